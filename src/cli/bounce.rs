//! `sendonce bounce`: one DSN read from standard input (or `--file`, at most
//! `dsn::MAX_BYTES`), handed to `app::dsn`, its receipts printed. Exit codes for an MTA are
//! `exit::for_mta_error`'s (main.rs picks it for this command); what the operator must fix
//! (the secret, the database, the account) is reported as unavailable, so the MTA retries.

use super::args::{BounceArgs, Cli};
use super::{open, to_json, Output};
use sendonce_core::app::dsn::{self, Piped};
use sendonce_domain::clock;
use sendonce_domain::dsn::MAX_BYTES;
use sendonce_domain::error::{Error, ErrorKind, Result};
use sendonce_domain::links::Keys;
use sendonce_store::prelude::*;
use std::io::Read;

pub(super) fn bounce(cli: &Cli, a: &BounceArgs) -> Result<Output> {
    // What only the operator can fix (the secret, the database, the account) is unavailable,
    // not invalid: the MTA keeps the DSN (exit 75) until it is fixed, instead of returning it.
    let keys = Keys::from_env().map_err(|e| Error::new(ErrorKind::Unavailable, e))?;
    let raw = read(a)?;
    let store = open(cli).map_err(configuration)?;
    let piped = Piped {
        account: &a.account,
        raw: &raw,
        to: a.to.as_deref().filter(|t| !t.trim().is_empty()),
        now_ms: clock::now_ms(),
    };
    store.resolve_account(&a.account).map_err(configuration)?;
    let out = dsn::receive(&store, &keys, &piped)?;
    let mut text = format!("dsn for job {}", out.job_id);
    for e in &out.events {
        let replay = if e.replay { " (replay)" } else { "" };
        text.push_str(&format!("\n{}\t{}{replay}", e.event_id, e.action.as_str()));
    }
    Ok(Output::ok(to_json(&out), text))
}

/// An error the operator must fix (no database, an unknown account) as `Unavailable`.
fn configuration(e: Error) -> Error {
    match e.kind {
        ErrorKind::Invalid | ErrorKind::NotFound => Error::new(ErrorKind::Unavailable, e.message),
        _ => e,
    }
}

/// The DSN's bytes, at most `MAX_BYTES` (one byte more is read to tell).
fn read(a: &BounceArgs) -> Result<Vec<u8>> {
    let mut raw = Vec::new();
    let limit = MAX_BYTES as u64 + 1;
    let got = match &a.file {
        Some(path) => std::fs::File::open(path)
            .and_then(|f| f.take(limit).read_to_end(&mut raw))
            .map_err(|e| Error::io(&format!("cannot read {}", path.display()), e)),
        None => std::io::stdin()
            .lock()
            .take(limit)
            .read_to_end(&mut raw)
            .map_err(|e| Error::io("cannot read the DSN from standard input", e)),
    };
    got?;
    if raw.len() > MAX_BYTES {
        return Err(Error::too_large(format!(
            "the DSN is larger than {} MB",
            MAX_BYTES / 1024 / 1024
        )));
    }
    Ok(raw)
}

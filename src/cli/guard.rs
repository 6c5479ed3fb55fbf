//! `sendonce adopt`, `backup` and `restore`: printing what `app::guard` did.

use super::args::Cli;
use super::{open, open_opts, to_json, Output};
use sendonce_core::app::guard;
use sendonce_domain::clock;
use sendonce_domain::error::Result;
use sendonce_store::LedgerCounts;
use std::path::Path;

fn counts_text(c: &LedgerCounts) -> String {
    format!(
        "{} campaigns, {} subscribers, {} sends (API messages and confirmations included: {} \
         sent, {} in doubt, {} unfinished), {} suppressions",
        c.campaigns, c.subscribers, c.sends, c.sent, c.in_doubt, c.unfinished, c.suppressions
    )
}

pub(super) fn adopt(cli: &Cli) -> Result<Output> {
    let a = guard::adopt(&*open(cli)?)?;
    Ok(Output::ok(to_json(&a), adopted_text(&a)))
}

fn adopted_text(a: &sendonce_store::Adopted) -> String {
    let mut text = match &a.previous_owner {
        Some(p) if *p != a.owner => format!("adopted: was {p}, now {}", a.owner),
        _ => format!("adopted: {}", a.owner),
    };
    if a.went_back {
        text.push_str(&format!(
            "\nthe file had gone back in time: {} unfinished rows (and the rows list building \
             adds to campaigns up to {}) are treated as possibly delivered since {}: retried \
             with the same key inside an idempotent provider's window, otherwise parked in \
             doubt (`sendonce doubts list`)",
            a.rows_marked,
            a.replay_through.unwrap_or(0),
            a.replay_since
                .map_or("its creation".into(), clock::format_ms)
        ));
    }
    text
}

pub(super) fn backup(cli: &Cli, path: &Path) -> Result<Output> {
    let b = guard::backup(&*open(cli)?, path, &open_opts(cli)?)?;
    let text = format!(
        "backup {} ({} bytes), quick_check ok: {}",
        b.path,
        b.bytes,
        counts_text(&b.counts)
    );
    Ok(Output::ok(to_json(&b), text))
}

pub(super) fn restore(cli: &Cli, backup: &Path) -> Result<Output> {
    let r = guard::restore(backup, &cli.db, &open_opts(cli)?)?;
    let mut text = format!(
        "restored {} to {}: {}\n{}",
        r.from,
        r.db,
        counts_text(&r.counts),
        adopted_text(&r.adopted)
    );
    if let Some(k) = &r.kept {
        text.push_str(&format!(
            "\nthe replaced database is kept as {k} (with its -wal); delete it when you no \
             longer need it"
        ));
    }
    if let Some(o) = &r.opt_outs {
        text.push_str(&format!(
            "\nopt-outs carried from the replaced file: {} suppressions, {} subscribers \
             unsubscribed or bounced, {} list unsubscribes",
            o.suppressions, o.subscribers, o.memberships
        ));
    }
    if let Some(e) = &r.opt_outs_error {
        text.push_str(&format!(
            "\nWARNING: the opt-outs of the replaced file could not be carried ({e}); opt-outs \
             recorded after the backup are missing: add them again (`sendonce suppress add`) \
             before sending"
        ));
        tracing::warn!(error = %e, "opt-outs of the replaced file not carried");
    }
    Ok(Output::ok(to_json(&r), text))
}

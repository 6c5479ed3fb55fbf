//! `sendonce token ...`: flags parsed into the inputs of `app::tokens` (create, list, revoke),
//! its outputs printed as text or one JSON document. A new token is printed once, alone on
//! stdout; nothing else ever prints a token.

use super::args::{Cli, TokenCmd};
use super::{open, open_read_only, to_json, Output};
use sendonce_core::app::tokens::{self, TokenInfo};
use sendonce_domain::clock;
use sendonce_domain::error::Result;
use sendonce_domain::token::Scope;
use std::io::Write;

pub(super) fn command(cli: &Cli, cmd: &TokenCmd) -> Result<Output> {
    match cmd {
        TokenCmd::Create {
            account,
            name,
            scope,
        } => {
            let c = tokens::create(&*open(cli)?, account, name, Scope::parse(scope)?)?;
            if !cli.json && !cli.quiet {
                let _ = writeln!(
                    std::io::stderr(),
                    "token {} ({:?}, scope {}, account {}): copy it now, it will not be shown \
                     again (only its SHA-256 is stored)",
                    c.id,
                    c.name,
                    c.scope,
                    c.account_id
                );
            }
            let text = c.token.expose().to_string();
            Ok(Output::ok(to_json(&c), text))
        }
        TokenCmd::List { account } => {
            let all = tokens::list(&*open_read_only(cli)?, account)?;
            let mut text = String::from("ID\tNAME\tSCOPE\tPREFIX\tCREATED\tLAST_USED\tREVOKED");
            for t in &all.tokens {
                text.push_str(&format!("\n{}", row(t)));
            }
            Ok(Output::ok(to_json(&all), text))
        }
        TokenCmd::Revoke { account, id } => {
            let r = tokens::revoke(&*open(cli)?, account, *id)?;
            let t = &r.token;
            let when = t.revoked_at.map(clock::format_ms).unwrap_or_default();
            let text = if r.already_revoked {
                format!(
                    "token {} ({:?}) was already revoked at {when}",
                    t.id, t.name
                )
            } else {
                format!("token {} ({:?}) revoked", t.id, t.name)
            };
            Ok(Output::ok(to_json(&r), text))
        }
    }
}

/// One line of `token list`: `-` for a time that is not there.
fn row(t: &TokenInfo) -> String {
    let time = |ms: Option<i64>| ms.map_or_else(|| "-".to_string(), clock::format_ms);
    format!(
        "{}\t{}\t{}\t{}\t{}\t{}\t{}",
        t.id,
        t.name,
        t.scope,
        t.prefix,
        clock::format_ms(t.created_at),
        time(t.last_used_at),
        time(t.revoked_at)
    )
}

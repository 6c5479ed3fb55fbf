//! `sendonce events list` and `sendonce endpoint ...`: flags into the inputs of `app::events`
//! (the feed; webhook endpoints: add, list, show, update, rotate, replay, remove), outputs as
//! text or one JSON document. A secret is printed once, alone on stdout, at `add` and `rotate`.

use super::args::{Cli, EndpointCmd, EventsCmd};
use super::{open, open_read_only, to_json, Output};
use sendonce_core::app::events::{self as app, EndpointInfo, EndpointInput, EndpointUpdate};
use sendonce_core::app::run::keys_if_set;
use sendonce_domain::clock;
use sendonce_domain::error::{Error, Result};
use sendonce_store::prelude::*;
use std::io::Write;

pub(super) fn feed(cli: &Cli, cmd: &EventsCmd) -> Result<Output> {
    let EventsCmd::List {
        account,
        after,
        types,
        limit,
    } = cmd;
    if *limit == 0 || *limit > app::MAX_PAGE {
        return Err(Error::invalid(format!(
            "--limit must be between 1 and {}",
            app::MAX_PAGE
        )));
    }
    let store = open_read_only(cli)?;
    let account_id = store.resolve_account(account)?;
    let after = after.as_deref().map(app::parse_cursor).transpose()?;
    let types = app::parse_types(types.as_deref())?;
    let page = app::feed(
        &store,
        account_id,
        after.unwrap_or_default(),
        &types,
        *limit,
    )?;
    let mut text = String::new();
    for e in &page.events {
        let field = |k: &str| e[k].as_str().unwrap_or("").to_string();
        text.push_str(&format!(
            "{}\t{}\t{}\t{}\n",
            field("id"),
            field("type"),
            field("timestamp"),
            field("subject")
        ));
    }
    text.push_str(&format!("next {}", page.next));
    Ok(Output::ok(to_json(&page), text))
}

/// Comma- or space-separated types, checked.
fn types_of(text: Option<&str>) -> Result<Vec<String>> {
    app::parse_types(text)
}

pub(super) fn endpoint(cli: &Cli, cmd: &EndpointCmd) -> Result<Output> {
    match cmd {
        EndpointCmd::Add {
            account,
            url,
            types,
            ordered,
        } => add(cli, account, url, types.as_deref(), *ordered),
        EndpointCmd::List { account } => list(cli, account),
        EndpointCmd::Show { account, id } => show(cli, account, *id),
        EndpointCmd::Update {
            account,
            id,
            url,
            types,
            ordered,
            enable,
            disable,
        } => {
            let u = EndpointUpdate {
                url: url.clone(),
                types: types.as_deref().map(|t| types_of(Some(t))).transpose()?,
                ordered: *ordered,
                enabled: match (enable, disable) {
                    (true, _) => Some(true),
                    (_, true) => Some(false),
                    _ => None,
                },
            };
            let (store, account_id) = writing(cli, account)?;
            let e = app::update_endpoint(&store, &settings()?.allow, account_id, *id, &u)?;
            Ok(Output::ok(to_json(&e), row(&e)))
        }
        EndpointCmd::Rotate {
            account,
            id,
            overlap,
        } => rotate(cli, account, *id, overlap),
        EndpointCmd::Replay {
            account,
            id,
            event,
            from,
            to,
            since,
            until,
        } => {
            let range = (event.as_deref(), from.as_deref(), to.as_deref());
            replay(
                cli,
                account,
                *id,
                range,
                (since.as_deref(), until.as_deref()),
            )
        }
        EndpointCmd::Remove { account, id } => {
            let (store, account_id) = writing(cli, account)?;
            app::delete_endpoint(&store, account_id, *id)?;
            let doc = serde_json::json!({ "removed": id });
            Ok(Output::ok(doc, format!("endpoint {id} removed")))
        }
    }
}

/// The `[events]` settings of the config file found (and the environment).
fn settings() -> Result<app::Settings> {
    let file = sendonce_core::config::Config::load(None)?;
    app::settings(file.as_ref())
}

/// The store opened for writing and the account's id.
fn writing(cli: &Cli, account: &str) -> Result<(std::sync::Arc<sendonce_store::Store>, i64)> {
    let store = open(cli)?;
    let account_id = store.resolve_account(account)?;
    Ok((store, account_id))
}

fn add(cli: &Cli, account: &str, url: &str, types: Option<&str>, ordered: bool) -> Result<Output> {
    let input = EndpointInput {
        url: url.to_string(),
        types: types_of(types)?,
        ordered,
    };
    let keys = keys_if_set()?;
    let allow = settings()?.allow;
    let (store, account_id) = writing(cli, account)?;
    let made = app::create_endpoint(&store, keys.as_ref(), &allow, account_id, &input)?;
    secret_once(cli, &made.endpoint, "added");
    Ok(Output::ok(to_json(&made), made.secret.clone()))
}

fn list(cli: &Cli, account: &str) -> Result<Output> {
    let store = open_read_only(cli)?;
    let all = app::endpoints(&store, store.resolve_account(account)?)?;
    let mut text = String::from("ID\tSTATUS\tURL\tTYPES\tPENDING\tDELIVERED\tDROPPED");
    for e in &all {
        text.push_str(&format!("\n{}", row(e)));
    }
    Ok(Output::ok(to_json(&all), text))
}

fn show(cli: &Cli, account: &str, id: i64) -> Result<Output> {
    let store = open_read_only(cli)?;
    let account_id = store.resolve_account(account)?;
    let e = app::endpoint(&store, account_id, id)?;
    let d = app::deliveries(&store, account_id, id)?;
    let mut text = format!(
        "ID\tSTATUS\tURL\tTYPES\tPENDING\tDELIVERED\tDROPPED\n{}\n\n\
         DELIVERY\tEVENT\tSTATUS\tATTEMPTS\tLAST\tNEXT",
        row(&e)
    );
    for x in &d {
        let last = match (&x.last_status, &x.last_error) {
            (Some(s), _) => format!("HTTP {s}"),
            (None, Some(err)) => err.clone(),
            (None, None) => "-".into(),
        };
        text.push_str(&format!(
            "\n{}\t{}\t{}\t{}\t{last}\t{}",
            x.id,
            x.event,
            x.status,
            x.attempts,
            clock::format_ms(x.next_at)
        ));
    }
    let doc = serde_json::json!({ "endpoint": e, "deliveries": d });
    Ok(Output::ok(doc, text))
}

fn rotate(cli: &Cli, account: &str, id: i64, overlap: &str) -> Result<Output> {
    let overlap = clock::parse_duration_in(
        "--overlap",
        overlap,
        std::time::Duration::ZERO,
        clock::MAX_DURATION,
    )?;
    let keys = keys_if_set()?;
    let (store, account_id) = writing(cli, account)?;
    let r = app::rotate_endpoint(&store, keys.as_ref(), account_id, id, overlap)?;
    secret_once(cli, &r.endpoint, "rotated");
    Ok(Output::ok(to_json(&r), r.secret.clone()))
}

/// `--event`, `--from`/`--to` (event ids) or `--since`/`--until` (times).
fn replay(
    cli: &Cli,
    account: &str,
    id: i64,
    ids: (Option<&str>, Option<&str>, Option<&str>),
    times: (Option<&str>, Option<&str>),
) -> Result<Output> {
    let number = app::parse_event_id;
    let (store, account_id) = writing(cli, account)?;
    let n = match (ids, times) {
        (_, (Some(since), Some(until))) => app::replay_times(&store, account_id, id, since, until)?,
        ((Some(e), _, _), _) => app::replay(&store, account_id, id, number(e)?, number(e)?)?,
        ((None, Some(f), Some(t)), _) => {
            app::replay(&store, account_id, id, number(f)?, number(t)?)?
        }
        _ => {
            return Err(Error::invalid(
                "replay needs --event, --from and --to, or --since and --until",
            ))
        }
    };
    let doc = serde_json::json!({ "queued": n });
    Ok(Output::ok(doc, format!("{n} deliveries queued")))
}

/// Tell on stderr that the secret on stdout is shown this once.
fn secret_once(cli: &Cli, e: &EndpointInfo, what: &str) {
    if !cli.json && !cli.quiet {
        let _ = writeln!(
            std::io::stderr(),
            "endpoint {} {what} ({}): its signing secret follows; configure the receiver with \
             it now, it will not be shown again",
            e.id,
            e.url
        );
    }
}

/// One line of `endpoint list`.
fn row(e: &EndpointInfo) -> String {
    let types = match e.types.is_empty() {
        true => "*".to_string(),
        false => e.types.join(","),
    };
    format!(
        "{}\t{}\t{}\t{types}\t{}\t{}\t{}",
        e.id, e.status, e.url, e.pending, e.delivered, e.dropped
    )
}

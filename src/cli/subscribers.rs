//! `sendonce subscriber ...`: add, import, list, show, update and remove the subscribers of an
//! account (given by id or name), with text for people and one JSON document.

use super::args::{Cli, SubscriberCmd};
use super::{open, open_read_only, Output};
use crate::app::import;
use crate::domain::clock;
use crate::error::{Error, Result};
use crate::store::SubscriberRow;
use serde_json::json;

pub(super) fn command(cli: &Cli, cmd: &SubscriberCmd) -> Result<Output> {
    match cmd {
        SubscriberCmd::Add {
            account,
            email,
            phone,
            name,
            attrs,
            status,
        } => {
            let attrs = attrs
                .iter()
                .map(|a| import::parse_attr(a))
                .collect::<Result<Vec<_>>>()?;
            let s = import::subscriber(
                email.as_deref(),
                phone.as_deref(),
                name.as_deref(),
                Some(status),
                &attrs,
            )?;
            let store = open(cli)?;
            let id = store.add_subscriber(store.resolve_account(account)?, &s)?;
            Ok(Output::ok(json!({"id": id}), id.to_string()))
        }
        SubscriberCmd::Import {
            account,
            file,
            skip_invalid,
            delimiter,
            encoding,
        } => import_csv(cli, account, file, *skip_invalid, delimiter, encoding),
        SubscriberCmd::List {
            account,
            status,
            limit,
            after,
        } => list(cli, account, status.as_deref(), *after, *limit),
        SubscriberCmd::Show {
            account,
            subscriber,
        } => {
            let store = open_read_only(cli)?;
            let r = store.find_subscriber(store.resolve_account(account)?, subscriber)?;
            let doc = to_json(&r);
            let text = serde_json::to_string_pretty(&doc).unwrap_or_default();
            Ok(Output::ok(doc, text))
        }
        SubscriberCmd::Update {
            account,
            subscriber,
            name,
            status,
            attrs,
        } => {
            let store = open(cli)?;
            let account = store.resolve_account(account)?;
            let changes = import::changes(name.as_deref(), status.as_deref(), attrs)?;
            let id = store.find_subscriber(account, subscriber)?.id;
            let r = store.update_subscriber(account, id, &changes)?;
            Ok(Output::ok(
                to_json(&r),
                format!("subscriber {} updated", r.id),
            ))
        }
        SubscriberCmd::Remove {
            account,
            subscriber,
        } => {
            let store = open(cli)?;
            let account = store.resolve_account(account)?;
            let id = store.find_subscriber(account, subscriber)?.id;
            store.remove_subscriber(account, id)?;
            Ok(Output::ok(
                json!({"id": id, "removed": true}),
                format!("subscriber {id} removed (the ledger keeps its past sends)"),
            ))
        }
    }
}

/// `subscriber import`: one all-or-nothing transaction (or the valid rows, with
/// `--skip-invalid`), every skipped row reported with its line.
fn import_csv(
    cli: &Cli,
    account: &str,
    file: &std::path::Path,
    skip_invalid: bool,
    delimiter: &str,
    encoding: &str,
) -> Result<Output> {
    let format = import::CsvFormat {
        delimiter: import::parse_delimiter(delimiter)?,
        encoding: import::Encoding::parse(encoding)?,
    };
    let store = open(cli)?;
    let account = store.resolve_account(account)?;
    let rows = import::read_csv_with(file, skip_invalid, format)?;
    let report = store.import_subscribers(account, rows, skip_invalid)?;
    let mut text = format!("imported {} subscribers", report.imported);
    if !report.skipped.is_empty() {
        text.push_str(&format!(", skipped {}:", report.skipped.len()));
        for s in &report.skipped {
            text.push_str(&format!("\n  line {}: {}", s.line, s.reason));
        }
    }
    Ok(Output::ok(
        serde_json::to_value(&report).unwrap_or_default(),
        text,
    ))
}

fn list(
    cli: &Cli,
    account: &str,
    status: Option<&str>,
    after: i64,
    limit: usize,
) -> Result<Output> {
    if let Some(st) = status {
        if !import::STATUSES.contains(&st) {
            return Err(Error::invalid(format!(
                "unknown status {st:?} (pending, confirmed, unsubscribed, bounced)"
            )));
        }
    }
    let store = open_read_only(cli)?;
    let account = store.resolve_account(account)?;
    let rows = store.list_subscribers(account, status, after, limit)?;
    let mut text = String::from("ID\tEMAIL\tPHONE\tNAME\tSTATUS");
    for r in &rows {
        text.push_str(&format!(
            "\n{}\t{}\t{}\t{}\t{}",
            r.id,
            r.email.as_deref().unwrap_or("-"),
            r.phone.as_deref().unwrap_or("-"),
            r.name.as_deref().unwrap_or("-"),
            r.status
        ));
    }
    let doc: Vec<_> = rows.iter().map(to_json).collect();
    Ok(Output::ok(json!({ "subscribers": doc }), text))
}

fn to_json(r: &SubscriberRow) -> serde_json::Value {
    let attrs: serde_json::Value = serde_json::from_str(&r.attrs).unwrap_or_default();
    json!({"id": r.id, "account_id": r.account_id, "email": r.email, "phone": r.phone,
           "name": r.name, "status": r.status, "attrs": attrs,
           "created_at": clock::format_ms(r.created_at)})
}

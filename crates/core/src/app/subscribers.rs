//! The subscribers of an account (given by id or name): add, import a CSV file, list, show,
//! update, remove. The field rules live in `import`; this module applies them to the store and
//! returns its own output structs.

use super::import::{self, CsvFormat};
use sendonce_domain::error::{Error, Result};
use sendonce_domain::links::Links;
use sendonce_store::prelude::*;
use sendonce_store::{NewSubscriber, Store, SubscriberRow};
use serde::Serialize;
use std::path::Path;

/// One subscriber as shown to people and machines; `attrs` is a JSON object.
#[derive(Debug, Clone, Serialize)]
pub struct Subscriber {
    pub id: i64,
    pub account_id: i64,
    pub email: Option<String>,
    pub phone: Option<String>,
    pub name: Option<String>,
    pub status: String,
    pub attrs: serde_json::Value,
    #[serde(serialize_with = "sendonce_domain::clock::ser_ms")]
    pub created_at: i64,
}

impl From<SubscriberRow> for Subscriber {
    fn from(r: SubscriberRow) -> Self {
        Subscriber {
            attrs: serde_json::from_str(&r.attrs).unwrap_or_default(),
            id: r.id,
            account_id: r.account_id,
            email: r.email,
            phone: r.phone,
            name: r.name,
            status: r.status.to_string(),
            created_at: r.created_at,
        }
    }
}

/// A new subscriber's id.
#[derive(Debug, Clone, Serialize)]
pub struct Added {
    pub id: i64,
}

/// Add `s` (checked by [`import::subscriber`]) to `account` and to `lists` (ids or names).
/// The address of a removed subscriber brings it back; with lists, the address of an existing
/// subscriber only joins them. A new pending membership of a double opt-in list gets its
/// confirmation email queued in the same transaction, its link built with `links` (without
/// them such a list is refused and nothing is written).
pub fn add(
    store: &Store,
    account: &str,
    s: &NewSubscriber,
    lists: &[String],
    links: Option<&Links>,
) -> Result<Added> {
    let account = store.resolve_account(account)?;
    let lists = super::lists::resolve(store, account, lists)?;
    let id = store.add_subscriber_with(account, s, &lists, links)?;
    Ok(Added { id })
}

/// A CSV import.
#[derive(Debug, Clone)]
pub struct ImportRequest<'a> {
    pub account: &'a str,
    pub file: &'a Path,
    /// Import the valid rows and report the others, instead of all or nothing.
    pub skip_invalid: bool,
    pub format: CsvFormat,
    /// Lists (ids or names) every imported row joins.
    pub lists: &'a [String],
    /// Where confirmation links of double opt-in lists point (see [`add`]).
    pub links: Option<&'a Links>,
    /// The consent recorded with every row (`privacy::declared`).
    pub consent: Option<sendonce_store::Consent>,
}

/// One row left out of an import, with its line in the file.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    pub line: u64,
    pub reason: String,
}

/// What an import did.
#[derive(Debug, Clone, Serialize)]
pub struct Imported {
    pub imported: u64,
    /// Rows whose address was already a subscriber (with lists: they joined the lists).
    #[serde(skip_serializing_if = "is_zero")]
    pub existing: u64,
    pub skipped: Vec<Skipped>,
}

/// Import a CSV file in one transaction: all or nothing, or the valid rows with
/// `skip_invalid`, every skipped row reported with its line.
pub fn import_csv(store: &Store, req: &ImportRequest<'_>) -> Result<Imported> {
    let account = store.resolve_account(req.account)?;
    let lists = super::lists::resolve(store, account, req.lists)?;
    let rows = with_consent(
        import::read_csv_with(req.file, req.skip_invalid, req.format)?,
        &req.consent,
    );
    let report =
        store.import_subscribers_with(account, rows, req.skip_invalid, &lists, req.links)?;
    Ok(imported(report))
}

/// A CSV file already in memory (a dashboard upload), to import into lists.
#[derive(Debug, Clone)]
pub struct UploadRequest<'a> {
    pub account: &'a str,
    /// The file's name, for messages.
    pub name: &'a str,
    pub bytes: Vec<u8>,
    pub skip_invalid: bool,
    pub format: CsvFormat,
    pub lists: &'a [String],
    pub links: Option<&'a Links>,
    pub consent: Option<sendonce_store::Consent>,
}

/// [`import_csv`] for an uploaded file: the same parser (`import::read_csv_bytes`), the same
/// one transaction.
pub fn import_upload(store: &Store, req: UploadRequest<'_>) -> Result<Imported> {
    let account = store.resolve_account(req.account)?;
    let lists = super::lists::resolve(store, account, req.lists)?;
    let rows = with_consent(
        import::read_csv_bytes(req.name, req.bytes, req.skip_invalid, req.format)?,
        &req.consent,
    );
    let report =
        store.import_subscribers_with(account, rows, req.skip_invalid, &lists, req.links)?;
    Ok(imported(report))
}

/// Every parsed row with `consent` to record.
fn with_consent(
    mut rows: Vec<(u64, Result<NewSubscriber>)>,
    consent: &Option<sendonce_store::Consent>,
) -> Vec<(u64, Result<NewSubscriber>)> {
    for (_, row) in &mut rows {
        if let Ok(s) = row {
            s.consent.clone_from(consent);
        }
    }
    rows
}

fn imported(report: sendonce_store::ImportReport) -> Imported {
    Imported {
        imported: report.imported,
        existing: report.existing,
        skipped: report
            .skipped
            .into_iter()
            .map(|s| Skipped {
                line: s.line,
                reason: s.reason,
            })
            .collect(),
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A status filter for [`list`]: one of [`import::STATUSES`].
pub fn status_filter(status: Option<&str>) -> Result<Option<&str>> {
    if let Some(st) = status {
        if !import::STATUSES.contains(&st) {
            return Err(Error::invalid(format!(
                "unknown status {st:?} (pending, confirmed, unsubscribed, bounced)"
            )));
        }
    }
    Ok(status)
}

/// A page of an account's subscribers: ids after `after`, at most `limit`, optionally one
/// status (checked by [`status_filter`]).
#[derive(Debug, Clone)]
pub struct Page<'a> {
    pub account: &'a str,
    pub status: Option<&'a str>,
    pub after: i64,
    pub limit: usize,
}

/// Subscribers in id order.
#[derive(Debug, Clone, Serialize)]
pub struct Subscribers {
    pub subscribers: Vec<Subscriber>,
}

/// List a page of subscribers (removed ones are not listed).
pub fn list(store: &Store, page: &Page<'_>) -> Result<Subscribers> {
    let account = store.resolve_account(page.account)?;
    let rows = store.list_subscribers(account, page.status, page.after, page.limit)?;
    Ok(Subscribers {
        subscribers: rows.into_iter().map(Subscriber::from).collect(),
    })
}

/// One subscriber of `account`, by id, email address or phone number.
pub fn show(store: &Store, account: &str, subscriber: &str) -> Result<Subscriber> {
    let account = store.resolve_account(account)?;
    Ok(store.find_subscriber(account, subscriber)?.into())
}

/// A change to one subscriber; `attrs` are `key=value` (an empty value removes the key).
#[derive(Debug, Clone)]
pub struct Update<'a> {
    pub account: &'a str,
    pub subscriber: &'a str,
    pub name: Option<&'a str>,
    pub status: Option<&'a str>,
    pub attrs: &'a [String],
}

/// Change a subscriber's name, status or attributes; returns it as it now is.
pub fn update(store: &Store, u: &Update<'_>) -> Result<Subscriber> {
    let account = store.resolve_account(u.account)?;
    let changes = import::changes(u.name, u.status, u.attrs)?;
    let id = store.find_subscriber(account, u.subscriber)?.id;
    Ok(store.update_subscriber(account, id, &changes)?.into())
}

/// A removed subscriber.
#[derive(Debug, Clone, Serialize)]
pub struct Removed {
    pub id: i64,
    pub removed: bool,
}

/// Remove a subscriber: never sent to again, listed nowhere; the ledger keeps its past sends.
pub fn remove(store: &Store, account: &str, subscriber: &str) -> Result<Removed> {
    let account = store.resolve_account(account)?;
    let id = store.find_subscriber(account, subscriber)?.id;
    store.remove_subscriber(account, id)?;
    Ok(Removed { id, removed: true })
}

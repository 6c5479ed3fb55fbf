//! Accounts and subscribers as they are added (`Audience`): the validated subscriber, the
//! import report, and what a template may use (attribute names). Written once for both stores
//! over `sql::Tx`: subscribers added and imported into lists (double opt-in confirmations
//! queued in the same transaction by `lists.rs` and `optin.rs`, removed subscribers revived).

use crate::shared::require_account;
use crate::sql::{args, Db, Tx};
use crate::{lists, optin, privacy};
use sendonce_domain::error::{Error, ErrorKind, Result};
use sendonce_domain::links::Links;
use std::collections::BTreeSet;

/// A validated subscriber ready to insert.
#[derive(Debug, Clone)]
pub struct NewSubscriber {
    pub email: Option<(String, String)>, // (as given, normalised)
    pub phone: Option<String>,
    pub name: Option<String>,
    pub status: String,
    /// JSON object text.
    pub attrs: String,
    /// The opt-in to record with it (`privacy::record_consent`): one record per list it
    /// joins, or one naming no list.
    pub consent: Option<crate::Consent>,
}

/// A row an import skipped, with its line number and why.
#[derive(Debug, Clone)]
pub struct SkippedRow {
    pub line: u64,
    pub reason: String,
}

#[derive(Debug, Clone)]
pub struct ImportReport {
    pub imported: u64,
    /// Rows whose address was already a subscriber: with lists, they joined the lists.
    pub existing: u64,
    pub skipped: Vec<SkippedRow>,
}

/// Adding accounts and subscribers, and what templates may refer to.
pub trait Audience: Send + Sync {
    /// Create an account; returns its id.
    fn add_account(&self, name: &str) -> Result<i64>;
    /// Insert one subscriber (a removed one comes back under its old id) and make it a
    /// member of `lists` (ids in the account; an unknown one is `NotFound` and nothing is
    /// written); returns its id. With lists, an address that is already a subscriber only
    /// joins them (an existing membership is kept as it is).
    /// No public URL: a double opt-in list among `lists` is refused (see
    /// [`Audience::add_subscriber_with`]).
    fn add_subscriber(&self, account_id: i64, s: &NewSubscriber, lists: &[i64]) -> Result<i64> {
        self.add_subscriber_with(account_id, s, lists, None)
    }
    /// [`Audience::add_subscriber`], and for every membership of a double opt-in list that is
    /// pending and was never sent a confirmation, the confirmation message queued in the same
    /// transaction (its link built with `links`): once per (list, subscriber), however often
    /// the subscriber is added. Such a membership without `links`, without an email address
    /// (confirmations go by email) or on a list with no confirmation sender is `Invalid`, and
    /// nothing is written.
    fn add_subscriber_with(
        &self,
        account_id: i64,
        s: &NewSubscriber,
        lists: &[i64],
        links: Option<&Links>,
    ) -> Result<i64>;
    /// Import `(line, parsed)` rows in one transaction, memberships of `lists` included (as
    /// in [`Audience::add_subscriber`]): all-or-nothing unless `skip_invalid`, which imports
    /// the valid rows and reports every skipped one.
    fn import_subscribers(
        &self,
        account_id: i64,
        rows: Vec<(u64, Result<NewSubscriber>)>,
        skip_invalid: bool,
        lists: &[i64],
    ) -> Result<ImportReport> {
        self.import_subscribers_with(account_id, rows, skip_invalid, lists, None)
    }
    /// [`Audience::import_subscribers`] with confirmations queued as
    /// [`Audience::add_subscriber_with`] does (a row that cannot have one is skipped with
    /// `skip_invalid`, else the import is refused).
    fn import_subscribers_with(
        &self,
        account_id: i64,
        rows: Vec<(u64, Result<NewSubscriber>)>,
        skip_invalid: bool,
        lists: &[i64],
        links: Option<&Links>,
    ) -> Result<ImportReport>;
    /// Every attribute name used by the account's subscribers.
    fn attribute_names(&self, account_id: i64) -> Result<BTreeSet<String>>;
    /// `Ok` when the account exists, else the usage error naming it.
    fn account_exists(&self, account_id: i64) -> Result<()>;
}

// ---- Written once over the seam (`sql::Tx`) ----

/// The subscriber of the account with `s`'s address, if any: `(id, removed)` (the lowest id
/// when the email and the phone name two subscribers).
fn existing_subscriber(
    tx: &mut dyn Tx,
    account_id: i64,
    s: &NewSubscriber,
) -> Result<Option<(i64, bool)>> {
    tx.query_opt(
        "SELECT id, removed_at IS NOT NULL FROM subscribers
         WHERE account_id = ?1 AND (email_norm = ?2 OR phone = ?3)
         ORDER BY id LIMIT 1",
        &args![account_id, s.email.as_ref().map(|e| e.1.as_str()), &s.phone],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
}

/// `s`'s email address as given and normalised (both NULL without one).
fn email_columns(s: &NewSubscriber) -> (Option<&str>, Option<&str>) {
    match &s.email {
        Some((given, norm)) => (Some(given.as_str()), Some(norm.as_str())),
        None => (None, None),
    }
}

/// Add `s` to the account and to `lists` (checked by `lists::require_lists`). With lists, an
/// address that is already a (not removed) subscriber only joins the lists, its row left as
/// it is: returns `(id, false)`. Otherwise the row is inserted (or revived): `(id, true)`.
fn add_to_lists(
    tx: &mut dyn Tx,
    account_id: i64,
    s: &NewSubscriber,
    lists: &[i64],
    links: Option<&Links>,
) -> Result<(i64, bool)> {
    // Everything that would refuse a confirmation is checked before anything is written (a
    // skipped import row leaves nothing behind).
    optin::can_confirm(tx, account_id, s, lists, links)?;
    let norm = s.email.as_ref().map(|e| e.1.as_str());
    privacy::refuse_erased(tx, account_id, norm, s.phone.as_deref())?;
    if !lists.is_empty() {
        if let Some((id, false)) = existing_subscriber(tx, account_id, s)? {
            lists::join_lists(tx, id, lists, links)?;
            consent(tx, account_id, id, s, lists)?;
            return Ok((id, false));
        }
    }
    let id = insert_subscriber(tx, account_id, s)?;
    lists::join_lists(tx, id, lists, links)?;
    optin::pending_until_confirmed(tx, id, lists)?;
    consent(tx, account_id, id, s, lists)?;
    Ok((id, true))
}

/// The consent `s` carries, recorded for subscriber `id`.
fn consent(tx: &mut dyn Tx, account: i64, id: i64, s: &NewSubscriber, lists: &[i64]) -> Result<()> {
    match &s.consent {
        Some(c) => {
            let now = sendonce_domain::clock::now_ms();
            privacy::record_consent(tx, account, id, lists, c, now)
        }
        None => Ok(()),
    }
}

/// Insert one subscriber (or revive a removed one under its old id), naming the conflicting
/// address when it already exists.
fn insert_subscriber(tx: &mut dyn Tx, account_id: i64, s: &NewSubscriber) -> Result<i64> {
    let existing = existing_subscriber(tx, account_id, s)?;
    if let Some((id, true)) = existing {
        if revive_subscriber(tx, account_id, id, s)? {
            return Ok(id);
        }
    }
    let (email, norm) = email_columns(s);
    if let Some((id, _)) = existing {
        let what = norm.or(s.phone.as_deref()).unwrap_or_default();
        return Err(Error::invalid(format!(
            "duplicate: {what} is already subscriber {id} of this account"
        )));
    }
    tx.scalar(
        "INSERT INTO subscribers (account_id, email, email_norm, phone, name, status, attrs,
                                  created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) RETURNING id",
        &args![
            account_id,
            email,
            norm,
            &s.phone,
            &s.name,
            &s.status,
            &s.attrs,
            sendonce_domain::clock::now_ms()
        ],
    )
}

/// A removed subscriber comes back under its old id (its past sends name it), and the
/// suppressions its removal added go. False if it was not removed after all.
fn revive_subscriber(tx: &mut dyn Tx, account_id: i64, id: i64, s: &NewSubscriber) -> Result<bool> {
    let (email, norm) = email_columns(s);
    let n = tx.exec(
        "UPDATE subscribers SET email = ?2, email_norm = ?3, phone = ?4, name = ?5,
                status = ?6, attrs = ?7, removed_at = NULL
         WHERE id = ?1 AND removed_at IS NOT NULL",
        &args![id, email, norm, &s.phone, &s.name, &s.status, &s.attrs],
    )?;
    if n != 1 {
        return Ok(false);
    }
    tx.exec(
        "DELETE FROM suppressions WHERE account_id = ?1 AND source = 'removal'
         AND ((channel = 'email' AND address = ?2) OR (channel = 'sms' AND address = ?3))",
        &args![account_id, norm, &s.phone],
    )?;
    Ok(true)
}

/// The account and `lists` checked before subscribers are added: on PostgreSQL under the
/// account's subscribers lock, shared (a list chunk, which takes it exclusively, then never
/// ends past an id that commits later), the lists' rows locked.
fn prepare_add(tx: &mut dyn Tx, account_id: i64, lists: &[i64]) -> Result<()> {
    require_account(tx, account_id)?;
    tx.dialect().lock_subscribers(tx, account_id, false)?;
    lists::require_lists(tx, account_id, lists, true)
}

/// Import `rows` (see [`Audience::import_subscribers_with`]) in the caller's transaction. A
/// refused row writes nothing: everything that refuses one is checked before its first write.
fn import(
    tx: &mut dyn Tx,
    account_id: i64,
    rows: &[(u64, Result<NewSubscriber>)],
    skip_invalid: bool,
    lists: &[i64],
    links: Option<&Links>,
) -> Result<ImportReport> {
    prepare_add(tx, account_id, lists)?;
    let aborts = tx.dialect().failed_statement_aborts;
    let mut report = ImportReport {
        imported: 0,
        existing: 0,
        skipped: Vec::new(),
    };
    for (line, row) in rows {
        let res = match row {
            Ok(s) => add_to_lists(tx, account_id, s, lists, links),
            Err(e) => Err(Error::invalid(e.message.clone())),
        };
        match res {
            Ok((_, true)) => report.imported += 1,
            Ok((_, false)) => report.existing += 1,
            // The database's own error ended PostgreSQL's transaction: nothing more can run
            // in it, whatever skip_invalid says.
            Err(e) if aborts && from_database(&e) => return Err(e),
            Err(e) if skip_invalid => report.skipped.push(SkippedRow {
                line: *line,
                reason: e.message,
            }),
            Err(e) => {
                // Returning the error rolls the whole import back.
                return Err(Error::invalid(format!(
                    "line {line}: {}; nothing was imported (use --skip-invalid to import the \
                     valid rows)",
                    e.message
                )));
            }
        }
    }
    Ok(report)
}

/// Whether `e` is the database's (or the connection's) failure rather than a refusal of ours.
fn from_database(e: &Error) -> bool {
    matches!(e.kind, ErrorKind::Database | ErrorKind::Unavailable)
}

/// Insert account `name` (trimmed, checked); a name already used is a `Conflict` naming it.
fn insert_account(tx: &mut dyn Tx, name: &str) -> Result<i64> {
    let id: Option<i64> = tx.scalar_opt(
        "INSERT INTO accounts (name, created_at) VALUES (?1, ?2)
         ON CONFLICT (name) DO NOTHING RETURNING id",
        &args![name, sendonce_domain::clock::now_ms()],
    )?;
    if let Some(id) = id {
        return Ok(id);
    }
    let id: i64 = tx.scalar("SELECT id FROM accounts WHERE name = ?1", &args![name])?;
    Err(Error::conflict(format!(
        "an account named {name:?} already exists (id {id})"
    )))
}

impl<S: Db> Audience for S {
    fn add_account(&self, name: &str) -> Result<i64> {
        let name = name.trim();
        if name.is_empty() {
            return Err(Error::invalid("the account name is empty"));
        }
        if name.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::invalid(format!(
                "the account name {name:?} is all digits: commands take an account by id or by \
                 name, so it would read as an id; add a letter"
            )));
        }
        self.write(|tx| insert_account(tx, name))
    }

    fn add_subscriber_with(
        &self,
        account_id: i64,
        s: &NewSubscriber,
        lists: &[i64],
        links: Option<&Links>,
    ) -> Result<i64> {
        self.write(|tx| {
            prepare_add(tx, account_id, lists)?;
            Ok(add_to_lists(tx, account_id, s, lists, links)?.0)
        })
    }

    fn import_subscribers_with(
        &self,
        account_id: i64,
        rows: Vec<(u64, Result<NewSubscriber>)>,
        skip_invalid: bool,
        lists: &[i64],
        links: Option<&Links>,
    ) -> Result<ImportReport> {
        self.write(|tx| import(tx, account_id, &rows, skip_invalid, lists, links))
    }

    fn attribute_names(&self, account_id: i64) -> Result<BTreeSet<String>> {
        self.read(|tx| {
            let mut names = BTreeSet::new();
            tx.each(tx.dialect().attribute_names, &args![account_id], &mut |r| {
                names.insert(r.get(0)?);
                Ok(())
            })?;
            Ok(names)
        })
    }

    fn account_exists(&self, account_id: i64) -> Result<()> {
        self.read(|tx| require_account(tx, account_id))
    }
}

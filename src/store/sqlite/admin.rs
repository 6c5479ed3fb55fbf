//! Tenants and subscribers (`Audience` on SQLite).

use super::SqliteStore;
use crate::domain::links::Links;
use crate::error::{Error, Result};
use crate::store::{Audience, ImportReport, NewSubscriber, SkippedRow};
use rusqlite::types::Null;
use rusqlite::{named_params, params, OptionalExtension, ToSql, Transaction};
use std::collections::BTreeSet;

pub(super) fn require_account(tx: &Transaction<'_>, account_id: i64) -> Result<()> {
    let found: Option<i64> = tx
        .prepare_cached("SELECT id FROM accounts WHERE id = ?1")?
        .query_row([account_id], |r| r.get(0))
        .optional()?;
    found
        .map(|_| ())
        .ok_or_else(|| Error::not_found(format!("unknown account id {account_id}")))
}

/// The subscriber of the account with `s`'s address, if any: `(id, removed)`.
fn existing_subscriber(
    tx: &Transaction<'_>,
    account_id: i64,
    s: &NewSubscriber,
) -> Result<Option<(i64, bool)>> {
    Ok(tx
        .prepare_cached(
            "SELECT id, removed_at IS NOT NULL FROM subscribers
             WHERE account_id = ?1 AND (email_norm = ?2 OR phone = ?3)",
        )?
        .query_row(
            params![account_id, s.email.as_ref().map(|e| &e.1), s.phone],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?)
}

/// Add `s` to the account and to `lists` (checked by `require_lists`). With lists, an
/// address that is already a (not removed) subscriber only joins the lists, its row left as
/// it is: returns `(id, false)`. Otherwise the row is inserted (or revived): `(id, true)`.
fn add_to_lists(
    tx: &Transaction<'_>,
    account_id: i64,
    s: &NewSubscriber,
    lists: &[i64],
    links: Option<&Links>,
) -> Result<(i64, bool)> {
    // Everything that would refuse a confirmation is checked before anything is written (a
    // skipped import row leaves nothing behind).
    super::optin::can_confirm(tx, account_id, s, lists, links)?;
    if !lists.is_empty() {
        if let Some((id, false)) = existing_subscriber(tx, account_id, s)? {
            super::lists::join_lists(tx, id, lists, links)?;
            return Ok((id, false));
        }
    }
    let id = insert_subscriber(tx, account_id, s)?;
    super::lists::join_lists(tx, id, lists, links)?;
    super::optin::pending_until_confirmed(tx, id, lists)?;
    Ok((id, true))
}

/// Insert one subscriber, naming the conflicting address when it already exists.
fn insert_subscriber(tx: &Transaction<'_>, account_id: i64, s: &NewSubscriber) -> Result<i64> {
    let existing = existing_subscriber(tx, account_id, s)?;
    if let Some((id, true)) = existing {
        if revive_subscriber(tx, account_id, id, s)? {
            return Ok(id);
        }
    }
    if let Some((id, _)) = existing {
        let what = s
            .email
            .as_ref()
            .map(|e| e.1.clone())
            .or(s.phone.clone())
            .unwrap_or_default();
        return Err(Error::invalid(format!(
            "duplicate: {what} is already subscriber {id} of this account"
        )));
    }
    tx.prepare_cached(
        "INSERT INTO subscribers (account_id, email, email_norm, phone, name, status, attrs, created_at)
         VALUES (:account, :email, :email_norm, :phone, :name, :status, :attrs, :now)",
    )?
    .execute(with_columns(s, named_params! {
        ":account": account_id,
        ":now": crate::domain::clock::now_ms(),
    }).as_slice())?;
    Ok(tx.last_insert_rowid())
}

/// The named parameters of a subscriber's own columns (`:email`, `:email_norm`, `:phone`,
/// `:name`, `:status`, `:attrs`), followed by `extra`.
fn with_columns<'a>(
    s: &'a NewSubscriber,
    extra: &[(&'a str, &'a dyn ToSql)],
) -> Vec<(&'a str, &'a dyn ToSql)> {
    let (email, norm): (&dyn ToSql, &dyn ToSql) = match &s.email {
        Some((given, norm)) => (given, norm),
        None => (&Null, &Null),
    };
    let mut out: Vec<(&str, &dyn ToSql)> = vec![
        (":email", email),
        (":email_norm", norm),
        (":phone", &s.phone),
        (":name", &s.name),
        (":status", &s.status),
        (":attrs", &s.attrs),
    ];
    out.extend_from_slice(extra);
    out
}

/// A removed subscriber comes back under its old id (its past sends name it), and the
/// suppressions its removal added go. False if it was not removed after all.
fn revive_subscriber(
    tx: &Transaction<'_>,
    account_id: i64,
    id: i64,
    s: &NewSubscriber,
) -> Result<bool> {
    let n = tx.execute(
        "UPDATE subscribers SET email = :email, email_norm = :email_norm, phone = :phone,
                name = :name, status = :status, attrs = :attrs, removed_at = NULL
         WHERE id = :id AND removed_at IS NOT NULL",
        with_columns(s, named_params! {":id": id}).as_slice(),
    )?;
    if n != 1 {
        return Ok(false);
    }
    tx.execute(
        "DELETE FROM suppressions WHERE account_id = ?1 AND source = 'removal'
         AND ((channel = 'email' AND address = ?2) OR (channel = 'sms' AND address = ?3))",
        params![account_id, s.email.as_ref().map(|e| &e.1), s.phone],
    )?;
    Ok(true)
}

impl Audience for SqliteStore {
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
        self.write(|tx| {
            let exists: Option<i64> = tx
                .query_row("SELECT id FROM accounts WHERE name = ?1", [name], |r| {
                    r.get(0)
                })
                .optional()?;
            if let Some(id) = exists {
                return Err(Error::conflict(format!(
                    "an account named {name:?} already exists (id {id})"
                )));
            }
            tx.execute(
                "INSERT INTO accounts (name, created_at) VALUES (?1, ?2)",
                params![name, crate::domain::clock::now_ms()],
            )?;
            Ok(tx.last_insert_rowid())
        })
    }

    fn add_subscriber_with(
        &self,
        account_id: i64,
        s: &NewSubscriber,
        lists: &[i64],
        links: Option<&Links>,
    ) -> Result<i64> {
        self.write(|tx| {
            require_account(tx, account_id)?;
            super::lists::require_lists(tx, account_id, lists)?;
            Ok(add_to_lists(tx, account_id, s, lists, links)?.0)
        })
    }

    /// Import subscribers in one transaction. Rows are `(line, parsed)`; a parse error is an
    /// `Err` with its reason. All-or-nothing unless `skip_invalid`, which imports the valid rows
    /// and reports every skipped one.
    fn import_subscribers_with(
        &self,
        account_id: i64,
        rows: Vec<(u64, Result<NewSubscriber>)>,
        skip_invalid: bool,
        lists: &[i64],
        links: Option<&Links>,
    ) -> Result<ImportReport> {
        self.write(|tx| {
            require_account(tx, account_id)?;
            super::lists::require_lists(tx, account_id, lists)?;
            let mut report = ImportReport {
                imported: 0,
                existing: 0,
                skipped: Vec::new(),
            };
            for (line, row) in rows {
                let res = row.and_then(|s| add_to_lists(tx, account_id, &s, lists, links));
                match res {
                    Ok((_, true)) => report.imported += 1,
                    Ok((_, false)) => report.existing += 1,
                    Err(e) if skip_invalid => report.skipped.push(SkippedRow {
                        line,
                        reason: e.message,
                    }),
                    Err(e) => {
                        // Returning the error rolls the whole import back.
                        return Err(Error::invalid(format!(
                            "line {line}: {}; nothing was imported (use --skip-invalid to \
                             import the valid rows)",
                            e.message
                        )));
                    }
                }
            }
            Ok(report)
        })
    }

    /// Attribute names that subscribers of this account have (templates may use them).
    fn attribute_names(&self, account_id: i64) -> Result<BTreeSet<String>> {
        self.read(|c| {
            let mut st = c.prepare(
                "SELECT DISTINCT j.key FROM subscribers s, json_each(s.attrs) j
                 WHERE s.account_id = ?1",
            )?;
            let names = st
                .query_map([account_id], |r| r.get(0))?
                .collect::<rusqlite::Result<BTreeSet<String>>>()?;
            Ok(names)
        })
    }

    /// Who would receive a `channel` campaign of this account now, for the template check at
    /// creation: the confirmed subscribers with an address for the channel (suppressed ones
    /// included, as a suppression may be lifted before the list is built), and per variable
    /// how many of them have it. Counted on the very JSON object list building captures for
    /// rendering (`list_insert_sql` in ledger.rs: the attributes patched with the built-in
    /// `name`, `email`, `phone`, where a NULL built-in is absent), so "has it" means here what
    /// it means when the message is rendered. One statement, so one snapshot.
    fn account_exists(&self, account_id: i64) -> Result<()> {
        self.read(|c| {
            let found: Option<i64> = c
                .query_row("SELECT id FROM accounts WHERE id = ?1", [account_id], |r| {
                    r.get(0)
                })
                .optional()?;
            found
                .map(|_| ())
                .ok_or_else(|| Error::not_found(format!("unknown account id {account_id}")))
        })
    }
}

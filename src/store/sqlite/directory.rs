//! Looking things up by name and listing them: accounts (by id or name), campaigns, and the
//! subscribers of an account, with the few edits a subscriber needs (update, remove).

use super::codec;
use super::SqliteStore;
use crate::domain::address::{normalize_email, normalize_phone, Channel};
use crate::domain::model::CampaignStatus;
use crate::error::{Error, Result};
use crate::store::{
    AccountRow, Audience, CampaignRow, Directory, SubscriberChanges, SubscriberRow,
};
use rusqlite::{named_params, params, OptionalExtension};

const SUBSCRIBER_COLS: &str =
    "id, account_id, email, phone, name, status, attrs, created_at FROM subscribers";

fn subscriber_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SubscriberRow> {
    Ok(SubscriberRow {
        id: r.get(0)?,
        account_id: r.get(1)?,
        email: r.get(2)?,
        phone: r.get(3)?,
        name: r.get(4)?,
        status: r.get(5)?,
        attrs: r.get(6)?,
        created_at: r.get(7)?,
    })
}

impl Directory for SqliteStore {
    /// An account given as an id (`3`) or a name (`acme`); an unknown one is a usage error
    /// that lists the accounts there are.
    fn resolve_account(&self, key: &str) -> Result<i64> {
        let key = key.trim();
        let found: Option<i64> = self.read(|c| {
            let by_id = key.parse::<i64>().ok();
            Ok(c.query_row(
                "SELECT id FROM accounts WHERE id = ?1 OR name = ?2 ORDER BY id = ?1 DESC LIMIT 1",
                params![by_id, key],
                |r| r.get(0),
            )
            .optional()?)
        })?;
        found.ok_or_else(|| {
            let names: Vec<String> = self
                .accounts()
                .map(|a| {
                    a.into_iter()
                        .map(|a| format!("{} ({})", a.name, a.id))
                        .collect()
                })
                .unwrap_or_default();
            let there = if names.is_empty() {
                "there are none yet: `sendonce account add NAME`".to_string()
            } else {
                format!("accounts: {}", names.join(", "))
            };
            match key.parse::<i64>() {
                Ok(id) => Error::not_found(format!("unknown account id {id}; {there}")),
                Err(_) => Error::not_found(format!("unknown account {key:?}; {there}")),
            }
        })
    }

    /// An account by its exact name.
    fn account_id_by_name(&self, name: &str) -> Result<i64> {
        let found: Option<i64> = self.read(|c| {
            Ok(
                c.query_row("SELECT id FROM accounts WHERE name = ?1", [name], |r| {
                    r.get(0)
                })
                .optional()?,
            )
        })?;
        found.ok_or_else(|| Error::not_found(format!("unknown account name {name:?}")))
    }

    fn account_name(&self, id: i64) -> Result<String> {
        let found: Option<String> = self.read(|c| {
            Ok(
                c.query_row("SELECT name FROM accounts WHERE id = ?1", [id], |r| {
                    r.get(0)
                })
                .optional()?,
            )
        })?;
        found.ok_or_else(|| Error::not_found(format!("unknown account id {id}")))
    }

    fn account_count(&self) -> Result<u64> {
        self.read(|c| {
            let n: i64 = c.query_row("SELECT count(*) FROM accounts", [], |r| r.get(0))?;
            Ok(n as u64)
        })
    }

    fn accounts(&self) -> Result<Vec<AccountRow>> {
        self.read(|c| {
            let mut st = c.prepare(
                "SELECT a.id, a.name, a.created_at,
                        (SELECT count(*) FROM subscribers s
                         WHERE s.account_id = a.id AND s.removed_at IS NULL),
                        (SELECT count(*) FROM campaigns k
                         WHERE k.account_id = a.id AND k.kind = 'campaign'
                           AND k.name NOT LIKE 'notify:%'),
                        a.sms_footer
                 FROM accounts a ORDER BY a.id",
            )?;
            let rows = st
                .query_map([], |r| {
                    Ok(AccountRow {
                        id: r.get(0)?,
                        name: r.get(1)?,
                        created_at: r.get(2)?,
                        subscribers: r.get(3)?,
                        campaigns: r.get(4)?,
                        sms_footer: r.get(5)?,
                    })
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })
    }

    fn sms_footer(&self, account: i64) -> Result<Option<String>> {
        self.account_exists(account)?;
        self.read(|c| {
            Ok(c.query_row(
                "SELECT sms_footer FROM accounts WHERE id = ?1",
                [account],
                |r| r.get(0),
            )?)
        })
    }

    fn set_sms_footer(&self, account: i64, footer: Option<&str>) -> Result<()> {
        self.write(|tx| {
            super::admin::require_account(tx, account)?;
            tx.execute(
                "UPDATE accounts SET sms_footer = ?2 WHERE id = ?1",
                params![account, footer],
            )?;
            Ok(())
        })
    }

    /// Campaigns, newest first, optionally of one account and in one state.
    fn list_campaigns(
        &self,
        account: Option<i64>,
        status: Option<CampaignStatus>,
    ) -> Result<Vec<CampaignRow>> {
        self.read(|c| {
            let mut st = c.prepare(
                "SELECT k.id, k.account_id, a.name, k.name, k.channel, k.status,
                        k.scheduled_for, k.created_at
                 FROM campaigns k JOIN accounts a ON a.id = k.account_id
                 WHERE (?1 IS NULL OR k.account_id = ?1) AND (?2 IS NULL OR k.status = ?2)
                   AND k.kind = 'campaign'
                 ORDER BY k.id DESC",
            )?;
            let rows = st
                .query_map(params![account, status], |r| {
                    Ok(CampaignRow {
                        id: r.get(0)?,
                        account_id: r.get(1)?,
                        account: r.get(2)?,
                        name: r.get(3)?,
                        channel: codec::get::<Channel>(r, 4, "campaigns")?.to_string(),
                        status: codec::get::<CampaignStatus>(r, 5, "campaigns")?.to_string(),
                        scheduled_for: r.get(6)?,
                        created_at: r.get(7)?,
                    })
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })
    }

    /// One page of an account's subscribers in id order, after `after_id`, optionally in one
    /// status. Removed subscribers are not listed.
    fn list_subscribers(
        &self,
        account: i64,
        status: Option<&str>,
        after_id: i64,
        limit: usize,
    ) -> Result<Vec<SubscriberRow>> {
        self.read(|c| {
            let mut st = c.prepare(&format!(
                "SELECT {SUBSCRIBER_COLS}
                 WHERE account_id = :account AND removed_at IS NULL AND id > :after
                   AND (:status IS NULL OR status = :status)
                 ORDER BY id LIMIT :limit"
            ))?;
            let rows = st
                .query_map(
                    named_params! {
                        ":account": account,
                        ":after": after_id,
                        ":status": status,
                        ":limit": limit as i64,
                    },
                    subscriber_from_row,
                )?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })
    }

    /// A subscriber by id, or by email address / phone number within an account.
    fn find_subscriber(&self, account: i64, key: &str) -> Result<SubscriberRow> {
        let key = key.trim();
        let by_id = key.parse::<i64>().ok();
        // The forms rows are stored in; a key that is neither is matched as given.
        let email = normalize_email(key).map_or_else(|_| key.to_lowercase(), |(_, n)| n);
        let phone = normalize_phone(key).unwrap_or_else(|_| key.to_string());
        let row = self.read(|c| {
            Ok(c.query_row(
                &format!(
                    "SELECT {SUBSCRIBER_COLS}
                     WHERE account_id = :account AND removed_at IS NULL
                       AND (id = :id OR email_norm = :email OR phone = :phone)
                     ORDER BY id = :id DESC LIMIT 1"
                ),
                named_params! {":account": account, ":id": by_id, ":email": email, ":phone": phone},
                subscriber_from_row,
            )
            .optional()?)
        })?;
        row.ok_or_else(|| {
            Error::not_found(format!(
                "no subscriber {key:?} in account {account} (give its id, email or phone)"
            ))
        })
    }

    /// Change a subscriber's name, status or attributes (merged). Returns the new row.
    fn update_subscriber(
        &self,
        account: i64,
        id: i64,
        ch: &SubscriberChanges,
    ) -> Result<SubscriberRow> {
        self.write(|tx| {
            let n = tx.execute(
                "UPDATE subscribers SET name = coalesce(:name, name),
                        status = coalesce(:status, status),
                        attrs = CASE WHEN :attrs IS NULL THEN attrs ELSE json_patch(attrs, :attrs) END
                 WHERE id = :id AND account_id = :account AND removed_at IS NULL",
                named_params! {
                    ":id": id,
                    ":account": account,
                    ":name": ch.name,
                    ":status": ch.status,
                    ":attrs": ch.attrs,
                },
            )?;
            if n != 1 {
                return Err(Error::not_found(format!(
                    "no subscriber {id} in account {account}"
                )));
            }
            Ok(())
        })?;
        self.find_subscriber(account, &id.to_string())
    }

    /// Remove a subscriber: blanked (no name, no attributes, `unsubscribed`), listed nowhere
    /// and never sent to (its addresses are suppressed, so rows already queued for it are not
    /// sent either); the ledger rows of past sends keep naming it. The row itself stays
    /// (deleting it would have to search the whole ledger for rows that name it); adding the
    /// same address again brings it back.
    fn remove_subscriber(&self, account: i64, id: i64) -> Result<()> {
        let now = crate::domain::clock::now_ms();
        self.write(|tx| {
            let n = tx.execute(
                "UPDATE subscribers SET name = NULL, attrs = '{}', status = 'unsubscribed',
                        removed_at = ?3
                 WHERE id = ?1 AND account_id = ?2 AND removed_at IS NULL",
                params![id, account, now],
            )?;
            if n != 1 {
                return Err(Error::not_found(format!(
                    "no subscriber {id} in account {account}"
                )));
            }
            // Rows already queued for this subscriber must not go out either: the claim
            // checks suppressions, so its addresses are suppressed (undone if it is re-added).
            tx.execute(
                "INSERT INTO suppressions (account_id, channel, address, reason, source, created_at)
                 SELECT account_id, 'email', email_norm, 'subscriber removed', 'removal', ?2
                 FROM subscribers WHERE id = ?1 AND email_norm IS NOT NULL
                 UNION ALL
                 SELECT account_id, 'sms', phone, 'subscriber removed', 'removal', ?2
                 FROM subscribers WHERE id = ?1 AND phone IS NOT NULL
                 ON CONFLICT DO NOTHING",
                params![id, now],
            )?;
            Ok(())
        })
    }
}

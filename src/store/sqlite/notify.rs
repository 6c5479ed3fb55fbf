//! Ledger rows for one-off notifications (`sendonce notify`): one hidden campaign per key and
//! channel in the account `notify`, one send row per recipient, job id `notify:<key>:<address>`.

use super::SqliteStore;
use crate::domain::address::Channel;
use crate::error::Result;
use crate::store::{Notifications, NotifyRow};
use rusqlite::{params, OptionalExtension, Transaction};

pub fn notify_job_id(key: &str, address: &str) -> String {
    format!("notify:{key}:{address}")
}

const ACCOUNT: &str = "notify";

fn campaign_name(key: &str) -> String {
    format!("notify:{key}")
}

fn account_id(tx: &Transaction<'_>, now: i64) -> Result<i64> {
    tx.execute(
        "INSERT INTO accounts (name, created_at) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
        params![ACCOUNT, now],
    )?;
    Ok(
        tx.query_row("SELECT id FROM accounts WHERE name = ?1", [ACCOUNT], |r| {
            r.get(0)
        })?,
    )
}

impl Notifications for SqliteStore {
    /// Create (or find) the rows of a notification. Content is taken from the first call for a
    /// key: a retry sends the same bytes. Returns the campaign id.
    fn prepare_notification(
        &self,
        key: &str,
        channel: Channel,
        from: Option<&str>,
        subject: Option<&str>,
        body: &str,
        addresses: &[String],
    ) -> Result<i64> {
        let now = crate::domain::clock::now_ms();
        self.write(|tx| {
            let account = account_id(tx, now)?;
            let name = campaign_name(key);
            let existing: Option<i64> = tx
                .query_row(
                    "SELECT id FROM campaigns WHERE account_id = ?1 AND name = ?2 AND channel = ?3",
                    params![account, name, channel.as_str()],
                    |r| r.get(0),
                )
                .optional()?;
            let cid = match existing {
                Some(id) => id,
                None => {
                    tx.execute(
                        "INSERT INTO campaigns (account_id, name, channel, sender, subject, body,
                                                templated, status, scheduled_for, approved_at,
                                                started_at, list_complete, created_at)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, 'sending', ?7, ?7, ?7, 1, ?7)",
                        params![account, name, channel.as_str(), from, subject, body, now],
                    )?;
                    tx.last_insert_rowid()
                }
            };
            let mut inserted = 0;
            for addr in addresses {
                let (email, phone) = match channel {
                    Channel::Email => (Some(addr.as_str()), None),
                    Channel::Sms => (None, Some(addr.as_str())),
                };
                let sub: Option<i64> = tx
                    .query_row(
                        "SELECT id FROM subscribers WHERE account_id = ?1
                         AND (email_norm = ?2 OR phone = ?3)",
                        params![account, email, phone],
                        |r| r.get(0),
                    )
                    .optional()?;
                let sub = match sub {
                    Some(id) => id,
                    None => {
                        tx.execute(
                            "INSERT INTO subscribers (account_id, email, email_norm, phone, status,
                                                      created_at)
                             VALUES (?1, ?2, ?2, ?3, 'confirmed', ?4)",
                            params![account, email, phone, now],
                        )?;
                        tx.last_insert_rowid()
                    }
                };
                inserted += tx.execute(
                    "INSERT INTO sends (account_id, campaign_id, subscriber_id, job_id, address,
                                        vars, status, visible_at, created_at, updated_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, '{}', 'queued', ?6, ?6, ?6)
                     ON CONFLICT DO NOTHING",
                    params![account, cid, sub, notify_job_id(key, addr), addr, now],
                )?;
            }
            if inserted > 0 {
                // A recipient added on a later call reopens a finished notification.
                tx.execute(
                    "UPDATE campaigns SET status = 'sending', finished_at = NULL
                     WHERE id = ?1 AND status = 'sent'",
                    [cid],
                )?;
            }
            Ok(cid)
        })
    }

    /// The rows of a notification for these addresses (read only; absent ones are omitted).
    fn notification_rows(
        &self,
        key: &str,
        channel: Channel,
        addresses: &[String],
    ) -> Result<Vec<NotifyRow>> {
        self.read(|c| {
            let mut st = c.prepare_cached(
                "SELECT s.status, s.attempts, s.sent_at, s.provider_message_id, s.last_error
                 FROM sends s JOIN campaigns k ON k.id = s.campaign_id
                 JOIN accounts a ON a.id = k.account_id
                 WHERE a.name = ?1 AND k.name = ?2 AND k.channel = ?3 AND s.address = ?4
                   AND s.account_id = a.id",
            )?;
            let mut out = Vec::new();
            for addr in addresses {
                let row = st
                    .query_row(
                        params![ACCOUNT, campaign_name(key), channel.as_str(), addr],
                        |r| {
                            Ok(NotifyRow {
                                job_id: notify_job_id(key, addr),
                                address: addr.clone(),
                                channel,
                                status: r.get(0)?,
                                attempts: r.get(1)?,
                                sent_at: r.get(2)?,
                                provider_message_id: r.get(3)?,
                                reason: r.get(4)?,
                            })
                        },
                    )
                    .optional()?;
                out.extend(row);
            }
            Ok(out)
        })
    }
}

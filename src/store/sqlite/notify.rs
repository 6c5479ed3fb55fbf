//! Ledger rows for one-off notifications (`sendonce notify`): one hidden campaign per key and
//! channel in the account `notify`, one send row per recipient, job id `notify:<key>:<address>`.

use super::codec;
use super::SqliteStore;
use crate::domain::address::Channel;
use crate::domain::model::SendStatus;
use crate::error::Result;
use crate::store::{Notifications, NotifyRow};
use rusqlite::{named_params, params, OptionalExtension, Transaction};

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

/// What a notification is about: its key, channel and content (taken from the first call).
struct Notice<'a> {
    key: &'a str,
    channel: Channel,
    from: Option<&'a str>,
    subject: Option<&'a str>,
    body: &'a str,
}

/// The hidden campaign of a notification: found, or created already `sending` with its list
/// complete.
fn notification_campaign(
    tx: &Transaction<'_>,
    account: i64,
    n: &Notice<'_>,
    now: i64,
) -> Result<i64> {
    let name = campaign_name(n.key);
    let existing: Option<i64> = tx
        .query_row(
            "SELECT id FROM campaigns WHERE account_id = ?1 AND name = ?2 AND channel = ?3",
            params![account, name, n.channel],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(id) = existing {
        return Ok(id);
    }
    tx.execute(
        "INSERT INTO campaigns (account_id, name, channel, sender, subject, body,
                                templated, status, scheduled_for, approved_at,
                                started_at, list_complete, created_at, kind)
         VALUES (:account, :name, :channel, :from, :subject, :body, 0, 'sending',
                 :now, :now, :now, 1, :now, 'notify')",
        named_params! {
            ":account": account,
            ":name": name,
            ":channel": n.channel,
            ":from": n.from,
            ":subject": n.subject,
            ":body": n.body,
            ":now": now,
        },
    )?;
    Ok(tx.last_insert_rowid())
}

/// The send row of one recipient (and its hidden subscriber); returns 1 if the row is new.
fn notification_row(
    tx: &Transaction<'_>,
    account: i64,
    cid: i64,
    n: &Notice<'_>,
    addr: &str,
    now: i64,
) -> Result<usize> {
    let (email, phone) = match n.channel {
        Channel::Email => (Some(addr), None),
        Channel::Sms => (None, Some(addr)),
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
                 VALUES (:account, :email, :email, :phone, 'confirmed', :now)",
                named_params! {
                    ":account": account,
                    ":email": email,
                    ":phone": phone,
                    ":now": now,
                },
            )?;
            tx.last_insert_rowid()
        }
    };
    Ok(tx.execute(
        "INSERT INTO sends (account_id, campaign_id, subscriber_id, job_id, address,
                            vars, status, visible_at, created_at, updated_at)
         VALUES (:account, :campaign, :subscriber, :job_id, :address, '{}', 'queued',
                 :now, :now, :now)
         ON CONFLICT DO NOTHING",
        named_params! {
            ":account": account,
            ":campaign": cid,
            ":subscriber": sub,
            ":job_id": notify_job_id(n.key, addr),
            ":address": addr,
            ":now": now,
        },
    )?)
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
        let notice = Notice {
            key,
            channel,
            from,
            subject,
            body,
        };
        self.write(|tx| {
            let account = account_id(tx, now)?;
            let cid = notification_campaign(tx, account, &notice, now)?;
            let mut inserted = 0;
            for addr in addresses {
                inserted += notification_row(tx, account, cid, &notice, addr, now)?;
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
                 WHERE a.name = :account AND k.name = :campaign AND k.channel = :channel
                   AND s.address = :address AND s.account_id = a.id",
            )?;
            let mut out = Vec::new();
            for addr in addresses {
                let row = st
                    .query_row(
                        named_params! {
                            ":account": ACCOUNT,
                            ":campaign": campaign_name(key),
                            ":channel": channel,
                            ":address": addr,
                        },
                        |r| {
                            Ok(NotifyRow {
                                job_id: notify_job_id(key, addr),
                                address: addr.clone(),
                                channel,
                                status: codec::get::<SendStatus>(r, 0, "sends")?.to_string(),
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

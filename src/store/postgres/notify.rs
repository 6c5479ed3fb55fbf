//! `Notifications` on PostgreSQL (`sendonce notify`): the same rows as `sqlite/notify.rs` — one
//! hidden campaign per key and channel in the account `notify`, one send row per recipient, job
//! id `notify:<key>:<address>`, content from the first call. Where SQLite's `BEGIN IMMEDIATE`
//! serializes two notifies, here the transaction locks the `notify` account's row first
//! (`FOR UPDATE`): the find-or-create of the campaign and of its hidden subscribers cannot race
//! another host's.

use super::ledger::{transaction, TxResult};
use super::PgStore;
use crate::domain::address::Channel;
use crate::domain::model::SendStatus;
use crate::error::{Error, Result};
use crate::store::{Notifications, NotifyRow};
use deadpool_postgres::Transaction;

const ACCOUNT: &str = "notify";

fn notify_job_id(key: &str, address: &str) -> String {
    format!("notify:{key}:{address}")
}

fn campaign_name(key: &str) -> String {
    format!("notify:{key}")
}

/// What a notification is about, owned (it moves onto the store's runtime).
struct Notice {
    key: String,
    channel: Channel,
    from: Option<String>,
    subject: Option<String>,
    body: String,
    now: i64,
}

/// The `notify` account, created if needed, its row locked until the commit.
async fn account_id(tx: &Transaction<'_>, now: i64) -> TxResult<i64> {
    tx.execute(
        "INSERT INTO accounts (name, created_at) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        &[&ACCOUNT, &now],
    )
    .await?;
    Ok(tx
        .query_one(
            "SELECT id FROM accounts WHERE name = $1 FOR UPDATE",
            &[&ACCOUNT],
        )
        .await?
        .get(0))
}

/// The hidden campaign of a notification: found, or created already `sending` with its list
/// complete.
async fn notification_campaign(tx: &Transaction<'_>, account: i64, n: &Notice) -> TxResult<i64> {
    let name = campaign_name(&n.key);
    let existing = tx
        .query_opt(
            "SELECT id FROM campaigns WHERE account_id = $1 AND name = $2 AND channel = $3
             ORDER BY id LIMIT 1 FOR UPDATE",
            &[&account, &name, &n.channel.as_str()],
        )
        .await?;
    if let Some(r) = existing {
        return Ok(r.get(0));
    }
    Ok(tx
        .query_one(
            "INSERT INTO campaigns (account_id, name, channel, sender, subject, body,
                                    templated, status, scheduled_for, approved_at,
                                    started_at, list_complete, created_at, kind)
             VALUES ($1, $2, $3, $4, $5, $6, FALSE, 'sending', $7, $7, $7, TRUE, $7, 'notify')
             RETURNING id",
            &[
                &account,
                &name,
                &n.channel.as_str(),
                &n.from,
                &n.subject,
                &n.body,
                &n.now,
            ],
        )
        .await?
        .get(0))
}

/// The send row of one recipient (and its hidden subscriber); returns 1 if the row is new.
async fn notification_row(
    tx: &Transaction<'_>,
    account: i64,
    cid: i64,
    n: &Notice,
    addr: &str,
) -> TxResult<u64> {
    let (email, phone) = match n.channel {
        Channel::Email => (Some(addr), None),
        Channel::Sms => (None, Some(addr)),
    };
    let found = tx
        .query_opt(
            "SELECT id FROM subscribers WHERE account_id = $1
             AND (email_norm = $2 OR phone = $3) ORDER BY id LIMIT 1",
            &[&account, &email, &phone],
        )
        .await?;
    let sub: i64 = match found {
        Some(r) => r.get(0),
        None => tx
            .query_one(
                "INSERT INTO subscribers (account_id, email, email_norm, phone, status,
                                          created_at)
                 VALUES ($1, $2, $2, $3, 'confirmed', $4) RETURNING id",
                &[&account, &email, &phone, &n.now],
            )
            .await?
            .get(0),
    };
    Ok(tx
        .execute(
            "INSERT INTO sends (account_id, campaign_id, subscriber_id, job_id, address,
                                vars, status, visible_at, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, '{}', 'queued', $6, $6, $6)
             ON CONFLICT DO NOTHING",
            &[
                &account,
                &cid,
                &sub,
                &notify_job_id(&n.key, addr),
                &addr,
                &n.now,
            ],
        )
        .await?)
}

impl Notifications for PgStore {
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
        let notice = Notice {
            key: key.to_string(),
            channel,
            from: from.map(str::to_string),
            subject: subject.map(str::to_string),
            body: body.to_string(),
            now: crate::domain::clock::now_ms(),
        };
        let addresses = addresses.to_vec();
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                let account = account_id(&tx, notice.now).await?;
                let cid = notification_campaign(&tx, account, &notice).await?;
                let mut inserted = 0;
                for addr in &addresses {
                    inserted += notification_row(&tx, account, cid, &notice, addr).await?;
                }
                if inserted > 0 {
                    // A recipient added on a later call reopens a finished notification.
                    tx.execute(
                        "UPDATE campaigns SET status = 'sending', finished_at = NULL
                         WHERE id = $1 AND status = 'sent'",
                        &[&cid],
                    )
                    .await?;
                }
                Ok(cid)
            })
        })
    }

    /// The rows of a notification for these addresses (read only; absent ones are omitted).
    fn notification_rows(
        &self,
        key: &str,
        channel: Channel,
        addresses: &[String],
    ) -> Result<Vec<NotifyRow>> {
        let key = key.to_string();
        let addresses = addresses.to_vec();
        self.run(move |pool| async move {
            let c = pool.get().await?;
            let st = c
                .prepare_cached(
                    "SELECT s.status, s.attempts, s.sent_at, s.provider_message_id, s.last_error
                     FROM sends s JOIN campaigns k ON k.id = s.campaign_id
                     JOIN accounts a ON a.id = k.account_id
                     WHERE a.name = $1 AND k.name = $2 AND k.channel = $3
                       AND s.address = $4 AND s.account_id = a.id
                     ORDER BY s.id LIMIT 1",
                )
                .await?;
            let name = campaign_name(&key);
            let mut out = Vec::new();
            for addr in &addresses {
                let Some(r) = c
                    .query_opt(&st, &[&ACCOUNT, &name, &channel.as_str(), addr])
                    .await?
                else {
                    continue;
                };
                let status: String = r.get(0);
                let status = SendStatus::parse(&status).ok_or_else(|| {
                    Error::damaged(format!("sends.status holds an unknown value {status:?}"))
                })?;
                out.push(NotifyRow {
                    job_id: notify_job_id(&key, addr),
                    address: addr.clone(),
                    channel,
                    status: status.to_string(),
                    attempts: r.get(1),
                    sent_at: r.get(2),
                    provider_message_id: r.get(3),
                    reason: r.get(4),
                });
            }
            Ok(out)
        })
    }
}

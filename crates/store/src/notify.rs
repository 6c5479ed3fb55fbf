//! Ledger rows of one-off notifications (`Notifications`, `sendonce notify`): one hidden
//! campaign per key and channel in the account `notify`, one send row per recipient, job id
//! `notify:<key>:<address>`, content from the first call. Written once for both stores over
//! `sql::Tx`. Where SQLite's `BEGIN IMMEDIATE` serializes two notifies, PostgreSQL's
//! transaction locks the `notify` account's row first (`FOR UPDATE`): the find-or-create of the
//! campaign and of its hidden subscribers cannot race another host's.

use crate::shared::get_at;
use crate::sql::{args, Db, Tx};
use sendonce_domain::address::Channel;
use sendonce_domain::error::Result;
use sendonce_domain::model::SendStatus;

/// One recipient's row of a notification.
#[derive(Debug, Clone)]
pub struct NotifyRow {
    pub job_id: String,
    pub address: String,
    pub channel: Channel,
    pub status: String,
    pub attempts: i64,
    pub sent_at: Option<i64>,
    pub provider_message_id: Option<String>,
    pub reason: Option<String>,
}

/// One-off notifications.
pub trait Notifications: Send + Sync {
    /// Create (or find) the rows of a notification; returns its campaign id.
    fn prepare_notification(
        &self,
        key: &str,
        channel: Channel,
        from: Option<&str>,
        subject: Option<&str>,
        body: &str,
        addresses: &[String],
    ) -> Result<i64>;
    /// The rows of a notification for these addresses.
    fn notification_rows(
        &self,
        key: &str,
        channel: Channel,
        addresses: &[String],
    ) -> Result<Vec<NotifyRow>>;
}

/// The job id of a notification's row for `address`.
pub fn notify_job_id(key: &str, address: &str) -> String {
    format!("notify:{key}:{address}")
}

const ACCOUNT: &str = "notify";

fn campaign_name(key: &str) -> String {
    format!("notify:{key}")
}

/// The `notify` account, created if needed, its row locked until the commit (PostgreSQL).
fn account_id(tx: &mut dyn Tx, now: i64) -> Result<i64> {
    tx.exec(
        "INSERT INTO accounts (name, created_at) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
        &args![ACCOUNT, now],
    )?;
    let sql = format!(
        "SELECT id FROM accounts WHERE name = ?1{}",
        tx.dialect().for_update
    );
    tx.scalar(&sql, &args![ACCOUNT])
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
fn notification_campaign(tx: &mut dyn Tx, account: i64, n: &Notice<'_>, now: i64) -> Result<i64> {
    let name = campaign_name(n.key);
    let find = format!(
        "SELECT id FROM campaigns WHERE account_id = ?1 AND name = ?2 AND channel = ?3
         ORDER BY id LIMIT 1{}",
        tx.dialect().for_update
    );
    if let Some(id) = tx.scalar_opt(&find, &args![account, &name, n.channel])? {
        return Ok(id);
    }
    tx.scalar(
        "INSERT INTO campaigns (account_id, name, channel, sender, subject, body,
                                templated, status, scheduled_for, approved_at,
                                started_at, list_complete, created_at, kind)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, FALSE, 'sending', ?7, ?7, ?7, TRUE, ?7, 'notify')
         RETURNING id",
        &args![account, &name, n.channel, n.from, n.subject, n.body, now],
    )
}

/// The send row of one recipient (and its hidden subscriber); returns 1 if the row is new.
fn notification_row(
    tx: &mut dyn Tx,
    (account, cid): (i64, i64),
    n: &Notice<'_>,
    addr: &str,
    now: i64,
) -> Result<u64> {
    let (email, phone) = match n.channel {
        Channel::Email => (Some(addr), None),
        Channel::Sms => (None, Some(addr)),
    };
    let found: Option<i64> = tx.scalar_opt(
        "SELECT id FROM subscribers WHERE account_id = ?1
         AND (email_norm = ?2 OR phone = ?3) ORDER BY id LIMIT 1",
        &args![account, email, phone],
    )?;
    let sub: i64 = match found {
        Some(id) => id,
        None => tx.scalar(
            "INSERT INTO subscribers (account_id, email, email_norm, phone, status,
                                      created_at)
             VALUES (?1, ?2, ?2, ?3, 'confirmed', ?4) RETURNING id",
            &args![account, email, phone, now],
        )?,
    };
    let job = notify_job_id(n.key, addr);
    tx.exec(
        "INSERT INTO sends (account_id, campaign_id, subscriber_id, job_id, address,
                            vars, status, visible_at, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, '{}', 'queued', ?6, ?6, ?6)
         ON CONFLICT DO NOTHING",
        &args![account, cid, sub, &job, addr, now],
    )
}

/// The state of a notification's row: account `?1`, campaign name `?2`, channel `?3`,
/// address `?4`.
const NOTIFICATION_ROW: &str =
    "SELECT s.status, s.attempts, s.sent_at, s.provider_message_id, s.last_error
     FROM sends s JOIN campaigns k ON k.id = s.campaign_id
     JOIN accounts a ON a.id = k.account_id
     WHERE a.name = ?1 AND k.name = ?2 AND k.channel = ?3
       AND s.address = ?4 AND s.account_id = a.id
     ORDER BY s.id LIMIT 1";

impl<S: Db> Notifications for S {
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
        let now = sendonce_domain::clock::now_ms();
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
                inserted += notification_row(tx, (account, cid), &notice, addr, now)?;
            }
            if inserted > 0 {
                // A recipient added on a later call reopens a finished notification.
                tx.exec(
                    "UPDATE campaigns SET status = 'sending', finished_at = NULL
                     WHERE id = ?1 AND status = 'sent'",
                    &args![cid],
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
        let name = campaign_name(key);
        self.read(|tx| {
            let mut out = Vec::new();
            for addr in addresses {
                let row = tx.query_opt(
                    NOTIFICATION_ROW,
                    &args![ACCOUNT, &name, channel, addr],
                    |r| {
                        Ok(NotifyRow {
                            job_id: notify_job_id(key, addr),
                            address: addr.clone(),
                            channel,
                            status: get_at::<SendStatus>(r, 0, "sends.status")?.to_string(),
                            attempts: r.get(1)?,
                            sent_at: r.get(2)?,
                            provider_message_id: r.get(3)?,
                            reason: r.get(4)?,
                        })
                    },
                )?;
                out.extend(row);
            }
            Ok(out)
        })
    }
}

//! Ledger rows of one-off notifications (`Notifications`, `sendonce notify`): rows of the
//! account `notify`'s stream for their channel, one per recipient, job id
//! `notify:<key>:<address>`, sharing one content per key and channel (`message_contents.
//! notify_key`), taken from the first call. Written once for both stores over `sql::Tx`. Where
//! SQLite's `BEGIN IMMEDIATE` serializes two notifies, PostgreSQL's transaction locks the
//! `notify` account's row first (`FOR UPDATE`): the find-or-create of the content and of its
//! hidden subscribers cannot race another host's.

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
    /// Create (or find) the rows of a notification; returns its stream's id.
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

/// The notification a content belongs to (`message_contents.notify_key`).
fn notify_key(channel: Channel, key: &str) -> String {
    format!("{}:{key}", channel.as_str())
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

/// The content of a notification: found, or stored from this call.
fn notification_content(tx: &mut dyn Tx, account: i64, n: &Notice<'_>, now: i64) -> Result<i64> {
    let key = notify_key(n.channel, n.key);
    const FIND: &str = "SELECT id FROM message_contents WHERE account_id = ?1 AND notify_key = ?2";
    if let Some(id) = tx.scalar_opt(FIND, &args![account, &key])? {
        return Ok(id);
    }
    tx.scalar(
        "INSERT INTO message_contents (account_id, sender, subject, body, body_format,
                                       created_at, notify_key)
         VALUES (?1, ?2, ?3, ?4, 'text', ?5, ?6) RETURNING id",
        &args![account, n.from, n.subject, n.body, now, &key],
    )
}

/// The send row of one recipient (and its hidden subscriber), unless it has one already.
fn notification_row(
    tx: &mut dyn Tx,
    (account, stream, content): (i64, i64, i64),
    n: &Notice<'_>,
    addr: &str,
    now: i64,
) -> Result<()> {
    // An erased address is recorded by its `sha256:` form: suppressed at claim, not stored.
    let recorded = crate::privacy::recorded_address(tx, account, n.channel.as_str(), addr)?;
    let addr = recorded.as_str();
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
                            vars, status, visible_at, created_at, updated_at, message_id)
         VALUES (?1, ?2, ?3, ?4, ?5, '{}', 'queued', ?6, ?6, ?6, ?7)
         ON CONFLICT DO NOTHING",
        &args![account, stream, sub, &job, addr, now, content],
    )?;
    Ok(())
}

/// The state of a notification's row: account `?1`, notify key `?2`, address `?3`, channel
/// `?4`; found through its stream and `sends_campaign_address`, not a scan of `sends`.
const NOTIFICATION_ROW: &str =
    "SELECT s.status, s.attempts, s.sent_at, s.provider_message_id, s.last_error
     FROM accounts a JOIN message_contents c ON c.account_id = a.id AND c.notify_key = ?2
     JOIN campaigns st ON st.account_id = a.id AND st.stream = TRUE AND st.channel = ?4
     JOIN sends s ON s.campaign_id = st.id AND s.address = ?3
                 AND coalesce(s.message_id, 0) = c.id
     WHERE a.name = ?1 ORDER BY s.id LIMIT 1";

impl<S: Db> Notifications for S {
    /// Create (or find) the rows of a notification. Content is taken from the first call for a
    /// key: a retry sends the same bytes. Returns the stream's id.
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
            let stream = crate::messages::stream_for(tx, account, channel, now)?;
            let content = notification_content(tx, account, &notice, now)?;
            for addr in addresses {
                notification_row(tx, (account, stream, content), &notice, addr, now)?;
            }
            Ok(stream)
        })
    }

    /// The rows of a notification for these addresses (read only; absent ones are omitted).
    fn notification_rows(
        &self,
        key: &str,
        channel: Channel,
        addresses: &[String],
    ) -> Result<Vec<NotifyRow>> {
        let nkey = notify_key(channel, key);
        self.read(|tx| {
            let mut out = Vec::new();
            let account =
                tx.scalar_opt::<i64>("SELECT id FROM accounts WHERE name = ?1", &args![ACCOUNT])?;
            for addr in addresses {
                let recorded = match account {
                    Some(a) => crate::privacy::recorded_address(tx, a, channel.as_str(), addr)?,
                    None => addr.clone(),
                };
                let row = tx.query_opt(
                    NOTIFICATION_ROW,
                    &args![ACCOUNT, &nkey, &recorded, channel],
                    |r| {
                        Ok(NotifyRow {
                            job_id: notify_job_id(key, &recorded),
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

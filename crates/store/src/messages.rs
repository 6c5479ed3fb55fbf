//! Transactional messages of the HTTP API (`Messages`): one message per (account,
//! Idempotency-Key), stored as a row of the account's stream (`schema/0020_stream.sql`) so
//! that it goes through the same ledger, lease, suppression check and provider routes as every
//! campaign's row. Written once for both stores over `sql::Tx`: the idempotency row, the
//! message's content and its send row in the stream, in one transaction. Where SQLite's `BEGIN IMMEDIATE` serializes two requests with the same key,
//! PostgreSQL's second request waits on the first's idempotency row (`ON CONFLICT DO NOTHING`),
//! then reads it (READ COMMITTED: its next statement sees the first's commit) and answers a
//! replay, in progress or mismatch exactly as SQLite would.

use crate::admin::key_scope;
use crate::shared::{get_at, require_account, BodyFormat};
use crate::sql::{args, Db, Row, Tx};
use sendonce_domain::address::Channel;
use sendonce_domain::attachment::Attachment;
use sendonce_domain::error::{Error, Result};
use sendonce_domain::model::{self, SendStatus};

/// How a request answers its new message: computed from the new row inside the submission's
/// transaction and kept with it for the key's replays, so a request that does not wait for the
/// outcome costs one commit (`None`: the caller saves its answer later, `save_answer`).
pub type Answer = std::sync::Arc<dyn Fn(&MessageRow) -> Result<(u16, String)> + Send + Sync>;

/// A message to submit, validated by the caller (addresses normalised, content checked).
#[derive(Clone)]
pub struct NewMessage<'a> {
    pub account_id: i64,
    pub idempotency_key: &'a str,
    /// SHA-256 (hex) of the request as parsed: the same key with another body is refused.
    pub request_hash: &'a str,
    pub channel: Channel,
    /// The normalised recipient.
    pub to: &'a str,
    pub from: Option<&'a str>,
    pub reply_to: Option<&'a str>,
    pub subject: Option<&'a str>,
    /// The text; empty when it is generated from `html`.
    pub text: &'a str,
    pub html: Option<&'a str>,
    /// The stored template version the content was rendered from.
    pub template: Option<&'a crate::TemplateRow>,
    /// Stored once with the content, in this order.
    pub attachments: &'a [Attachment],
    /// The client's JSON object, kept for the message's events.
    pub metadata: Option<&'a str>,
    pub now: i64,
    /// The answer to keep with a new message, if the caller knows it now.
    pub answer: Option<Answer>,
}

/// What a submission found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Submitted {
    /// A new message, queued: its row as written, and the answer kept with it (when the
    /// submission brought [`NewMessage::answer`]).
    Created {
        row: Box<MessageRow>,
        answer: Option<(u16, String)>,
    },
    /// The key was used with this very request, which was answered: its answer.
    Replay { id: i64, status: u16, body: String },
    /// The key was used with this very request, which has not answered yet.
    InProgress { id: i64, since: i64 },
    /// The key was used with another request.
    Mismatch { id: i64 },
}

/// One API message as stored, with its send row's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageRow {
    pub id: i64,
    pub account_id: i64,
    pub idempotency_key: String,
    pub channel: Channel,
    pub to: String,
    pub job_id: String,
    pub status: SendStatus,
    pub attempts: i64,
    pub provider_message_id: Option<String>,
    pub reason: Option<String>,
    pub created_at: i64,
    pub sent_at: Option<i64>,
    /// The stored template (name, version) the content was rendered from.
    pub template: Option<(String, i64)>,
    /// How many attachments it carries.
    pub attachments: i64,
    /// Its subject (email), as stored.
    pub subject: Option<String>,
}

/// Which of an account's messages to show (`Messages::messages_page`), newest first.
#[derive(Debug, Clone, Default)]
pub struct MessageSearch<'a> {
    pub account_id: i64,
    /// The start of the recipient's normalised address (lower-case email, or E.164).
    pub to_prefix: Option<&'a str>,
    /// The send states the API shows as one (`queued` is queued or leased).
    pub states: Option<&'a [SendStatus]>,
    /// The provider's message id, exactly.
    pub provider_id: Option<&'a str>,
    /// Keyset: messages older than this id.
    pub before: Option<i64>,
    pub limit: usize,
}

/// The API's transactional messages.
pub trait Messages: Send + Sync {
    /// Submit a message under its key, in one transaction: a new key creates the message (its
    /// content and its queued send row in the account's stream).
    fn submit_message(&self, m: &NewMessage<'_>) -> Result<Submitted>;
    /// Keep the answer given to the request that created message `id`, for its replays.
    fn save_answer(&self, account_id: i64, id: i64, status: u16, body: &str) -> Result<()>;
    /// What a request with `key` and request hash `hash` would find already there (a replay,
    /// in progress, a mismatch), without writing: `None` for a new key.
    fn submitted(&self, account_id: i64, key: &str, hash: &str) -> Result<Option<Submitted>>;
    /// Message `id` of `account_id` (`NotFound` for another account's).
    fn message(&self, account_id: i64, id: i64) -> Result<MessageRow>;
    /// A page of the account's messages, newest first (the dashboard's message stream).
    fn messages_page(&self, q: &MessageSearch<'_>) -> Result<Vec<MessageRow>>;
}

/// The columns `message_from_row` reads, over `api_messages m`, `sends s`, `campaigns k`,
/// `message_contents c` and `templates t`.
const MESSAGE_COLUMNS: &str = "m.id, m.account_id, m.idempotency_key, k.channel, s.address,
    s.job_id, s.status, s.attempts, s.provider_message_id, s.last_error, m.created_at, s.sent_at,
    t.name, t.version,
    (SELECT count(*) FROM message_attachments a WHERE a.message_id = s.message_id), c.subject
    FROM api_messages m JOIN sends s ON s.id = m.send_id
    JOIN campaigns k ON k.id = m.campaign_id
    LEFT JOIN message_contents c ON c.id = s.message_id
    LEFT JOIN templates t ON t.id = c.template_id";

/// The message already under this key, if any.
fn existing(tx: &mut dyn Tx, m: &NewMessage<'_>) -> Result<Option<Submitted>> {
    existing_key(tx, m.account_id, m.idempotency_key, m.request_hash)
}

/// The message already under `key` of `account_id`, compared with the request hash `hash`.
fn existing_key(
    tx: &mut dyn Tx,
    account_id: i64,
    key: &str,
    hash: &str,
) -> Result<Option<Submitted>> {
    tx.query_opt(
        "SELECT id, request_hash, response_status, response_body, created_at
         FROM api_messages WHERE account_id = ?1 AND idempotency_key = ?2",
        &args![account_id, key],
        |r| {
            let id: i64 = r.get(0)?;
            if r.get::<String>(1)? != hash {
                return Ok(Submitted::Mismatch { id });
            }
            Ok(
                match (r.get::<Option<u16>>(2)?, r.get::<Option<String>>(3)?) {
                    (Some(status), Some(body)) => Submitted::Replay { id, status, body },
                    _ => Submitted::InProgress {
                        id,
                        since: r.get(4)?,
                    },
                },
            )
        },
    )
}

/// The subscriber the send row points at: the account's own for this address, or a hidden
/// one (unsubscribed and removed: listed nowhere, in no campaign) made for the message.
fn subscriber_for(tx: &mut dyn Tx, m: &NewMessage<'_>, to: &str) -> Result<i64> {
    let (email, phone) = match m.channel {
        Channel::Email => (Some(to), None),
        Channel::Sms => (None, Some(to)),
    };
    let found: Option<i64> = tx.scalar_opt(
        "SELECT id FROM subscribers WHERE account_id = ?1
         AND (email_norm = ?2 OR phone = ?3) LIMIT 1",
        &args![m.account_id, email, phone],
    )?;
    if let Some(id) = found {
        return Ok(id);
    }
    tx.scalar(
        "INSERT INTO subscribers (account_id, email, email_norm, phone, status, created_at,
                                  removed_at)
         VALUES (?1, ?2, ?2, ?3, 'unsubscribed', ?4, ?4) RETURNING id",
        &args![m.account_id, email, phone, m.now],
    )
}

/// The account's stream for `channel` (a campaign with `stream` set, always sending), made with
/// its first message. Two first messages at once (PostgreSQL) both reach the one row: the
/// second's insert waits on the first's unique index entry, then does nothing.
pub(crate) fn stream_for(
    tx: &mut dyn Tx,
    account_id: i64,
    channel: Channel,
    now: i64,
) -> Result<i64> {
    const FIND: &str =
        "SELECT id FROM campaigns WHERE account_id = ?1 AND channel = ?2 AND stream = TRUE";
    if let Some(id) = tx.scalar_opt::<i64>(FIND, &args![account_id, channel])? {
        return Ok(id);
    }
    tx.exec(
        "INSERT INTO campaigns (account_id, name, channel, body, templated, status,
                                scheduled_for, approved_at, started_at, list_complete,
                                created_at, kind, transactional, stream)
         VALUES (?1, 'stream: ' || CAST(?2 AS TEXT), ?2,
                 'the stream''s messages carry their own content', FALSE, 'sending', ?3, ?3, ?3,
                 TRUE, ?3, 'api', TRUE, TRUE)
         ON CONFLICT DO NOTHING",
        &args![account_id, channel, now],
    )?;
    tx.scalar_opt::<i64>(FIND, &args![account_id, channel])?
        .ok_or_else(|| {
            Error::db(format!(
                "account {account_id}'s {} stream is gone",
                channel.as_str()
            ))
        })
}

/// A message's content and attachments, stored once; returns the content's id (its send row's
/// `message_id`).
fn content_for(tx: &mut dyn Tx, m: &NewMessage<'_>) -> Result<i64> {
    let (body, format, html) = BodyFormat::store(m.text, m.html);
    let id: i64 = tx.scalar(
        "INSERT INTO message_contents (account_id, sender, reply_to, subject, body,
                                       body_format, html, created_at, template_id)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) RETURNING id",
        &args![
            m.account_id,
            m.from,
            m.reply_to,
            m.subject,
            body,
            format,
            html,
            m.now,
            m.template.map(|t| t.id)
        ],
    )?;
    for (position, a) in m.attachments.iter().enumerate() {
        tx.exec(
            "INSERT INTO message_attachments (message_id, position, filename, content_type,
                                              content_id, data)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            &args![
                id,
                position as i64,
                &a.filename,
                &a.content_type,
                &a.content_id,
                &*a.data
            ],
        )?;
    }
    Ok(id)
}

/// The idempotency row, then the message's content and its send row in the account's stream,
/// with its answer when the caller brought one; `None` when a concurrent request took the key
/// first (PostgreSQL; SQLite's write lock excludes it).
fn create(tx: &mut dyn Tx, m: &NewMessage<'_>) -> Result<Option<Submitted>> {
    require_account(tx, m.account_id)?;
    // An erased address is recorded by its `sha256:` form (the row is suppressed at claim),
    // and what the message would have told about the person is not stored either.
    let to = crate::privacy::recorded_address(tx, m.account_id, m.channel.as_str(), m.to)?;
    let withheld;
    let m = if sendonce_domain::address::is_erased_form(&to) {
        withheld = crate::privacy::withheld(m);
        &withheld
    } else {
        m
    };
    let Some(id) = tx.scalar_opt::<i64>(
        "INSERT INTO api_messages (account_id, idempotency_key, request_hash, created_at,
                                   metadata)
         VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (account_id, idempotency_key) DO NOTHING
         RETURNING id",
        &args![
            m.account_id,
            m.idempotency_key,
            m.request_hash,
            m.now,
            m.metadata
        ],
    )?
    else {
        return Ok(None);
    };
    let scope = key_scope(tx, &[("messages_through", id)])?;
    let sub = subscriber_for(tx, m, &to)?;
    let stream = stream_for(tx, m.account_id, m.channel, m.now)?;
    let content = content_for(tx, m)?;
    let job = model::api_job_id(&scope, m.account_id, id);
    let send: i64 = tx.scalar(
        "INSERT INTO sends (account_id, campaign_id, subscriber_id, job_id, address, vars,
                            status, visible_at, created_at, updated_at, message_id)
         VALUES (?1, ?2, ?3, ?4, ?5, '{}', 'queued', ?6, ?6, ?6, ?7) RETURNING id",
        &args![m.account_id, stream, sub, &job, &to, m.now, content],
    )?;
    // The row as `Messages::message` would read it now.
    let row = MessageRow {
        id,
        account_id: m.account_id,
        idempotency_key: m.idempotency_key.to_string(),
        channel: m.channel,
        to,
        job_id: job,
        status: SendStatus::Queued,
        attempts: 0,
        provider_message_id: None,
        reason: None,
        created_at: m.now,
        sent_at: None,
        template: m.template.map(|t| (t.name.clone(), t.version)),
        attachments: m.attachments.len() as i64,
        subject: m.subject.map(str::to_string),
    };
    let answer = m.answer.as_ref().map(|a| a(&row)).transpose()?;
    let (status, body) = answer.clone().unzip();
    tx.exec(
        "UPDATE api_messages SET campaign_id = ?2, send_id = ?3, response_status = ?4,
                response_body = ?5
         WHERE id = ?1",
        &args![id, stream, send, status, body.as_deref()],
    )?;
    Ok(Some(Submitted::Created {
        row: Box::new(row),
        answer,
    }))
}

fn message_from_row(r: Row<'_>) -> Result<MessageRow> {
    Ok(MessageRow {
        id: r.get(0)?,
        account_id: r.get(1)?,
        idempotency_key: r.get(2)?,
        channel: get_at(r, 3, "campaigns.channel")?,
        to: r.get(4)?,
        job_id: r.get(5)?,
        status: get_at(r, 6, "sends.status")?,
        attempts: r.get(7)?,
        provider_message_id: r.get(8)?,
        reason: r.get(9)?,
        created_at: r.get(10)?,
        sent_at: r.get(11)?,
        template: match (r.get::<Option<String>>(12)?, r.get::<Option<i64>>(13)?) {
            (Some(name), Some(version)) => Some((name, version)),
            _ => None,
        },
        attachments: r.get(14)?,
        subject: r.get(15)?,
    })
}

/// [`Messages::submit_message`] inside a transaction (its own, or a group's: `group.rs`).
pub(crate) fn submit_tx(tx: &mut dyn Tx, m: &NewMessage<'_>) -> Result<Submitted> {
    if let Some(found) = existing(tx, m)? {
        return Ok(found);
    }
    match create(tx, m)? {
        Some(created) => Ok(created),
        None => {
            existing(tx, m)?.ok_or_else(|| Error::db("the idempotency key was taken and is gone"))
        }
    }
}

/// [`Messages::save_answer`] inside a transaction.
pub(crate) fn save_answer_tx(
    tx: &mut dyn Tx,
    account_id: i64,
    id: i64,
    status: u16,
    body: &str,
) -> Result<()> {
    tx.exec(
        "UPDATE api_messages SET response_status = ?3, response_body = ?4
         WHERE id = ?1 AND account_id = ?2 AND response_status IS NULL",
        &args![id, account_id, status, body],
    )?;
    Ok(())
}

impl<S: Db> Messages for S {
    fn submit_message(&self, m: &NewMessage<'_>) -> Result<Submitted> {
        self.write(|tx| submit_tx(tx, m))
    }

    fn save_answer(&self, account_id: i64, id: i64, status: u16, body: &str) -> Result<()> {
        self.write(|tx| save_answer_tx(tx, account_id, id, status, body))
    }

    fn submitted(&self, account_id: i64, key: &str, hash: &str) -> Result<Option<Submitted>> {
        self.read(|tx| existing_key(tx, account_id, key, hash))
    }

    fn message(&self, account_id: i64, id: i64) -> Result<MessageRow> {
        let row = self.read(|tx| {
            tx.query_opt(
                &format!("SELECT {MESSAGE_COLUMNS} WHERE m.id = ?1 AND m.account_id = ?2"),
                &args![id, account_id],
                message_from_row,
            )
        })?;
        row.ok_or_else(|| Error::not_found(format!("unknown message id {id}")))
    }

    fn messages_page(&self, q: &MessageSearch<'_>) -> Result<Vec<MessageRow>> {
        let (low, high) = match q.to_prefix {
            Some(p) => {
                let (low, high) = crate::prefix_bounds(p, None);
                (Some(low), Some(high))
            }
            None => (None, None),
        };
        let states: Option<Vec<&str>> = q.states.map(|s| s.iter().map(|s| s.as_str()).collect());
        let states = states.map(|s| s.join(","));
        self.read(|tx| {
            // In byte order the range is exactly the addresses that start with the prefix,
            // whatever the database's collation (`schema/postgres/0003_prefix_order.sql`).
            let c = tx.dialect().byte_order;
            tx.query(
                &format!(
                    "SELECT {MESSAGE_COLUMNS}
                     WHERE m.account_id = ?1 AND m.id < ?2
                       AND (CAST(?3 AS TEXT) IS NULL
                            OR (s.address{c} >= ?3 AND s.address{c} < ?4))
                       AND (CAST(?5 AS TEXT) IS NULL
                            OR ',' || ?5 || ',' LIKE '%,' || s.status || ',%')
                       AND (CAST(?6 AS TEXT) IS NULL OR s.provider_message_id = ?6)
                     ORDER BY m.id DESC LIMIT ?7"
                ),
                &args![
                    q.account_id,
                    q.before.unwrap_or(i64::MAX),
                    low.as_deref(),
                    high.as_deref(),
                    states.as_deref(),
                    q.provider_id,
                    i64::try_from(q.limit).unwrap_or(i64::MAX)
                ],
                message_from_row,
            )
        })
    }
}

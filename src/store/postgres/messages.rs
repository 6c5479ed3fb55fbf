//! `Messages` on PostgreSQL: the API's transactional messages, as `sqlite/messages.rs` (the
//! idempotency row, the hidden one-row `api` campaign and its send row, in one transaction).
//! Where SQLite's `BEGIN IMMEDIATE` serializes two requests with the same key, here the
//! idempotency row is inserted `ON CONFLICT DO NOTHING`: the second request waits on the
//! first's row, then reads it (READ COMMITTED: its next statement sees the first's commit) and
//! answers a replay, in progress or mismatch exactly as SQLite would.

use super::ledger::{transaction, TxResult};
use super::PgStore;
use crate::domain::address::Channel;
use crate::domain::model::{self, SendStatus};
use crate::error::{Error, Result};
use crate::store::{MessageRow, Messages, NewMessage, Submitted};
use deadpool_postgres::Transaction;

/// What a request needs, owned (it moves onto the store's runtime).
struct Msg {
    account_id: i64,
    key: String,
    hash: String,
    channel: Channel,
    to: String,
    from: Option<String>,
    reply_to: Option<String>,
    subject: Option<String>,
    text: String,
    html: Option<String>,
    now: i64,
}

/// The message already under this key, if any.
async fn existing(tx: &Transaction<'_>, m: &Msg) -> TxResult<Option<Submitted>> {
    let row = tx
        .query_opt(
            "SELECT id, request_hash, response_status, response_body, created_at
             FROM api_messages WHERE account_id = $1 AND idempotency_key = $2",
            &[&m.account_id, &m.key],
        )
        .await?;
    Ok(row.map(|r| {
        let id: i64 = r.get(0);
        let hash: String = r.get(1);
        let status: Option<i32> = r.get(2);
        let body: Option<String> = r.get(3);
        if hash != m.hash {
            return Submitted::Mismatch { id };
        }
        match (status, body) {
            (Some(status), Some(body)) => Submitted::Replay {
                id,
                status: status as u16,
                body,
            },
            _ => Submitted::InProgress {
                id,
                since: r.get(4),
            },
        }
    }))
}

/// The subscriber the send row points at: the account's own for this address, or a hidden
/// one (unsubscribed and removed) made for the message.
async fn subscriber_for(tx: &Transaction<'_>, m: &Msg) -> TxResult<i64> {
    let (email, phone) = match m.channel {
        Channel::Email => (Some(m.to.as_str()), None),
        Channel::Sms => (None, Some(m.to.as_str())),
    };
    let found = tx
        .query_opt(
            "SELECT id FROM subscribers WHERE account_id = $1
             AND (email_norm = $2 OR phone = $3) LIMIT 1",
            &[&m.account_id, &email, &phone],
        )
        .await?;
    if let Some(r) = found {
        return Ok(r.get(0));
    }
    Ok(tx
        .query_one(
            "INSERT INTO subscribers (account_id, email, email_norm, phone, status, created_at,
                                      removed_at)
             VALUES ($1, $2, $2, $3, 'unsubscribed', $4, $4) RETURNING id",
            &[&m.account_id, &email, &phone, &m.now],
        )
        .await?
        .get(0))
}

/// The idempotency row, then the message's hidden campaign and its send row; `None` when a
/// concurrent request took the key first.
async fn create(tx: &Transaction<'_>, m: &Msg) -> TxResult<Option<i64>> {
    if tx
        .query_opt("SELECT 1 FROM accounts WHERE id = $1", &[&m.account_id])
        .await?
        .is_none()
    {
        return Err(Error::not_found(format!("unknown account id {}", m.account_id)).into());
    }
    let Some(r) = tx
        .query_opt(
            "INSERT INTO api_messages (account_id, idempotency_key, request_hash, created_at)
             VALUES ($1, $2, $3, $4) ON CONFLICT (account_id, idempotency_key) DO NOTHING
             RETURNING id",
            &[&m.account_id, &m.key, &m.hash, &m.now],
        )
        .await?
    else {
        return Ok(None); // another request took the key first
    };
    let id: i64 = r.get(0);
    let scope = super::admin::key_scope(&**tx, &[("messages_through", id)]).await?;
    let sub = subscriber_for(tx, m).await?;
    let cid = insert_campaign(tx, m, id).await?;
    let send: i64 = tx
        .query_one(
            "INSERT INTO sends (account_id, campaign_id, subscriber_id, job_id, address, vars,
                                status, visible_at, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, '{}', 'queued', $6, $6, $6) RETURNING id",
            &[
                &m.account_id,
                &cid,
                &sub,
                &model::api_job_id(&scope, m.account_id, id),
                &m.to,
                &m.now,
            ],
        )
        .await?
        .get(0);
    tx.execute(
        "UPDATE api_messages SET campaign_id = $2, send_id = $3 WHERE id = $1",
        &[&id, &cid, &send],
    )
    .await?;
    Ok(Some(id))
}

/// The hidden one-row campaign of message `id`, already sending with its list complete.
async fn insert_campaign(tx: &Transaction<'_>, m: &Msg, id: i64) -> TxResult<i64> {
    // As sqlite's BodyFormat::store: an HTML-only message keeps its HTML in `body`.
    let (body, format, html) = match m.html.as_deref() {
        Some(h) if m.text.is_empty() => (h.to_string(), "html", None),
        _ => (m.text.clone(), "text", m.html.clone()),
    };
    Ok(tx
        .query_one(
            "INSERT INTO campaigns (account_id, name, channel, sender, subject, body,
                                    body_format, html, reply_to, templated, status,
                                    scheduled_for, approved_at, started_at, list_complete,
                                    created_at, kind)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, FALSE, 'sending', $10, $10, $10, TRUE,
                     $10, 'api')
             RETURNING id",
            &[
                &m.account_id,
                &format!("api message {id}"),
                &m.channel.as_str(),
                &m.from,
                &m.subject,
                &body,
                &format,
                &html,
                &m.reply_to,
                &m.now,
            ],
        )
        .await?
        .get(0))
}

impl Messages for PgStore {
    fn submit_message(&self, m: &NewMessage<'_>) -> Result<Submitted> {
        let m = Msg {
            account_id: m.account_id,
            key: m.idempotency_key.to_string(),
            hash: m.request_hash.to_string(),
            channel: m.channel,
            to: m.to.to_string(),
            from: m.from.map(str::to_string),
            reply_to: m.reply_to.map(str::to_string),
            subject: m.subject.map(str::to_string),
            text: m.text.to_string(),
            html: m.html.map(str::to_string),
            now: m.now,
        };
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                if let Some(found) = existing(&tx, &m).await? {
                    return Ok(found);
                }
                match create(&tx, &m).await? {
                    Some(id) => Ok(Submitted::Created { id }),
                    None => existing(&tx, &m).await?.ok_or_else(|| {
                        Error::db("the idempotency key was taken and is gone").into()
                    }),
                }
            })
        })
    }

    fn save_answer(&self, account_id: i64, id: i64, status: u16, body: &str) -> Result<()> {
        let body = body.to_string();
        let status = i32::from(status);
        self.run(move |pool| async move {
            let c = pool.get().await?;
            c.execute(
                "UPDATE api_messages SET response_status = $3, response_body = $4
                 WHERE id = $1 AND account_id = $2 AND response_status IS NULL",
                &[&id, &account_id, &status, &body],
            )
            .await?;
            Ok(())
        })
    }

    fn message(&self, account_id: i64, id: i64) -> Result<MessageRow> {
        let row = self.run(move |pool| async move {
            let c = pool.get().await?;
            let Some(r) = c
                .query_opt(
                    "SELECT m.id, m.account_id, m.idempotency_key, k.channel, s.address, s.job_id,
                            s.status, s.attempts, s.provider_message_id, s.last_error,
                            m.created_at, s.sent_at
                     FROM api_messages m JOIN sends s ON s.id = m.send_id
                     JOIN campaigns k ON k.id = m.campaign_id
                     WHERE m.id = $1 AND m.account_id = $2",
                    &[&id, &account_id],
                )
                .await?
            else {
                return Ok(None);
            };
            let channel: String = r.get(3);
            let status: String = r.get(6);
            Ok(Some(MessageRow {
                id: r.get(0),
                account_id: r.get(1),
                idempotency_key: r.get(2),
                channel: channel
                    .parse()
                    .map_err(|_| Error::damaged(format!("campaign channel {channel:?}")))?,
                to: r.get(4),
                job_id: r.get(5),
                status: SendStatus::parse(&status)
                    .ok_or_else(|| Error::damaged(format!("send status {status:?}")))?,
                attempts: r.get(7),
                provider_message_id: r.get(8),
                reason: r.get(9),
                created_at: r.get(10),
                sent_at: r.get(11),
            }))
        })?;
        row.ok_or_else(|| Error::not_found(format!("unknown message id {id}")))
    }
}

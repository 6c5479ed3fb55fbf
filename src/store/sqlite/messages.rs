//! The API's transactional messages on SQLite: the idempotency row, the hidden one-row
//! campaign (kind `api`, literal content, already `sending` with its list complete) and its
//! send row, written in one `BEGIN IMMEDIATE` transaction.

use super::codec::{self, BodyFormat};
use super::SqliteStore;
use crate::domain::address::Channel;
use crate::domain::model;
use crate::error::{Error, Result};
use crate::store::{MessageRow, Messages, NewMessage, Submitted};
use rusqlite::{named_params, params, OptionalExtension, Transaction};

/// An `api_messages` row: id, request hash, answer status and body, creation time.
type KeyRow = (i64, String, Option<u16>, Option<String>, i64);

/// The message already under this key, if any.
fn existing(tx: &Transaction<'_>, m: &NewMessage<'_>) -> Result<Option<Submitted>> {
    let row: Option<KeyRow> = tx
        .query_row(
            "SELECT id, request_hash, response_status, response_body, created_at
             FROM api_messages WHERE account_id = ?1 AND idempotency_key = ?2",
            params![m.account_id, m.idempotency_key],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .optional()?;
    Ok(row.map(|(id, hash, status, body, since)| {
        if hash != m.request_hash {
            return Submitted::Mismatch { id };
        }
        match (status, body) {
            (Some(status), Some(body)) => Submitted::Replay { id, status, body },
            _ => Submitted::InProgress { id, since },
        }
    }))
}

/// The subscriber the send row points at: the account's own for this address, or a hidden
/// one (unsubscribed and removed: listed nowhere, in no campaign) made for the message.
fn subscriber_for(tx: &Transaction<'_>, m: &NewMessage<'_>) -> Result<i64> {
    let (email, phone) = match m.channel {
        Channel::Email => (Some(m.to), None),
        Channel::Sms => (None, Some(m.to)),
    };
    let found: Option<i64> = tx
        .query_row(
            "SELECT id FROM subscribers WHERE account_id = ?1
             AND (email_norm = ?2 OR phone = ?3)",
            params![m.account_id, email, phone],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(id) = found {
        return Ok(id);
    }
    tx.execute(
        "INSERT INTO subscribers (account_id, email, email_norm, phone, status, created_at,
                                  removed_at)
         VALUES (:account, :email, :email, :phone, 'unsubscribed', :now, :now)",
        named_params! {":account": m.account_id, ":email": email, ":phone": phone, ":now": m.now},
    )?;
    Ok(tx.last_insert_rowid())
}

/// The hidden campaign of message `id`: literal content, already sending, list complete.
fn campaign_for(tx: &Transaction<'_>, m: &NewMessage<'_>, id: i64) -> Result<i64> {
    let (body, format, html) = BodyFormat::store(m.text, m.html);
    tx.execute(
        "INSERT INTO campaigns (account_id, name, channel, sender, subject, body, body_format,
                                html, reply_to, templated, status, scheduled_for, approved_at,
                                started_at, list_complete, created_at, kind)
         VALUES (:account, :name, :channel, :from, :subject, :body, :format, :html, :reply_to,
                 0, 'sending', :now, :now, :now, 1, :now, 'api')",
        named_params! {
            ":account": m.account_id,
            ":name": format!("api message {id}"),
            ":channel": m.channel,
            ":from": m.from,
            ":subject": m.subject,
            ":body": body,
            ":format": format,
            ":html": html,
            ":reply_to": m.reply_to,
            ":now": m.now,
        },
    )?;
    Ok(tx.last_insert_rowid())
}

fn create(tx: &Transaction<'_>, m: &NewMessage<'_>) -> Result<i64> {
    super::admin::require_account(tx, m.account_id)?;
    tx.execute(
        "INSERT INTO api_messages (account_id, idempotency_key, request_hash, created_at)
         VALUES (?1, ?2, ?3, ?4)",
        params![m.account_id, m.idempotency_key, m.request_hash, m.now],
    )?;
    let id = tx.last_insert_rowid();
    let scope = super::guard::key_scope(tx, &[("messages_through", id)])?;
    let sub = subscriber_for(tx, m)?;
    let cid = campaign_for(tx, m, id)?;
    tx.execute(
        "INSERT INTO sends (account_id, campaign_id, subscriber_id, job_id, address, vars,
                            status, visible_at, created_at, updated_at)
         VALUES (:account, :campaign, :subscriber, :job, :to, '{}', 'queued', :now, :now, :now)",
        named_params! {
            ":account": m.account_id,
            ":campaign": cid,
            ":subscriber": sub,
            ":job": model::api_job_id(&scope, m.account_id, id),
            ":to": m.to,
            ":now": m.now,
        },
    )?;
    let send = tx.last_insert_rowid();
    tx.execute(
        "UPDATE api_messages SET campaign_id = ?2, send_id = ?3 WHERE id = ?1",
        params![id, cid, send],
    )?;
    Ok(id)
}

impl Messages for SqliteStore {
    fn submit_message(&self, m: &NewMessage<'_>) -> Result<Submitted> {
        self.write(|tx| match existing(tx, m)? {
            Some(found) => Ok(found),
            None => Ok(Submitted::Created { id: create(tx, m)? }),
        })
    }

    fn save_answer(&self, account_id: i64, id: i64, status: u16, body: &str) -> Result<()> {
        self.write(|tx| {
            tx.execute(
                "UPDATE api_messages SET response_status = ?3, response_body = ?4
                 WHERE id = ?1 AND account_id = ?2 AND response_status IS NULL",
                params![id, account_id, status, body],
            )?;
            Ok(())
        })
    }

    fn message(&self, account_id: i64, id: i64) -> Result<MessageRow> {
        let row = self.read(|c| {
            Ok(c.query_row(
                "SELECT m.id, m.account_id, m.idempotency_key, k.channel, s.address, s.job_id,
                        s.status, s.attempts, s.provider_message_id, s.last_error, m.created_at,
                        s.sent_at
                 FROM api_messages m JOIN sends s ON s.id = m.send_id
                 JOIN campaigns k ON k.id = m.campaign_id
                 WHERE m.id = ?1 AND m.account_id = ?2",
                params![id, account_id],
                |r| {
                    Ok(MessageRow {
                        id: r.get(0)?,
                        account_id: r.get(1)?,
                        idempotency_key: r.get(2)?,
                        channel: codec::get(r, 3, "campaigns")?,
                        to: r.get(4)?,
                        job_id: r.get(5)?,
                        status: codec::get(r, 6, "sends")?,
                        attempts: r.get(7)?,
                        provider_message_id: r.get(8)?,
                        reason: r.get(9)?,
                        created_at: r.get(10)?,
                        sent_at: r.get(11)?,
                    })
                },
            )
            .optional()?)
        })?;
        row.ok_or_else(|| Error::not_found(format!("unknown message id {id}")))
    }
}

//! `Webhooks` on PostgreSQL: the same rules as `sqlite/webhooks.rs` — the event row and its
//! effect (suppression added or lifted, a row in doubt settled, a delivery report kept for the
//! claim) in one transaction; the same event again (same body hash) changes nothing and answers
//! what it did the first time; the same id with another body is a conflict.
//!
//! Where SQLite's `BEGIN IMMEDIATE` serializes everything, here two things do:
//! * the event's key (account, source, event id) is taken under a transaction-scoped advisory
//!   lock before it is looked up, so two deliveries of one event (a provider retrying while
//!   the first request is still in flight, on another host) apply it once;
//! * a delivery report locks the send row it names (`FOR UPDATE`) before reading its state: a
//!   claim that is parking the row in doubt either commits first (the report then settles the
//!   row) or skips the locked row (`SKIP LOCKED`) and sees the kept report on its next turn.

use super::ledger::{transaction, TxResult, COMPLETE_IF_DONE};
use super::PgStore;
use crate::domain::model::{CAMPAIGN_JOB_AT, CAMPAIGN_JOB_PREFIX, CAMPAIGN_JOB_SUB};
use crate::domain::webhook::{Effect, Event, Source};
use crate::error::{Error, Result};
use crate::store::{Applied, DeliveryEvent, WebhookAction, Webhooks};
use deadpool_postgres::Transaction;

/// The advisory lock class of webhook events (the two-key form: its own key space, apart from
/// the migrations' one-key lock).
const LOCK_CLASS: i32 = 0x574B_4556; // "WKEV"

const LOCK_EVENT: &str = "SELECT pg_advisory_xact_lock($1, hashtext($2))";

const FIND_EVENT: &str = "SELECT body_sha256, action FROM webhook_events
     WHERE account_id = $1 AND source = $2 AND event_id = $3";

const INSERT_EVENT: &str = "INSERT INTO webhook_events (account_id, source, event_id,
     body_sha256, kind, job_id, address, delivery, action, received_at, provider_message_id)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";

const SUPPRESS: &str =
    "INSERT INTO suppressions (account_id, channel, address, reason, source, created_at)
     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING";

/// A provider's opt-in lifts only what that provider put there (its webhook's source, and
/// `provider`, the worker's record of the provider refusing an opted-out address): never an
/// unsubscribe link, an operator's `suppress add` or a removal.
const UNSUPPRESS: &str = "DELETE FROM suppressions
     WHERE account_id = $1 AND channel = $2 AND address = $3 AND source IN ($4, 'provider')";

const CAMPAIGN_SEND: &str = "SELECT id, status, campaign_id FROM sends
     WHERE campaign_id = $1 AND subscriber_id = $2 AND account_id = $3 AND job_id = $4
     FOR UPDATE";

const API_SEND: &str = "SELECT s.id, s.status, s.campaign_id FROM api_messages m
     JOIN sends s ON s.id = m.send_id
     WHERE m.id = $1 AND m.account_id = $2 AND s.job_id = $3
     FOR UPDATE OF s";

/// A double opt-in confirmation's row, by its (list, subscriber) record.
const CONFIRM_SEND: &str = "SELECT s.id, s.status, s.campaign_id FROM list_confirmations lc
     JOIN sends s ON s.campaign_id = lc.campaign_id AND s.subscriber_id = lc.subscriber_id
     WHERE lc.list_id = $1 AND lc.subscriber_id = $2 AND s.account_id = $3 AND s.job_id = $4
     FOR UPDATE OF s";

/// A row settled as sent keeps the provider's id the report names (`$6`) unless it has one.
const SETTLE_IN_DOUBT: &str = "UPDATE sends SET
     status = CASE WHEN $2::boolean THEN 'sent' ELSE 'failed' END,
     sent_at = CASE WHEN $2::boolean THEN $3 ELSE sent_at END,
     provider_message_id = CASE WHEN $2::boolean THEN coalesce(provider_message_id, $6::text)
     ELSE provider_message_id END,
     updated_at = $3, doubt_since = NULL, lease_token = NULL,
     last_error = 'settled by a ' || $4::text || ' webhook (' || $5::text || ')'
     WHERE id = $1 AND status = 'in_doubt'";

/// The send row of one of our job ids in this account, as (id, status, campaign), found by its
/// unique keys (campaign and subscriber, or the API message), never by a scan; locked.
async fn send_for_job(
    tx: &Transaction<'_>,
    account_id: i64,
    job: &str,
) -> TxResult<Option<(i64, String, i64)>> {
    let row = |r: tokio_postgres::Row| (r.get(0), r.get(1), r.get(2));
    let (head, _) = job.split_once(CAMPAIGN_JOB_AT).unwrap_or((job, ""));
    if let Some(rest) = head.strip_prefix(CAMPAIGN_JOB_PREFIX) {
        let Some((c, s)) = rest.split_once(CAMPAIGN_JOB_SUB) else {
            return Ok(None);
        };
        let (Ok(c), Ok(s)) = (c.parse::<i64>(), s.parse::<i64>()) else {
            return Ok(None);
        };
        return Ok(tx
            .query_opt(CAMPAIGN_SEND, &[&c, &s, &account_id, &job])
            .await?
            .map(row));
    }
    if let Some(rest) = head.strip_prefix("confirm:") {
        let Some((l, sub)) = rest.split_once(':') else {
            return Ok(None);
        };
        let (Ok(l), Ok(sub)) = (l.parse::<i64>(), sub.parse::<i64>()) else {
            return Ok(None);
        };
        return Ok(tx
            .query_opt(CONFIRM_SEND, &[&l, &sub, &account_id, &job])
            .await?
            .map(row));
    }
    if let Some(rest) = head.strip_prefix("api:") {
        let Some((a, m)) = rest.split_once(':') else {
            return Ok(None);
        };
        let (Ok(a), Ok(m)) = (a.parse::<i64>(), m.parse::<i64>()) else {
            return Ok(None);
        };
        if a != account_id {
            return Ok(None);
        }
        return Ok(tx
            .query_opt(API_SEND, &[&m, &account_id, &job])
            .await?
            .map(row));
    }
    Ok(None)
}

/// A delivery report for `job`: settles the row if it is in doubt (as sent: with the report's
/// provider id when the row has none), else keeps it for the claim (`Recorded`); an unknown
/// job changes nothing (`Ignored`, no delivery kept).
async fn deliver(
    tx: &Transaction<'_>,
    w: &Hook,
    job: &str,
    sent: bool,
) -> TxResult<(WebhookAction, Option<&'static str>)> {
    let provider_id = w.event.effect.report_id();
    let delivery = Some(if sent { "sent" } else { "failed" });
    let Some((id, status, campaign)) = send_for_job(tx, w.account_id, job).await? else {
        return Ok((WebhookAction::Ignored, None));
    };
    if status != "in_doubt" {
        return Ok((WebhookAction::Recorded, delivery));
    }
    let n = tx
        .execute(
            SETTLE_IN_DOUBT,
            &[
                &id,
                &sent,
                &w.now,
                &w.source.as_str(),
                &w.event.kind,
                &provider_id,
            ],
        )
        .await?;
    if n != 1 {
        return Err(
            Error::damaged(format!("settling send {id} by a webhook changed {n} rows")).into(),
        );
    }
    tx.execute(super::ledger::LOCK_CAMPAIGN, &[&campaign])
        .await?;
    tx.execute(COMPLETE_IF_DONE, &[&campaign, &w.now]).await?;
    let action = match sent {
        true => WebhookAction::SettledSent,
        false => WebhookAction::SettledFailed,
    };
    Ok((action, delivery))
}

/// One event to apply, owned (it moves onto the store's runtime).
struct Hook {
    account_id: i64,
    source: Source,
    event: Event,
    body_sha256: String,
    now: i64,
}

async fn apply_tx(tx: &Transaction<'_>, w: &Hook) -> TxResult<Applied> {
    let source = w.source.as_str();
    let key = format!("{}:{source}:{}", w.account_id, w.event.event_id);
    tx.execute(LOCK_EVENT, &[&LOCK_CLASS, &key]).await?;
    let seen = tx
        .query_opt(FIND_EVENT, &[&w.account_id, &source, &w.event.event_id])
        .await?;
    if let Some(r) = seen {
        let (hash, action): (String, String) = (r.get(0), r.get(1));
        if hash != w.body_sha256 {
            return Err(Error::conflict(format!(
                "{source} event {:?} was received before with another body; nothing changed",
                w.event.event_id
            ))
            .into());
        }
        let action = WebhookAction::parse(&action).ok_or_else(|| {
            Error::damaged(format!(
                "webhook_events.action holds an unknown value {action:?}"
            ))
        })?;
        return Ok(Applied::Replay(action));
    }
    let (action, delivery) = match &w.event.effect {
        Effect::Suppress {
            channel,
            address,
            reason,
        } => {
            let at = w
                .now
                .max(super::ledger::lock_opt_outs(tx, w.account_id).await?);
            tx.execute(
                SUPPRESS,
                &[
                    &w.account_id,
                    &channel.as_str(),
                    address,
                    reason,
                    &source,
                    &at,
                ],
            )
            .await?;
            (WebhookAction::Suppressed, None)
        }
        Effect::Unsuppress { channel, address } => {
            tx.execute(
                UNSUPPRESS,
                &[&w.account_id, &channel.as_str(), address, &source],
            )
            .await?;
            (WebhookAction::Unsuppressed, None)
        }
        Effect::Delivery { job_id, sent, .. } => deliver(tx, w, job_id, *sent).await?,
        Effect::Nothing => (WebhookAction::Ignored, None),
    };
    tx.execute(
        INSERT_EVENT,
        &[
            &w.account_id,
            &source,
            &w.event.event_id,
            &w.body_sha256,
            &w.event.kind,
            &w.event.job_id,
            &w.event.address,
            &delivery,
            &action.as_str(),
            &w.now,
            &w.event.effect.report_id(),
        ],
    )
    .await?;
    Ok(Applied::New(action))
}

impl Webhooks for PgStore {
    fn apply_webhook(
        &self,
        account_id: i64,
        source: Source,
        event: &Event,
        body_sha256: &str,
        now: i64,
    ) -> Result<Applied> {
        let hook = Hook {
            account_id,
            source,
            event: event.clone(),
            body_sha256: body_sha256.to_string(),
            now,
        };
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => apply_tx(&tx, &hook).await)
        })
    }

    fn delivery_events(&self, account_id: i64, job_ids: &[String]) -> Result<Vec<DeliveryEvent>> {
        if job_ids.len() > 100 {
            return Err(Error::invalid("at most 100 jobs at a time"));
        }
        let jobs = job_ids.to_vec();
        self.run(move |pool| async move {
            let c = pool.get().await?;
            let rows = c
                .query(
                    "SELECT id, job_id, source, kind, delivery, action, received_at
                     FROM webhook_events
                     WHERE account_id = $1 AND job_id = ANY($2) AND delivery IS NOT NULL
                     ORDER BY id",
                    &[&account_id, &jobs],
                )
                .await?;
            rows.iter()
                .map(|r| {
                    let action: String = r.get(5);
                    let action = WebhookAction::parse(&action).ok_or_else(|| {
                        Error::damaged(format!(
                            "webhook_events.action holds an unknown value {action:?}"
                        ))
                    })?;
                    Ok(DeliveryEvent {
                        job_id: r.get(1),
                        source: r.get(2),
                        kind: r.get(3),
                        delivery: r.get(4),
                        action,
                        received_at: r.get(6),
                    })
                })
                .collect()
        })
    }
}

//! Provider webhook events on SQLite (`Webhooks`, table `webhook_events` of 0010): the event
//! row and its effect (suppression, settled doubt, kept delivery report) in one `BEGIN
//! IMMEDIATE` transaction; a replay changes nothing. The claim's use of the kept reports is
//! in `ledger.rs` (`CLAIM_CALLBACK`).

use super::SqliteStore;
use crate::domain::model::{CAMPAIGN_JOB_AT, CAMPAIGN_JOB_PREFIX, CAMPAIGN_JOB_SUB};
use crate::domain::webhook::{Effect, Event, Source};
use crate::error::{Error, Result};
use crate::store::{Applied, DeliveryEvent, WebhookAction, Webhooks};
use rusqlite::{params, OptionalExtension, Transaction};

const FIND_EVENT: &str = "SELECT body_sha256, action FROM webhook_events
     WHERE account_id = ?1 AND source = ?2 AND event_id = ?3";

const INSERT_EVENT: &str = "INSERT INTO webhook_events (account_id, source, event_id,
     body_sha256, kind, job_id, address, delivery, action, received_at, provider_message_id)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";

const SUPPRESS: &str =
    "INSERT INTO suppressions (account_id, channel, address, reason, source, created_at)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING";

/// A provider's opt-in lifts only what that provider put there (its webhook's source, and
/// `provider`, the worker's record of the provider refusing an opted-out address): never an
/// unsubscribe link, an operator's `suppress add` or a removal.
const UNSUPPRESS: &str = "DELETE FROM suppressions
     WHERE account_id = ?1 AND channel = ?2 AND address = ?3 AND source IN (?4, 'provider')";

const CAMPAIGN_SEND: &str = "SELECT id, status, campaign_id FROM sends
     WHERE campaign_id = ?1 AND subscriber_id = ?2 AND account_id = ?3 AND job_id = ?4";

const API_SEND: &str = "SELECT s.id, s.status, s.campaign_id FROM api_messages m
     JOIN sends s ON s.id = m.send_id
     WHERE m.id = ?1 AND m.account_id = ?2 AND s.job_id = ?3";

/// A double opt-in confirmation's row, by its (list, subscriber) record.
const CONFIRM_SEND: &str = "SELECT s.id, s.status, s.campaign_id FROM list_confirmations lc
     JOIN sends s ON s.campaign_id = lc.campaign_id AND s.subscriber_id = lc.subscriber_id
     WHERE lc.list_id = ?1 AND lc.subscriber_id = ?2 AND s.account_id = ?3 AND s.job_id = ?4";

/// A row settled as sent keeps the provider's id the report names (`?6`) unless it has one.
const SETTLE_IN_DOUBT: &str = "UPDATE sends SET
     status = CASE WHEN ?2 THEN 'sent' ELSE 'failed' END,
     sent_at = CASE WHEN ?2 THEN ?3 ELSE sent_at END,
     provider_message_id = CASE WHEN ?2 THEN coalesce(provider_message_id, ?6)
     ELSE provider_message_id END,
     updated_at = ?3, doubt_since = NULL, lease_token = NULL,
     last_error = 'settled by a ' || ?4 || ' webhook (' || ?5 || ')'
     WHERE id = ?1 AND status = 'in_doubt'";

/// The send row of one of our job ids in this account, as (id, status, campaign), found by its
/// unique keys (campaign and subscriber, or the API message), never by a scan.
fn send_for_job(
    tx: &Transaction<'_>,
    account_id: i64,
    job: &str,
) -> Result<Option<(i64, String, i64)>> {
    let row = |r: &rusqlite::Row<'_>| Ok((r.get(0)?, r.get(1)?, r.get(2)?));
    let (head, _) = job.split_once(CAMPAIGN_JOB_AT).unwrap_or((job, ""));
    if let Some(rest) = head.strip_prefix(CAMPAIGN_JOB_PREFIX) {
        let Some((c, s)) = rest.split_once(CAMPAIGN_JOB_SUB) else {
            return Ok(None);
        };
        let (Ok(c), Ok(s)) = (c.parse::<i64>(), s.parse::<i64>()) else {
            return Ok(None);
        };
        return Ok(tx
            .prepare_cached(CAMPAIGN_SEND)?
            .query_row(params![c, s, account_id, job], row)
            .optional()?);
    }
    if let Some(rest) = head.strip_prefix("confirm:") {
        let Some((l, sub)) = rest.split_once(':') else {
            return Ok(None);
        };
        let (Ok(l), Ok(sub)) = (l.parse::<i64>(), sub.parse::<i64>()) else {
            return Ok(None);
        };
        return Ok(tx
            .prepare_cached(CONFIRM_SEND)?
            .query_row(params![l, sub, account_id, job], row)
            .optional()?);
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
            .prepare_cached(API_SEND)?
            .query_row(params![m, account_id, job], row)
            .optional()?);
    }
    Ok(None)
}

/// A delivery report for `job`: settles the row if it is in doubt (as sent: with the report's
/// `provider_id` when the row has none), else keeps it for the claim (`Recorded`); an unknown
/// job changes nothing (`Ignored`, no delivery kept).
fn deliver(
    tx: &Transaction<'_>,
    account_id: i64,
    source: Source,
    event: &Event,
    job: &str,
    sent: bool,
    now: i64,
) -> Result<(WebhookAction, Option<&'static str>)> {
    let provider_id = event.effect.report_id();
    let delivery = Some(if sent { "sent" } else { "failed" });
    let Some((id, status, campaign)) = send_for_job(tx, account_id, job)? else {
        return Ok((WebhookAction::Ignored, None));
    };
    if status != "in_doubt" {
        return Ok((WebhookAction::Recorded, delivery));
    }
    let n = tx.prepare_cached(SETTLE_IN_DOUBT)?.execute(params![
        id,
        sent,
        now,
        source.as_str(),
        event.kind,
        provider_id
    ])?;
    if n != 1 {
        return Err(Error::damaged(format!(
            "settling send {id} by a webhook changed {n} rows"
        )));
    }
    super::campaigns::complete_if_done(tx, campaign, now)?;
    let action = match sent {
        true => WebhookAction::SettledSent,
        false => WebhookAction::SettledFailed,
    };
    Ok((action, delivery))
}

fn apply_tx(
    tx: &Transaction<'_>,
    account_id: i64,
    source: Source,
    event: &Event,
    body_sha256: &str,
    now: i64,
) -> Result<Applied> {
    let seen: Option<(String, String)> = tx
        .prepare_cached(FIND_EVENT)?
        .query_row(params![account_id, source.as_str(), event.event_id], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()?;
    if let Some((hash, action)) = seen {
        if hash != body_sha256 {
            return Err(Error::conflict(format!(
                "{} event {:?} was received before with another body; nothing changed",
                source.as_str(),
                event.event_id
            )));
        }
        let action = WebhookAction::parse(&action).ok_or_else(|| {
            Error::damaged(format!(
                "webhook_events.action holds an unknown value {action:?}"
            ))
        })?;
        return Ok(Applied::Replay(action));
    }
    let (action, delivery) = match &event.effect {
        Effect::Suppress {
            channel,
            address,
            reason,
        } => {
            tx.prepare_cached(SUPPRESS)?.execute(params![
                account_id,
                channel,
                address,
                reason,
                source.as_str(),
                now
            ])?;
            (WebhookAction::Suppressed, None)
        }
        Effect::Unsuppress { channel, address } => {
            tx.prepare_cached(UNSUPPRESS)?.execute(params![
                account_id,
                channel,
                address,
                source.as_str()
            ])?;
            (WebhookAction::Unsuppressed, None)
        }
        Effect::Delivery { job_id, sent, .. } => {
            deliver(tx, account_id, source, event, job_id, *sent, now)?
        }
        Effect::Nothing => (WebhookAction::Ignored, None),
    };
    tx.prepare_cached(INSERT_EVENT)?.execute(params![
        account_id,
        source.as_str(),
        event.event_id,
        body_sha256,
        event.kind,
        event.job_id,
        event.address,
        delivery,
        action.as_str(),
        now,
        event.effect.report_id()
    ])?;
    Ok(Applied::New(action))
}

impl Webhooks for SqliteStore {
    fn apply_webhook(
        &self,
        account_id: i64,
        source: Source,
        event: &Event,
        body_sha256: &str,
        now: i64,
    ) -> Result<Applied> {
        self.write(|tx| apply_tx(tx, account_id, source, event, body_sha256, now))
    }

    fn delivery_events(&self, account_id: i64, job_ids: &[String]) -> Result<Vec<DeliveryEvent>> {
        if job_ids.len() > 100 {
            return Err(Error::invalid("at most 100 jobs at a time"));
        }
        self.read(|c| {
            let mut st = c.prepare_cached(DELIVERY_EVENTS)?;
            let mut out = Vec::new();
            for job in job_ids {
                let rows = st.query_map(params![account_id, job], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, String>(4)?,
                        r.get::<_, String>(5)?,
                        r.get::<_, i64>(6)?,
                    ))
                })?;
                for row in rows {
                    out.push(row?);
                }
            }
            out.sort_by_key(|r| r.0);
            out.into_iter()
                .map(|(_, job_id, source, kind, delivery, action, received_at)| {
                    let action = WebhookAction::parse(&action).ok_or_else(|| {
                        Error::damaged(format!(
                            "webhook_events.action holds an unknown value {action:?}"
                        ))
                    })?;
                    Ok(DeliveryEvent {
                        job_id,
                        source,
                        kind,
                        delivery,
                        action,
                        received_at,
                    })
                })
                .collect()
        })
    }
}

/// The delivery reports of one job (the `webhook_events_job` index).
const DELIVERY_EVENTS: &str = "SELECT id, job_id, source, kind, delivery, action, received_at
     FROM webhook_events
     WHERE account_id = ?1 AND job_id = ?2 AND delivery IS NOT NULL";

/// Statements of this module whose plans `hot_query_plans` reports (tests/ledger.rs).
pub(super) fn hot_queries() -> Vec<(&'static str, String)> {
    [
        ("webhook: find event", FIND_EVENT),
        ("webhook: campaign send of a job", CAMPAIGN_SEND),
        ("webhook: api send of a job", API_SEND),
        ("webhook: settle in doubt", SETTLE_IN_DOUBT),
    ]
    .into_iter()
    .map(|(n, q)| (n, q.to_string()))
    .collect()
}

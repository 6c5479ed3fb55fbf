//! Provider webhook events (`Webhooks`, table `webhook_events` of 0010), written once for both
//! stores over `sql::Tx`: each event is stored once per (account, source, event id) with the
//! hash of its body, and applied in the same transaction as its record: a suppression added or
//! removed, a row in doubt settled, or a delivery report kept for the claim (a row whose lease
//! expired after dispatch is settled by it instead of being parked in doubt). A replay changes
//! nothing; the same id with another body is a conflict. The claim's use of the kept reports is
//! in the ledger (`CLAIM_CALLBACK`).
//!
//! Where SQLite's `BEGIN IMMEDIATE` serializes everything, PostgreSQL needs two locks (asked
//! of the dialect, no-ops on SQLite):
//! * the event's key (account, source, event id) is taken under a transaction-scoped advisory
//!   lock before it is looked up, so two deliveries of one event (a provider retrying while
//!   the first request is still in flight, on another host) apply it once;
//! * a delivery report locks the send row it names (`FOR UPDATE`) before reading its state: a
//!   claim that is parking the row in doubt either commits first (the report then settles the
//!   row) or skips the locked row (`SKIP LOCKED`) and sees the kept report on its next turn.

use crate::ledger::complete_if_done;
use crate::shared::locking;
use crate::sql::{args, Arg, Db, Tx};
use sendonce_domain::error::{Error, Result};
use sendonce_domain::model::{CAMPAIGN_JOB_AT, CAMPAIGN_JOB_PREFIX, CAMPAIGN_JOB_SUB};
use sendonce_domain::webhook::{Effect, Event, Source};
use serde::Serialize;

/// What applying an event did (the `action` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WebhookAction {
    Suppressed,
    Unsuppressed,
    SettledSent,
    SettledFailed,
    /// A delivery report for a row not in doubt (yet): kept for the claim.
    Recorded,
    Ignored,
}

impl WebhookAction {
    pub fn as_str(self) -> &'static str {
        match self {
            WebhookAction::Suppressed => "suppressed",
            WebhookAction::Unsuppressed => "unsuppressed",
            WebhookAction::SettledSent => "settled_sent",
            WebhookAction::SettledFailed => "settled_failed",
            WebhookAction::Recorded => "recorded",
            WebhookAction::Ignored => "ignored",
        }
    }

    pub fn parse(s: &str) -> Option<WebhookAction> {
        [
            WebhookAction::Suppressed,
            WebhookAction::Unsuppressed,
            WebhookAction::SettledSent,
            WebhookAction::SettledFailed,
            WebhookAction::Recorded,
            WebhookAction::Ignored,
        ]
        .into_iter()
        .find(|a| a.as_str() == s)
    }
}

/// The outcome of [`Webhooks::apply_webhook`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// First time: applied, with what it did.
    New(WebhookAction),
    /// The same event (same id, same body) came again: nothing changed; what it did the first
    /// time.
    Replay(WebhookAction),
}

/// A delivery report received for a job (what the dashboard shows beside a row in doubt).
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryEvent {
    pub job_id: String,
    pub source: String,
    pub kind: String,
    /// `sent` or `failed`.
    pub delivery: String,
    pub action: WebhookAction,
    pub received_at: i64,
}

/// Provider webhook events of an account.
pub trait Webhooks: Send + Sync {
    /// Record `event` (from `source`, body hash `body_sha256`) for `account_id` and apply its
    /// effect, both in one transaction. The same event id with another body is a `Conflict`
    /// and changes nothing.
    fn apply_webhook(
        &self,
        account_id: i64,
        source: Source,
        event: &Event,
        body_sha256: &str,
        now: i64,
    ) -> Result<Applied>;

    /// Several events of one request (a SendGrid batch, an SES bounce's recipients), each with
    /// the hash of its own text, applied as one transaction: all of them, or none on any error.
    fn apply_webhooks(
        &self,
        account_id: i64,
        source: Source,
        events: &[(Event, String)],
        now: i64,
    ) -> Result<Vec<Applied>>;

    /// The delivery reports of `account_id` for these jobs (at most 100 job ids), in event id
    /// order; one search of the `webhook_events_job` index per job.
    fn delivery_events(&self, account_id: i64, job_ids: &[String]) -> Result<Vec<DeliveryEvent>>;
}

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

/// A campaign's row (locked on PostgreSQL: `Dialect::for_update`).
const CAMPAIGN_SEND: &str = "SELECT id, status, campaign_id FROM sends
     WHERE campaign_id = ?1 AND subscriber_id = ?2 AND account_id = ?3 AND job_id = ?4";

/// An API message's row (its send locked on PostgreSQL: `Dialect::for_update_of`).
const API_SEND: &str = "SELECT s.id, s.status, s.campaign_id FROM api_messages m
     JOIN sends s ON s.id = m.send_id
     WHERE m.id = ?1 AND m.account_id = ?2 AND s.job_id = ?3";

/// A double opt-in confirmation's row, by its (list, subscriber) record (its send locked on
/// PostgreSQL).
const CONFIRM_SEND: &str = "SELECT s.id, s.status, s.campaign_id FROM list_confirmations lc
     JOIN sends s ON s.campaign_id = lc.campaign_id AND s.subscriber_id = lc.subscriber_id
     WHERE lc.list_id = ?1 AND lc.subscriber_id = ?2 AND s.account_id = ?3 AND s.job_id = ?4";

/// A row settled as sent keeps the provider's id the report names (`?6`) unless it has one.
const SETTLE_IN_DOUBT: &str = "UPDATE sends SET
     status = CASE WHEN CAST(?2 AS BOOLEAN) THEN 'sent' ELSE 'failed' END,
     sent_at = CASE WHEN CAST(?2 AS BOOLEAN) THEN ?3 ELSE sent_at END,
     provider_message_id = CASE WHEN CAST(?2 AS BOOLEAN)
     THEN coalesce(provider_message_id, CAST(?6 AS TEXT)) ELSE provider_message_id END,
     updated_at = ?3, doubt_since = NULL, lease_token = NULL,
     last_error = 'settled by a ' || CAST(?4 AS TEXT) || ' webhook (' || CAST(?5 AS TEXT) || ')'
     WHERE id = ?1 AND status = 'in_doubt'";

/// The delivery reports of one job (the `webhook_events_job` index).
const DELIVERY_EVENTS: &str = "SELECT id, job_id, source, kind, delivery, action, received_at
     FROM webhook_events
     WHERE account_id = ?1 AND job_id = ?2 AND delivery IS NOT NULL";

/// A send row as (id, status, campaign).
type SendKey = (i64, String, i64);

/// The row `sql` (with its lock clause `lock`) finds with `args`.
fn locked_send(tx: &mut dyn Tx, sql: &str, lock: &str, a: &[Arg<'_>]) -> Result<Option<SendKey>> {
    tx.query_opt(&locking(sql, lock), a, |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?))
    })
}

/// The two numbers of `rest` around `sep` (`12:34`), if it is that.
fn two_ids(rest: &str, sep: &str) -> Option<(i64, i64)> {
    let (a, b) = rest.split_once(sep)?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// The send row of one of our job ids in this account, found by its unique keys (campaign and
/// subscriber, or the API message), never by a scan; locked on PostgreSQL.
fn send_for_job(tx: &mut dyn Tx, account_id: i64, job: &str) -> Result<Option<SendKey>> {
    let d = tx.dialect();
    let (head, _) = job.split_once(CAMPAIGN_JOB_AT).unwrap_or((job, ""));
    if let Some(rest) = head.strip_prefix(CAMPAIGN_JOB_PREFIX) {
        let Some((c, s)) = two_ids(rest, CAMPAIGN_JOB_SUB) else {
            return Ok(None);
        };
        let a = args![c, s, account_id, job];
        return locked_send(tx, CAMPAIGN_SEND, d.for_update, &a);
    }
    if let Some(rest) = head.strip_prefix("confirm:") {
        let Some((l, sub)) = two_ids(rest, ":") else {
            return Ok(None);
        };
        let a = args![l, sub, account_id, job];
        return locked_send(tx, CONFIRM_SEND, &(d.for_update_of)("s"), &a);
    }
    if let Some(rest) = head.strip_prefix("api:") {
        let Some((a, m)) = two_ids(rest, ":") else {
            return Ok(None);
        };
        if a != account_id {
            return Ok(None);
        }
        let a = args![m, account_id, job];
        return locked_send(tx, API_SEND, &(d.for_update_of)("s"), &a);
    }
    Ok(None)
}

/// A delivery report for `job`: settles the row if it is in doubt (as sent: with the report's
/// provider id when the row has none), else keeps it for the claim (`Recorded`); an unknown
/// job changes nothing (`Ignored`, no delivery kept).
fn deliver(
    tx: &mut dyn Tx,
    w: &Hook<'_>,
    job: &str,
    sent: bool,
) -> Result<(WebhookAction, Option<&'static str>)> {
    let provider_id = w.event.effect.report_id();
    let delivery = Some(if sent { "sent" } else { "failed" });
    let Some((id, status, campaign)) = send_for_job(tx, w.account_id, job)? else {
        return Ok((WebhookAction::Ignored, None));
    };
    if status != "in_doubt" {
        return Ok((WebhookAction::Recorded, delivery));
    }
    let n = tx.exec(
        SETTLE_IN_DOUBT,
        &args![
            id,
            sent,
            w.now,
            w.source.as_str(),
            &w.event.kind,
            provider_id
        ],
    )?;
    if n != 1 {
        return Err(Error::damaged(format!(
            "settling send {id} by a webhook changed {n} rows"
        )));
    }
    complete_if_done(tx, campaign, w.now)?;
    let action = match sent {
        true => WebhookAction::SettledSent,
        false => WebhookAction::SettledFailed,
    };
    Ok((action, delivery))
}

/// One event to apply.
struct Hook<'a> {
    account_id: i64,
    source: Source,
    event: &'a Event,
    body_sha256: &'a str,
    now: i64,
}

/// What the same event did the first time, if it came before (a `Conflict` when its body
/// differs).
fn replayed(tx: &mut dyn Tx, w: &Hook<'_>) -> Result<Option<WebhookAction>> {
    let source = w.source.as_str();
    let seen: Option<(String, String)> = tx.query_opt(
        FIND_EVENT,
        &args![w.account_id, source, &w.event.event_id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let Some((hash, action)) = seen else {
        return Ok(None);
    };
    if hash != w.body_sha256 {
        return Err(Error::conflict(format!(
            "{source} event {:?} was received before with another body; nothing changed",
            w.event.event_id
        )));
    }
    parse_action(&action).map(Some)
}

fn parse_action(action: &str) -> Result<WebhookAction> {
    WebhookAction::parse(action).ok_or_else(|| {
        Error::damaged(format!(
            "webhook_events.action holds an unknown value {action:?}"
        ))
    })
}

/// The event's effect: what it did and the delivery it keeps.
fn effect(tx: &mut dyn Tx, w: &Hook<'_>) -> Result<(WebhookAction, Option<&'static str>)> {
    let source = w.source.as_str();
    Ok(match &w.event.effect {
        Effect::Suppress {
            channel,
            address,
            reason,
        } => {
            let at = tx.dialect().opt_out_at(tx, w.account_id, w.now)?;
            tx.exec(
                SUPPRESS,
                &args![w.account_id, *channel, address, reason, source, at],
            )?;
            (WebhookAction::Suppressed, None)
        }
        Effect::Unsuppress { channel, address } => {
            tx.exec(UNSUPPRESS, &args![w.account_id, *channel, address, source])?;
            (WebhookAction::Unsuppressed, None)
        }
        Effect::Delivery { job_id, sent, .. } => deliver(tx, w, job_id, *sent)?,
        Effect::Nothing => (WebhookAction::Ignored, None),
    })
}

fn apply_tx(tx: &mut dyn Tx, w: &Hook<'_>) -> Result<Applied> {
    let source = w.source.as_str();
    tx.dialect()
        .lock_webhook_event(tx, w.account_id, source, &w.event.event_id)?;
    if let Some(action) = replayed(tx, w)? {
        return Ok(Applied::Replay(action));
    }
    let (action, delivery) = effect(tx, w)?;
    let e = w.event;
    tx.exec(
        INSERT_EVENT,
        &args![
            w.account_id,
            source,
            &e.event_id,
            w.body_sha256,
            &e.kind,
            &e.job_id,
            &e.address,
            delivery,
            action.as_str(),
            w.now,
            e.effect.report_id()
        ],
    )?;
    report_event(tx, w, action)?;
    Ok(Applied::New(action))
}

/// The event out a report makes (`events`): a delivery report for one of our sends
/// (`send.delivered`, `send.bounced`), or an address the provider bounced or that complained
/// (`address.bounced`, `address.complained`; the suppression it adds makes its own event).
fn report_event(tx: &mut dyn Tx, w: &Hook<'_>, action: WebhookAction) -> Result<()> {
    let e = w.event;
    let (kind, subject, send_id) = match &e.effect {
        Effect::Delivery { job_id, sent, .. } if action != WebhookAction::Ignored => {
            let send = send_for_job(tx, w.account_id, job_id)?.map(|(id, _, _)| id);
            let kind = if *sent {
                "send.delivered"
            } else {
                "send.bounced"
            };
            (kind, job_id.clone(), send)
        }
        Effect::Suppress {
            channel, address, ..
        } => {
            let k = e.kind.to_ascii_lowercase();
            let kind = match k.contains("complain") || k.contains("spam") {
                true => "address.complained",
                false => "address.bounced",
            };
            (kind, format!("address:{channel}:{address}"), None)
        }
        _ => return Ok(()),
    };
    let data = serde_json::json!({
        "source": w.source.as_str(),
        "report": e.kind,
        "job_id": e.job_id,
        "address": e.address,
        "provider_message_id": e.effect.report_id(),
    });
    let emit = crate::events::Emit {
        account_id: w.account_id,
        kind,
        subject: &subject,
        at: w.now,
        send_id,
        data: &data,
    };
    crate::events::emit(tx, &emit)
}

impl<S: Db> Webhooks for S {
    fn apply_webhook(
        &self,
        account_id: i64,
        source: Source,
        event: &Event,
        body_sha256: &str,
        now: i64,
    ) -> Result<Applied> {
        let one = [(event.clone(), body_sha256.to_string())];
        let applied = self.apply_webhooks(account_id, source, &one, now)?;
        applied
            .into_iter()
            .next()
            .ok_or_else(|| Error::internal("no event applied"))
    }

    fn apply_webhooks(
        &self,
        account_id: i64,
        source: Source,
        events: &[(Event, String)],
        now: i64,
    ) -> Result<Vec<Applied>> {
        self.write(|tx| {
            events
                .iter()
                .map(|(event, body_sha256)| {
                    let hook = Hook {
                        account_id,
                        source,
                        event,
                        body_sha256,
                        now,
                    };
                    apply_tx(tx, &hook)
                })
                .collect()
        })
    }

    fn delivery_events(&self, account_id: i64, job_ids: &[String]) -> Result<Vec<DeliveryEvent>> {
        if job_ids.len() > 100 {
            return Err(Error::invalid("at most 100 jobs at a time"));
        }
        self.read(|tx| {
            let mut out = Vec::new();
            for job in job_ids {
                tx.each(DELIVERY_EVENTS, &args![account_id, job], &mut |r| {
                    let row: (i64, String, String, String, String, String, i64) = (
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                    );
                    out.push(row);
                    Ok(())
                })?;
            }
            out.sort_by_key(|r| r.0);
            out.into_iter()
                .map(|(_, job_id, source, kind, delivery, action, received_at)| {
                    Ok(DeliveryEvent {
                        action: parse_action(&action)?,
                        job_id,
                        source,
                        kind,
                        delivery,
                        received_at,
                    })
                })
                .collect()
        })
    }
}

/// Statements of this module whose plans `SqliteStore::hot_query_plans` reports
/// (tests/store/ledger.rs), as SQLite runs them.
pub(crate) fn hot_queries() -> Vec<(&'static str, String)> {
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

//! Provider webhook events, backend-neutral (`Webhooks`): each event is stored once per
//! (account, source, event id) with the hash of its body, and applied in the same transaction
//! as its record: a suppression added or removed, a row in doubt settled, or a delivery report
//! kept for the claim (a row whose lease expired after dispatch is settled by it instead of
//! being parked in doubt).

use crate::domain::webhook::{Event, Source};
use crate::error::Result;
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

    /// The delivery reports of `account_id` for these jobs (at most 100 job ids), in event id
    /// order; one search of the `webhook_events_job` index per job.
    fn delivery_events(&self, account_id: i64, job_ids: &[String]) -> Result<Vec<DeliveryEvent>>;
}

//! Transactional messages of the HTTP API (`Messages`): one message per (account,
//! Idempotency-Key), stored as a hidden one-row campaign so that it goes through the same
//! ledger, lease, suppression check and provider routes as every campaign.

use crate::domain::address::Channel;
use crate::domain::model::SendStatus;
use crate::error::Result;

/// A message to submit, validated by the caller (addresses normalised, content checked).
#[derive(Debug, Clone)]
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
    pub now: i64,
}

/// What a submission found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Submitted {
    /// A new message, queued.
    Created { id: i64 },
    /// The key was used with this very request, which was answered: its answer.
    Replay { id: i64, status: u16, body: String },
    /// The key was used with this very request, which has not answered yet.
    InProgress { id: i64, since: i64 },
    /// The key was used with another request.
    Mismatch { id: i64 },
}

/// One API message as stored, with its send row's state.
#[derive(Debug, Clone)]
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
}

/// The API's transactional messages.
pub trait Messages: Send + Sync {
    /// Submit a message under its key, in one transaction: a new key creates the message (its
    /// hidden campaign, already sending, and its queued send row).
    fn submit_message(&self, m: &NewMessage<'_>) -> Result<Submitted>;
    /// Keep the answer given to the request that created message `id`, for its replays.
    fn save_answer(&self, account_id: i64, id: i64, status: u16, body: &str) -> Result<()>;
    /// Message `id` of `account_id` (`NotFound` for another account's).
    fn message(&self, account_id: i64, id: i64) -> Result<MessageRow>;
}

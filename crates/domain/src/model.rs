//! Domain vocabulary shared by the store, the worker and the CLI: states, ids and keys.

use serde::Serialize;
use std::fmt;

/// The state of one row of the send ledger (see ARCHITECTURE.md for the transitions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SendStatus {
    Queued,
    Leased,
    Sent,
    Failed,
    Suppressed,
    InDoubt,
    Cancelled,
}

impl SendStatus {
    pub const ALL: [SendStatus; 7] = [
        SendStatus::Queued,
        SendStatus::Leased,
        SendStatus::Sent,
        SendStatus::Failed,
        SendStatus::Suppressed,
        SendStatus::InDoubt,
        SendStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SendStatus::Queued => "queued",
            SendStatus::Leased => "leased",
            SendStatus::Sent => "sent",
            SendStatus::Failed => "failed",
            SendStatus::Suppressed => "suppressed",
            SendStatus::InDoubt => "in_doubt",
            SendStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

impl fmt::Display for SendStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The state of a campaign.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CampaignStatus {
    Draft,
    Approved,
    Sending,
    Paused,
    Sent,
    Cancelled,
}

impl CampaignStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CampaignStatus::Draft => "draft",
            CampaignStatus::Approved => "approved",
            CampaignStatus::Sending => "sending",
            CampaignStatus::Paused => "paused",
            CampaignStatus::Sent => "sent",
            CampaignStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Draft,
            Self::Approved,
            Self::Sending,
            Self::Paused,
            Self::Sent,
            Self::Cancelled,
        ]
        .into_iter()
        .find(|x| x.as_str() == s)
    }
}

impl fmt::Display for CampaignStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The parts of a campaign job id, `campaign:<cid>:sub:<sid>@<scope>`: [`campaign_job_id`]
/// joins them in Rust and the list builder joins the same constants in SQL
/// (`list_insert_sql` in `crates/store/src/sqlite/ledger.rs`), so the format is written once.
pub const CAMPAIGN_JOB_PREFIX: &str = "campaign:";
pub const CAMPAIGN_JOB_SUB: &str = ":sub:";
pub const CAMPAIGN_JOB_AT: &str = "@";
/// How many leading characters of the installation id scope a job id.
pub const INSTALLATION_SCOPE_LEN: usize = 16;

/// Separates the installation from the key epoch in a job id's scope.
pub const EPOCH_MARK: &str = "~";

/// The scope of a job id: the first 16 hex digits of the installation id, then `~L` when the
/// job's campaign, subscriber, list or message was made after an `adopt` that found the file
/// gone back in time, L being that adopt's label (`schema/0011_guard.sql`): ids the lost
/// timeline may have used for other people never share a key with new ones.
pub fn key_scope(installation: &str, epoch: i64) -> String {
    let prefix = installation
        .get(..INSTALLATION_SCOPE_LEN)
        .unwrap_or(installation);
    match epoch {
        0 => prefix.to_string(),
        n => format!("{prefix}{EPOCH_MARK}{n}"),
    }
}

/// The deterministic job id of a campaign send: the same recipient of the same campaign always
/// gets the same id, so every retry carries the same provider key. The scope ([`key_scope`])
/// keeps two databases, which both start at campaign 1 and subscriber 1, from ever sharing a
/// key; a copy of a file keeps it.
pub fn campaign_job_id(scope: &str, campaign_id: i64, subscriber_id: i64) -> String {
    format!(
        "{CAMPAIGN_JOB_PREFIX}{campaign_id}{CAMPAIGN_JOB_SUB}{subscriber_id}{CAMPAIGN_JOB_AT}{scope}"
    )
}

/// The job id of a transactional message of the HTTP API, `api:<account>:<message>@<scope>`:
/// its own id, never the client's Idempotency-Key (free text that could not go in a header).
pub fn api_job_id(scope: &str, account_id: i64, message_id: i64) -> String {
    format!("api:{account_id}:{message_id}{CAMPAIGN_JOB_AT}{scope}")
}

/// The job id of a double opt-in confirmation, `confirm:<list>:<subscriber>@<scope>`: one per
/// (list, subscriber), whatever adds the subscriber or how often, so a confirmation is never
/// queued twice for the same membership.
pub fn confirm_job_id(scope: &str, list_id: i64, subscriber_id: i64) -> String {
    format!("confirm:{list_id}:{subscriber_id}{CAMPAIGN_JOB_AT}{scope}")
}

/// Namespace for idempotency keys (a fixed random UUID; changing it would change every key).
const KEY_NAMESPACE: uuid::Uuid = uuid::Uuid::from_u128(0x5e7d_0a3c_9b1f_4e52_8c6d_2f0b_7a41_93e8);

/// The idempotency key sent to providers: a UUIDv5 of the job id, which fits every provider's
/// key format (SparkPost forbids `:`, Brevo wants a UUID).
pub fn idempotency_key(job_id: &str) -> String {
    uuid::Uuid::new_v5(&KEY_NAMESPACE, job_id.as_bytes()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_deterministic_uuids() {
        let inst = key_scope("0123456789abcdef0123456789abcdef", 0);
        let a = idempotency_key(&campaign_job_id(&inst, 1, 2));
        assert_eq!(a, idempotency_key("campaign:1:sub:2@0123456789abcdef"));
        assert_ne!(a, idempotency_key(&campaign_job_id(&inst, 1, 3)));
        let other = key_scope("fedcba9876543210fedcba9876543210", 0);
        assert_ne!(a, idempotency_key(&campaign_job_id(&other, 1, 2)));
        // After an adopt that found the file gone back, new ids get a new scope.
        let later = key_scope("0123456789abcdef0123456789abcdef", 2);
        assert_eq!(
            campaign_job_id(&later, 1, 2),
            "campaign:1:sub:2@0123456789abcdef~2"
        );
        assert_eq!(uuid::Uuid::parse_str(&a).unwrap().get_version_num(), 5);
    }

    #[test]
    fn status_names_round_trip() {
        for s in SendStatus::ALL {
            assert_eq!(SendStatus::parse(s.as_str()), Some(s));
        }
    }
}

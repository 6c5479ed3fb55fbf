//! What the crash-suite checker reads (`Audit`): a snapshot of the ledger and the ledger
//! invariants that must hold after every restart.

use crate::error::Result;
use std::collections::HashMap;

/// One ledger row as the checker sees it.
#[derive(Debug, Clone)]
pub struct AuditRow {
    pub job_id: String,
    pub address: String,
    pub status: String,
    pub attempts: i64,
    pub claimed_at: Option<i64>,
}

/// Everything the checker compares against the provider's log, for one campaign.
#[derive(Debug, Clone)]
pub struct AuditSnapshot {
    pub campaign_id: i64,
    pub account_id: i64,
    pub campaign_status: String,
    /// Distinct normalised addresses of the account's confirmed subscribers for the channel.
    pub eligible: Vec<String>,
    /// Ledger rows by job id.
    pub rows: HashMap<String, AuditRow>,
    /// Suppressed address -> when the suppression was written (inside its transaction).
    pub suppressed_at: HashMap<String, i64>,
}

/// Read-only queries for `sendonce check`.
pub trait Audit: Send + Sync {
    fn audit_snapshot(&self, campaign_id: i64) -> Result<AuditSnapshot>;
    /// Every broken ledger invariant of a campaign, described (empty when sound).
    fn invariant_violations(&self, campaign_id: i64) -> Result<Vec<String>>;
}

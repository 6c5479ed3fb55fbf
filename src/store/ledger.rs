//! The ledger's contract, backend-neutral: the rows the worker claims and the outcomes it
//! records, the `Ledger` trait every store implements (`sqlite/ledger.rs`,
//! `postgres/ledger.rs`), and what both decide alike (a claim's per-row decision and lease
//! terms, a second confirmation).

use crate::domain::address::Channel;
use crate::error::Result;

/// A campaign the worker may claim from (status `sending`), with its frozen content.
#[derive(Debug, Clone)]
pub struct ActiveCampaign {
    pub id: i64,
    pub account_id: i64,
    /// For routing by account name in the config file.
    pub account_name: String,
    pub channel: Channel,
    pub sender: Option<String>,
    pub subject: Option<String>,
    /// The text template; empty when the text part is generated from `html`.
    pub body: String,
    pub html: Option<String>,
    pub reply_to: Option<String>,
    pub sms_footer: Option<String>,
    /// The campaign's name and the names of the lists it targets (template variables).
    pub name: String,
    pub list_names: Vec<String>,
    /// The ids of the lists it targets (empty: the whole account); sealed into unsubscribe links.
    pub list_ids: Vec<i64>,
    /// False: subject and body are literal text, not templates (one-off notifications).
    pub templated: bool,
    /// Marked transactional, or a one-off message (API, notify): its email carries no
    /// List-Unsubscribe, and the worker sends it without a public URL.
    pub transactional: bool,
    /// False while the recipient list is still being built.
    pub list_complete: bool,
}

/// What one claim asks for.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    pub campaign_id: i64,
    pub account_id: i64,
    pub channel: Channel,
    pub batch: usize,
    /// Lease length: the row is ours until `now + lease_ms`.
    pub lease_ms: i64,
    /// The fence token written on every row of this claim.
    pub token: i64,
    pub owner: String,
    /// The provider's idempotency-key window, if it has one. A row that may already have been
    /// delivered is retried only inside this window (with the same key); otherwise it goes
    /// `in_doubt`.
    pub key_window_ms: Option<i64>,
    pub now: i64,
}

/// What one claim writes on every row it leases (both stores).
pub(crate) struct LeaseTerms {
    /// Taken once the claim is ordered against opt-outs (SQLite: the write lock; PostgreSQL:
    /// the account's opt-out lock, shared from before the candidates are read to the commit): a
    /// suppression whose created_at is earlier committed before this claim (the crash-suite
    /// checker relies on it). It marks the claim that started the current delivery chain: a
    /// same-key retry of a row that may have been delivered keeps the first one.
    pub(crate) claimed_at: i64,
    /// The lease runs from now, not from `req.now`: waiting for the write lock (or for the
    /// rows' locks) must not eat into the time a call has before its lease expires.
    pub(crate) until: i64,
    /// The dispatch marker, when the caller is about to call every row: dispatched now and
    /// attempts + 1 (NULL and 0 otherwise).
    pub(crate) dispatched_at: Option<i64>,
    pub(crate) increment: i64,
}

impl LeaseTerms {
    pub(crate) fn now(req: &ClaimRequest, dispatch: bool) -> Self {
        let claimed_at = crate::domain::clock::now_ms();
        LeaseTerms {
            claimed_at,
            until: claimed_at + req.lease_ms,
            dispatched_at: dispatch.then_some(claimed_at),
            increment: i64::from(dispatch),
        }
    }
}

/// What the claim does with one due row.
pub(crate) enum Decision {
    /// It may already have been delivered and a retry is not safe: park it in doubt.
    InDoubt { since: i64 },
    /// Its address is suppressed.
    Suppress,
    /// It may already have been delivered; the provider's key window still covers a retry with
    /// the same key.
    SameKeyRetry { since: i64 },
    /// Nothing special (nearly every row).
    Lease,
}

/// The per-row decision of a claim (both stores), from when the row may already have been
/// delivered (`maybe_since`: its `doubt_since`, or the dispatch of an expired lease; `None` for
/// a row never dispatched) and whether its address is suppressed. A row that may already have
/// been delivered is retried only by an idempotent provider, still inside its key window.
pub(crate) fn decide(maybe_since: Option<i64>, suppressed: bool, req: &ClaimRequest) -> Decision {
    match maybe_since {
        Some(since) => {
            if crate::domain::retry::same_key_retry_safe(since, req.now, req.key_window_ms) {
                Decision::SameKeyRetry { since }
            } else {
                Decision::InDoubt { since }
            }
        }
        None if suppressed => Decision::Suppress,
        None => Decision::Lease,
    }
}

/// A row this worker now holds.
#[derive(Debug, Clone)]
pub struct ClaimedRow {
    pub id: i64,
    pub job_id: String,
    pub address: String,
    /// Captured template variables (JSON text).
    pub vars: String,
    /// Provider calls dispatched before this claim.
    pub attempts: i64,
    pub token: i64,
    /// An earlier call may have delivered it: this is a retry with the same key.
    pub maybe_delivered: bool,
}

/// The result of one claim transaction.
#[derive(Debug, Default)]
pub struct Claimed {
    pub rows: Vec<ClaimedRow>,
    /// Rows moved to `suppressed` because their address was suppressed before this claim.
    pub suppressed: u64,
    /// Rows moved to `in_doubt`: dispatched by a worker whose lease expired, provider not
    /// idempotent (or the key window has passed).
    pub in_doubt: u64,
    /// Rows that may already have been delivered, settled (sent or failed) by a delivery
    /// report a provider webhook had sent while they were still leased.
    pub settled_by_webhook: u64,
}

/// How one provider call ended, as the ledger records it. The worker decides (backoff, key
/// window, attempt limit); the store applies.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The provider accepted the message.
    Accepted {
        provider_id: Option<String>,
        note: Option<String>,
    },
    /// It will never be accepted; with `suppress`, the address is added to the suppression list.
    Failed {
        error: String,
        suppress: Option<String>,
    },
    /// Definitely not sent (or an ambiguous outcome that is safe to retry with the same key):
    /// back to `queued`, ready at `retry_at`.
    Retry {
        error: String,
        retry_at: i64,
        maybe_delivered: bool,
    },
    /// The outcome is unknown and cannot be retried safely.
    InDoubt { error: String },
}

/// One outcome for one leased row.
#[derive(Debug, Clone)]
pub struct Record {
    pub id: i64,
    pub token: i64,
    pub outcome: Outcome,
}

#[derive(Debug, Default, Clone, Copy)]
pub struct RecordStats {
    pub sent: u64,
    pub failed: u64,
    pub retried: u64,
    pub in_doubt: u64,
    /// Accepted after our lease was lost: recorded as sent anyway (never dropped).
    pub late_confirmations: u64,
    /// Non-accepted outcomes whose lease was lost: the row's new holder decides.
    pub fenced_out: u64,
    /// Acceptances without a provider id: the provider reported the key as already used
    /// (for a key API, "same key, different payload"). Recorded as sent, never resent.
    pub already_accepted: u64,
    /// Acceptances of a row already `sent` (a replayed key; or another provider id, noted on
    /// the row as a possible second delivery).
    pub double_confirmations: u64,
}

/// What the worker needs from a ledger. A second backend implements this without touching the
/// worker.
pub trait Ledger: Send + Sync + 'static {
    /// Compare-and-set `approved -> sending` for every campaign due at `now`.
    fn start_due_campaigns(&self, now: i64) -> Result<Vec<i64>>;
    /// Campaigns in `sending`, with their content.
    fn active_campaigns(&self) -> Result<Vec<ActiveCampaign>>;
    /// Add the next `chunk` subscribers to the list; returns true when the list is complete.
    fn build_list_chunk(&self, campaign_id: i64, chunk: usize) -> Result<bool>;
    /// Lease up to `batch` due rows, moving suppressed and unrecoverable ones aside.
    fn claim(&self, req: &ClaimRequest) -> Result<Claimed>;
    /// Write the dispatch marker (and renew the lease) for rows about to be called. Returns the
    /// ids still held: a row whose lease was lost must not be called.
    fn mark_dispatched(&self, rows: &[(i64, i64)], now: i64, lease_ms: i64) -> Result<Vec<i64>>;
    /// Record a group of outcomes in one commit.
    fn record(&self, records: &[Record], now: i64) -> Result<RecordStats>;
    /// One commit per worker cycle: record the outcomes of finished calls and, with `claim`,
    /// lease a new batch whose rows all get their dispatch marker in the same statement (ask
    /// for no more rows than there are free call slots). The default runs the steps as
    /// separate commits; the SQLite store does it in one transaction.
    fn cycle(
        &self,
        records: &[Record],
        claim: Option<&ClaimRequest>,
        now: i64,
    ) -> Result<(RecordStats, Claimed)> {
        let stats = if records.is_empty() {
            RecordStats::default()
        } else {
            self.record(records, now)?
        };
        let Some(req) = claim else {
            return Ok((stats, Claimed::default()));
        };
        let mut got = self.claim(req)?;
        let keys: Vec<(i64, i64)> = got.rows.iter().map(|r| (r.id, r.token)).collect();
        let held: std::collections::HashSet<i64> = self
            .mark_dispatched(&keys, req.now, req.lease_ms)?
            .into_iter()
            .collect();
        got.rows.retain(|r| held.contains(&r.id));
        Ok((stats, got))
    }
    /// Keep the WAL file bounded: checkpoint and truncate it when it has grown past the
    /// store's limit (readers that hold old snapshots stop the automatic checkpoints from
    /// resetting it). Returns true if a checkpoint ran. Default: nothing to do.
    fn checkpoint_if_large(&self) -> Result<bool> {
        Ok(false)
    }
    /// Give back leased rows that were never dispatched.
    fn release(&self, rows: &[(i64, i64)], now: i64) -> Result<u64>;
    /// Mark the campaign `sent` if the ledger says it is finished.
    fn try_complete(&self, campaign_id: i64, now: i64) -> Result<bool>;
    /// The earliest time a row of this campaign becomes claimable, if any row can.
    fn next_visible(&self, campaign_id: i64) -> Result<Option<i64>>;
    /// Settle expired leases of cancelled campaigns (dispatched: in doubt; else cancelled).
    fn sweep_cancelled(&self, now: i64) -> Result<u64>;
    /// Rows in doubt since before `before`, to look up at the provider: (id, job id, address).
    fn reconcilable(
        &self,
        campaign_id: i64,
        before: i64,
        limit: usize,
    ) -> Result<Vec<(i64, String, String)>>;
    /// The provider answered for a row in doubt: `Some(id)` it has the message (sent), `None`
    /// it never accepted it (queued again). Returns false if the row was no longer in doubt.
    fn settle_doubt(&self, send_id: i64, found: Option<String>) -> Result<bool>;
}

/// An acceptance for a row that is already `sent` (`stored`: the row's provider id, `None` when
/// the row does not exist). The same provider id (a replay of the same key) or none (the
/// provider said "already accepted") is a benign repeat. A different id can happen with an
/// intact database (an operator requeued a row in doubt and it was sent again before the first
/// call's late "yes" arrived; a provider that gives a replay a new id): it is not damage, but it
/// may mean two deliveries, so the row's reason says so (the returned note) and the run counts
/// it. A row that does not exist at all means the database is damaged. Both backends decide
/// here; they only read the row and write the note.
pub(crate) fn confirmed_again(
    id: i64,
    ours: Option<&str>,
    stored: Option<Option<String>>,
) -> Result<Option<String>> {
    let Some(stored) = stored else {
        return Err(crate::error::Error::damaged(format!(
            "a provider accepted send {id}, which is not in the ledger"
        )));
    };
    match (ours, stored.as_deref()) {
        (Some(ours), Some(theirs)) if ours != theirs => {
            tracing::warn!(
                send_id = id,
                first = theirs,
                second = ours,
                "a sent row was confirmed again with another provider id: it may have been \
                 delivered twice"
            );
            Ok(Some(format!(
                "confirmed again with another provider id ({ours}): it may have been delivered \
                 twice"
            )))
        }
        _ => {
            tracing::warn!(
                send_id = id,
                "a second confirmation of a sent row (same key)"
            );
            Ok(None)
        }
    }
}

//! What the ledger (`store/ledger.rs`, written once) does on SQLite only: a claim is counted
//! by the clone guard (`guard.rs`), the WAL is kept bounded, and `sendonce bench` prints the
//! query plans of the send path's statements in SQLite's dialect.

use super::dialect::SQLITE;
use super::SqliteStore;
use crate::ledger::{self as ledger, LedgerStore};
use crate::sql::Tx;
use sendonce_domain::address::Channel;
use sendonce_domain::error::Result;
use sendonce_domain::segment::Filter;

impl LedgerStore for SqliteStore {
    fn count_claim(&self, tx: &mut dyn Tx, claimed_at: i64) -> Result<Option<i64>> {
        super::guard::claim_generation(tx, self.guard(), claimed_at).map(Some)
    }

    fn claim_committed(&self, generation: Option<i64>, now: i64) -> Result<()> {
        self.claimed(generation, now)
    }

    fn checkpoint_wal_if_large(&self) -> Result<bool> {
        let wal = std::path::PathBuf::from(format!("{}-wal", self.path.display()));
        let size = match std::fs::metadata(&wal) {
            Ok(m) => m.len(),
            Err(_) => return Ok(false),
        };
        if size < super::WAL_CHECKPOINT_BYTES {
            return Ok(false);
        }
        self.checkpoint_truncate()?;
        tracing::debug!(wal_bytes = size, "WAL checkpointed and truncated");
        Ok(true)
    }
}

/// Every statement of the send path, by name, for `SqliteStore::hot_query_plans`.
pub(super) fn hot_queries() -> Vec<(&'static str, String)> {
    let d = &SQLITE;
    let mut q: Vec<(&'static str, String)> = [
        ("start due campaigns", ledger::START_DUE_CAMPAIGNS),
        ("active campaigns", ledger::ACTIVE_CAMPAIGNS.get(d)),
        ("list: campaign row", ledger::LIST_CAMPAIGN.get(d)),
        ("list: chunk end", ledger::LIST_CHUNK_END),
        ("list: advance cursor", ledger::LIST_ADVANCE_CURSOR),
        (
            "claim: campaign status",
            ledger::CLAIM_CAMPAIGN_STATUS.get(d),
        ),
        (
            "claim: due rows + suppression check",
            ledger::CLAIM_CANDIDATES.get(d),
        ),
        (
            "claim: lease many (JSON ids)",
            ledger::CLAIM_LEASE_MANY.get(d),
        ),
        ("claim: lease one (same-key retry)", ledger::CLAIM_LEASE_ONE),
        ("claim: park in doubt", ledger::CLAIM_PARK_IN_DOUBT),
        ("claim: suppress", ledger::CLAIM_SUPPRESS),
        ("claim: webhook report for a job", ledger::CLAIM_CALLBACK),
        ("claim: settle by webhook", ledger::CLAIM_SETTLE_BY_CALLBACK),
        ("dispatch marker (separate)", ledger::MARK_DISPATCHED),
        ("record: sent (fenced)", ledger::RECORD_SENT),
        ("record: late confirmation", ledger::RECORD_LATE),
        (
            "record: check a twice-confirmed row",
            ledger::RECORD_CHECK_ROW,
        ),
        (
            "record: note a twice-confirmed row",
            ledger::RECORD_NOTE_TWICE,
        ),
        ("record: failed", ledger::RECORD_FAILED),
        ("record: add suppression", ledger::RECORD_ADD_SUPPRESSION),
        ("record: retry", ledger::RECORD_RETRY),
        ("record: in doubt", ledger::RECORD_IN_DOUBT),
        (
            "record: webhook report for a parked row",
            ledger::RECORD_DOUBT_REPORT,
        ),
        (
            "record: settle a parked row by webhook",
            ledger::RECORD_SETTLE_FROM_REPORT,
        ),
        ("release", ledger::RELEASE),
        ("next visible", ledger::NEXT_VISIBLE),
        ("reconcilable", ledger::RECONCILABLE),
        ("sweep cancelled", ledger::SWEEP_CANCELLED.get(d)),
        ("complete if done", ledger::COMPLETE_IF_DONE),
        ("status counts", super::dialect::STATUS_COUNTS),
    ]
    .into_iter()
    .map(|(n, q)| (n, q.to_string()))
    .collect();
    add_list_builds(&mut q);
    q
}

/// The list-building INSERTs, after the chunk end in [`hot_queries`].
fn add_list_builds(q: &mut Vec<(&'static str, String)>) {
    let d = &SQLITE;
    let chunks = [
        ("list: insert chunk (email)", Channel::Email, false),
        ("list: insert chunk (sms)", Channel::Sms, false),
        ("list: insert chunk (email, lists)", Channel::Email, true),
        ("list: insert chunk (sms, lists)", Channel::Sms, true),
    ];
    for (i, (name, channel, targeted)) in chunks.into_iter().enumerate() {
        q.insert(
            3 + i,
            (name, ledger::list_insert_sql(d, channel, targeted, None)),
        );
    }
    // With an audience filter: the same range, the filter evaluated on each row of it.
    let sample = Filter::parse(r#"city = "x" and not (plan in ("a", "b") or has zone)"#)
        .map(|f| crate::segment::compile(d, Some(&f), 7).sql)
        .unwrap_or_default();
    q.insert(
        3 + chunks.len(),
        (
            "list: insert chunk (email, lists, filter)",
            ledger::list_insert_sql(d, Channel::Email, true, Some(&sample)),
        ),
    );
}

//! What the ledger (`store/ledger.rs`, written once) does on PostgreSQL only: a claim is
//! counted by the sequence `claim_generation`, not an UPDATE of the guard row (one row every
//! claim updates would serialize every worker of every host on its lock). The claim's row
//! locks (`FOR UPDATE OF s SKIP LOCKED`) and advisory locks are `dialect.rs`'s. Also the
//! statements `bench.rs` plans, in PostgreSQL's numbering.

use super::dialect::POSTGRES;
use super::PgStore;
use crate::ledger::{self as ledger, LedgerStore};
use crate::sql::Tx;
use sendonce_domain::error::Result;

impl LedgerStore for PgStore {
    fn count_claim(&self, tx: &mut dyn Tx, _claimed_at: i64) -> Result<Option<i64>> {
        tx.scalar("SELECT nextval('claim_generation')", &[])
            .map(Some)
    }

    fn claim_committed(&self, _generation: Option<i64>, _now: i64) -> Result<()> {
        Ok(())
    }

    fn checkpoint_wal_if_large(&self) -> Result<bool> {
        Ok(false)
    }
}

/// The ledger statements `bench.rs` plans, as the ledger runs them on PostgreSQL: claim
/// candidates, next visible, reconcilable, complete if done, sweep cancelled (its `$2` a JSON
/// array of campaign ids).
pub(super) fn bench_statements() -> &'static [String; 5] {
    static S: std::sync::OnceLock<[String; 5]> = std::sync::OnceLock::new();
    S.get_or_init(|| {
        let pg = |sql: &str| super::tx::numbered(sql).into_owned();
        [
            pg(ledger::CLAIM_CANDIDATES.get(&POSTGRES)),
            pg(ledger::NEXT_VISIBLE),
            pg(ledger::RECONCILABLE),
            pg(ledger::COMPLETE_IF_DONE),
            pg(ledger::SWEEP_CANCELLED.get(&POSTGRES)),
        ]
    })
}

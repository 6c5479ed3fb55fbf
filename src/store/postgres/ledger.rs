//! What the ledger (`store/ledger.rs`, written once) does on PostgreSQL only: a claim is
//! counted by the sequence `claim_generation`, not an UPDATE of the guard row (one row every
//! claim updates would serialize every worker of every host on its lock). The claim's row
//! locks (`FOR UPDATE OF s SKIP LOCKED`) and advisory locks are `dialect.rs`'s.
//!
//! Also, until the rest of the PostgreSQL store is written once over `sql::Tx`: the
//! `transaction!` macro and the async helpers its other files share (`lock_opt_outs`,
//! `lock_subscribers`, `settle_doubt_tx`, `LOCK_CAMPAIGN`, `COMPLETE_IF_DONE`), and the
//! statements `bench.rs` plans, in PostgreSQL's numbering.

use super::dialect::POSTGRES;
use super::PgStore;
use crate::error::{Error, Result};
use crate::store::ledger::{self as ledger, LedgerStore};
use crate::store::sql::Tx;
use deadpool_postgres::Transaction;
/// An error inside a transaction: the driver's (kept whole, so a deadlock can be retried) or
/// ours.
pub(crate) enum TxError {
    Pg(tokio_postgres::Error),
    Other(Error),
}

impl From<tokio_postgres::Error> for TxError {
    fn from(e: tokio_postgres::Error) -> Self {
        TxError::Pg(e)
    }
}

impl From<Error> for TxError {
    fn from(e: Error) -> Self {
        TxError::Other(e)
    }
}

impl From<TxError> for Error {
    fn from(e: TxError) -> Self {
        match e {
            TxError::Pg(e) => e.into(),
            TxError::Other(e) => e,
        }
    }
}

pub(crate) type TxResult<T> = std::result::Result<T, TxError>;

/// A deadlock or serialization failure: the whole transaction can run again.
pub(crate) fn retryable(e: &TxError) -> bool {
    use tokio_postgres::error::SqlState;
    match e {
        TxError::Pg(e) => matches!(
            e.code(),
            Some(c) if *c == SqlState::T_R_DEADLOCK_DETECTED
                || *c == SqlState::T_R_SERIALIZATION_FAILURE
        ),
        TxError::Other(_) => false,
    }
}

/// Run `$body` (which uses `$tx` and returns `TxResult<T>`) in a transaction on `$client` and
/// commit it; a deadlock or serialization failure reruns it (three more times at most).
macro_rules! transaction {
    ($client:expr, $tx:ident => $body:expr) => {{
        let mut tries = 0u32;
        loop {
            let $tx = $client.transaction().await?;
            let out: $crate::store::postgres::ledger::TxResult<_> = async { $body }.await;
            let out = match out {
                Ok(v) => $tx.commit().await.map(|_| v).map_err(Into::into),
                Err(e) => Err(e),
            };
            match out {
                Ok(v) => break Ok(v),
                Err(e) if $crate::store::postgres::ledger::retryable(&e) && tries < 3 => {
                    tries += 1;
                    continue;
                }
                Err(e) => break Err($crate::error::Error::from(e)),
            }
        }
    }};
}
pub(crate) use transaction;

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

use crate::store::sql::SUBSCRIBERS_LOCK;

/// New subscribers and list building of one account in one order: identity ids are handed
/// out before commit, so without this a list chunk could end past an id committed early and
/// leave behind the lower ids of a slower import still in flight. Inserting subscribers shares
/// the lock; a list chunk takes it exclusively, so when it reads no insert is in flight.
pub(crate) async fn lock_subscribers(
    tx: &Transaction<'_>,
    account_id: i64,
    exclusive: bool,
) -> TxResult<()> {
    let sql = match exclusive {
        true => "SELECT pg_advisory_xact_lock($1::bigint)",
        false => "SELECT pg_advisory_xact_lock_shared($1::bigint)",
    };
    tx.execute(sql, &[&(SUBSCRIBERS_LOCK | account_id)]).await?;
    Ok(())
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

//! PostgreSQL's SQL where it differs from SQLite's (`store::sql::Dialect`): READ COMMITTED
//! transactions that lock the rows they change.

use crate::error::Result;
use crate::store::sql::{args, Dialect, Tx};

/// The opt-out advisory lock key, as `ledger.rs` takes it (PostgreSQL's one-bigint key space).
const OPT_OUT_LOCK: i64 = 1 << 62;

/// PostgreSQL's dialect.
pub struct Postgres;

/// The one instance every PostgreSQL transaction hands out.
pub static POSTGRES: Postgres = Postgres;

impl Dialect for Postgres {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn for_update(&self) -> &'static str {
        " FOR UPDATE"
    }

    // --- Directory, Suppressions, Audit ---

    fn lock_opt_outs(&self, tx: &mut dyn Tx, account_id: i64) -> Result<i64> {
        tx.exec(
            "SELECT pg_advisory_xact_lock(CAST(?1 AS BIGINT))",
            &args![OPT_OUT_LOCK | account_id],
        )?;
        Ok(crate::domain::clock::now_ms())
    }

    fn like_ci(&self) -> &'static str {
        "ILIKE"
    }

    fn byte_order(&self) -> &'static str {
        " COLLATE \"C\""
    }

    fn json_patch(&self, _tx: &mut dyn Tx, attrs: &str, patch: &str) -> Result<String> {
        crate::store::shared::json_patch(attrs, patch)
    }

    fn begin_snapshot(&self) -> &'static str {
        "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"
    }
}

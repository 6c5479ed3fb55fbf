//! PostgreSQL's SQL where it differs from SQLite's (`store::sql::Dialect`): READ COMMITTED
//! transactions that lock the rows they change.

use crate::error::Result;
use crate::store::sql::{args, Dialect, Tx};

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

    // --- lists and opt-in (`Lists`, `Optin`) ---

    fn list_member_counts(&self) -> &'static str {
        "(SELECT count(*) FROM list_members m WHERE m.list_id = l.id AND m.status = 'subscribed'),
    (SELECT count(*) FROM list_members m WHERE m.list_id = l.id AND m.status = 'unsubscribed'),
    (SELECT count(*) FROM list_members m WHERE m.list_id = l.id AND m.status = 'pending')"
    }

    fn byte_order(&self) -> &'static str {
        " COLLATE \"C\""
    }

    fn starts_with(&self, column: &str, param: &str) -> String {
        format!(" AND starts_with({column}, {param})")
    }

    fn for_update_of(&self, alias: &str) -> String {
        format!(" FOR UPDATE OF {alias}")
    }

    fn lock_opt_outs(&self, tx: &mut dyn Tx, account_id: i64) -> Result<i64> {
        tx.exec(
            "SELECT pg_advisory_xact_lock(CAST(?1 AS BIGINT))",
            &args![OPT_OUT_LOCK | account_id],
        )?;
        Ok(crate::domain::clock::now_ms())
    }
}

/// The advisory lock key space of an account's opt-outs (`postgres/ledger.rs`'s
/// `OPT_OUT_LOCK`: the same key, so an unsubscribe and a claim exclude each other).
const OPT_OUT_LOCK: i64 = 1 << 62;

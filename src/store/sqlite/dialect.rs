//! SQLite's SQL where it differs from PostgreSQL's (`store::sql::Dialect`): one writer at a
//! time (`BEGIN IMMEDIATE`), so no row locks.

use crate::error::Result;
use crate::store::sql::{args, Dialect, Tx};

/// SQLite's dialect.
pub struct Sqlite;

/// The one instance every SQLite transaction hands out.
pub static SQLITE: Sqlite = Sqlite;

impl Dialect for Sqlite {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn for_update(&self) -> &'static str {
        ""
    }

    // --- Directory, Suppressions, Audit ---

    fn lock_opt_outs(&self, _tx: &mut dyn Tx, _account_id: i64) -> Result<i64> {
        Ok(crate::domain::clock::now_ms())
    }

    fn lock_subscribers(&self, _tx: &mut dyn Tx, _account_id: i64) -> Result<()> {
        Ok(())
    }

    fn like_ci(&self) -> &'static str {
        "LIKE"
    }

    fn byte_order(&self) -> &'static str {
        ""
    }

    fn json_patch(&self, tx: &mut dyn Tx, attrs: &str, patch: &str) -> Result<String> {
        tx.scalar("SELECT json_patch(?1, ?2)", &args![attrs, patch])
    }

    fn begin_snapshot(&self) -> &'static str {
        "BEGIN"
    }
}

//! SQLite's SQL where it differs from PostgreSQL's (`store::sql::Dialect`): one writer at a
//! time (`BEGIN IMMEDIATE`), so no row locks.

use crate::error::Result;
use crate::store::sql::{Dialect, Tx};

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

    // --- lists and opt-in (`Lists`, `Optin`) ---

    fn list_member_counts(&self) -> &'static str {
        "(SELECT coalesce(sum(n), 0) FROM list_counts c WHERE c.list_id = l.id AND c.status = 'subscribed'),
    (SELECT coalesce(sum(n), 0) FROM list_counts c WHERE c.list_id = l.id AND c.status = 'unsubscribed'),
    (SELECT coalesce(sum(n), 0) FROM list_counts c WHERE c.list_id = l.id AND c.status = 'pending')"
    }

    fn byte_order(&self) -> &'static str {
        ""
    }

    fn starts_with(&self, _column: &str, _param: &str) -> String {
        String::new()
    }

    fn for_update_of(&self, _alias: &str) -> String {
        String::new()
    }

    fn lock_opt_outs(&self, _tx: &mut dyn Tx, _account_id: i64) -> Result<i64> {
        Ok(crate::domain::clock::now_ms())
    }
}

//! SQLite's SQL where it differs from PostgreSQL's (`store::sql::Dialect`): one writer at a
//! time (`BEGIN IMMEDIATE`), so no row locks.

use crate::store::sql::Dialect;

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
}

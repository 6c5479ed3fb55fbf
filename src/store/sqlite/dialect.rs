//! SQLite's SQL where it differs from PostgreSQL's (`store::sql::Dialect`): one writer at a
//! time (`BEGIN IMMEDIATE`), so no row or advisory locks.

use crate::store::sql::Dialect;

/// SQLite's dialect.
pub static SQLITE: Dialect = Dialect {
    name: "sqlite",
    for_update: "",
    in_doubt_count: "SELECT count(*) FROM sends INDEXED BY sends_doubt WHERE status = 'in_doubt'",
};

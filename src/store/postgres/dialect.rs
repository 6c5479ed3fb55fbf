//! PostgreSQL's SQL where it differs from SQLite's (`store::sql::Dialect`): READ COMMITTED
//! transactions that lock the rows they change.

use crate::store::sql::Dialect;

/// PostgreSQL's dialect.
pub static POSTGRES: Dialect = Dialect {
    name: "postgres",
    for_update: " FOR UPDATE",
    in_doubt_count: "SELECT count(*) FROM sends WHERE status = 'in_doubt'",
};

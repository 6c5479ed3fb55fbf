//! PostgreSQL's SQL where it differs from SQLite's (`store::sql::Dialect`): READ COMMITTED
//! transactions that lock the rows they change.

use crate::store::sql::Dialect;

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
}

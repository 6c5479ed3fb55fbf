//! Storage: the backend-neutral view of the ledger and its management queries. Today's backend
//! is SQLite (`sqlite/`).

pub mod sqlite;

pub use sqlite::*;

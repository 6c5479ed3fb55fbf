//! The suppressions page for SQLite's `Suppressions` (`admin.rs`), handed to the neutral one
//! of `store/pages.rs` (until that caller is written once too).

use super::tx::SqliteTx;
use crate::error::Result;
use crate::store::{Suppression, SuppressionPage};
use rusqlite::Connection;

/// `store::pages::suppressions`.
pub(super) fn suppressions(c: &Connection, q: &SuppressionPage<'_>) -> Result<Vec<Suppression>> {
    crate::store::pages::suppressions(&mut SqliteTx(c), q)
}

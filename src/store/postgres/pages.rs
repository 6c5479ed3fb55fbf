//! The suppressions page for PostgreSQL's `Suppressions` (`suppressions.rs`): the neutral one
//! of `store/pages.rs` on a connection of the store (until that caller is written once too).

use super::PgStore;
use crate::error::Result;
use crate::store::sql::Db;
use crate::store::{Suppression, SuppressionPage};

impl PgStore {
    /// A page of an account's suppressions (see `Suppressions::suppressions_page`).
    pub(super) fn suppression_page(&self, q: &SuppressionPage<'_>) -> Result<Vec<Suppression>> {
        self.read(|tx| crate::store::pages::suppressions(tx, q))
    }
}

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

    // --- webhooks, logins, rate limits ---

    fn for_update_of(&self, _alias: &str) -> String {
        String::new()
    }

    fn lock_webhook_event(
        &self,
        _tx: &mut dyn Tx,
        _account_id: i64,
        _source: &str,
        _event_id: &str,
    ) -> Result<()> {
        Ok(())
    }

    fn lock_opt_outs(&self, _tx: &mut dyn Tx, _account_id: i64) -> Result<i64> {
        Ok(crate::domain::clock::now_ms())
    }

    fn opt_out_at(&self, _tx: &mut dyn Tx, _account_id: i64, now: i64) -> Result<i64> {
        Ok(now)
    }

    fn lock_campaign(&self, _tx: &mut dyn Tx, _campaign_id: i64) -> Result<()> {
        Ok(())
    }
}

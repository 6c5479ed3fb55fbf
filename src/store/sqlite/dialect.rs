//! SQLite's SQL where it differs from PostgreSQL's (`store::sql::Dialect`): one writer at a
//! time (`BEGIN IMMEDIATE`), so no row locks.

use crate::error::Result;
use crate::store::sql::{Dialect, Tx};

/// The template variables a send captures from its subscriber (`s`): the attributes, with the
/// built-ins on top. Campaign preview and list previews read the same expression.
pub(crate) const CAPTURED_VARS: &str =
    "json_patch(s.attrs, json_object('name', s.name, 'email', s.email, 'phone', s.phone))";

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

    // The ledger and audience filters (`store/ledger.rs`, `store/segment.rs`).

    fn lock_opt_outs(&self, _tx: &mut dyn Tx, _account_id: i64) -> Result<i64> {
        Ok(crate::domain::clock::now_ms())
    }

    fn share_opt_outs(&self, _tx: &mut dyn Tx, _account_id: i64) -> Result<()> {
        Ok(())
    }

    fn lock_subscribers(&self, _tx: &mut dyn Tx, _account_id: i64) -> Result<()> {
        Ok(())
    }

    fn lock_subscribers_for_list(&self, _tx: &mut dyn Tx, _account_id: i64) -> Result<()> {
        Ok(())
    }

    fn lock_campaign(&self, _tx: &mut dyn Tx, _campaign_id: i64) -> Result<()> {
        Ok(())
    }

    fn skip_locked(&self) -> &'static str {
        ""
    }

    fn for_share(&self) -> &'static str {
        ""
    }

    fn in_json_ids(&self, col: &str, param: &str) -> String {
        format!("{col} IN (SELECT value FROM json_each({param}))")
    }

    fn json_array_agg(&self) -> &'static str {
        "json_group_array"
    }

    fn captured_vars(&self) -> &'static str {
        CAPTURED_VARS
    }

    fn subscribers_by_id(&self) -> &'static str {
        " NOT INDEXED"
    }

    fn attr_param(&self, key: &str) -> String {
        format!("$.\"{key}\"")
    }

    fn attr_text(&self, param: &str) -> String {
        format!("CAST(json_extract(s.attrs, {param}) AS TEXT)")
    }

    fn same_text(&self, same: bool) -> &'static str {
        if same {
            "IS"
        } else {
            "IS NOT"
        }
    }

    fn confirm_many(&self) -> Option<&'static str> {
        None
    }
}

//! SQLite's SQL where it differs from PostgreSQL's (`store::sql::Dialect`): one writer at a
//! time (`BEGIN IMMEDIATE`), so no row locks.

use crate::error::Result;
use crate::store::sql::{Dialect, Tx};
use crate::store::sql::{args, Dialect, Tx};
use crate::domain::model::SendStatus;
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

/// The template variables a send captures from its subscriber (`s`): the attributes, with the
/// built-ins on top. Campaign preview and list previews read the same expression.
pub(crate) const CAPTURED_VARS: &str =
    "json_patch(s.attrs, json_object('name', s.name, 'email', s.email, 'phone', s.phone))";

/// One count per send state of a campaign, from the counters the triggers of 0014 keep in
/// every transaction that changes a send: one primary-key range, whatever the size of the
/// campaign.
pub(crate) const STATUS_COUNTS: &str =
    "SELECT status, n FROM campaign_counts WHERE campaign_id = ?1 AND n <> 0";

/// The most queued or leased sends a report page sorts by id rather than walk the campaign.
const REPORT_SORT_AT_MOST: i64 = 50_000;

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
    // --- Directory, Suppressions, Audit ---

    fn lock_opt_outs(&self, _tx: &mut dyn Tx, _account_id: i64) -> Result<i64> {
        Ok(crate::domain::clock::now_ms())
    }

    fn like_ci(&self) -> &'static str {
        "LIKE"
    // --- lists and opt-in (`Lists`, `Optin`) ---

    fn list_member_counts(&self) -> &'static str {
        "(SELECT coalesce(sum(n), 0) FROM list_counts c WHERE c.list_id = l.id AND c.status = 'subscribed'),
    (SELECT coalesce(sum(n), 0) FROM list_counts c WHERE c.list_id = l.id AND c.status = 'unsubscribed'),
    (SELECT coalesce(sum(n), 0) FROM list_counts c WHERE c.list_id = l.id AND c.status = 'pending')"
    }

    fn byte_order(&self) -> &'static str {
        ""
    }

    fn json_patch(&self, tx: &mut dyn Tx, attrs: &str, patch: &str) -> Result<String> {
        tx.scalar("SELECT json_patch(?1, ?2)", &args![attrs, patch])
    }

    fn begin_snapshot(&self) -> &'static str {
        "BEGIN"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sqlite::tx::SqliteTx;

    /// The Rust merge PostgreSQL uses (`shared::json_patch`) gives SQLite's bytes.
    #[test]
    fn json_patch_in_rust_is_sqlites() {
        let c = rusqlite::Connection::open_in_memory().expect("in-memory SQLite");
        let cases = [
            ("{}", r#"{"z":1,"a":{"x":1,"y":[1,2]},"m":"é"}"#),
            (
                r#"{"z":1,"a":{"x":1,"y":[1,2]},"m":"é"}"#,
                r#"{"a":{"x":null,"w":true},"z":null,"n":2.50}"#,
            ),
            (
                r#"{ "a" : [ 1 , { "b" : null } ] , "c":"x\"y" }"#,
                r#"{"c":"\u00e9"}"#,
            ),
            (
                r#"{"a":1}"#,
                r#"{"b":{"c":null,"d":{"e":null,"f":-0.5e+3}}}"#,
            ),
            (r#"{"a":{"b":1}}"#, r#"{"a":7}"#),
            (r#"{"a":7}"#, r#"{"a":{"b":null,"c":1}}"#),
            (r#"{"\u0061":1,"b":2}"#, r#"{"a":null,"b":3,"b":4}"#),
            (r#"[1,2]"#, r#"{"a":1}"#),
            (r#"{"a":1}"#, r#"[1, 2]"#),
            (r#"{"a":1}"#, "null"),
            (r#"{"a":1,"a":2}"#, r#"{"a":null}"#),
            (
                r#"{"n":12345678901234567890,"t":true,"f":false}"#,
                r#"{"x":1E400}"#,
            ),
        ];
        for (target, patch) in cases {
            let sqlite = SQLITE
                .json_patch(&mut SqliteTx(&c), target, patch)
                .expect("SQLite's json_patch");
            let rust = crate::store::shared::json_patch(target, patch).expect("Rust json_patch");
            assert_eq!(rust, sqlite, "json_patch({target}, {patch})");
        }
        for (target, patch) in [("{", "{}"), ("{}", r#"{"a":}"#), ("{}", "01")] {
            assert!(crate::store::shared::json_patch(target, patch).is_err());
        }
    fn starts_with(&self, _column: &str, _param: &str) -> String {
        String::new()
    }

    fn for_update_of(&self, _alias: &str) -> String {
        String::new()
    }

    fn lock_opt_outs(&self, _tx: &mut dyn Tx, _account_id: i64) -> Result<i64> {
        Ok(crate::domain::clock::now_ms())
    // --- Campaigns, Messages, Notifications ---

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

    fn status_counts_sql(&self) -> &'static str {
        STATUS_COUNTS
    }

    fn state_count_sql(&self) -> Option<&'static str> {
        Some("SELECT n FROM campaign_counts WHERE campaign_id = ?1 AND status = ?2")
    }

    /// The index that reads fewest rows:
    /// - with a prefix, the range of UNIQUE (campaign_id, address);
    /// - a state with a partial index (`in_doubt`: sends_doubt; `failed`, `suppressed`:
    ///   sends_unsent of 0015) reads only that state's rows, in id order;
    /// - `queued`/`leased` read sends_claim and sort, when there are at most
    ///   [`REPORT_SORT_AT_MOST`] of them;
    /// - otherwise `sends_campaign_order` (0014) walks the campaign in id order and stops at a
    ///   page (a common state: its rows are dense).
    fn report_scan(&self, prefix: bool, state: Option<SendStatus>, in_state: i64) -> &'static str {
        match state {
            _ if prefix => "WHERE campaign_id = ?1",
            Some(SendStatus::InDoubt) => "WHERE campaign_id = ?1 AND status = 'in_doubt'",
            Some(SendStatus::Failed | SendStatus::Suppressed) => {
                "WHERE campaign_id = ?1 AND status IN ('failed', 'suppressed')"
            }
            // Left to itself, the planner prefers UNIQUE (campaign_id, subscriber_id) here.
            Some(SendStatus::Queued | SendStatus::Leased) if in_state <= REPORT_SORT_AT_MOST => {
                "INDEXED BY sends_claim WHERE campaign_id = ?1 AND status IN ('queued', 'leased')"
            }
            _ => "WHERE campaign_id + 0 = ?1",
        }
    }

    fn prefix_match(&self, column: &str, param: &str) -> String {
        // U+10FFFF is char(1114111); BINARY collation: the range is the prefix.
        format!("{column} >= {param} AND {column} < {param} || char(1114111)")
    }

    fn report_batch(&self) -> Option<i64> {
        None
    }

    fn sends_doubt_index(&self) -> &'static str {
        " INDEXED BY sends_doubt"
    }
    fn confirm_many(&self) -> Option<&'static str> {
        None
    }
}

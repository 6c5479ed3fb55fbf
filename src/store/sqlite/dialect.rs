//! SQLite's SQL where it differs from PostgreSQL's (`store::sql::Dialect`): one writer at a
//! time (`BEGIN IMMEDIATE`), so no row locks.

use crate::error::Result;
use crate::store::sql::{Dialect, Tx};
use crate::store::sql::{args, Dialect, Tx};

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
    }
}

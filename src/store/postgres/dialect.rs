//! PostgreSQL's SQL where it differs from SQLite's (`store::sql::Dialect`): READ COMMITTED
//! transactions that lock the rows they change.

use crate::error::Result;
use crate::store::sql::{args, Dialect, Tx};

/// The advisory lock class of webhook events (the two-key form: its own key space, apart from
/// the migrations' one-key lock).
const WEBHOOK_EVENT_LOCK: i32 = 0x574B_4556; // "WKEV"

/// Advisory lock keys (PostgreSQL's one-bigint key space; the migration lock and the webhook
/// events' two-key locks live elsewhere in it or in the other space).
/// The opt-out advisory lock key, as `ledger.rs` takes it (PostgreSQL's one-bigint key space).
const OPT_OUT_LOCK: i64 = 1 << 62;

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

    // --- webhooks, logins, rate limits ---

    fn for_update_of(&self, alias: &str) -> String {
        format!(" FOR UPDATE OF {alias}")
    }

    fn lock_webhook_event(
        &self,
        tx: &mut dyn Tx,
        account_id: i64,
        source: &str,
        event_id: &str,
    ) -> Result<()> {
        let key = format!("{account_id}:{source}:{event_id}");
        tx.exec(
            "SELECT pg_advisory_xact_lock(?1, hashtext(?2))",
            &args![WEBHOOK_EVENT_LOCK, &key],
        )?;
        Ok(())
    }

    /// An opt-out (suppression, removal, unsubscribe, bounce) takes this lock exclusively
    /// before it writes and a claim shares it from before it reads its candidates to its
    /// commit. So a claim either sees the opt-out, or committed before the opt-out was written,
    /// and the opt-out's time (taken after the lock: the returned clock) is later than the
    /// claim's.
    // --- Directory, Suppressions, Audit ---
    // --- lists and opt-in (`Lists`, `Optin`) ---

    fn list_member_counts(&self) -> &'static str {
        "(SELECT count(*) FROM list_members m WHERE m.list_id = l.id AND m.status = 'subscribed'),
    (SELECT count(*) FROM list_members m WHERE m.list_id = l.id AND m.status = 'unsubscribed'),
    (SELECT count(*) FROM list_members m WHERE m.list_id = l.id AND m.status = 'pending')"
    }

    fn byte_order(&self) -> &'static str {
        " COLLATE \"C\""
    }

    fn starts_with(&self, column: &str, param: &str) -> String {
        format!(" AND starts_with({column}, {param})")
    }

    fn for_update_of(&self, alias: &str) -> String {
        format!(" FOR UPDATE OF {alias}")
    }

    fn lock_opt_outs(&self, tx: &mut dyn Tx, account_id: i64) -> Result<i64> {
        tx.exec(
            "SELECT pg_advisory_xact_lock(CAST(?1 AS BIGINT))",
            &args![OPT_OUT_LOCK | account_id],
        )?;
        Ok(crate::domain::clock::now_ms())
    }

    fn opt_out_at(&self, tx: &mut dyn Tx, account_id: i64, now: i64) -> Result<i64> {
        Ok(now.max(self.lock_opt_outs(tx, account_id)?))
    }

    fn lock_campaign(&self, tx: &mut dyn Tx, campaign_id: i64) -> Result<()> {
        tx.exec(
            "SELECT 1 FROM campaigns WHERE id = ?1 FOR UPDATE",
            &args![campaign_id],
        )?;
        Ok(())
    fn like_ci(&self) -> &'static str {
        "ILIKE"
    }

    fn byte_order(&self) -> &'static str {
        " COLLATE \"C\""
    }

    fn json_patch(&self, _tx: &mut dyn Tx, attrs: &str, patch: &str) -> Result<String> {
        crate::store::shared::json_patch(attrs, patch)
    }

    fn begin_snapshot(&self) -> &'static str {
        "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"
    }
}

/// The advisory lock key space of an account's opt-outs (`postgres/ledger.rs`'s
/// `OPT_OUT_LOCK`: the same key, so an unsubscribe and a claim exclude each other).
const OPT_OUT_LOCK: i64 = 1 << 62;

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
use crate::domain::model::SendStatus;
use crate::error::Result;
use crate::store::sql::{args, Dialect, Tx};
/// Advisory lock keys (PostgreSQL's one-bigint key space; the migration lock and the webhook
/// events' two-key locks live elsewhere in it or in the other space).
pub(super) const OPT_OUT_LOCK: i64 = 1 << 62;
pub(super) const SUBSCRIBERS_LOCK: i64 = 1 << 61;

/// The template variables captured for a recipient: the attributes with the built-in `name`,
/// `email`, `phone` over them (a NULL built-in is absent), as SQLite's `json_patch` does. The
/// text differs from SQLite's (jsonb orders keys), which nothing depends on: it is parsed, and
/// captured once per row.
const CAPTURED_VARS: &str = "((s.attrs::jsonb - 'name' - 'email' - 'phone')
     || jsonb_strip_nulls(jsonb_build_object('name', s.name, 'email', s.email,
                                             'phone', s.phone)))::text";

/// The text SQLite's `CAST(json_extract(s.attrs, '$."key"') AS TEXT)` gives, for the JSON
/// value `v` of the key (`{key}`: the bound key): a string unescaped; `true`/`false` as `1`/`0`
/// (json_extract makes them integers); an integer that fits 64 bits as its decimal text; any
/// other number as SQLite prints a REAL (`5.0`, `2.5`, `1000.0` for `1e3`; beyond 10^15 or with
/// more than 15 significant digits the two may print differently); JSON `null` and a missing
/// key as NULL; an object or array as its JSON text. `json` rather than `jsonb` because `json`
/// keeps a number's text as written (jsonb would turn `1e3` into `1000`, and SQLite makes that
/// a REAL).
const ATTR_TEXT: &str = "(SELECT CASE json_typeof(v)
        WHEN 'string' THEN v #>> '{}'
        WHEN 'boolean' THEN CASE WHEN v::text = 'true' THEN '1' ELSE '0' END
        WHEN 'number' THEN CASE
            WHEN v::text ~ '^-?[0-9]+$'
                 AND v::text::numeric BETWEEN -9223372036854775808 AND 9223372036854775807
                THEN v::text::numeric::text
            WHEN v::text::float8 = trunc(v::text::float8) AND abs(v::text::float8) < 1e15
                THEN trunc(v::text::float8)::numeric::text || '.0'
            ELSE v::text::float8::text END
        WHEN 'null' THEN NULL
        ELSE v::text END
     FROM (SELECT s.attrs::json -> {key} AS v) attr)";

/// Take the transaction-scoped advisory lock `key`, shared or not.
fn advisory(tx: &mut dyn Tx, key: i64, shared: bool) -> Result<()> {
    let sql = match shared {
        true => "SELECT pg_advisory_xact_lock_shared(CAST(?1 AS BIGINT))",
        false => "SELECT pg_advisory_xact_lock(CAST(?1 AS BIGINT))",
    };
    tx.exec(sql, &args![key])?;
    Ok(())
}

/// PostgreSQL's dialect.
pub struct Postgres;

/// The one instance every PostgreSQL transaction hands out.
pub static POSTGRES: Postgres = Postgres;

/// The template variables captured for a recipient: the attributes with the built-in `name`,
/// `email`, `phone` over them (a NULL built-in is absent), as SQLite's `json_patch` does. The
/// text differs from SQLite's (jsonb orders keys), which nothing depends on: it is parsed, and
/// captured once per row.
const CAPTURED_VARS: &str = "((s.attrs::jsonb - 'name' - 'email' - 'phone')
     || jsonb_strip_nulls(jsonb_build_object('name', s.name, 'email', s.email,
                                             'phone', s.phone)))::text";

/// The text SQLite's `CAST(json_extract(s.attrs, '$."key"') AS TEXT)` gives, for the JSON
/// value `v` of the key (`{key}`: the bound key): a string unescaped; `true`/`false` as `1`/`0`
/// (json_extract makes them integers); an integer that fits 64 bits as its decimal text; any
/// other number as SQLite prints a REAL (`5.0`, `2.5`, `1000.0` for `1e3`; beyond 10^15 or with
/// more than 15 significant digits the two may print differently); JSON `null` and a missing
/// key as NULL; an object or array as its JSON text. `json` rather than `jsonb` because `json`
/// keeps a number's text as written (jsonb would turn `1e3` into `1000`, and SQLite makes that
/// a REAL).
const ATTR_TEXT: &str = "(SELECT CASE json_typeof(v)
        WHEN 'string' THEN v #>> '{}'
        WHEN 'boolean' THEN CASE WHEN v::text = 'true' THEN '1' ELSE '0' END
        WHEN 'number' THEN CASE
            WHEN v::text ~ '^-?[0-9]+$'
                 AND v::text::numeric BETWEEN -9223372036854775808 AND 9223372036854775807
                THEN v::text::numeric::text
            WHEN v::text::float8 = trunc(v::text::float8) AND abs(v::text::float8) < 1e15
                THEN trunc(v::text::float8)::numeric::text || '.0'
            ELSE v::text::float8::text END
        WHEN 'null' THEN NULL
        ELSE v::text END
     FROM (SELECT s.attrs::json -> {key} AS v) attr)";

/// A campaign's sends per state, counted (no counters here), under the campaign's account.
const STATUS_COUNTS: &str = "SELECT status, count(*) FROM sends
     WHERE campaign_id = ?1 AND account_id = (SELECT account_id FROM campaigns WHERE id = ?1)
     GROUP BY status";

/// How many rows `Campaigns::report` reads per query.
const REPORT_PAGE: i64 = 5000;

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
    // --- Campaigns, Messages, Notifications ---

    fn lock_campaign(&self, tx: &mut dyn Tx, campaign_id: i64) -> Result<()> {
        tx.exec(
            "SELECT 1 FROM campaigns WHERE id = ?1 FOR UPDATE",
            &args![campaign_id],
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
    // The ledger and audience filters (`store/ledger.rs`, `store/segment.rs`).

    /// Opt-outs and claims of one account in one order. SQLite's single writer orders them
    /// for free; here an opt-out (suppression, removal, unsubscribe, bounce) takes this lock
    /// exclusively before it writes and a claim shares it from before it reads its candidates
    /// to its commit. So a claim either sees the opt-out, or committed before the opt-out was
    /// written, and the opt-out's time (taken after the lock: the returned clock) is later
    /// than the claim's.
    fn lock_opt_outs(&self, tx: &mut dyn Tx, account_id: i64) -> Result<i64> {
        advisory(tx, OPT_OUT_LOCK | account_id, false)?;
        Ok(crate::domain::clock::now_ms())
    }

    fn share_opt_outs(&self, tx: &mut dyn Tx, account_id: i64) -> Result<()> {
        advisory(tx, OPT_OUT_LOCK | account_id, true)
    }

    /// New subscribers and list building of one account in one order: identity ids are
    /// handed out before commit, so without this a list chunk could end past an id committed
    /// early and leave behind the lower ids of a slower import still in flight. Inserting
    /// subscribers shares the lock; a list chunk takes it exclusively, so when it reads no
    /// insert is in flight.
    fn lock_subscribers(&self, tx: &mut dyn Tx, account_id: i64) -> Result<()> {
        advisory(tx, SUBSCRIBERS_LOCK | account_id, true)
    }

    fn lock_subscribers_for_list(&self, tx: &mut dyn Tx, account_id: i64) -> Result<()> {
        advisory(tx, SUBSCRIBERS_LOCK | account_id, false)
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

    fn skip_locked(&self) -> &'static str {
        " FOR UPDATE OF s SKIP LOCKED"
    }

    fn for_share(&self) -> &'static str {
        " FOR SHARE"
    }

    fn in_json_ids(&self, col: &str, param: &str) -> String {
        format!(
            "{col} = ANY(ARRAY(SELECT CAST(value AS BIGINT)
                FROM jsonb_array_elements_text(CAST(CAST({param} AS TEXT) AS jsonb))))"
        )
    }

    fn json_array_agg(&self) -> &'static str {
        "json_agg"
    }

    fn captured_vars(&self) -> &'static str {
        CAPTURED_VARS
    }

    fn subscribers_by_id(&self) -> &'static str {
        ""
    }

    fn attr_param(&self, key: &str) -> String {
        key.to_string()
    }

    fn attr_text(&self, param: &str) -> String {
        ATTR_TEXT.replace("{key}", &format!("CAST({param} AS TEXT)"))
    }

    fn same_text(&self, same: bool) -> &'static str {
        if same {
            "IS NOT DISTINCT FROM"
        } else {
            "IS DISTINCT FROM"
        }
    }

    fn status_counts_sql(&self) -> &'static str {
        STATUS_COUNTS
    }

    fn state_count_sql(&self) -> Option<&'static str> {
        None
    }

    fn report_scan(
        &self,
        _prefix: bool,
        _state: Option<SendStatus>,
        _in_state: i64,
    ) -> &'static str {
        "WHERE campaign_id = ?1"
    }

    fn prefix_match(&self, column: &str, param: &str) -> String {
        format!("starts_with({column}, CAST({param} AS TEXT))")
    }

    fn report_batch(&self) -> Option<i64> {
        Some(REPORT_PAGE)
    }

    fn sends_doubt_index(&self) -> &'static str {
        ""
    /// Rows leased with the token are this worker's: claimers skip locked rows, so only a
    /// cancel or a sweep can wait on them, and a deadlock with one is retried (`Db::write`).
    fn confirm_many(&self) -> Option<&'static str> {
        Some(
            "UPDATE sends s SET status = 'sent', provider_message_id = v.pid, sent_at = ?2,
             updated_at = ?2, lease_token = NULL, doubt_since = NULL, last_error = v.note
             FROM jsonb_to_recordset(CAST(CAST(?1 AS TEXT) AS jsonb))
                  AS v(id bigint, token bigint, pid text, note text)
             WHERE s.id = v.id AND s.lease_token = v.token AND s.status = 'leased'
             RETURNING s.id",
        )
    }
}

/// The advisory lock key space of an account's opt-outs (`postgres/ledger.rs`'s
/// `OPT_OUT_LOCK`: the same key, so an unsubscribe and a claim exclude each other).
const OPT_OUT_LOCK: i64 = 1 << 62;

//! PostgreSQL's SQL where it differs from SQLite's (`store::sql::Dialect`): READ COMMITTED
//! transactions that lock the rows they change and take advisory locks where SQLite's one
//! writer orders transactions for free; no counters (it counts).

use crate::sql::Dialect;

/// PostgreSQL's dialect.
pub static POSTGRES: Dialect = Dialect {
    name: "postgres",
    for_update: " FOR UPDATE",
    for_update_of: |alias| format!(" FOR UPDATE OF {alias}"),
    for_share: " FOR SHARE",
    skip_locked: " FOR UPDATE OF s SKIP LOCKED",
    advisory_lock: Some((
        "SELECT pg_advisory_xact_lock(CAST(?1 AS BIGINT))",
        "SELECT pg_advisory_xact_lock_shared(CAST(?1 AS BIGINT))",
    )),
    advisory_lock_text: Some("SELECT pg_advisory_xact_lock(?1, hashtext(?2))"),
    lock_campaign: Some("SELECT 1 FROM campaigns WHERE id = ?1 FOR UPDATE"),
    begin_snapshot: "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY",
    byte_order: " COLLATE \"C\"",
    starts_with: |c, p| format!(" AND starts_with({c}, {p})"),
    prefix_match: |c, p| format!("starts_with({c}, CAST({p} AS TEXT))"),
    like_ci: "ILIKE",
    same_text: ("IS NOT DISTINCT FROM", "IS DISTINCT FROM"),
    json_patch: None,
    json_array_agg: "json_agg",
    in_json_ids: |col, param| {
        format!(
            "{col} = ANY(ARRAY(SELECT CAST(value AS BIGINT)
                FROM jsonb_array_elements_text(CAST(CAST({param} AS TEXT) AS jsonb))))"
        )
    },
    captured_vars: CAPTURED_VARS,
    attr_param: |key| key.to_string(),
    attr_text: |param| ATTR_TEXT.replace("{key}", &format!("CAST({param} AS TEXT)")),
    json_keys: |obj| format!("jsonb_each(CAST({obj} AS jsonb))"),
    attribute_names: "SELECT DISTINCT j.key FROM subscribers s, json_each(s.attrs::json) j
     WHERE s.account_id = ?1 AND json_typeof(s.attrs::json) = 'object'",
    failed_statement_aborts: true,
    list_member_counts:
        "(SELECT count(*) FROM list_members m WHERE m.list_id = l.id AND m.status = 'subscribed'),
    (SELECT count(*) FROM list_members m WHERE m.list_id = l.id AND m.status = 'unsubscribed'),
    (SELECT count(*) FROM list_members m WHERE m.list_id = l.id AND m.status = 'pending')",
    // A campaign's sends per state, counted under the campaign's account.
    status_counts: "SELECT status, count(*) FROM sends
     WHERE campaign_id = ?1 AND account_id = (SELECT account_id FROM campaigns WHERE id = ?1)
     GROUP BY status",
    state_count: None,
    report_scan: |_, _, _| "WHERE campaign_id = ?1",
    // How many rows `Campaigns::report` reads per query.
    report_batch: Some(5000),
    in_doubt_count: "SELECT count(*) FROM sends WHERE status = 'in_doubt'",
    sends_doubt_index: "",
    subscribers_by_id: "",
    // Rows leased with the token are this worker's: claimers skip locked rows, so only a
    // cancel or a sweep can wait on them, and a deadlock with one is retried (`Db::write`).
    confirm_many: Some(
        "UPDATE sends s SET status = 'sent', provider_message_id = v.pid, sent_at = ?2,
         updated_at = ?2, lease_token = NULL, doubt_since = NULL, last_error = v.note
         FROM jsonb_to_recordset(CAST(CAST(?1 AS TEXT) AS jsonb))
              AS v(id bigint, token bigint, pid text, note text)
         WHERE s.id = v.id AND s.lease_token = v.token AND s.status = 'leased'
         RETURNING s.id",
    ),
    seed_subscribers: "INSERT INTO subscribers (account_id, email, email_norm, name, status, attrs,
                             created_at)
     SELECT ?1, 'reader' || i || '@bench.example', 'reader' || i || '@bench.example',
            'Reader ' || i, 'confirmed',
            json_build_object('city', (ARRAY['Lisbon','Porto','Recife','Luanda',
                                             'Maputo'])[i % 5 + 1])::text,
            ?4
       FROM generate_series(CAST(?2 AS BIGINT), CAST(?3 AS BIGINT)) AS i",
    events_scan: "SELECT txid, id, account_id, type, subject FROM events
     WHERE account_id = ?1 AND (txid, id) > (?2, ?3)
       AND txid < pg_snapshot_xmin(pg_current_snapshot())::text::bigint
     ORDER BY txid, id LIMIT ?4",
    events_newest: "SELECT txid, id FROM events
     WHERE account_id = ?1 AND txid < pg_snapshot_xmin(pg_current_snapshot())::text::bigint
     ORDER BY txid DESC, id DESC LIMIT 1",
    secure_delete: None,
};

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

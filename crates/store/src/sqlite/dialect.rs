//! SQLite's SQL where it differs from PostgreSQL's (`store::sql::Dialect`): one writer at a
//! time (`BEGIN IMMEDIATE`), so no row or advisory locks; counters kept by triggers, and the
//! index a statement should read named where the planner would pick another.

use crate::sql::Dialect;
use sendonce_domain::model::SendStatus;

/// SQLite's dialect.
pub static SQLITE: Dialect = Dialect {
    name: "sqlite",
    for_update: "",
    for_update_of: |_| String::new(),
    for_share: "",
    skip_locked: "",
    advisory_lock: None,
    advisory_lock_text: None,
    lock_campaign: None,
    begin_snapshot: "BEGIN",
    byte_order: "",
    starts_with: |_, _| String::new(),
    // U+10FFFF is char(1114111); BINARY collation: the range is the prefix.
    prefix_match: |c, p| format!("{c} >= {p} AND {c} < {p} || char(1114111)"),
    like_ci: "LIKE",
    same_text: ("IS", "IS NOT"),
    json_patch: Some("SELECT json_patch(?1, ?2)"),
    json_array_agg: "json_group_array",
    in_json_ids: |col, param| format!("{col} IN (SELECT value FROM json_each({param}))"),
    captured_vars: CAPTURED_VARS,
    attr_param: |key| format!("$.\"{key}\""),
    attr_text: |param| format!("CAST(json_extract(s.attrs, {param}) AS TEXT)"),
    json_keys: |obj| format!("json_each({obj})"),
    attribute_names: "SELECT DISTINCT j.key FROM subscribers s, json_each(s.attrs) j
     WHERE s.account_id = ?1",
    failed_statement_aborts: false,
    list_member_counts: "(SELECT coalesce(sum(n), 0) FROM list_counts c WHERE c.list_id = l.id AND c.status = 'subscribed'),
    (SELECT coalesce(sum(n), 0) FROM list_counts c WHERE c.list_id = l.id AND c.status = 'unsubscribed'),
    (SELECT coalesce(sum(n), 0) FROM list_counts c WHERE c.list_id = l.id AND c.status = 'pending')",
    status_counts: STATUS_COUNTS,
    state_count: Some("SELECT n FROM campaign_counts WHERE campaign_id = ?1 AND status = ?2"),
    report_scan,
    report_batch: None,
    in_doubt_count: "SELECT count(*) FROM sends INDEXED BY sends_doubt WHERE status = 'in_doubt'",
    sends_doubt_index: " INDEXED BY sends_doubt",
    subscribers_by_id: " NOT INDEXED",
    confirm_many: None,
    seed_subscribers: "WITH RECURSIVE seq(i) AS (SELECT ?2 UNION ALL SELECT i + 1 FROM seq WHERE i < ?3)
     INSERT INTO subscribers (account_id, email, email_norm, name, status, attrs, created_at)
     SELECT ?1, 'reader' || i || '@bench.example', 'reader' || i || '@bench.example',
            'Reader ' || i, 'confirmed',
            json_object('city', CASE i % 5 WHEN 0 THEN 'Lisbon' WHEN 1 THEN 'Porto'
                                WHEN 2 THEN 'Recife' WHEN 3 THEN 'Luanda' ELSE 'Maputo' END),
            ?4
     FROM seq",
    // One writer at a time: ids are in commit order. No index of events by account (its
    // upkeep cost a send 10 µs of CPU, +22%): every account's events by primary key, filtered
    // by the caller (?1 and ?2 are bound, unused).
    events_scan: "SELECT txid, id, account_id, type, subject FROM events
     WHERE id > ?3 ORDER BY id LIMIT ?4",
    events_newest: "SELECT txid, id FROM events WHERE ?1 IS NOT NULL ORDER BY id DESC LIMIT 1",
    secure_delete: Some(("PRAGMA secure_delete = ON", "PRAGMA secure_delete = OFF")),
};

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

/// The index that reads fewest rows:
/// - with a prefix, the range of UNIQUE (campaign_id, address);
/// - a state with a partial index (`in_doubt`: sends_doubt; `failed`, `suppressed`:
///   sends_unsent of 0015) reads only that state's rows, in id order;
/// - `queued`/`leased` read sends_claim and sort, when there are at most
///   [`REPORT_SORT_AT_MOST`] of them;
/// - otherwise `sends_campaign_order` (0014) walks the campaign in id order and stops at a
///   page (a common state: its rows are dense).
fn report_scan(prefix: bool, state: Option<SendStatus>, in_state: i64) -> &'static str {
    match state {
        _ if prefix => "WHERE campaign_id = ?1",
        Some(SendStatus::InDoubt) => "WHERE campaign_id = ?1 AND status = 'in_doubt'",
        Some(SendStatus::Failed | SendStatus::Suppressed) => {
            "WHERE campaign_id = ?1 AND status IN ('failed', 'suppressed')"
        }
        // Left to itself, the planner prefers the unique (campaign_id, subscriber_id) index here.
        Some(SendStatus::Queued | SendStatus::Leased) if in_state <= REPORT_SORT_AT_MOST => {
            "INDEXED BY sends_claim WHERE campaign_id = ?1 AND status IN ('queued', 'leased')"
        }
        _ => "WHERE campaign_id + 0 = ?1",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlite::tx::SqliteTx;

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
            let rust = crate::shared::json_patch(target, patch).expect("Rust json_patch");
            assert_eq!(rust, sqlite, "json_patch({target}, {patch})");
        }
        for (target, patch) in [("{", "{}"), ("{}", r#"{"a":}"#), ("{}", "01")] {
            assert!(crate::shared::json_patch(target, patch).is_err());
        }
    }

    /// An audience filter (`store/segment.rs`) compiled for SQLite, against an in-memory
    /// table: the missing-attribute rule and two-valued `not`.
    #[test]
    fn missing_attributes_never_equal() {
        let db = rusqlite::Connection::open_in_memory().unwrap();
        db.execute_batch(
            "CREATE TABLE subscribers (id INTEGER PRIMARY KEY, name TEXT, email_norm TEXT,
                                       phone TEXT, attrs TEXT, created_at INTEGER);
             INSERT INTO subscribers VALUES
               (1, 'Ann', 'ann@x.org', NULL, '{\"city\": \"Lisboa\", \"n\": 5}', 1000),
               (2, NULL, 'bob@x.org', '+351', '{\"city\": \"Porto\", \"zone\": \"  \"}', 2000),
               (3, 'Cy', 'cy@x.org', NULL, '{}', 3000);",
        )
        .unwrap();
        let ids = |text: &str| -> Vec<i64> {
            let f = sendonce_domain::segment::Filter::parse(text).unwrap();
            let c = crate::segment::compile(&SQLITE, Some(&f), 1);
            let sql = format!("SELECT id FROM subscribers s WHERE {} ORDER BY id", c.sql);
            let mut st = db.prepare(&sql).unwrap();
            st.query_map(rusqlite::params_from_iter(c.with(&[])), |r| r.get(0))
                .unwrap()
                .collect::<rusqlite::Result<Vec<i64>>>()
                .unwrap()
        };
        assert_eq!(ids(r#"city = "Lisboa""#), [1]);
        assert_eq!(ids(r#"city != "Lisboa""#), [2, 3]);
        assert_eq!(ids(r#"not city = "Lisboa""#), [2, 3]);
        assert_eq!(ids(r#"city in ("Lisboa", "Porto")"#), [1, 2]);
        assert_eq!(ids(r#"city not in ("Lisboa")"#), [2, 3]);
        assert_eq!(ids(r#"not city in ("Lisboa")"#), [2, 3]);
        assert_eq!(ids("has city"), [1, 2]);
        assert_eq!(ids("not has zone"), [1, 2, 3]);
        assert_eq!(ids("has name"), [1, 3]);
        assert_eq!(ids("has phone"), [2]);
        assert_eq!(ids(r#"n = "5""#), [1]);
        assert_eq!(ids(r#"email = "BOB@X.org" or name = "Cy""#), [2, 3]);
        assert_eq!(ids(r#"created_after "1970-01-01T00:00:02Z""#), [2, 3]);
        assert_eq!(ids(r#"created_before "1970-01-01T00:00:02Z""#), [1]);
    }
}

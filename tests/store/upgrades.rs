//! Frozen copies of every released schema (`tests/fixtures/schema-NN.db`, made by
//! `tests/fixtures/make.py`): each one copied, upgraded by `init`, read back through the normal
//! commands, and finished by `run --once` without re-sending what was sent; a database from a
//! newer binary is refused with its bytes unchanged. The rebuild of `sends` (0016) keeps every
//! row and its check, and a file whose references point nowhere is refused unchanged.

use crate::common::{deliveries, Env};
use serde_json::Value;
use std::path::{Path, PathBuf};

const RELEASED: i64 = 26;

fn fixture(n: i64) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/schema-{n:02}.db"))
}

fn json(env: &Env, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    serde_json::from_str(&env.ok(&all)).expect("one JSON document")
}

/// `schema-NN.db` copied to a new temp dir (a new path: no owner recorded before schema 11, and
/// the schema-11 fixture has none either).
fn copied(n: i64) -> Env {
    let env = Env::new();
    std::fs::copy(fixture(n), &env.db).expect("copy the fixture");
    env
}

fn addresses(v: &Value, list: &str) -> Vec<String> {
    let mut out: Vec<String> = v[list]
        .as_array()
        .unwrap_or_else(|| panic!("no {list} in {v}"))
        .iter()
        .map(|r| r["address"].as_str().expect("address").to_string())
        .collect();
    out.sort();
    out
}

#[test]
fn every_fixture_exists_and_the_newest_is_this_binarys_schema() {
    for n in 1..=RELEASED {
        assert!(fixture(n).is_file(), "missing {}", fixture(n).display());
    }
    assert!(
        !fixture(RELEASED + 1).exists(),
        "a schema-{:02}.db exists: bump RELEASED",
        RELEASED + 1
    );
    assert_eq!(
        sendonce::store::SCHEMA_VERSION,
        RELEASED,
        "a new migration needs its fixture (python3 tests/fixtures/make.py) and RELEASED bumped"
    );
}

#[test]
fn doctor_on_an_old_fixture_says_upgrade_and_writes_nothing() {
    let env = copied(4);
    let before = std::fs::read(&env.db).unwrap();
    let r = env.run(&["doctor", "--json"]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    let doc: Value = serde_json::from_str(&r.stdout).expect("json");
    let schema = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "schema")
        .expect("schema finding")
        .clone();
    assert_eq!(schema["level"], "warn", "{schema}");
    assert!(schema["hint"].as_str().unwrap().contains("sendonce init"));
    assert_eq!(
        std::fs::read(&env.db).unwrap(),
        before,
        "doctor changed the file"
    );
}

#[test]
fn each_released_schema_upgrades_reads_back_and_finishes_without_resending() {
    for n in 1..=RELEASED {
        let env = upgraded(n);
        doctor_reads_the_upgraded_file(&env, n);
        campaigns_read_back(&env, n);
        directory_reads_back(&env, n);
        let (outbox, spec) = the_campaign_goes_on_without_resending(&env, n);
        doctor_says_only_the_row_in_doubt_is_left(&env, n);
        a_second_run_sends_nothing_more(&env, n, &outbox, &spec);
    }
}

/// `schema-NN.db` copied and upgraded by `init`: the schema, the counters, the installation id.
fn upgraded(n: i64) -> Env {
    let env = copied(n);
    let init = json(&env, &["init"]);
    assert_eq!(init["schema_version"], RELEASED, "schema-{n:02}: {init}");
    // The counters of 0014 and 0015 start out equal to the rows they count.
    env.assert_counters();
    if n >= 2 {
        assert_eq!(
            init["installation_id"], "0123456789abcdef0123456789abcdef",
            "schema-{n:02}: the installation id must survive the upgrade"
        );
    }
    env
}

/// doctor reads the upgraded file: the dead worker's lease and the row in doubt.
fn doctor_reads_the_upgraded_file(env: &Env, n: i64) {
    let r = env.run(&["doctor", "--json"]);
    assert_eq!(r.code, 1, "schema-{n:02}: {}", r.stdout);
    let doc: Value = serde_json::from_str(&r.stdout).expect("doctor JSON");
    for name in ["expired_leases", "in_doubt"] {
        let f = doc["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .unwrap();
        assert_eq!(f["level"], "warn", "schema-{n:02}: {f}");
        assert!(
            f["detail"].as_str().unwrap().contains("campaign 2: 1"),
            "schema-{n:02}: {f}"
        );
    }
}

/// Both campaigns read back: the half-sent one's counts, the finished one and its report.
fn campaigns_read_back(env: &Env, n: i64) {
    let st = json(env, &["campaign", "status", "2"]);
    for (k, want) in [
        ("sent", 2),
        ("queued", 2),
        ("leased", 1),
        ("in_doubt", 1),
        ("suppressed", 1),
    ] {
        assert_eq!(st[k], want, "schema-{n:02}: campaign 2 {k}: {st}");
    }
    assert_eq!(st["status"], "sending", "schema-{n:02}");
    let done = json(env, &["campaign", "status", "1"]);
    assert_eq!(
        (done["status"].as_str(), done["sent"].as_i64()),
        (Some("sent"), Some(3)),
        "schema-{n:02}: {done}"
    );

    let report = env.ok(&["campaign", "report", "1"]);
    assert_eq!(
        report.matches(",sent,").count(),
        3,
        "schema-{n:02}: {report}"
    );
    assert!(
        report.contains("old-1-3"),
        "schema-{n:02}: provider ids kept: {report}"
    );
}

/// Subscribers, doubts, suppressions, and the lists, tokens and admins of later schemas.
fn directory_reads_back(env: &Env, n: i64) {
    let subs = env.ok(&["subscriber", "list", "--account", "acme"]);
    for s in 1..=8 {
        assert!(
            subs.contains(&format!("s{s}@example.org")),
            "schema-{n:02}: {subs}"
        );
    }
    assert!(subs.contains("Sub 8"), "schema-{n:02}: {subs}");

    let doubts = json(env, &["doubts", "list", "--campaign", "2"]);
    assert_eq!(
        addresses(&doubts, "in_doubt"),
        ["s6@example.org"],
        "schema-{n:02}"
    );

    let sup = json(env, &["suppress", "list", "--account", "acme"]);
    assert_eq!(
        addresses(&sup, "suppressions"),
        ["gone@example.org", "s7@example.org"],
        "schema-{n:02}"
    );
    if n >= 4 {
        let lists = env.ok(&["list", "list", "--account", "acme"]);
        assert!(lists.contains("news"), "schema-{n:02}: {lists}");
    }
    if n >= 6 {
        let tokens = env.ok(&["token", "list", "--account", "acme"]);
        assert!(tokens.contains("so_abcd"), "schema-{n:02}: {tokens}");
    }
    if n >= 9 {
        let lists = env.ok(&["list", "list", "--account", "acme"]);
        assert!(lists.contains("weekly"), "schema-{n:02}: {lists}");
    }
    if n >= 13 {
        let admins = env.ok(&["admin", "list"]);
        assert!(admins.contains("ana"), "schema-{n:02}: {admins}");
    }
}

/// `run --once` sends the queued rows and the never-called lease only: (outbox, provider spec).
fn the_campaign_goes_on_without_resending(env: &Env, n: i64) -> (PathBuf, String) {
    // The in-progress campaign goes on: the queued rows and the never-called lease are
    // sent, the rows already sent are not, the row in doubt stays parked.
    let outbox = env.path("outbox.jsonl");
    let spec = format!("outbox:{}", outbox.display());
    let r = env.run(&["run", "--once", "--provider", &spec]);
    assert_eq!(
        r.code, 3,
        "schema-{n:02}: run (3: one row in doubt): {}{}",
        r.stdout, r.stderr
    );
    let mut sent: Vec<String> = std::fs::read_to_string(&outbox)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).expect("outbox line")["to"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    sent.sort();
    assert_eq!(
        sent,
        ["s3@example.org", "s4@example.org", "s5@example.org"],
        "schema-{n:02}: only the rows not yet sent go out"
    );
    assert!(
        deliveries(&outbox).values().all(|&k| k == 1),
        "schema-{n:02}: a job id twice"
    );
    let st = json(env, &["campaign", "status", "2"]);
    assert_eq!(
        (
            st["sent"].as_i64(),
            st["in_doubt"].as_i64(),
            st["queued"].as_i64()
        ),
        (Some(5), Some(1), Some(0)),
        "schema-{n:02}: {st}"
    );
    (outbox, spec)
}

/// Only the row in doubt keeps the campaign in sending: doctor says so, and what to run.
fn doctor_says_only_the_row_in_doubt_is_left(env: &Env, n: i64) {
    let r = env.run(&["doctor", "--json"]);
    let doc: Value = serde_json::from_str(&r.stdout).expect("doctor JSON");
    let f = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "campaigns_sending")
        .unwrap()
        .clone();
    assert_eq!(f["level"], "warn", "schema-{n:02}: {f}");
    assert!(
        f["detail"]
            .as_str()
            .unwrap()
            .contains("campaign 2: nothing left to send but 1 row(s) in doubt"),
        "schema-{n:02}: {f}"
    );
    assert!(
        f["hint"]
            .as_str()
            .unwrap()
            .contains("doubts list --campaign 2"),
        "{f}"
    );
}

/// A second `run --once` sends nothing more.
fn a_second_run_sends_nothing_more(env: &Env, n: i64, outbox: &Path, spec: &str) {
    let r = env.run(&["run", "--once", "--provider", spec]);
    assert_eq!(r.code, 3, "schema-{n:02}: {}{}", r.stdout, r.stderr);
    assert_eq!(
        std::fs::read_to_string(outbox).unwrap().lines().count(),
        3,
        "schema-{n:02}"
    );
}

#[test]
fn a_database_from_a_newer_binary_is_refused_unchanged() {
    let env = copied(RELEASED);
    {
        let c = rusqlite::Connection::open(&env.db).unwrap();
        c.pragma_update(None, "user_version", RELEASED + 1).unwrap();
    }
    let before = std::fs::read(&env.db).unwrap();
    let outbox = env.path("o.jsonl");
    let spec = format!("outbox:{}", outbox.display());
    for args in [
        vec!["init"],
        vec!["campaign", "status", "2"],
        vec!["run", "--once", "--provider", spec.as_str()],
    ] {
        let r = env.run(&args);
        assert_ne!(r.code, 0, "{args:?} accepted a newer schema");
        assert!(
            r.stderr.contains("newer than this binary"),
            "{args:?}: {}",
            r.stderr
        );
        assert_eq!(
            std::fs::read(&env.db).unwrap(),
            before,
            "{args:?} changed the file"
        );
    }
    let r = env.run(&["doctor"]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(r.stdout.contains("newer than this binary"), "{}", r.stdout);
    assert_eq!(
        std::fs::read(&env.db).unwrap(),
        before,
        "doctor changed the file"
    );
    assert_eq!(std::fs::read_to_string(&outbox).unwrap_or_default(), "");
}

/// Every column of every send, in id order, as text (what a rebuild must keep).
fn sends_dump(db: &Path) -> Vec<Vec<String>> {
    let c = rusqlite::Connection::open(db).unwrap();
    let mut st = c.prepare("SELECT * FROM sends ORDER BY id").unwrap();
    let n = st.column_count();
    let rows = st
        .query_map([], |r| {
            (0..n)
                .map(|i| {
                    Ok(match r.get_ref(i)? {
                        rusqlite::types::ValueRef::Null => "NULL".to_string(),
                        rusqlite::types::ValueRef::Integer(v) => v.to_string(),
                        rusqlite::types::ValueRef::Text(t) => {
                            format!("'{}'", String::from_utf8_lossy(t))
                        }
                        other => format!("{other:?}"),
                    })
                })
                .collect::<rusqlite::Result<Vec<String>>>()
        })
        .unwrap();
    rows.collect::<rusqlite::Result<Vec<_>>>().unwrap()
}

/// Every schema object but its pages: (type, name, table, SQL), by type and name.
fn schema_objects(db: &Path) -> Vec<(String, String, String, Option<String>)> {
    let c = rusqlite::Connection::open(db).unwrap();
    let mut st = c
        .prepare("SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY type, name")
        .unwrap();
    let rows = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap();
    rows.collect::<rusqlite::Result<Vec<_>>>().unwrap()
}

/// `init` of a copy of the schema-15 fixture after `damage` ran on it with foreign keys and
/// checks off: refused with exit 5 and a message containing each of `says`, the file's bytes
/// and schema version unchanged.
fn upgrade_refused_unchanged(damage: &str, says: &[&str]) {
    let env = copied(15);
    {
        let c = rusqlite::Connection::open(&env.db).unwrap();
        c.execute_batch(&format!(
            "PRAGMA foreign_keys = OFF; PRAGMA ignore_check_constraints = ON; {damage}"
        ))
        .unwrap();
    }
    let before = std::fs::read(&env.db).unwrap();
    let r = env.run(&["init"]);
    assert_eq!(r.code, 5, "{damage}: {}{}", r.stdout, r.stderr);
    for s in says {
        assert!(r.stderr.contains(s), "{damage}: no {s:?} in {}", r.stderr);
    }
    let c = rusqlite::Connection::open(&env.db).unwrap();
    let v: i64 = c
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, 15, "{damage}: the upgrade was rolled back");
    drop(c);
    assert_eq!(
        std::fs::read(&env.db).unwrap(),
        before,
        "{damage}: init changed the file"
    );
}

#[test]
fn the_sends_rebuild_keeps_every_row_its_check_and_its_references() {
    let env = copied(15);
    let before = sends_dump(&env.db);
    assert_eq!(before.len(), 12, "the schema-15 fixture's sends");
    let init = json(&env, &["init"]);
    assert_eq!(init["schema_version"], RELEASED, "{init}");
    // 0020 adds `message_id` (last) and moves the API message (send 100) to its stream, 0022
    // the opt-in confirmation (send 101, campaign 4) with its own content (tests/http/
    // stream.rs checks those moves); every other cell is kept.
    let mut after = sends_dump(&env.db);
    let stream = env
        .count("SELECT id FROM campaigns WHERE stream = 1")
        .to_string();
    for row in &mut after {
        let message = row.pop().expect("message_id");
        if row[0] == "100" {
            assert_eq!((row[2].as_str(), message.as_str()), (stream.as_str(), "1"));
            row[2] = "3".into();
        } else if row[0] == "101" {
            assert_eq!((row[2].as_str(), message.as_str()), (stream.as_str(), "2"));
            row[2] = "4".into();
        } else {
            assert_eq!(message, "NULL", "send {} has content", row[0]);
        }
    }
    assert_eq!(after, before, "0016, 0020 or 0022 changed a send");
    env.assert_counters();
    // The same tables, indexes and triggers, to the byte, as a file made by this binary.
    let fresh = Env::new();
    fresh.ok(&["init"]);
    assert_eq!(schema_objects(&env.db), schema_objects(&fresh.db));

    let c = rusqlite::Connection::open(&env.db).unwrap();
    c.pragma_update(None, "foreign_keys", "ON").unwrap();
    let sql: String = c
        .query_row(
            "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'sends'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        !sql.contains("IN ("),
        "the check is still an IN list: {sql}"
    );
    for (statement, refused) in [
        // The check still refuses a state that does not exist.
        (
            "UPDATE sends SET status = 'delivered' WHERE id = 1",
            "CHECK constraint failed",
        ),
        // The API message's send reference resolves to the rebuilt table, still enforced.
        (
            "UPDATE api_messages SET send_id = 999999",
            "FOREIGN KEY constraint failed",
        ),
    ] {
        let r = c.execute(statement, []);
        assert!(
            r.as_ref().is_err_and(|e| e.to_string().contains(refused)),
            "{statement}: {r:?}"
        );
    }
    let ok: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
}

#[test]
fn an_operators_view_over_sends_survives_the_rebuild() {
    let env = copied(15);
    {
        let c = rusqlite::Connection::open(&env.db).unwrap();
        c.execute_batch(
            "CREATE VIEW my_report AS SELECT status, count(*) AS n FROM sends GROUP BY status",
        )
        .unwrap();
    }
    let init = json(&env, &["init"]);
    assert_eq!(init["schema_version"], RELEASED, "{init}");
    let c = rusqlite::Connection::open(&env.db).unwrap();
    let n: i64 = c
        .query_row("SELECT sum(n) FROM my_report", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 12, "the view reads the rebuilt table");
}

#[test]
fn an_upgrade_over_damage_is_refused_with_exit_5_and_changes_nothing() {
    // A reference that points nowhere: found before any migration runs.
    upgrade_refused_unchanged(
        "UPDATE api_messages SET send_id = 999999",
        &[
            "point nowhere",
            "api_messages",
            "the file at schema 15",
            "doctor",
        ],
    );
    // A state the ledger does not know: the rebuild's check finds it.
    upgrade_refused_unchanged(
        "UPDATE sends SET status = 'bogus' WHERE id = 1",
        &[
            "0016_sends_check",
            "CHECK constraint failed",
            "the file at schema 15",
        ],
    );
}

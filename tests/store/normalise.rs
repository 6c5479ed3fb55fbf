//! Issue 37, F5 and F6: one form per address. An address spelled another way (Unicode NFD, a
//! domain in Unicode or in Punycode, a phone number with its national trunk prefix) is the
//! same address for suppression, through the CLI, the API and a campaign, on SQLite and on
//! PostgreSQL; invisible characters and numbers no country has are refused with an error that
//! names them; the upgrade (SQLite 0017, PostgreSQL 0004) brings stored rows to that form, an
//! opt-out winning every collision, and `doctor` reports what it found.
// Some tests here need tools outside Rust (tier 1); without them their helpers go unused.
#![cfg_attr(not(feature = "tier1"), allow(unused_imports, dead_code))]

use crate::common::{client, pg, rt, token, Env, Fake, Server};
use serde_json::{json, Value};
use std::path::PathBuf;

/// `josé` precomposed (NFC) and decomposed (NFD): two spellings of one address.
const NFC: &str = "jos\u{e9}@acme.example";
const NFD: &str = "jose\u{301}@acme.example";

/// A fresh SQLite file and a fresh PostgreSQL database, each as a CLI environment.
fn stores() -> Vec<(&'static str, Env)> {
    let pg = Env {
        dir: tempfile::tempdir().expect("tempdir"),
        db: PathBuf::from(pg::shared().fresh_url()),
    };
    vec![("sqlite", Env::new()), ("postgres", pg)]
}

fn json_of(out: &str) -> Value {
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("not one JSON document: {e}\n{out}"))
}

fn suppress(env: &Env, channel: &str, address: &str) {
    env.ok(&[
        "suppress",
        "add",
        "--account",
        "acme",
        "--channel",
        channel,
        address,
    ]);
}

/// A campaign of `channel` to everyone in the account, approved and run once through the
/// outbox; returns its status document and the outbox's deliveries per address.
fn run_campaign(env: &Env, channel: &str) -> (Value, Vec<String>) {
    let body = env.write("body.txt", "Hello\n");
    let mut args = vec![
        "campaign",
        "create",
        "--account",
        "acme",
        "--name",
        "c",
        "--channel",
        channel,
        "--body-file",
        body.to_str().unwrap(),
    ];
    if channel == "email" {
        args.extend(["--from", "news@example.org", "--subject", "Hi"]);
    } else {
        args.extend(["--from", "+14155550100"]);
    }
    let cid = env.ok(&args);
    env.ok(&["campaign", "approve", &cid]);
    let outbox = env.path("out.jsonl");
    let spec = format!("outbox:{}", outbox.display());
    env.ok(&["run", "--once", "--provider", &spec, "--tick", "20ms"]);
    let status = json_of(&env.ok(&["--json", "campaign", "status", &cid]));
    let sent = std::fs::read_to_string(&outbox)
        .unwrap_or_default()
        .lines()
        .map(|l| json_of(l)["to"].as_str().unwrap_or("").to_string())
        .collect();
    (status, sent)
}

/// F5: `josé` suppressed in NFC; a subscriber imported in NFD is the same person: the campaign
/// suppresses them and sends to nobody.
#[cfg(feature = "tier1")]
#[test]
fn a_campaign_to_the_nfd_spelling_of_a_suppressed_address_is_suppressed() {
    for (name, env) in stores() {
        env.setup_account();
        suppress(&env, "email", NFC);
        let csv = env.write(
            "subs.csv",
            format!("email,name\n{NFD},José\nana@example.com,Ana\n"),
        );
        env.import_csv("acme", &csv);
        let (st, sent) = run_campaign(&env, "email");
        assert_eq!(st["suppressed"], 1, "{name}: {st}");
        assert_eq!(st["sent"], 1, "{name}: {st}");
        assert_eq!(sent, vec!["ana@example.com".to_string()], "{name}");
    }
}

/// F5 through the API: a message to the NFD spelling of a suppressed NFC address is
/// suppressed, not sent.
#[cfg(feature = "tier1")]
#[test]
fn an_api_message_to_the_nfd_spelling_of_a_suppressed_address_is_suppressed() {
    for (name, env) in stores() {
        env.setup_account();
        suppress(&env, "email", NFC);
        let fake = Fake::start(&env.path("fake.jsonl"), &[]);
        let spec = format!("webhook:{}", fake.url("/send"));
        let server = Server::start(&env, &["--worker", "--provider", spec.as_str()]);
        let tok = token(&env, "acme", "send");
        let (status, body) = rt().block_on(async {
            let res = client()
                .post(server.url("/v1/messages?wait=10s"))
                .bearer_auth(&tok)
                .header("Idempotency-Key", "nfd-1")
                .json(&json!({"to": NFD, "from": "app@example.org", "subject": "Hi", "text": "x"}))
                .send()
                .await
                .unwrap();
            (res.status().as_u16(), res.json::<Value>().await.unwrap())
        });
        assert_eq!(status, 200, "{name}: {body}");
        assert_eq!(body["status"], "suppressed", "{name}: {body}");
        assert_eq!(body["to"], NFC, "{name}: {body}");
        assert!(fake.lines().is_empty(), "{name}: the fake got a message");
    }
}

/// F5: a zero-width space in an address is refused, with the code point named, at the CLI,
/// in a CSV import and through the API; nothing is written.
#[test]
fn an_invisible_character_in_an_address_is_refused_with_a_clear_error() {
    let env = Env::new();
    env.setup_account();
    let zwsp = "jo\u{200b}se@acme.example";
    let r = env.run(&["subscriber", "add", "--account", "acme", "--email", zwsp]);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("U+200B"), "{}", r.stderr);
    let r = env.run(&[
        "suppress",
        "add",
        "--account",
        "acme",
        "--channel",
        "email",
        zwsp,
    ]);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("invisible character U+200B"),
        "{}",
        r.stderr
    );
    assert_eq!(env.count("SELECT count(*) FROM subscribers"), 0);
    assert_eq!(env.count("SELECT count(*) FROM suppressions"), 0);
    let server = Server::start(&env, &[]);
    let tok = token(&env, "acme", "send");
    let (status, body) = rt().block_on(async {
        let res = client()
            .post(server.url("/v1/messages"))
            .bearer_auth(&tok)
            .header("Idempotency-Key", "zwsp-1")
            .json(&json!({"to": zwsp, "from": "app@example.org", "subject": "Hi", "text": "x"}))
            .send()
            .await
            .unwrap();
        (res.status().as_u16(), res.json::<Value>().await.unwrap())
    });
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("U+200B"), "{body}");
    assert_eq!(env.count("SELECT count(*) FROM sends"), 0);
}

/// F5: a domain in Unicode and its Punycode form are one address.
#[cfg(feature = "tier1")]
#[test]
fn an_idna_domain_and_its_ascii_form_are_one_address() {
    for (name, env) in stores() {
        env.setup_account();
        suppress(&env, "email", "User@B\u{fc}cher.example");
        let list = json_of(&env.ok(&["--json", "suppress", "list", "--account", "acme"]));
        assert_eq!(
            list["suppressions"][0]["address"], "user@xn--bcher-kva.example",
            "{name}: {list}"
        );
        let csv = env.write(
            "subs.csv",
            "email\nuser@xn--bcher-kva.example\nana@example.com\n",
        );
        env.import_csv("acme", &csv);
        let (st, sent) = run_campaign(&env, "email");
        assert_eq!(
            (st["suppressed"].as_u64(), st["sent"].as_u64()),
            (Some(1), Some(1)),
            "{name}: {st}"
        );
        assert_eq!(sent, vec!["ana@example.com".to_string()], "{name}");
        // And the other way round: the Punycode form finds the Unicode one.
        let r = env.run(&[
            "suppress",
            "add",
            "--account",
            "acme",
            "--channel",
            "email",
            "user@xn--bcher-kva.example",
        ]);
        assert!(
            r.stdout.contains("already"),
            "{name}: {}{}",
            r.stdout,
            r.stderr
        );
    }
}

/// F6: `+44 (0)20 7946 0000` is `+442079460000` (the trunk prefix dropped): suppressed, it is
/// not sent; a number no country has is refused.
#[cfg(feature = "tier1")]
#[test]
fn a_phone_number_with_its_trunk_prefix_is_the_suppressed_number() {
    for (name, env) in stores() {
        env.setup_account();
        suppress(&env, "sms", "+442079460000");
        let csv = env.write(
            "subs.csv",
            "phone,name\n+44 (0)20 7946 0000,Kim\n+1 415 555 0101,Lee\n",
        );
        env.import_csv("acme", &csv);
        let (st, sent) = run_campaign(&env, "sms");
        assert_eq!(st["suppressed"], 1, "{name}: {st}");
        assert_eq!(sent, vec!["+14155550101".to_string()], "{name}: {st}");
        let r = env.run(&[
            "subscriber",
            "add",
            "--account",
            "acme",
            "--phone",
            "+1 555 000 1111",
        ]);
        assert_eq!(r.code, 2, "{name}: {}{}", r.stdout, r.stderr);
        assert!(
            r.stderr.contains("not a valid number"),
            "{name}: {}",
            r.stderr
        );
    }
}

/// Rows a binary before the fix could have stored, colliding once normalised, for a store at
/// the schema before the address step; `subscribers` holds a, b, c, ... in the SQL of either
/// store. Subscriber 20 (NFC, confirmed, member of list 1) and 21 (NFD, unsubscribed, its
/// membership of list 1 unsubscribed) are one person; 22's number has its trunk prefix; 23's
/// address has a zero-width space; sends of campaign 2 are queued for 20 and 21.
fn old_rows(job: &dyn Fn(i64) -> String) -> String {
    format!(
        "INSERT INTO subscribers (id, account_id, email, email_norm, status, created_at) VALUES
           (20, 1, '{NFC}', '{NFC}', 'confirmed', 0),
           (21, 1, '{NFD}', '{NFD}', 'unsubscribed', 0),
           (23, 1, 'a\u{200b}b@acme.example', 'a\u{200b}b@acme.example', 'confirmed', 0);
         INSERT INTO subscribers (id, account_id, phone, status, created_at)
           VALUES (22, 1, '+4402079460000', 'confirmed', 0);
         INSERT INTO list_members VALUES (1, 20, 'subscribed', 0, 0), (1, 21, 'unsubscribed', 0, 0);
         INSERT INTO suppressions VALUES (1, 'sms', '+442079460000', 'stop', 'manual', 0);
         INSERT INTO sends (account_id, campaign_id, subscriber_id, job_id, address, vars, status,
                            visible_at, created_at, updated_at)
           VALUES (1, 2, 20, '{}', '{NFC}', '{{}}', 'queued', 0, 0, 0),
                  (1, 2, 21, '{}', '{NFD}', '{{}}', 'queued', 0, 0, 0);",
        job(20),
        job(21)
    )
}

/// What the address step must have done to [`old_rows`], read with `query` (one value per
/// row, `|`-separated columns, as psql -At prints them).
fn assert_normalised(store: &str, query: &dyn Fn(&str) -> String) {
    let q = |sql: &str| query(sql).trim().to_string();
    // 20 kept (it held the normal form) and took 21's opt-out, as status and as a suppression.
    assert_eq!(
        q(
            "SELECT email_norm || '|' || status || '|' || CASE WHEN removed_at IS NULL
           THEN 'live' ELSE 'removed' END FROM subscribers WHERE id = 20"
        ),
        format!("{NFC}|unsubscribed|live"),
        "{store}"
    );
    assert_eq!(
        q("SELECT count(*) FROM subscribers WHERE id = 21 AND removed_at IS NOT NULL"),
        "1",
        "{store}"
    );
    assert_eq!(
        q("SELECT status FROM list_members WHERE list_id = 1 AND subscriber_id = 20"),
        "unsubscribed",
        "{store}"
    );
    assert_eq!(
        q("SELECT count(*) FROM list_members WHERE subscriber_id = 21"),
        "0",
        "{store}"
    );
    assert_eq!(
        q(&format!(
            "SELECT source FROM suppressions WHERE channel = 'email' AND address = '{NFC}'"
        )),
        "upgrade",
        "{store}"
    );
    assert_eq!(
        q("SELECT phone FROM subscribers WHERE id = 22"),
        "+442079460000",
        "{store}"
    );
    assert_eq!(
        q("SELECT email_norm FROM subscribers WHERE id = 23"),
        "a\u{200b}b@acme.example",
        "{store}"
    );
    // 21's queued send went to the same person as 20's: cancelled.
    assert_eq!(
        q("SELECT status FROM sends WHERE campaign_id = 2 AND subscriber_id = 21"),
        "cancelled",
        "{store}"
    );
    assert_eq!(
        q("SELECT kind || ':' || count(*) FROM address_collisions GROUP BY kind ORDER BY kind"),
        "invalid:1\nsend:1\nsubscriber:1",
        "{store}"
    );
}

fn fixture(n: i64) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/schema-{n:02}.db"))
}

/// The SQLite upgrade from schema 16: rows normalised in the upgrade, collisions resolved for
/// the opt-out and recorded, `doctor` reports them, and the next run sends nothing to the
/// person who opted out.
#[test]
fn the_sqlite_upgrade_normalises_stored_rows_and_an_opt_out_wins() {
    let env = Env::new();
    std::fs::copy(fixture(16), &env.db).expect("copy the fixture");
    let job = |s| format!("campaign:2:sub:{s}@0123456789abcdef");
    env.sqlite()
        .execute_batch(&old_rows(&job))
        .expect("old rows");
    let init = json_of(&env.ok(&["--json", "init"]));
    assert_eq!(
        init["schema_version"],
        sendonce::store::SCHEMA_VERSION,
        "{init}"
    );
    let query = |sql: &str| {
        let c = env.sqlite();
        let mut st = c.prepare(sql).expect(sql);
        let rows: Vec<String> = st
            .query_map([], |r| r.get::<_, rusqlite::types::Value>(0))
            .expect(sql)
            .map(|v| match v.expect("row") {
                rusqlite::types::Value::Integer(n) => n.to_string(),
                rusqlite::types::Value::Text(t) => t,
                other => format!("{other:?}"),
            })
            .collect();
        rows.join("\n")
    };
    assert_normalised("sqlite", &query);
    assert_eq!(env.count("SELECT count(*) FROM pending_steps"), 0);
    env.assert_counters();
    let doctor = json_of(&env.run(&["--json", "doctor"]).stdout);
    let found = doctor["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "addresses")
        .unwrap_or_else(|| panic!("no addresses finding: {doctor}"))
        .clone();
    assert_eq!(found["level"], "ok", "{found}");
    let detail = found["detail"].as_str().unwrap();
    for part in ["1 invalid", "1 send", "1 subscriber", "address_collisions"] {
        assert!(detail.contains(part), "{detail}");
    }
    let outbox = env.path("out.jsonl");
    let spec = format!("outbox:{}", outbox.display());
    // Exit 3: the fixture's row in doubt still needs a decision; everything else is settled.
    let r = env.run(&["run", "--once", "--provider", &spec, "--tick", "20ms"]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    let sent = std::fs::read_to_string(&outbox).unwrap_or_default();
    assert!(
        !sent.contains("acme.example"),
        "sent to the person who opted out:\n{sent}"
    );
    assert_eq!(
        query("SELECT status FROM sends WHERE campaign_id = 2 AND subscriber_id = 20"),
        "suppressed"
    );
}

/// The PostgreSQL upgrade to its schema 4 does the same to the same rows, inside the migration.
#[cfg(feature = "tier1")]
#[test]
fn the_postgres_upgrade_normalises_stored_rows_the_same_way() {
    let c = pg::shared();
    let url = c.fresh_url();
    let db = pg::db_name(&url);
    let env = Env {
        dir: tempfile::tempdir().expect("tempdir"),
        db: PathBuf::from(&url),
    };
    env.setup_account();
    let body = env.write("body.txt", "Hello\n");
    for n in 1..=2 {
        env.ok(&[
            "campaign",
            "create",
            "--account",
            "acme",
            "--name",
            &format!("c{n}"),
            "--channel",
            "email",
            "--from",
            "news@example.org",
            "--subject",
            "Hi",
            "--body-file",
            body.to_str().unwrap(),
        ]);
    }
    env.ok(&["list", "create", "--account", "acme", "news"]);
    // Back to schema 3 (what 4 and every later migration added undone), then the rows a
    // binary of schema 3 could have written.
    c.psql(
        &db,
        &format!(
            "{} {} {} {} DROP TABLE address_collisions; ALTER TABLE admins DROP COLUMN role;
             ALTER TABLE webhook_events DROP COLUMN provider_message_id;
             DELETE FROM sendonce_schema WHERE version >= 4",
            pg::UNDO_0013,
            pg::UNDO_0012,
            pg::UNDO_0011,
            pg::UNDO_0007
        ),
    );
    let job = |s| format!("campaign:2:sub:{s}");
    c.psql(&db, &old_rows(&job));
    env.ok(&["init"]);
    assert_eq!(
        c.psql(&db, "SELECT max(version) FROM sendonce_schema")
            .trim(),
        sendonce::store::postgres::SCHEMA_VERSION.to_string()
    );
    assert_normalised("postgres", &|sql| c.psql(&db, sql));
}

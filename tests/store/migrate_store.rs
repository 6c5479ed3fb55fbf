//! `sendonce migrate-store` (issue 17): a SQLite file with a campaign half-sent (some sent, a
//! worker killed with rows leased, one in doubt, suppressions, a list, a token) copied into an
//! empty PostgreSQL database; a worker on PostgreSQL finishes the campaign against the fake
//! provider with nobody messaged twice; the moved file refuses workers; the refusals (file
//! held by a worker, non-empty target) write nothing; the password is never shown or stored.
// Some tests here need tools outside Rust (tier 1); without them their helpers go unused.
#![cfg_attr(not(feature = "tier1"), allow(unused_imports, dead_code))]

use crate::common::{self, pg, Env, Fake, Run};
use sendonce::store::prelude::*;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PASSWORD: &str = "hunter2-Secret";

/// `url` with a password (the throwaway cluster trusts the socket: it is ignored there).
fn with_password(url: &str) -> String {
    url.replacen("://sendonce@", &format!("://sendonce:{PASSWORD}@"), 1)
}

/// The binary on `db` (a file or a URL) with the test environment of `Env::cmd`.
fn sendonce(db: &str) -> Command {
    let mut c = Command::new(common::BIN);
    c.arg("--db")
        .arg(db)
        .env_remove("SENDONCE_DB")
        .env_remove("SENDONCE_CRASH_AT")
        .env("SENDONCE_PUBLIC_URL", common::TEST_PUBLIC_URL)
        .env(
            "SENDONCE_UNSUBSCRIBE_SECRET",
            common::TEST_UNSUBSCRIBE_SECRET,
        )
        .env("SENDONCE_RESEND_API_KEY", "re_test_key");
    c
}

fn run(db: &str, args: &[&str]) -> Run {
    Run::from(sendonce(db).args(args).output().expect("run sendonce"))
}

/// `migrate-store --from FILE` with the target (and its password) in SENDONCE_DB only.
fn migrate(from: &Path, to: &str) -> Run {
    Run::from(
        Command::new(common::BIN)
            .args(["--json", "migrate-store", "--from"])
            .arg(from)
            .env("SENDONCE_DB", to)
            .output()
            .expect("run migrate-store"),
    )
}

fn spec(fake: &Fake) -> String {
    format!(
        "resend:?base_url={}&from=news@example.com&timeout=2s",
        fake.base()
    )
}

fn db_name(url: &str) -> String {
    url.split('/')
        .nth(3)
        .unwrap()
        .split('?')
        .next()
        .unwrap()
        .to_string()
}

/// A file with campaign 1 to 12 addresses half-sent: a worker killed -9 while calls were in
/// flight (its leases expire 2 s later), one more row leased by a dead worker without a
/// dispatch marker, one in doubt, a suppressed address, a list, a token. Returns (env, campaign).
fn half_sent(fake: &Fake) -> (Env, String) {
    let env = Env::new();
    let (acct, cid) = env.setup_campaign(12);
    env.ok(&["list", "create", "--account", &acct, "news"]);
    let csv = env.path("subs.csv");
    env.ok(&[
        "subscriber",
        "import",
        "--account",
        &acct,
        "--list",
        "news",
        csv.to_str().unwrap(),
    ]);
    env.ok(&["token", "create", "--account", &acct]);
    env.ok(&[
        "suppress",
        "add",
        "--account",
        &acct,
        "--channel",
        "email",
        "user11@example.com",
    ]);
    env.ok(&["campaign", "approve", &cid]);
    let db = env.db.to_str().unwrap().to_string();
    let spec = spec(fake);
    let mut worker = sendonce(&db)
        .args([
            "run",
            "--provider",
            &spec,
            "--concurrency",
            "2",
            "--batch",
            "2",
            "--tick",
            "20ms",
            "--lease",
            "2s",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the worker");
    let deadline = Instant::now() + Duration::from_secs(30);
    while common::deliveries(&fake.log).len() < 4 {
        assert!(Instant::now() < deadline, "the worker sent nothing in 30 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    worker.kill().expect("kill -9 the worker");
    worker.wait().unwrap();
    // One queued row in doubt (called, outcome unknown), one leased by a dead worker that
    // never called (expired lease, no dispatch marker).
    let c = env.sqlite();
    let queued: Vec<i64> = c
        .prepare("SELECT id FROM sends WHERE status = 'queued' ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(
        queued.len() >= 2,
        "the campaign is not half-sent: {queued:?}"
    );
    c.execute(
        "UPDATE sends SET status = 'in_doubt', attempts = attempts + 1, dispatched_at = 1,
                          doubt_since = 1, last_error = 'timeout' WHERE id = ?1",
        [queued[0]],
    )
    .unwrap();
    c.execute(
        "UPDATE sends SET status = 'leased', lease_token = 987654321, lease_owner = 'dead',
                          claimed_at = 1, visible_at = 2 WHERE id = ?1",
        [queued[1]],
    )
    .unwrap();
    an_api_message_with_a_template_and_a_file(&env);
    (env, cid)
}

/// A message of the account's stream rendered from a stored template, with one file: the move
/// carries the template, the content and the file's bytes.
fn an_api_message_with_a_template_and_a_file(env: &Env) {
    use sendonce::store::prelude::*;
    use sendonce::store::{NewMessage, NewTemplate};
    let opts = sendonce::store::OpenOptions::default();
    let s = sendonce::store::open(&sendonce::store::Target::File(env.db.clone()), &opts).unwrap();
    let acct = s.resolve_account("acme").unwrap();
    let t = s
        .save_template(&NewTemplate {
            account_id: acct,
            name: "receipt",
            subject: Some("Receipt"),
            text: Some("Paid {{ amount }}"),
            html: None,
            now: 1,
        })
        .unwrap();
    let file = sendonce::domain::attachment::decode("r.bin", None, "AP8=", None).unwrap();
    s.submit_message(&NewMessage {
        account_id: acct,
        idempotency_key: "moved-1",
        request_hash: "h",
        channel: sendonce::domain::address::Channel::Email,
        to: "kim@example.org",
        from: Some("shop@example.org"),
        reply_to: None,
        subject: Some("Receipt"),
        text: "Paid 3",
        html: None,
        template: Some(&t),
        attachments: &[file],
        metadata: None,
        now: 1,
        answer: None,
    })
    .unwrap();
}

/// Rows per status, and the non-empty tables' counts, on the SQLite file.
fn sqlite_counts(env: &Env) -> Value {
    let c = env.sqlite();
    let mut out = serde_json::Map::new();
    for t in [
        "accounts",
        "subscribers",
        "campaigns",
        "sends",
        "suppressions",
        "lists",
        "list_members",
        "api_tokens",
        "guard_epochs",
        "templates",
        "message_contents",
        "message_attachments",
    ] {
        let n: i64 = c
            .query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))
            .unwrap();
        out.insert(t.to_string(), n.into());
    }
    Value::Object(out)
}

#[cfg(feature = "tier1")]
#[test]
fn a_half_sent_campaign_moves_and_finishes_on_postgres_without_a_duplicate() {
    let cluster = pg::shared();
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::start(
        &dir.path().join("fake.jsonl"),
        &["--latency", "300ms..300ms"],
    );
    let moved = half_sent_and_migrated(cluster, &fake);
    the_same_rows_are_on_postgres(cluster, &moved);
    let again = the_moved_file_refuses_workers_writes_and_a_second_move(cluster, &fake, &moved);
    let r = a_worker_on_postgres_finishes_the_campaign(cluster, &fake, &moved);
    the_password_is_nowhere(&r, &again, &moved.env);
}

/// The half-sent file and where it was moved to.
struct Moved {
    env: Env,
    cid: String,
    /// The PostgreSQL URL, with the password.
    url: String,
    db: String,
    installation: String,
}

/// A half-sent file moved to a new database (its URL given a password): every row is counted.
fn half_sent_and_migrated(cluster: &pg::PgCluster, fake: &Fake) -> Moved {
    let (env, cid) = half_sent(fake);
    let before = sqlite_counts(&env);
    let installation = env
        .sqlite()
        .query_row("SELECT id FROM installation", [], |r| r.get::<_, String>(0))
        .unwrap();
    let url = with_password(&cluster.fresh_url());
    let r = migrate(&env.db, &url);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let doc: Value = serde_json::from_str(&r.stdout).expect("one JSON document");
    assert_eq!(doc["store"], "postgres", "{doc}");
    assert_eq!(doc["installation"], installation.as_str(), "{doc}");
    for (t, n) in before.as_object().unwrap() {
        assert_eq!(&doc["rows"][t], n, "{t}: {doc}");
    }
    let db = db_name(&url);
    Moved {
        env,
        cid,
        url,
        db,
        installation,
    }
}

/// The same rows on PostgreSQL, by status, the same installation id, and new ids past the old.
fn the_same_rows_are_on_postgres(cluster: &pg::PgCluster, moved: &Moved) {
    let Moved {
        env,
        db,
        installation,
        ..
    } = moved;
    let by_status = "SELECT string_agg(status || '=' || n, ',' ORDER BY status) FROM \
                     (SELECT status, count(*) AS n FROM sends GROUP BY status) s";
    let sqlite_status: String = env
        .sqlite()
        .query_row(
            "SELECT group_concat(status || '=' || n, ',') FROM \
             (SELECT status, count(*) AS n FROM sends GROUP BY status ORDER BY status)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(cluster.psql(db, by_status).trim(), sqlite_status);
    assert!(sqlite_status.contains("in_doubt=1"), "{sqlite_status}");
    assert!(sqlite_status.contains("leased="), "{sqlite_status}");
    assert_eq!(
        cluster.psql(db, "SELECT id FROM installation").trim(),
        installation
    );
    let file = "SELECT encode(data, 'hex') || ' ' || t.name FROM message_attachments a \
                JOIN message_contents c ON c.id = a.message_id JOIN templates t ON t.id = c.template_id";
    assert_eq!(cluster.psql(db, file).trim(), "00ff receipt");
    // New ids continue past the copied ones.
    let max_sub: i64 = env.count("SELECT max(id) FROM subscribers");
    let next: i64 = cluster
        .psql(
            db,
            "SELECT nextval(pg_get_serial_sequence('subscribers', 'id'))",
        )
        .trim()
        .parse()
        .unwrap();
    assert!(next > max_sub, "{next} <= {max_sub}");
}

/// The moved file refuses a worker, an opt-out and a second move, and still reads its status.
fn the_moved_file_refuses_workers_writes_and_a_second_move(
    cluster: &pg::PgCluster,
    fake: &Fake,
    moved: &Moved,
) -> Run {
    let Moved { env, cid, .. } = moved;
    // The moved file: a worker refuses it (exit 5) and sends nothing; status still reads it.
    let file = env.db.to_str().unwrap().to_string();
    let sent_before = common::deliveries(&fake.log).len();
    let r = run(&file, &["run", "--once", "--provider", &spec(fake)]);
    assert_eq!(r.code, 5, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("was moved to"), "{}", r.stderr);
    assert!(
        r.stderr.contains("--db postgres://sendonce@"),
        "{}",
        r.stderr
    );
    assert_eq!(common::deliveries(&fake.log).len(), sent_before);
    let st = run(&file, &["campaign", "status", cid]);
    assert_eq!(st.code, 0, "{}", st.stderr);
    // Nothing else writes to it either: an opt-out written here would never reach the store
    // that sends now.
    let rows = |sql: &str| -> i64 {
        let c = rusqlite::Connection::open(&env.db).unwrap();
        c.query_row(sql, [], |r| r.get(0)).unwrap()
    };
    let suppressed = rows("SELECT count(*) FROM suppressions");
    let opt_out = run(
        &file,
        &[
            "suppress",
            "add",
            "--account",
            "1",
            "--channel",
            "email",
            "late@example.com",
        ],
    );
    assert_eq!(opt_out.code, 5, "{}{}", opt_out.stdout, opt_out.stderr);
    assert!(
        opt_out.stderr.contains("was moved to"),
        "{}",
        opt_out.stderr
    );
    assert_eq!(rows("SELECT count(*) FROM suppressions"), suppressed);
    // Migrating it again is refused: it was moved.
    let again = migrate(&env.db, &with_password(&cluster.fresh_url()));
    assert_eq!(again.code, 5, "{}", again.stderr);
    assert!(again.stderr.contains("was moved to"), "{}", again.stderr);
    again
}

/// Once the killed worker's leases expire, a worker on PostgreSQL finishes with no duplicate.
fn a_worker_on_postgres_finishes_the_campaign(
    cluster: &pg::PgCluster,
    fake: &Fake,
    moved: &Moved,
) -> Run {
    let Moved { cid, url, db, .. } = moved;
    std::thread::sleep(Duration::from_secs(2));
    let r = run(
        url,
        &["run", "--once", "--tick", "20ms", "--provider", &spec(fake)],
    );
    assert_eq!(
        r.code, 3,
        "ends with the row in doubt: {}{}",
        r.stdout, r.stderr
    );
    let log = fake.log.to_str().unwrap().to_string();
    let check = run(url, &["--json", "check", "--campaign", cid, "--log", &log]);
    let verdict: Value = serde_json::from_str(&check.stdout)
        .unwrap_or_else(|_| panic!("{}{}", check.stdout, check.stderr));
    assert_eq!(check.code, 0, "{verdict}");
    assert_eq!(verdict["pass"], true, "{verdict}");
    assert_eq!(verdict["duplicated"], 0, "{verdict}");
    assert_eq!(verdict["lost"], 0, "{verdict}");
    assert_eq!(verdict["unexpected"], 0, "{verdict}");
    assert!(verdict["in_doubt"].as_u64().unwrap() >= 1, "{verdict}");
    assert!(verdict["delivered"].as_u64().unwrap() >= 4, "{verdict}");
    assert_eq!(
        cluster
            .psql(
                db,
                "SELECT count(*) FROM sends WHERE status IN ('queued', 'leased')"
            )
            .trim(),
        "0",
        "the campaign is finished"
    );
    r
}

/// The password is nowhere: the worker's and the refused move's output, the file, its WAL.
fn the_password_is_nowhere(r: &Run, again: &Run, env: &Env) {
    for text in [&r.stdout, &r.stderr, &again.stdout, &again.stderr] {
        assert!(!text.contains(PASSWORD), "{text}");
    }
    let bytes = std::fs::read(&env.db).unwrap();
    let wal = std::fs::read(format!("{}-wal", env.db.display())).unwrap_or_default();
    for b in [&bytes, &wal] {
        assert!(
            !b.windows(PASSWORD.len()).any(|w| w == PASSWORD.as_bytes()),
            "the password is in the SQLite file"
        );
    }
}

#[cfg(feature = "tier1")]
#[test]
fn a_file_a_worker_holds_and_a_non_empty_target_are_refused_with_nothing_written() {
    let cluster = pg::shared();
    let env = Env::new();
    env.setup_campaign(3);
    // A running worker (idle: nothing approved) holds the file open for writing.
    let outbox = env.path("outbox.jsonl");
    let spec = format!("outbox:{}", outbox.display());
    let mut holder = sendonce(env.db.to_str().unwrap())
        .args(["run", "--provider", &spec, "--tick", "20ms"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the worker");
    let deadline = Instant::now() + Duration::from_secs(20);
    let fd_dir = format!("/proc/{}/fd", holder.id());
    let holds = || {
        std::fs::read_dir(&fd_dir)
            .map(|d| {
                d.flatten()
                    .any(|e| std::fs::read_link(e.path()).ok() == Some(env.db.clone()))
            })
            .unwrap_or(false)
    };
    while !holds() {
        assert!(
            Instant::now() < deadline,
            "the worker never opened the file"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let url = with_password(&cluster.fresh_url());
    let db = db_name(&url);
    let r = migrate(&env.db, &url);
    let _ = holder.kill();
    let _ = holder.wait();
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(r.stderr.contains("open for writing"), "{}", r.stderr);
    assert!(!r.stderr.contains(PASSWORD), "{}", r.stderr);
    // Refused before the target was even opened: not a table was made there.
    assert_eq!(
        cluster
            .psql(
                &db,
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
            )
            .trim(),
        "0"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM guard WHERE moved_to IS NULL"),
        1
    );

    // A target with a row in it: refused, naming the table; nothing written on either side.
    let busy = with_password(&cluster.fresh_url());
    let busy_db = db_name(&busy);
    let r = run(&busy, &["init"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = run(&busy, &["account", "add", "other"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = migrate(&env.db, &busy);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("table accounts has rows"), "{}", r.stderr);
    assert!(!r.stderr.contains(PASSWORD), "{}", r.stderr);
    assert_eq!(
        cluster
            .psql(&busy_db, "SELECT string_agg(name, ',') FROM accounts")
            .trim(),
        "other"
    );
    assert_eq!(
        cluster
            .psql(&busy_db, "SELECT count(*) FROM subscribers")
            .trim(),
        "0"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM guard WHERE moved_to IS NULL"),
        1
    );
    // And then into the empty one it works.
    let r = migrate(&env.db, &url);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(
        cluster.psql(&db, "SELECT count(*) FROM subscribers").trim(),
        "3"
    );
    assert!(!r.stdout.contains(PASSWORD), "{}", r.stdout);
}

/// A worker already running on the file when it is marked as moved (here by another
/// connection) claims nothing more: the claim transaction's owner check refuses it.
#[test]
fn a_running_worker_claims_nothing_once_the_file_is_marked_as_moved() {
    use sendonce::store::{ClaimRequest, OpenOptions};
    let env = Env::new();
    let opts = OpenOptions {
        create: true,
        ..Default::default()
    };
    let s = sendonce::store::open(&sendonce::store::Target::File(env.db.clone()), &opts).unwrap();
    let (acct, cid) = common::started_campaign(&*s, 6);
    while !s.build_list_chunk(cid, 7).unwrap() {}
    let req = |token: i64| ClaimRequest {
        campaign_id: cid,
        account_id: acct,
        channel: sendonce::domain::address::Channel::Email,
        batch: 2,
        lease_ms: 60_000,
        token,
        owner: format!("w{token}"),
        key_window_ms: None,
        now: sendonce::domain::clock::now_ms(),
    };
    assert_eq!(s.claim(&req(1)).unwrap().rows.len(), 2);
    env.sqlite()
        .execute(
            "UPDATE guard SET moved_to = 'postgres://sendonce@db.example.org/mail', \
             moved_at = 1767225600000",
            [],
        )
        .unwrap();
    let e = s.claim(&req(2)).unwrap_err();
    assert_eq!(e.kind, sendonce::error::ErrorKind::Guarded, "{}", e.message);
    assert!(
        e.message
            .contains("--db postgres://sendonce@db.example.org/mail"),
        "{}",
        e.message
    );
    assert_eq!(sendonce::exit::for_error(&e), 5);
    let leased = s.status_counts(cid).unwrap().counts.get("leased").copied();
    assert_eq!(leased, Some(2), "nothing of the refused claim committed");
    // The guard says so too (what `run` and `doctor` check before the first claim).
    let why = sendonce::app::guard::refusal(&s.guard_state().unwrap()).expect("a refusal");
    assert!(
        why.contains("was moved to postgres://sendonce@db.example.org/mail"),
        "{why}"
    );
}

#[test]
fn the_moved_marker_and_the_output_keep_no_password() {
    use sendonce::store::postgres::without_password;
    assert_eq!(
        without_password("postgres://u:p%40ss@h:5432/db?sslmode=require"),
        "postgres://u@h:5432/db?sslmode=require"
    );
    assert_eq!(
        without_password("postgresql://u@h/db?password=pw&host=/run/pg"),
        "postgresql://u@h/db?host=/run/pg"
    );
    assert_eq!(
        without_password("postgres://u@h/db?password=pw"),
        "postgres://u@h/db"
    );
}

/// A list removed before the move keeps its id to itself after it, as SQLite's `AUTOINCREMENT`
/// does: the next list made on PostgreSQL gets a new id, not the removed one's (a draft or an
/// old link that still names it must not reach the new list).
#[cfg(feature = "tier1")]
#[test]
fn ids_of_removed_lists_are_not_given_again_after_the_move() {
    let cluster = pg::shared();
    let env = Env::new();
    let acct = env.setup_account();
    for name in ["kept", "gone"] {
        env.ok(&["list", "create", "--account", &acct, name]);
    }
    env.ok(&["list", "remove", "--account", &acct, "gone"]);
    let url = with_password(&cluster.fresh_url());
    let r = migrate(&env.db, &url);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let made = Run::from(
        sendonce(&url)
            .args(["list", "create", "--account", &acct, "new"])
            .output()
            .expect("run sendonce"),
    );
    assert_eq!(made.code, 0, "{}", made.stderr);
    assert_eq!(
        made.stdout.trim(),
        "3",
        "the removed list's id 2 was given again"
    );
}

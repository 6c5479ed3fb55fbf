//! Regression tests for defects that sent twice, lost messages or crashed: a damaged file, keys
//! shared between databases, files that are not ours, content that would fail every recipient,
//! spreadsheet formulas in reports, and panics reachable from the command line.

use crate::common;
use crate::common::Env;
use sendonce::store::prelude::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Run a command with a deadline; returns (exit code or None if it had to be killed, stderr).
fn run_with_deadline(mut cmd: Command, limit: Duration) -> (Option<i32>, String) {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stderr = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        use std::io::Read;
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let code = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st.code();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (code, reader.join().unwrap_or_default())
}

/// An approved email campaign to `n` subscribers with its recipient list built, the file
/// closed (WAL checkpointed into the main file). Returns the campaign id.
fn built_campaign(env: &Env, n: usize) -> i64 {
    let (_acct, cid) = env.setup_campaign(n);
    env.ok(&["campaign", "approve", &cid]);
    let cid: i64 = cid.parse().unwrap();
    // One connection: with more, the pool may open a spare in the background while the list
    // is built, and that late connection would still hold the file when we look at the WAL.
    let one = sendonce::store::OpenOptions {
        pool_size: 1,
        ..Default::default()
    };
    let store =
        sendonce::store::open(&sendonce::store::Target::File(env.db.clone()), &one).unwrap();
    store
        .start_due_campaigns(sendonce::domain::clock::now_ms())
        .unwrap();
    while !store.build_list_chunk(cid, 1000).unwrap() {}
    drop(store);
    // The pool's last connection may be dropped by r2d2's own thread a moment after the store
    // (it holds the pool while a maintenance task runs): the checkpoint on close follows it.
    let wal = env.path("t.db-wal");
    let checkpointed = || !wal.exists() || std::fs::metadata(&wal).map_or(true, |m| m.len() == 0);
    let start = Instant::now();
    while !checkpointed() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(checkpointed(), "the WAL should be checkpointed on close");
    cid
}

/// A flipped byte turns one row's status `queued` into `quyued` while its claim-index entry
/// stays. The worker must stop with a message about damage, and send nothing twice (before the
/// fix it sent that row thousands of times, never stopping).
#[test]
fn a_damaged_status_stops_the_worker_and_sends_nothing_twice() {
    let env = Env::new();
    let cid = built_campaign(&env, 5);
    let mut bytes = std::fs::read(&env.db).unwrap();
    let job = format!("campaign:{cid}:sub:3@");
    let at = bytes
        .windows(job.len())
        .position(|w| w == job.as_bytes())
        .expect("the row's job id is in the file");
    let rel = bytes[at..(at + 600).min(bytes.len())]
        .windows(6)
        .position(|w| w == b"queued")
        .expect("the row's status follows its job id");
    bytes[at + rel + 2] = b'y';
    std::fs::write(&env.db, &bytes).unwrap();
    let damaged: i64 = env.count("SELECT count(*) FROM sends WHERE status = 'quyued'");
    assert_eq!(damaged, 1, "the probe damaged exactly one row");

    let outbox = env.path("out.jsonl");
    // The check before the first claim finds it: nothing is sent, exit 5.
    let mut cmd = env.cmd();
    cmd.args(["run", "--once", "--tick", "20ms", "--provider"])
        .arg(format!("outbox:{}", outbox.display()));
    let (code, stderr) = run_with_deadline(cmd, Duration::from_secs(20));
    assert_eq!(code, Some(5), "{stderr}");
    assert!(
        stderr.contains("damaged") && stderr.contains("quick_check"),
        "{stderr}"
    );
    assert!(common::deliveries(&outbox).is_empty());
    // Without that check (a file above its size limit), the claim finds it.
    let mut cmd = env.cmd();
    cmd.env(sendonce::app::guard::START_CHECK_ENV, "0");
    cmd.args(["run", "--once", "--tick", "20ms", "--provider"])
        .arg(format!("outbox:{}", outbox.display()));
    let (code, stderr) = run_with_deadline(cmd, Duration::from_secs(20));
    let per_job = common::deliveries(&outbox);
    let worst = per_job.values().copied().max().unwrap_or(0);
    assert!(worst <= 1, "a message was sent {worst} times: {per_job:?}");
    assert_eq!(code, Some(1), "the worker must stop by itself: {stderr}");
    assert!(
        stderr.contains("damaged") && stderr.contains("integrity_check"),
        "{stderr}"
    );
}

/// Flip the status byte of one row (`queued` -> `quyued`), leaving its claim-index entry.
fn damage_status(env: &Env, cid: i64, sub: usize) {
    let mut bytes = std::fs::read(&env.db).unwrap();
    let job = format!("campaign:{cid}:sub:{sub}@");
    let at = bytes
        .windows(job.len())
        .position(|w| w == job.as_bytes())
        .expect("the row's job id is in the file");
    let end = (at + 600).min(bytes.len());
    let rel = bytes[at..end]
        .windows(6)
        .position(|w| w == b"queued")
        .expect("the row's status follows its job id");
    bytes[at + rel + 2] = b'y';
    std::fs::write(&env.db, &bytes).unwrap();
}

/// `run --once` with four calls at a time, so that damage meets calls in flight (the check
/// before the first claim is off, so that the claim meets it).
fn small_batches(env: &Env, provider: &str) -> Command {
    let mut cmd = env.cmd();
    cmd.env(sendonce::app::guard::START_CHECK_ENV, "0");
    cmd.args(["run", "--once", "--tick", "20ms", "--batch", "4"])
        .args(["--concurrency", "4", "--provider", provider]);
    cmd
}

/// Damage met mid-campaign: the worker stops claiming, but what it already sent is recorded
/// (the outcomes that shared the failing claim's transaction are committed on their own, and
/// the calls in flight finish first), so the ledger matches the provider exactly.
#[test]
fn damage_mid_campaign_still_records_every_delivery() {
    let env = Env::new();
    let cid = built_campaign(&env, 40);
    damage_status(&env, cid, 30);
    let outbox = env.path("out.jsonl");
    let cmd = small_batches(
        &env,
        &format!("outbox:{}?idempotent=false", outbox.display()),
    );
    let (code, stderr) = run_with_deadline(cmd, Duration::from_secs(30));
    assert_eq!(code, Some(1), "{stderr}");
    let delivered = common::deliveries(&outbox);
    assert!(delivered.values().all(|&n| n == 1), "{delivered:?}");
    assert!(
        !delivered.is_empty() && delivered.len() < 40,
        "{delivered:?}"
    );
    let sent = env.count("SELECT count(*) FROM sends WHERE status = 'sent'");
    assert_eq!(
        sent as usize,
        delivered.len(),
        "every delivery is recorded as sent"
    );
    let leased = env.count("SELECT count(*) FROM sends WHERE status = 'leased'");
    assert_eq!(leased, 0, "no call was left without its outcome");
}

/// Damage that maintenance meets (a campaign's channel no longer one we know) stops the
/// worker like a claim's damage does: the calls already in flight finish and are recorded, so
/// no row is left leased with its outcome lost.
#[test]
fn damage_found_by_maintenance_still_records_the_calls_in_flight() {
    let env = Env::new();
    let cid = built_campaign(&env, 40);
    let mut cmd = small_batches(&env, "null?latency=700ms");
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn run");
    let started = Instant::now();
    while env.count("SELECT count(*) FROM sends WHERE status = 'leased'") == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no row was ever leased"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The damage: a value the CHECK constraint and the content trigger would refuse.
    env.sqlite()
        .execute_batch(&format!(
            "PRAGMA ignore_check_constraints = ON;
         DROP TRIGGER campaigns_content_frozen;
         UPDATE campaigns SET channel = 'fax' WHERE id = {cid};"
        ))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "the worker did not stop on damage"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("campaigns.channel holds \"fax\""),
        "{stderr}"
    );
    let leased = env.count("SELECT count(*) FROM sends WHERE status = 'leased'");
    assert_eq!(
        leased, 0,
        "calls in flight were dropped without their outcome: {stderr}"
    );
    let sent = env.count("SELECT count(*) FROM sends WHERE status = 'sent'");
    assert!((1..40).contains(&sent), "sent {sent}: {stderr}");
}

/// Two fresh databases both start at campaign 1, subscriber 1. Sharing one provider (here one
/// outbox, which honours idempotency keys like Resend does), the second must really deliver,
/// not be answered as a replay of the first. A copy of a file keeps its installation id.
#[test]
fn two_databases_never_share_an_idempotency_key() {
    let outbox = tempfile::tempdir().unwrap();
    let outbox = outbox.path().join("shared.jsonl");
    let spec = format!("outbox:{}", outbox.display());
    let mut ids = Vec::new();
    for _ in 0..2 {
        let env = Env::new();
        let (_a, cid) = env.setup_campaign(1);
        env.ok(&["campaign", "approve", &cid]);
        env.ok(&["run", "--once", "--tick", "20ms", "--provider", &spec]);
        let doc: serde_json::Value = serde_json::from_str(&env.ok(&["--json", "init"])).unwrap();
        ids.push(doc["installation_id"].as_str().unwrap().to_string());
        let copy = env.path("copy.db");
        std::fs::copy(&env.db, &copy).unwrap();
        let r = common::Run::from(
            Command::new(common::BIN)
                .args(["--json", "--db"])
                .arg(&copy)
                .arg("init")
                .output()
                .unwrap(),
        );
        let copied: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
        assert_eq!(copied["installation_id"], doc["installation_id"]);
    }
    assert_ne!(ids[0], ids[1]);
    let lines = sendonce::provider::deliverylog::read_lines(&outbox).unwrap();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines.iter().all(|l| !l.replay), "{lines:?}");
    assert_ne!(lines[0].idempotency_key, lines[1].idempotency_key);
}

#[test]
fn an_empty_file_is_not_a_database() {
    let env = Env::new();
    std::fs::write(&env.db, b"").unwrap();
    for args in [
        &["run", "--once", "--provider", "null"][..],
        &["campaign", "status", "1"],
        &["account", "add", "x"],
    ] {
        let r = env.run(args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains("empty file"), "{}", r.stderr);
        assert_eq!(std::fs::metadata(&env.db).unwrap().len(), 0, "{args:?}");
    }
    env.ok(&["init"]);
    env.ok(&["account", "add", "x"]);
}

/// Another application's SQLite file is refused by every command, byte for byte unchanged.
#[test]
fn another_sqlite_file_is_refused_and_left_unchanged() {
    let env = Env::new();
    {
        let c = rusqlite::Connection::open(&env.db).unwrap();
        c.execute_batch("CREATE TABLE notes (t TEXT); INSERT INTO notes VALUES ('mine');")
            .unwrap();
    }
    let before = std::fs::read(&env.db).unwrap();
    for args in [
        &["campaign", "status", "1"][..],
        &["campaign", "report", "1"],
        &["account", "add", "x"],
        &["init"],
        &["run", "--once", "--provider", "null"],
    ] {
        let r = env.run(args);
        assert_eq!(r.code, 1, "{args:?}: {}", r.stderr);
        assert!(
            r.stderr.contains("not a sendonce database")
                && r.stderr.contains("nothing was changed"),
            "{}",
            r.stderr
        );
        assert_eq!(
            std::fs::read(&env.db).unwrap(),
            before,
            "{args:?} changed the file"
        );
        assert!(!env.path("t.db-wal").exists(), "{args:?}");
    }
    // Ours carry the mark.
    let ours = Env::new();
    ours.ok(&["init"]);
    let id: i64 = ours.count("PRAGMA application_id");
    assert_eq!(id, sendonce::store::APPLICATION_ID);
}

/// Reports work on a file the user can only read (not its directory either): run as `nobody`
/// when the tests run as root, else with the write bits removed.
#[test]
fn read_only_commands_work_on_a_read_only_file() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    let cid = built_campaign(&env, 3);
    let dir = env.path("ro");
    std::fs::create_dir(&dir).unwrap();
    let db = dir.join("t.db");
    std::fs::copy(&env.db, &db).unwrap();
    let bin = env.path("sendonce");
    std::fs::copy(common::BIN, &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o444)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    std::fs::set_permissions(env.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = unsafe { libc::geteuid() } == 0;
    let run = |args: &[&str]| {
        let mut c = if root {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
            c.arg(&bin);
            c
        } else {
            Command::new(&bin)
        };
        c.arg("--db").arg(&db).args(args);
        common::Run::from(c.output().expect("run sendonce read-only"))
    };
    let before = std::fs::read(&db).unwrap();
    let cid = cid.to_string();
    let r = run(&["--json", "campaign", "status", &cid]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(doc["queued"], 3);
    let r = run(&["campaign", "report", &cid]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout.lines().count(), 4, "{}", r.stdout);
    let r = run(&["doubts", "list", "--campaign", &cid]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = run(&["suppress", "list", "--account", "1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // A snapshot cannot be followed: it would never see the writes of others.
    let r = run(&["campaign", "status", "--watch", &cid]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("cannot follow"), "{}", r.stderr);
    // A writing command fails cleanly.
    let r = run(&["campaign", "pause", &cid]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("cannot be written"), "{}", r.stderr);
    assert_eq!(std::fs::read(&db).unwrap(), before);
    // A -wal beside the file means a process may be writing: no snapshot then.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(dir.join("t.db-wal"), b"").unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    let r = run(&["campaign", "status", &cid]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert_eq!(std::fs::read(&db).unwrap(), before);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn create(env: &Env, acct: &str, extra: &[&str]) -> common::Run {
    let body = env.write("body.txt", "Hello {{ name }}");
    let mut args = vec![
        "campaign",
        "create",
        "--account",
        acct,
        "--name",
        "c",
        "--body-file",
        body.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    env.run(&args)
}

/// What would fail for every recipient is refused at create, and again at approve.
#[test]
fn content_that_cannot_be_sent_is_refused_at_create_and_approve() {
    let env = Env::new();
    let acct = env.setup_account();
    env.ok(&[
        "subscriber",
        "add",
        "--account",
        &acct,
        "--email",
        "a@x.com",
    ]);
    let r = create(&env, &acct, &["--channel", "email", "--subject", "Hi"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("needs --from"), "{}", r.stderr);
    let hostile = [
        "Hi\r\nBcc: victim@example.org",
        "Hi\nthere",
        "Hi\u{85}there",
        "Hi\u{2028}there",
        "=?utf-8?q?x=0D=0ABcc:_evil@x?=",
        "=? utf-8 ?q?x=0ABcc:e?=",
        "=?utf-8?b?SGkNCkJjYzogZXZpbEB4?=",
        "a =?UTF-8? Q ?x=0A?= b",
    ];
    for s in hostile {
        let r = create(
            &env,
            &acct,
            &[
                "--channel",
                "email",
                "--from",
                "news@example.org",
                "--subject",
                s,
            ],
        );
        assert_eq!(r.code, 2, "{s:?}: {}", r.stderr);
    }
    let r = create(
        &env,
        &acct,
        &[
            "--channel",
            "email",
            "--from",
            "News\r\nBcc: x@y.org <news@example.org>",
            "--subject",
            "Hi",
        ],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    // An SMS body no message can carry.
    let long = env.write("long.txt", "x".repeat(20_000));
    let r = env.run(&[
        "campaign",
        "create",
        "--account",
        &acct,
        "--name",
        "s",
        "--channel",
        "sms",
        "--body-file",
        long.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("1600"), "{}", r.stderr);
    assert_eq!(
        env.count("SELECT count(*) FROM campaigns"),
        0,
        "nothing was written"
    );

    // A draft stored without a sender (by an older version) is refused at approve.
    env.sqlite()
        .execute(
            "INSERT INTO campaigns (account_id, name, channel, subject, body, created_at)
             VALUES (1, 'old', 'email', 's', 'b', 0)",
            [],
        )
        .unwrap();
    let r = env.run(&["campaign", "approve", "1"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("cannot be approved"), "{}", r.stderr);
    assert_eq!(
        env.count("SELECT count(*) FROM campaigns WHERE status = 'draft'"),
        1
    );
}

/// Cells that a spreadsheet would run as formulas are neutralised in CSV reports.
#[test]
fn csv_reports_do_not_carry_formulas() {
    let env = Env::new();
    let acct = env.setup_account();
    for p in ["+14155550100", "+14155550101"] {
        env.ok(&["subscriber", "add", "--account", &acct, "--phone", p]);
    }
    let body = env.write("sms.txt", "hi");
    let cid = env.ok(&[
        "campaign",
        "create",
        "--account",
        &acct,
        "--name",
        "s",
        "--channel",
        "sms",
        "--body-file",
        body.to_str().unwrap(),
    ]);
    env.ok(&["campaign", "approve", &cid]);
    env.ok(&["run", "--once", "--tick", "20ms", "--provider", "null"]);
    env.sqlite()
        .execute(
            "UPDATE sends SET last_error = '=HYPERLINK(\"http://x\")', provider_message_id = '@SUM(1)'
             WHERE address = '+14155550101'",
            [],
        )
        .unwrap();
    let r = env.run(&["campaign", "report", &cid, "--format", "csv"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let mut rdr = csv::Reader::from_reader(r.stdout.as_bytes());
    let mut n = 0;
    for rec in rdr.records() {
        let rec = rec.unwrap();
        for cell in rec.iter() {
            assert!(
                !cell.starts_with(['=', '+', '-', '@', '\t', '\r']),
                "formula-like cell {cell:?} in {rec:?}"
            );
        }
        n += 1;
    }
    assert_eq!(n, 2);
    assert!(r.stdout.contains("'+14155550100"), "{}", r.stdout);
}

/// No panic is reachable from these inputs: each is a clear usage error, and a closed pipe
/// ends the command quietly.
#[test]
fn bad_durations_and_closed_pipes_do_not_panic() {
    let env = Env::new();
    let cid = built_campaign(&env, 2000);
    for args in [
        &["--busy-timeout", "999999999h", "campaign", "status", "1"][..],
        &["run", "--once", "--tick", "0s", "--provider", "null"],
        &[
            "run",
            "--once",
            "--lease",
            "99999999h",
            "--provider",
            "null",
        ],
        &["run", "--once", "--retry-base", "0s", "--provider", "null"],
    ] {
        let r = env.run(args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
        assert!(
            r.stderr.contains("must be between") || r.stderr.contains("too long"),
            "{}",
            r.stderr
        );
    }
    for args in [
        vec!["--json", "campaign", "report", cid.to_string().leak()],
        vec![
            "campaign",
            "report",
            cid.to_string().leak(),
            "--format",
            "json",
        ],
        vec!["--help"],
    ] {
        let mut child = env
            .cmd()
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Read ten bytes, then close the pipe, as `| head -c 10` does.
        let mut out = child.stdout.take().unwrap();
        let mut ten = [0u8; 10];
        use std::io::Read;
        out.read_exact(&mut ten).unwrap();
        drop(out);
        let o = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// A restored backup replays keys the provider already accepted, but the recipient's captured
/// variables changed in between: the provider answers "same key, different payload". That is
/// "already sent, never resend", and no longer silent: a warning, a count in the run summary,
/// and the reason in the report.
#[test]
fn same_key_with_other_content_is_recorded_as_sent_and_reported() {
    let env = Env::new();
    let (_acct, cid) = env.setup_campaign(1);
    env.ok(&["campaign", "approve", &cid]);
    let backup = env.path("backup.db");
    // A backup taken properly: everything committed is in the main file first.
    env.sqlite()
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    std::fs::copy(&env.db, &backup).unwrap();
    let log = env.path("fake.jsonl");
    let fake = common::Fake::start(&log, &[]);
    let spec = format!(
        "resend:?base_url={}&from=news@example.com&timeout=2s",
        fake.base()
    );
    let run = |db: &std::path::Path| {
        let out = Command::new(common::BIN)
            .arg("--db")
            .arg(db)
            .env("SENDONCE_PUBLIC_URL", common::TEST_PUBLIC_URL)
            .env(
                "SENDONCE_UNSUBSCRIBE_SECRET",
                common::TEST_UNSUBSCRIBE_SECRET,
            )
            .args([
                "--json",
                "run",
                "--once",
                "--tick",
                "20ms",
                "--provider",
                &spec,
            ])
            .env("SENDONCE_RESEND_API_KEY", "re_test_key")
            .env_remove("SENDONCE_LOG")
            .output()
            .unwrap();
        common::Run::from(out)
    };
    let r = run(&env.db);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // The backup is restored, and the subscriber was renamed in it before its list was built.
    let c = rusqlite::Connection::open(&backup).unwrap();
    c.execute("UPDATE subscribers SET name = 'Renamed'", [])
        .unwrap();
    drop(c);
    // A worker refuses a copy until it is adopted (the clone guard).
    let refused = run(&backup);
    assert_eq!(refused.code, 5, "{}", refused.stderr);
    assert!(refused.stderr.contains("is a copy"), "{}", refused.stderr);
    let adopted = Command::new(common::BIN)
        .arg("--db")
        .arg(&backup)
        .arg("adopt")
        .status()
        .unwrap();
    assert!(adopted.success());
    let r = run(&backup);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(doc["already_accepted"], 1, "{doc}");
    assert_eq!(doc["sent"], 1, "{doc}");
    assert!(r.stderr.contains("already accepted"), "{}", r.stderr);
    let report = common::Run::from(
        Command::new(common::BIN)
            .arg("--db")
            .arg(&backup)
            .args(["campaign", "report", &cid])
            .output()
            .unwrap(),
    );
    assert!(
        report.stdout.contains("already accepted"),
        "{}",
        report.stdout
    );
    assert_eq!(common::deliveries(&log).len(), 1, "one real delivery");
}

/// A SQLite file with no tables at all is not a database of ours either (only `init` makes one).
#[test]
fn a_sqlite_file_without_tables_is_refused_except_by_init() {
    let env = Env::new();
    {
        let c = rusqlite::Connection::open(&env.db).unwrap();
        let mode: String = c
            .query_row("PRAGMA journal_mode=wal", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }
    let r = env.run(&["account", "add", "acme"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("without any tables"), "{}", r.stderr);
    assert_eq!(env.count("SELECT count(*) FROM sqlite_schema"), 0);
    env.ok(&["init"]);
    env.ok(&["account", "add", "acme"]);
    // An all-digit name would read as an id wherever an account is taken.
    let r = env.run(&["account", "add", "2"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("all digits"), "{}", r.stderr);
}

/// A read-only command on a file of an older schema changes nothing and says how to upgrade.
#[test]
fn read_only_commands_on_an_older_schema_say_to_run_init() {
    let env = Env::new();
    env.setup_account();
    env.sqlite()
        .execute_batch(
            "ALTER TABLE accounts DROP COLUMN tz; ALTER TABLE accounts DROP COLUMN send_window;
             ALTER TABLE accounts DROP COLUMN sms_hours; ALTER TABLE campaigns DROP COLUMN tz;
             ALTER TABLE campaigns DROP COLUMN send_window;
             ALTER TABLE campaigns DROP COLUMN sms_hours;
             DROP TABLE consents;
             DROP TRIGGER sends_event; DROP TRIGGER sends_event_insert; DROP TRIGGER campaigns_event;
             DROP TRIGGER subscribers_event_insert; DROP TRIGGER subscribers_event_update;
             DROP TRIGGER list_members_event_insert; DROP TRIGGER list_members_event_update;
             DROP TRIGGER suppressions_event_insert; DROP TRIGGER suppressions_event_delete;
             DROP TABLE hook_attempts; DROP TABLE hook_deliveries; DROP TABLE hook_endpoints;
             DROP TABLE events; ALTER TABLE api_messages DROP COLUMN metadata;
             DROP TABLE message_attachments; DROP TABLE templates;
             ALTER TABLE message_contents DROP COLUMN template_id;
             DROP TABLE address_collisions; DROP TABLE pending_steps;
             DROP TRIGGER list_members_count_insert; DROP TRIGGER list_members_count_update;
             DROP TRIGGER list_members_count_delete; DROP TRIGGER lists_count_delete;
             DROP TABLE list_counts; DROP INDEX sends_unsent; DROP INDEX list_members_state;
             DROP INDEX sends_campaign_order; DROP TRIGGER sends_count_insert;
             DROP TRIGGER sends_count_update; DROP TRIGGER sends_count_delete;
             DROP TABLE campaign_counts; DROP TABLE admin_sessions; DROP TABLE admins;
             DROP INDEX campaigns_stream; ALTER TABLE campaigns DROP COLUMN stream;
             DROP TABLE message_contents;
             DROP TABLE guard; DROP TABLE guard_epochs; DROP TABLE webhook_events; DROP TABLE list_confirmations;
             DROP TRIGGER campaigns_content_frozen_0008;
             ALTER TABLE campaigns DROP COLUMN transactional;
             DROP TABLE api_messages; ALTER TABLE campaigns DROP COLUMN kind;
             DROP TABLE api_tokens;
             DROP TRIGGER campaigns_content_frozen_0005;
             ALTER TABLE campaigns DROP COLUMN body_format; ALTER TABLE campaigns DROP COLUMN html;
             ALTER TABLE campaigns DROP COLUMN reply_to; ALTER TABLE campaigns DROP COLUMN filter;
             ALTER TABLE campaigns DROP COLUMN sms_footer; ALTER TABLE accounts DROP COLUMN sms_footer;
             DROP TABLE campaign_lists; DROP TABLE list_members; DROP TABLE lists;
             ALTER TABLE subscribers DROP COLUMN removed_at; PRAGMA user_version = 2;",
        )
        .unwrap();
    let r = env.run(&["subscriber", "list", "--account", "acme"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("sendonce init"), "{}", r.stderr);
    assert_eq!(env.count("PRAGMA user_version"), 2, "nothing was changed");
    env.ok(&["init"]);
    assert_eq!(
        env.count("PRAGMA user_version"),
        sendonce::store::SCHEMA_VERSION
    );
    env.ok(&["subscriber", "list", "--account", "acme"]);
}

/// A provider answering with a huge error body is read only up to a cap: the run's memory stays
/// small, and what is stored is a short excerpt.
#[test]
fn a_huge_error_body_is_read_only_up_to_a_cap() {
    use std::io::{Read, Write};
    const BODY: usize = 64 * 1024 * 1024;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let Ok((mut sock, _)) = listener.accept() else {
            return;
        };
        let mut buf = [0u8; 65536];
        let _ = sock.read(&mut buf);
        let head = format!(
            "HTTP/1.1 500 Internal Server Error\r\nContent-Length: {BODY}\r\nConnection: close\r\n\r\n"
        );
        let _ = sock.write_all(head.as_bytes());
        let chunk = vec![b'x'; 65536];
        let mut sent = 0;
        while sent < BODY {
            if sock.write_all(&chunk).is_err() {
                break;
            }
            sent += chunk.len();
        }
    });
    let env = Env::new();
    let (_a, cid) = env.setup_campaign(1);
    env.ok(&["campaign", "approve", &cid]);
    let spec = format!("webhook:http://{addr}/send#timeout=20s");
    let r = env.run(&[
        "--json",
        "run",
        "--once",
        "--tick",
        "20ms",
        "--report-peak-rss",
        "--provider",
        &spec,
    ]);
    let doc: serde_json::Value = serde_json::from_str(&r.stdout).unwrap_or_default();
    let rss = doc["peak_rss_kib"].as_u64().unwrap_or(u64::MAX);
    assert!(
        rss < 48 * 1024,
        "peak RSS {rss} KiB for a 64 MiB error body: {}",
        r.stderr
    );
    let reason: String = env
        .sqlite()
        .query_row("SELECT coalesce(last_error, '') FROM sends", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(reason.contains("500") && reason.len() < 1024, "{reason}");
    let _ = server.join();
}

//! Damaged files: a truncated database, flipped bytes in the pages of the send ledger, and a
//! `-wal` deleted after a worker was killed with SIGKILL mid-run (a crash point). In each case
//! `run` refuses to send with a clear message and a non-zero exit, the provider's log gains
//! nothing, and `doctor` reports the damage with exit 1. Needs `--features tier2` (crash points).

use crate::common::{deliveries, Env, Run};
use serde_json::Value;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

const ROWS: usize = 600;

/// A campaign of `ROWS` recipients whose worker was killed (SIGKILL) right after its 4th claim
/// commit, batches of 50: 150 sent, 50 leased and dispatched but never called, the rest queued.
/// Returns the env, the outbox and the provider spec.
fn interrupted() -> (Env, PathBuf, String) {
    let env = Env::new();
    let (_, cid) = env.setup_campaign(ROWS);
    env.ok(&["campaign", "approve", &cid]);
    let outbox = env.path("outbox.jsonl");
    let spec = format!("outbox:{}", outbox.display());
    let out = env
        .cmd()
        .env("SENDONCE_CRASH_AT", "after_claim_commit:4")
        .args(["-q", "run", "--once", "--batch", "50", "--provider", &spec])
        .output()
        .expect("run sendonce");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&out.status),
        Some(libc::SIGKILL),
        "the worker was not killed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sent = lines(&outbox);
    assert!(sent > 0 && sent < ROWS, "{sent} lines before the kill");
    (env, outbox, spec)
}

fn lines(outbox: &PathBuf) -> usize {
    std::fs::read_to_string(outbox).map_or(0, |t| t.lines().count())
}

/// Fold the WAL into the file and close it (no -wal left), as a clean stop would.
fn checkpoint(env: &Env) {
    let c = env.sqlite();
    c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    drop(c);
    assert!(
        !env.path("t.db-wal").exists(),
        "-wal left after the checkpoint"
    );
}

/// `run --once` on the damaged file: refused, nothing new in the outbox.
fn refused(env: &Env, outbox: &PathBuf, spec: &str) -> Run {
    let before = lines(outbox);
    let r = env.run(&["run", "--once", "--provider", spec]);
    assert_ne!(r.code, 0, "run sent from a damaged file: {}", r.stdout);
    assert!(!r.stderr.trim().is_empty(), "no message");
    assert!(
        !r.stderr.contains("panicked"),
        "a panic, not a message: {}",
        r.stderr
    );
    assert_eq!(
        lines(outbox),
        before,
        "the provider got calls: {}",
        r.stderr
    );
    r
}

/// `doctor --json`: exit 1, one JSON document, and the failed findings by name.
fn doctor_fails(env: &Env) -> Vec<(String, String)> {
    let r = env.run(&["doctor", "--json"]);
    assert_eq!(r.code, 1, "doctor: {}{}", r.stdout, r.stderr);
    let doc: Value = serde_json::from_str(&r.stdout).expect("doctor's JSON");
    assert_eq!(doc["healthy"], false);
    assert_eq!(doc["store"], "sqlite");
    doc["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["level"] == "fail")
        .map(|f| {
            (
                f["name"].as_str().unwrap().to_string(),
                f["detail"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_deleted_wal_after_a_kill_is_refused_then_adopt_sends_nobody_twice() {
    let (env, outbox, spec) = interrupted();
    for side in ["t.db-wal", "t.db-shm"] {
        std::fs::remove_file(env.path(side)).expect("the killed worker left its -wal");
    }
    let r = refused(&env, &outbox, &spec);
    assert_eq!(r.code, 5, "{}", r.stderr);
    assert!(r.stderr.contains("went back in time"), "{}", r.stderr);
    let failed = doctor_fails(&env);
    assert!(
        failed
            .iter()
            .any(|(n, d)| n == "clone_guard" && d.contains("went back in time")),
        "{failed:?}"
    );
    // The operator adopts the file: the campaign goes on, and nothing already delivered is
    // delivered again (the outbox honours keys: a same-key retry is a replay, not a delivery).
    env.ok(&["adopt"]);
    let r = env.run(&["run", "--once", "--provider", &spec]);
    assert!(r.code == 0 || r.code == 3, "{}{}", r.stdout, r.stderr);
    let d = deliveries(&outbox);
    let twice: Vec<_> = d.iter().filter(|(_, &k)| k > 1).collect();
    assert!(twice.is_empty(), "delivered twice: {twice:?}");
    assert_eq!(d.len(), ROWS, "every recipient delivered once");
}

#[test]
fn flipped_bytes_in_the_ledgers_pages_stop_the_worker_at_start() {
    let (env, outbox, spec) = interrupted();
    checkpoint(&env);
    let (page_size, pages): (u64, Vec<i64>) = {
        let c = env.sqlite();
        let size: i64 = c.query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap();
        let mut st = c
            .prepare("SELECT rootpage FROM sqlite_schema WHERE name IN ('sends', 'sends_claim')")
            .unwrap();
        let pages = st
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<Vec<i64>, _>>()
            .unwrap();
        (size as u64, pages)
    };
    assert_eq!(pages.len(), 2);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&env.db)
        .unwrap();
    for p in pages {
        // Past the page header: the cell pointers and the first cells.
        let at = (p as u64 - 1) * page_size + 16;
        let mut buf = vec![0u8; 64];
        f.read_exact_at(&mut buf, at).unwrap();
        buf.iter_mut().for_each(|b| *b ^= 0xA5);
        f.write_all_at(&buf, at).unwrap();
    }
    f.sync_all().unwrap();
    drop(f);
    let r = refused(&env, &outbox, &spec);
    assert_eq!(
        r.code, 5,
        "the start check (quick_check) must catch it: {}",
        r.stderr
    );
    assert!(r.stderr.contains("is damaged"), "{}", r.stderr);
    let failed = doctor_fails(&env);
    assert!(failed.iter().any(|(n, _)| n == "quick_check"), "{failed:?}");
    // --full runs integrity_check and finds it too.
    let r = env.run(&["doctor", "--full"]);
    assert_eq!(r.code, 1);
    assert!(r.stdout.contains("integrity_check"), "{}", r.stdout);
}

#[test]
fn a_truncated_file_is_refused_and_reported() {
    let (env, outbox, spec) = interrupted();
    checkpoint(&env);
    let len = std::fs::metadata(&env.db).unwrap().len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&env.db)
        .unwrap();
    f.set_len(len / 2 / 4096 * 4096).unwrap();
    drop(f);
    // SQLite itself notices the missing pages when the store opens (reading the schema or the
    // guard): exit 1, "the database file is damaged"; when the pages it needs at open are
    // intact, the start check (quick_check) does: exit 5.
    let r = refused(&env, &outbox, &spec);
    assert!(r.code == 1 || r.code == 5, "{}: {}", r.code, r.stderr);
    assert!(r.stderr.contains("damaged"), "{}", r.stderr);
    let failed = doctor_fails(&env);
    assert!(
        failed
            .iter()
            .any(|(n, _)| n == "open" || n == "quick_check"),
        "{failed:?}"
    );
}

#[test]
fn doctor_is_healthy_on_a_sound_file_and_never_writes_it() {
    let env = Env::new();
    env.setup_account();
    // Drop the -wal and -shm the last writer left, so "unchanged" covers every byte.
    checkpoint(&env);
    let before = std::fs::read(&env.db).unwrap();
    let r = env.run(&["doctor"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("healthy"), "{}", r.stdout);
    assert_eq!(std::fs::read(&env.db).unwrap(), before);
    // A file others can read is a finding, with the command to run.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&env.db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let r = env.run(&["doctor", "--json"]);
    assert_eq!(r.code, 1);
    let doc: Value = serde_json::from_str(&r.stdout).unwrap();
    let modes = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "file_modes")
        .unwrap()
        .clone();
    assert_eq!(modes["level"], "warn", "{modes}");
    assert!(
        modes["hint"].as_str().unwrap().contains("chmod 600"),
        "{modes}"
    );
    // A provider whose secret is missing is a failed route.
    std::fs::set_permissions(&env.db, std::fs::Permissions::from_mode(0o600)).unwrap();
    let r = env
        .cmd()
        .env_remove("SENDONCE_RESEND_API_KEY")
        .args(["doctor", "--provider", "resend:?from=news@example.org"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&r.stdout);
    assert_eq!(r.status.code(), Some(1), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("FAIL") && l.contains("SENDONCE_RESEND_API_KEY")),
        "{out}"
    );
    // The config file's routes, each built: a missing secret, an unknown account, a good one.
    let cfg = env.write(
        "sendonce.toml",
        format!(
            "provider = \"outbox:{}\"\n\
             [[route]]\nchannel = \"email\"\nprovider = \"resend:?from=news@example.org\"\n\
             [[route]]\naccount = \"nobody\"\nprovider = \"null\"\n",
            env.path("never-created.jsonl").display()
        ),
    );
    let r = env
        .cmd()
        .env_remove("SENDONCE_RESEND_API_KEY")
        .env_remove("SENDONCE_PROVIDER")
        .args(["doctor", "--json", "--config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&r.stdout).expect("JSON");
    let level = |name: &str| {
        doc["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {doc}"))["level"]
            .clone()
    };
    assert_eq!(level("provider"), "ok", "{doc}");
    assert_eq!(level("route 1"), "fail", "{doc}");
    assert_eq!(level("route 2"), "fail", "{doc}");
    assert!(
        !env.path("never-created.jsonl").exists(),
        "doctor created the outbox"
    );
}

#[test]
fn doctor_on_files_that_are_not_databases_gives_findings_not_crashes() {
    let env = Env::new();
    for content in [
        &b"not a database at all"[..],
        &b"SQLite format 3\0garbage"[..],
    ] {
        std::fs::write(&env.db, content).unwrap();
        let r = env.run(&["doctor", "--json"]);
        assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
        let doc: Value = serde_json::from_str(&r.stdout).expect("JSON");
        assert_eq!(doc["findings"][0]["name"], "open");
        assert_eq!(doc["findings"][0]["level"], "fail");
    }
}

//! The clone guard, the time-travel watermark, backups and restores, with real worker processes
//! (killed with SIGKILL) against a real fake-provider process: a copy of a live file, a `-wal`
//! deleted after a kill, an old backup restored over a file with later sends, backups taken
//! while workers die. In every case nobody gets a message twice.

use crate::common::{self, Env, Fake, BIN};
use sendonce::store::prelude::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const N: usize = 300;

fn fake(env: &Env, idempotent: bool) -> Fake {
    let flag = if idempotent {
        "--idempotent"
    } else {
        "--no-idempotent"
    };
    Fake::start(&env.path("fake.jsonl"), &[flag, "--latency", "4ms..9ms"])
}

fn spec(fake: &Fake, idempotent: bool) -> String {
    let window = if idempotent { "&key_window=24h" } else { "" };
    format!("webhook:{}/send#timeout=5s{window}", fake.base())
}

/// `sendonce run --once` on `db` (other flags after), as a command to spawn or run.
fn worker(db: &Path, spec: &str) -> Command {
    let mut c = Command::new(BIN);
    c.arg("--db").arg(db).env_remove("SENDONCE_DB");
    c.env_remove("SENDONCE_CRASH_AT")
        .env_remove(sendonce::store::sqlite::HOST_ENV)
        .env("SENDONCE_PUBLIC_URL", common::TEST_PUBLIC_URL)
        .env(
            "SENDONCE_UNSUBSCRIBE_SECRET",
            common::TEST_UNSUBSCRIBE_SECRET,
        );
    c.args([
        "run",
        "--once",
        "--provider",
        spec,
        "--tick",
        "20ms",
        "--concurrency",
        "8",
        "--retry-base",
        "20ms",
        "--lease",
        "1s",
    ]);
    c.stdout(Stdio::null()).stderr(Stdio::piped());
    c
}

fn sendonce(db: &Path, args: &[&str]) -> common::Run {
    common::Run::from(
        Command::new(BIN)
            .arg("--db")
            .arg(db)
            .env_remove("SENDONCE_DB")
            .env_remove(sendonce::store::sqlite::HOST_ENV)
            .args(args)
            .output()
            .unwrap(),
    )
}

/// Deliveries per job (replays of an idempotent provider excluded).
fn delivered(env: &Env) -> HashMap<String, usize> {
    common::deliveries(&env.path("fake.jsonl"))
}

fn assert_nobody_twice(env: &Env, what: &str) -> usize {
    let d = delivered(env);
    let twice: Vec<_> = d.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "{what}: delivered twice: {twice:?}");
    d.len()
}

fn wait_for_deliveries(env: &Env, at_least: usize, child: &mut Child) {
    let start = Instant::now();
    while delivered(env).len() < at_least {
        if let Some(st) = child.try_wait().unwrap() {
            panic!("the worker exited ({st}) before {at_least} deliveries");
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no {at_least} deliveries in 60 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

fn finish(child: Child) -> common::Run {
    common::Run::from(child.wait_with_output().unwrap())
}

fn json(r: &common::Run) -> serde_json::Value {
    serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}\n{}", r.stdout, r.stderr))
}

/// The ledger's counts by status of one campaign.
fn statuses(env: &Env, cid: &str) -> HashMap<String, i64> {
    let c = env.sqlite();
    let mut st = c
        .prepare("SELECT status, count(*) FROM sends WHERE campaign_id = ?1 GROUP BY status")
        .unwrap();
    st.query_map([cid], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(|r| r.unwrap())
        .collect()
}

fn side(db: &Path, suffix: &str) -> PathBuf {
    PathBuf::from(format!("{}{suffix}", db.display()))
}

/// An operator copies the live files (`cp sendonce.db* elsewhere/`) while a worker sends and
/// starts a worker on the copy; later the copy is put on another host at the same path. The
/// copy claims nothing either time; the original finishes; nobody gets two messages.
#[test]
fn a_copy_of_a_live_file_claims_nothing() {
    let env = Env::new();
    let (_a, cid) = env.setup_campaign(N);
    env.ok(&["campaign", "approve", &cid]);
    let fake = fake(&env, false);
    let spec = spec(&fake, false);
    let mut a = worker(&env.db, &spec).spawn().unwrap();
    wait_for_deliveries(&env, 40, &mut a);
    let dir = env.path("elsewhere");
    std::fs::create_dir(&dir).unwrap();
    let copy = dir.join("t.db");
    for suffix in ["", "-wal", "-shm", "-watermark"] {
        let from = side(&env.db, suffix);
        if from.exists() {
            std::fs::copy(&from, side(&copy, suffix)).unwrap();
        }
    }
    let b = finish(worker(&copy, &spec).spawn().unwrap());
    assert_eq!(b.code, 5, "a worker on a copy is refused: {}", b.stderr);
    assert!(b.stderr.contains("is a copy"), "{}", b.stderr);
    assert!(
        b.stderr
            .contains(env.db.file_name().unwrap().to_str().unwrap())
            && b.stderr.contains("sendonce adopt"),
        "names both places and the way out: {}",
        b.stderr
    );
    let a = finish(a);
    assert_eq!(a.code, 0, "{}", a.stderr);
    assert_eq!(assert_nobody_twice(&env, "copy beside the original"), N);
    // The same path on another machine (a disk image cloned to a second VPS).
    let mut other = worker(&env.db, &spec);
    other.env(sendonce::store::sqlite::HOST_ENV, "another-vps");
    let r = finish(other.spawn().unwrap());
    assert_eq!(r.code, 5, "{}", r.stderr);
    assert!(r.stderr.contains("another-vps"), "{}", r.stderr);
    assert_eq!(assert_nobody_twice(&env, "clone on another host"), N);
}

/// A worker killed with SIGKILL mid-run, its `-wal` deleted (the file goes back to its last
/// checkpoint, which a test connection forces halfway through): the next worker refuses; after
/// `adopt`, the rows the lost part may have sent are retried with the same key by an idempotent
/// provider (nobody twice, everyone once) or parked in doubt by one without (nobody twice).
#[test]
fn a_deleted_wal_after_a_kill_is_refused_and_adopt_sends_nobody_twice() {
    for idempotent in [false, true] {
        let env = Env::new();
        let (_a, cid) = env.setup_campaign(N);
        env.ok(&["campaign", "approve", &cid]);
        let fake = fake(&env, idempotent);
        let spec = spec(&fake, idempotent);
        let mut a = worker(&env.db, &spec).spawn().unwrap();
        wait_for_deliveries(&env, 60, &mut a);
        env.sqlite()
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
            .unwrap();
        wait_for_deliveries(&env, 150, &mut a);
        kill(&mut a);
        // A request in flight at the kill may still be recorded by the provider.
        std::thread::sleep(Duration::from_millis(300));
        let before = delivered(&env).len();
        for suffix in ["-wal", "-shm"] {
            let _ = std::fs::remove_file(side(&env.db, suffix));
        }
        let r = finish(worker(&env.db, &spec).spawn().unwrap());
        assert_eq!(r.code, 5, "refused after the lost WAL: {}", r.stderr);
        assert!(r.stderr.contains("went back in time"), "{}", r.stderr);
        assert_eq!(delivered(&env).len(), before, "the refusal sent nothing");
        let adopted = json(&sendonce(&env.db, &["--json", "adopt"]));
        assert_eq!(adopted["went_back"], true, "{adopted}");
        let r = finish(worker(&env.db, &spec).spawn().unwrap());
        let what = format!("deleted WAL, idempotent={idempotent}");
        let total = assert_nobody_twice(&env, &what);
        let counts = statuses(&env, &cid);
        if idempotent {
            assert_eq!(r.code, 0, "{what}: {}", r.stderr);
            assert_eq!(total, N, "{what}: everyone once");
            assert_eq!(counts.get("sent"), Some(&(N as i64)), "{what}: {counts:?}");
        } else {
            assert_eq!(r.code, 3, "{what}: ends with rows in doubt: {}", r.stderr);
            assert!(
                counts.get("in_doubt").copied().unwrap_or(0) > 0,
                "{counts:?}"
            );
            assert_eq!(
                counts.values().sum::<i64>(),
                counts.get("sent").copied().unwrap_or(0)
                    + counts.get("in_doubt").copied().unwrap_or(0),
                "{what}: every row sent or in doubt: {counts:?}"
            );
        }
    }
}

/// Backups taken while workers are killed at random all open and pass `integrity_check`; an
/// old one restored over the file with later sends (refused while `serve` holds the file)
/// sends nobody twice: everyone once with an idempotent provider, the rest in doubt without.
#[test]
fn backups_under_kills_open_and_a_restore_sends_nobody_twice() {
    for idempotent in [true, false] {
        let env = Env::new();
        let (_a, cid) = env.setup_campaign(N);
        env.ok(&["campaign", "approve", &cid]);
        let fake = fake(&env, idempotent);
        let spec = spec(&fake, idempotent);
        let mut backups = Vec::new();
        let mut seed = 0x5eed_u64 + idempotent as u64;
        for i in 0..4 {
            let mut w = worker(&env.db, &spec).spawn().unwrap();
            wait_for_deliveries(&env, 30 * (i + 1), &mut w);
            let b = env.path(&format!("backup-{i}.db"));
            let r = sendonce(&env.db, &["--json", "backup", b.to_str().unwrap()]);
            assert_eq!(r.code, 0, "backup {i}: {}", r.stderr);
            assert!(json(&r)["bytes"].as_u64().unwrap() > 0);
            if i == 1 {
                // `serve` holds the file for writing for as long as the check takes (the
                // worker alone may finish the campaign before it: seen once in CI).
                let holder = common::Server::start(&env, &[]);
                let refused = sendonce(&env.db, &["restore", b.to_str().unwrap()]);
                drop(holder);
                assert_ne!(refused.code, 0, "restore while a worker runs");
                assert!(
                    refused.stderr.contains("open for writing"),
                    "{}",
                    refused.stderr
                );
            }
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            std::thread::sleep(Duration::from_millis(seed >> 58));
            kill(&mut w);
            backups.push(b);
        }
        for b in &backups {
            let c = rusqlite::Connection::open(b).unwrap();
            let ok: String = c
                .query_row("PRAGMA integrity_check", [], |r| r.get(0))
                .unwrap();
            assert_eq!(ok, "ok", "{}", b.display());
        }
        // Later sends on the live file, then the oldest backup put back.
        let r = finish(worker(&env.db, &spec).spawn().unwrap());
        assert!(r.code == 0 || r.code == 3, "{}", r.stderr);
        let restored = sendonce(
            &env.db,
            &["--json", "restore", backups[0].to_str().unwrap()],
        );
        assert_eq!(restored.code, 0, "{}", restored.stderr);
        let doc = json(&restored);
        assert_eq!(doc["adopted"]["went_back"], true, "{doc}");
        let r = finish(worker(&env.db, &spec).spawn().unwrap());
        let what = format!("restore, idempotent={idempotent}");
        let total = assert_nobody_twice(&env, &what);
        let counts = statuses(&env, &cid);
        if idempotent {
            assert_eq!(r.code, 0, "{what}: {}", r.stderr);
            assert_eq!(total, N, "{what}");
            assert_eq!(counts.get("sent"), Some(&(N as i64)), "{what}: {counts:?}");
        } else {
            assert_eq!(r.code, 3, "{what}: {}", r.stderr);
            assert!(
                counts.get("in_doubt").copied().unwrap_or(0) > 0,
                "{counts:?}"
            );
        }
    }
}

/// `init` of a new file where another database's watermark was left behind is not blocked,
/// and its first worker sends.
#[test]
fn init_on_a_new_file_is_never_blocked_by_an_old_watermark() {
    let env = Env::new();
    let (_a, cid) = env.setup_campaign(3);
    env.ok(&["campaign", "approve", &cid]);
    let out = env.path("out.jsonl");
    let spec = format!("outbox:{}", out.display());
    env.ok(&["run", "--once", "--provider", &spec]);
    assert!(side(&env.db, "-watermark").exists());
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(side(&env.db, suffix));
    }
    let (_a, cid) = env.setup_campaign(2);
    env.ok(&["campaign", "approve", &cid]);
    let out2 = env.path("out2.jsonl");
    env.ok(&[
        "run",
        "--once",
        "--provider",
        &format!("outbox:{}", out2.display()),
    ]);
    assert_eq!(std::fs::read_to_string(&out2).unwrap().lines().count(), 2);
}

/// Inside the claim's transaction: a file whose claim counter went back under a running
/// process, or whose recorded owner is another place, gets no claim at all (nothing of it is
/// committed), and the error is the guard's (exit 5).
#[test]
fn a_claim_refuses_a_counter_gone_back_or_another_owner() {
    use sendonce::store::{ClaimRequest, OpenOptions, Watermark};
    let env = Env::new();
    let opts = OpenOptions {
        create: true,
        ..Default::default()
    };
    let s = sendonce::store::open(&sendonce::store::Target::File(env.db.clone()), &opts).unwrap();
    let (acct, cid) = common::started_campaign(&*s, 20);
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
    let st = s.guard_state().unwrap();
    assert_eq!(st.generation, 1);
    assert!(
        matches!(st.watermark, Watermark::At { generation: 1, .. }),
        "{st:?}"
    );
    let leased =
        |s: &sendonce::store::Store| s.status_counts(cid).unwrap().counts.get("leased").copied();
    // Another connection puts the counter back, as a file swapped under the process would.
    env.sqlite()
        .execute("UPDATE guard SET generation = 0", [])
        .unwrap();
    let e = s.claim(&req(2)).unwrap_err();
    assert_eq!(e.kind, sendonce::error::ErrorKind::Guarded, "{}", e.message);
    assert!(e.message.contains("went back in time"), "{}", e.message);
    assert_eq!(
        leased(&s),
        Some(2),
        "nothing of the refused claim committed"
    );
    // Another place recorded as the owner.
    env.sqlite()
        .execute(
            "UPDATE guard SET generation = 9, host = 'elsewhere', path = '/srv/x.db'",
            [],
        )
        .unwrap();
    let e = s.claim(&req(3)).unwrap_err();
    assert_eq!(e.kind, sendonce::error::ErrorKind::Guarded);
    assert!(
        e.message.contains("is a copy") && e.message.contains("/srv/x.db on host elsewhere"),
        "{}",
        e.message
    );
    assert_eq!(leased(&s), Some(2));
    assert_eq!(sendonce::exit::for_error(&e), 5);
}

/// After a restore that went back in time, the ids the lost timeline used for other people are
/// reused here (campaign 2, subscribers 4-6): their jobs get a new key scope, so an idempotent
/// provider delivers them instead of answering with the lost timeline's messages; the restored
/// campaign's rows keep their keys and are not delivered twice.
#[test]
fn ids_reused_after_a_restore_never_share_a_key_with_the_lost_timeline() {
    let env = Env::new();
    let (acct, c1) = env.setup_campaign(3);
    env.ok(&["campaign", "approve", &c1]);
    let backup = env.path("before.db");
    env.ok(&["backup", backup.to_str().unwrap()]);
    let fake = fake(&env, true);
    let spec = spec(&fake, true);
    let new_campaign = |csv: &str| {
        let f = env.write("more.csv", csv);
        env.import_csv(&acct, &f);
        let body = env.write("b2.txt", "Second {{ name }}\n");
        let cid = env.ok(&[
            "campaign",
            "create",
            "--account",
            &acct,
            "--name",
            "c2",
            "--channel",
            "email",
            "--from",
            "news@example.org",
            "--subject",
            "Two",
            "--body-file",
            body.to_str().unwrap(),
        ]);
        env.ok(&["campaign", "approve", &cid]);
        cid
    };
    // The timeline that will be lost: campaign 1 sent, campaign 2 to three new people.
    assert_eq!(finish(worker(&env.db, &spec).spawn().unwrap()).code, 0);
    let lost_c2 = new_campaign(
        "email,name\nlost4@example.com,L4\nlost5@example.com,L5\nlost6@example.com,L6\n",
    );
    assert_eq!(finish(worker(&env.db, &spec).spawn().unwrap()).code, 0);
    assert_eq!(delivered(&env).len(), 9);
    let r = sendonce(&env.db, &["--json", "restore", backup.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(json(&r)["adopted"]["went_back"], true);
    // The same ids again, for other people.
    let c2 =
        new_campaign("email,name\nnew4@example.com,N4\nnew5@example.com,N5\nnew6@example.com,N6\n");
    assert_eq!(c2, lost_c2, "the restored file reuses the campaign id");
    let r = finish(worker(&env.db, &spec).spawn().unwrap());
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_nobody_twice(&env, "after the restore");
    let c = env.sqlite();
    let jobs: Vec<String> = c
        .prepare("SELECT job_id FROM sends WHERE campaign_id = ?1 ORDER BY subscriber_id")
        .unwrap()
        .query_map([&c2], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(jobs.len(), 6);
    let scope = |j: &str| j.split_once('~').map(|(_, l)| l.to_string());
    let label = scope(&jobs[0]).expect("a new key scope");
    assert!(
        jobs.iter().all(|j| scope(j).as_ref() == Some(&label)),
        "{jobs:?}"
    );
    let d = delivered(&env);
    assert!(
        jobs.iter().all(|j| d.get(j) == Some(&1)),
        "campaign 2 reached all six: {jobs:?} {d:?}"
    );
    // Campaign 1's list is built now: its three first rows keep their keys (replays), the
    // three new people get the new scope.
    let c1_jobs: Vec<String> = c
        .prepare("SELECT job_id FROM sends WHERE campaign_id = ?1 ORDER BY subscriber_id")
        .unwrap()
        .query_map([&c1], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(c1_jobs.len(), 6, "{c1_jobs:?}");
    assert!(c1_jobs[..3].iter().all(|j| !j.contains('~')), "{c1_jobs:?}");
    assert!(
        c1_jobs[3..]
            .iter()
            .all(|j| scope(j).as_ref() == Some(&label)),
        "{c1_jobs:?}"
    );
    let sent: i64 = c
        .query_row(
            "SELECT count(*) FROM sends WHERE status = 'sent'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(sent, 12, "campaign 1 (6) and campaign 2 (6)");
    assert_eq!(d.len(), 18, "9 of the lost timeline + 9 new; none twice");
    drop(c);
    // The same backup restored again: the second lost timeline's new ids get another scope.
    let r = sendonce(&env.db, &["--json", "restore", backup.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let c2 = new_campaign(
        "email,name\nthird4@example.com,T4\nthird5@example.com,T5\nthird6@example.com,T6\n",
    );
    assert_eq!(c2, lost_c2);
    let r = finish(worker(&env.db, &spec).spawn().unwrap());
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_nobody_twice(&env, "after the second restore");
    let jobs: Vec<String> = env
        .sqlite()
        .prepare("SELECT job_id FROM sends WHERE campaign_id = ?1")
        .unwrap()
        .query_map([&c2], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    let second = scope(&jobs[0]).expect("a new key scope");
    assert_ne!(
        second, label,
        "restoring the same backup twice never reuses a scope"
    );
    assert_eq!(
        delivered(&env).len(),
        27,
        "9 more new deliveries, none twice"
    );
}

/// Opt-outs recorded after a backup survive its restore: the replaced file is kept (with its
/// -wal) and its suppressions are carried into the restored one, so the address is not sent.
#[test]
fn a_restore_keeps_the_opt_outs_recorded_after_the_backup() {
    let env = Env::new();
    let (acct, cid) = env.setup_campaign(3);
    let backup = env.path("before.db");
    env.ok(&["backup", backup.to_str().unwrap()]);
    env.ok(&[
        "suppress",
        "add",
        "--account",
        &acct,
        "--channel",
        "email",
        "user1@example.com",
    ]);
    let r = sendonce(&env.db, &["--json", "restore", backup.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc = json(&r);
    assert_eq!(doc["opt_outs"]["suppressions"], 1, "{doc}");
    let kept = doc["kept"].as_str().unwrap();
    assert!(Path::new(kept).exists(), "{doc}");
    env.ok(&["campaign", "approve", &cid]);
    let fake = fake(&env, true);
    let r = finish(worker(&env.db, &spec(&fake, true)).spawn().unwrap());
    assert_eq!(r.code, 0, "{}", r.stderr);
    let d = delivered(&env);
    assert_eq!(d.len(), 2, "{d:?}");
    assert!(
        d.keys().all(|j| !j.contains(":sub:2@")),
        "user1 was suppressed: {d:?}"
    );
}

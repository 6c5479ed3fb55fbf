//! The power-loss suite: the database (and, with the outbox provider, the outbox) lives on a
//! FUSE filesystem, `tests/support/powercut.py`, that keeps every write since the last fsync
//! in a volatile cache. Workers, opt-outs and the provider calls run on it; at a random moment
//! every process is killed with SIGKILL and the power is cut: of the unsynced writes a random
//! subset survives, torn and reordered, and of the unsynced directory entries a random
//! prefix. The next "boot" mounts what survived, and the workers go on. At the end the
//! checker counts as the crash suite does: lost = duplicated = unexpected = sent after
//! opt-out = 0, the ledger agrees, `integrity_check` is ok, and no worker was ever refused by
//! the time-travel guard (under `synchronous=FULL` the database is never behind its
//! watermark).
//!
//! The control runs the same cuts with `SENDONCE_TEST_SYNC=normal` (every connection at
//! `synchronous=NORMAL`) and requires the suite to catch it: duplicates, lost deliveries or
//! the guard refusing a database that went back in time.
//!
//! Needs `--features tier2` (crash points) (the control's switch), `/dev/fuse`, `fusermount3`
//! (Debian's fuse3) and the `mfusepy` package (tests/run.sh brings both). Sizes:
//! `SENDONCE_POWER_CUTS=N` cuts per test (default 100); `SENDONCE_POWER_SEED=N` replays one.

use crate::common::{Env, Fake, BIN};
use crate::crash::workers::{assert_pass, check, killed, start_fake, template, webhook_spec, Rng};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

const WORKERS: usize = 3;
const CONCURRENCY: u64 = 4;
const WORKER_ARGS: [&str; 6] = ["--lease", "1s", "--batch", "10", "--concurrency", "4"];

fn cuts_wanted() -> u64 {
    std::env::var("SENDONCE_POWER_CUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100)
}

fn seed() -> u64 {
    std::env::var("SENDONCE_POWER_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| sendonce::domain::clock::now_ms() as u64)
}

// ---------------------------------------------------------------- the filesystem

/// One boot of the power-cut filesystem over `disk`, mounted at `mnt`.
struct Mounted {
    child: Child,
    stdin: ChildStdin,
    out: BufReader<ChildStdout>,
    mnt: PathBuf,
}

fn mounted(mnt: &Path) -> bool {
    let want = mnt.to_str().unwrap();
    std::fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(1) == Some(want))
}

impl Mounted {
    fn boot(disk: &Path, mnt: &Path, seed: u64) -> Mounted {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/powercut.py");
        let mut child = Command::new("python3")
            .arg(script)
            .arg(mnt)
            .arg(disk)
            .args(["--seed", &seed.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start tests/support/powercut.py (python3 with mfusepy: tests/run.sh)");
        let started = Instant::now();
        while !mounted(mnt) {
            if let Ok(Some(st)) = child.try_wait() {
                panic!("powercut.py exited {st:?} before mounting {}: is /dev/fuse usable and mfusepy installed (tests/run.sh)?", mnt.display());
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "{} not mounted after 20 s",
                mnt.display()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let stdin = child.stdin.take().unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        Mounted {
            child,
            stdin,
            out,
            mnt: mnt.to_path_buf(),
        }
    }

    fn command(&mut self, cmd: &str) -> String {
        writeln!(self.stdin, "{cmd}").unwrap();
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        line.trim().to_string()
    }

    /// The power goes out (every process on the mount must be dead already); returns the
    /// filesystem's account of what survived: `cut KEPT/PENDING ENTRIES_KEPT/ENTRIES`.
    fn cut(mut self) -> String {
        let said = self.command("cut");
        assert!(said.starts_with("cut "), "powercut.py said {said:?}");
        self.unmount();
        said
    }

    /// A clean shutdown: everything made durable, then unmounted.
    fn shutdown(mut self) {
        assert_eq!(self.command("sync"), "synced");
        self.unmount();
    }

    fn unmount(&mut self) {
        let st = Command::new("fusermount3")
            .arg("-u")
            .arg("-z")
            .arg(&self.mnt)
            .status()
            .expect("fusermount3 (Debian's fuse3: tests/run.sh installs it)");
        assert!(
            st.success(),
            "fusermount3 -u {}: {st:?}",
            self.mnt.display()
        );
        let started = Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            if started.elapsed() > Duration::from_secs(10) {
                let _ = self.child.kill();
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = Command::new("fusermount3")
                .arg("-u")
                .arg("-z")
                .arg(&self.mnt)
                .status();
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ---------------------------------------------------------------- the suite

/// Where the messages go.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Route {
    /// The fake provider over HTTP, without idempotency keys: a remote service, whose log
    /// (outside the cut filesystem) does not lose power with us.
    Remote,
    /// The outbox provider, its file on the cut filesystem: a "delivery" is a line that must
    /// survive the cut once the ledger says sent.
    Outbox,
}

#[derive(Debug, Default)]
struct Report {
    cuts: u64,
    rounds: u64,
    /// Unsynced writes kept / dropped by the cuts, and directory entries kept / dropped.
    writes_kept: u64,
    writes_dropped: u64,
    entries_kept: u64,
    entries_dropped: u64,
    /// Workers the time-travel guard refused (exit 5), each followed by `sendonce adopt`.
    guard_refusals: u64,
    lost: u64,
    duplicated: u64,
    unexpected: u64,
    sent_after_optout: u64,
    in_doubt: u64,
    in_doubt_delivered: u64,
    /// In doubt with no request at the (remote) provider: parked by a cut before its call.
    in_doubt_never_called: u64,
    integrity_failures: u64,
    /// Opt-outs that committed and survived, summed over the rounds.
    optouts: u64,
    docs: Vec<serde_json::Value>,
}

fn parse_cut(said: &str, r: &mut Report) {
    let mut parts = said.split(' ').skip(1).map(|p| {
        let (a, b) = p.split_once('/').unwrap();
        (a.parse::<u64>().unwrap(), b.parse::<u64>().unwrap())
    });
    let (kept, pending) = parts.next().unwrap();
    let (ek, e) = parts.next().unwrap();
    r.writes_kept += kept;
    r.writes_dropped += pending - kept;
    r.entries_kept += ek;
    r.entries_dropped += e - ek;
}

fn sendonce(db: &Path, weak: Weakness) -> Command {
    let mut c = Command::new(BIN);
    c.arg("--db").arg(db).arg("-q");
    c.env_remove("SENDONCE_CRASH_AT").stdout(Stdio::null());
    weak.apply(&mut c);
    c
}

fn worker(db: &Path, spec: &str, name: &str, weak: Weakness) -> Command {
    let mut c = crate::crash::workers::worker_cmd(db, spec, name, &WORKER_ARGS);
    weak.apply(&mut c);
    c
}

fn adopt(db: &Path, weak: Weakness) {
    let st = sendonce(db, weak).arg("adopt").status().unwrap();
    assert!(st.success(), "sendonce adopt {}: {st:?}", db.display());
}

/// One opt-out of a recipient of the round's campaign, as its own process.
fn opt_out(db: &Path, who: u64, weak: Weakness) -> Child {
    sendonce(db, weak)
        .args(["suppress", "add", "--account", "1", "--channel", "email"])
        .arg(format!("user{who}@example.com"))
        .args(["--reason", "opt-out"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// A fresh round: an approved campaign of `n` recipients copied onto a new cut filesystem
/// and adopted there, everything synced. Returns (env, disk, mnt, campaign id).
fn new_round(n: usize) -> (Env, PathBuf, PathBuf, String) {
    let env = Env::new();
    let cid = template(&env, n);
    let disk = env.path("disk");
    let mnt = env.path("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    // The outbox's own directory: no sync of the database's directory (SQLite syncs it when
    // it makes its -wal) can make the outbox's name durable by chance.
    std::fs::create_dir_all(disk.join("out")).unwrap();
    // The template, checkpointed, is the disk's first content.
    env.sqlite()
        .execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .unwrap();
    std::fs::copy(&env.db, disk.join("sendonce.db")).unwrap();
    (env, disk, mnt, cid)
}

/// What a control run breaks on purpose.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Weakness {
    None,
    /// Every connection at `synchronous=NORMAL`.
    SyncNormal,
    /// The outbox acknowledges a line without fsyncing it.
    OutboxNoFsync,
}

impl Weakness {
    fn apply(self, c: &mut Command) {
        match self {
            Weakness::None => {}
            Weakness::SyncNormal => {
                c.env("SENDONCE_TEST_SYNC", "normal");
            }
            Weakness::OutboxNoFsync => {
                c.env("SENDONCE_TEST_OUTBOX_NO_FSYNC", "1");
            }
        }
    }
}

/// One campaign on its own cut disk, and where its messages go.
struct Round {
    /// First, so it stops before the directory it writes in goes.
    _fake: Option<Fake>,
    env: Env,
    disk: PathBuf,
    mnt: PathBuf,
    db: PathBuf,
    cid: String,
    spec: String,
    /// The delivery log the checker reads: the remote fake's, or the outbox.
    log: PathBuf,
    route: Route,
    weak: Weakness,
}

/// Recipients of each round's campaign.
const RECIPIENTS: u64 = 200;

impl Round {
    fn start(route: Route, weak: Weakness, rng: &mut Rng) -> Round {
        let (env, disk, mnt, cid) = new_round(RECIPIENTS as usize);
        let db = mnt.join("sendonce.db");
        let fake = match route {
            Route::Remote => Some(start_fake(
                &env.path("deliveries.jsonl"),
                false,
                &[
                    "--request-log",
                    env.path("requests.jsonl").to_str().unwrap(),
                    "--latency",
                    "1ms..5ms",
                ],
            )),
            Route::Outbox => None,
        };
        let (spec, log) = match &fake {
            Some(f) => (webhook_spec(f, false), f.log.clone()),
            None => {
                let out = mnt.join("out").join("outbox.jsonl");
                (format!("outbox:{}?idempotent=false", out.display()), out)
            }
        };
        let first = Mounted::boot(&disk, &mnt, rng.next());
        adopt(&db, weak);
        first.shutdown();
        Round {
            _fake: fake,
            env,
            disk,
            mnt,
            db,
            cid,
            spec,
            log,
            route,
            weak,
        }
    }

    /// Boot, run the workers (and maybe an opt-out) for a random moment, kill everything and
    /// cut the power. True when a worker had finished the campaign before the cut.
    fn cut_once(&self, rng: &mut Rng, r: &mut Report) -> bool {
        let boot = Mounted::boot(&self.disk, &self.mnt, rng.next());
        let mut procs: Vec<Child> = (0..WORKERS)
            .map(|i| {
                worker(&self.db, &self.spec, &format!("w{i}-{}", r.cuts), self.weak)
                    .spawn()
                    .unwrap()
            })
            .collect();
        if rng.below(2) == 0 {
            procs.push(opt_out(&self.db, rng.below(RECIPIENTS), self.weak));
        }
        std::thread::sleep(Duration::from_millis(30 + rng.below(500)));
        let (mut refused, mut finished) = (false, false);
        for (i, p) in procs.iter_mut().enumerate() {
            match p.try_wait().unwrap() {
                Some(st) if i < WORKERS && st.code() == Some(5) => refused = true,
                Some(st) if i < WORKERS && matches!(st.code(), Some(0) | Some(3)) => {
                    finished = true
                }
                Some(st) if i < WORKERS => panic!("worker exited {st:?}"),
                _ => {}
            }
            let _ = p.kill(); // SIGKILL
            p.wait().unwrap();
        }
        parse_cut(&boot.cut(), r);
        r.cuts += 1;
        if refused {
            r.guard_refusals += 1;
            let b = Mounted::boot(&self.disk, &self.mnt, rng.next());
            adopt(&self.db, self.weak);
            b.shutdown();
        }
        finished
    }

    /// Power stays on: finish the campaign, then count what the checker finds.
    fn finish(&self, rng: &mut Rng, r: &mut Report) {
        let last = Mounted::boot(&self.disk, &self.mnt, rng.next());
        for attempt in 0.. {
            assert!(attempt < 20, "the finishing workers never finished");
            let st = worker(
                &self.db,
                &self.spec,
                &format!("finisher-{attempt}"),
                self.weak,
            )
            .status()
            .unwrap();
            assert!(!killed(st));
            match st.code() {
                Some(0) | Some(3) => break,
                Some(5) => {
                    r.guard_refusals += 1;
                    adopt(&self.db, self.weak);
                }
                other => panic!("finishing worker exited {other:?}"),
            }
        }
        let ok: String = rusqlite::Connection::open(&self.db)
            .unwrap()
            .query_row("PRAGMA integrity_check", [], |row| row.get(0))
            .unwrap();
        r.integrity_failures += (ok != "ok") as u64;
        let optouts: i64 = rusqlite::Connection::open(&self.db)
            .unwrap()
            .query_row("SELECT count(*) FROM suppressions", [], |row| row.get(0))
            .unwrap();
        r.optouts += optouts as u64;
        let doc = check(&self.db, &[&self.cid], &self.log);
        for (k, v) in [
            ("lost", &mut r.lost),
            ("duplicated", &mut r.duplicated),
            ("unexpected", &mut r.unexpected),
            ("sent_after_optout", &mut r.sent_after_optout),
            ("in_doubt", &mut r.in_doubt),
            ("in_doubt_delivered", &mut r.in_doubt_delivered),
        ] {
            *v += doc[k].as_u64().unwrap_or(0);
        }
        if let Route::Remote = self.route {
            let requests = self.env.path("requests.jsonl");
            r.in_doubt_never_called += never_called(&self.db, &self.cid, &requests);
        }
        println!(
            "round {}: {} cuts so far; check: {}",
            r.rounds,
            r.cuts,
            serde_json::json!({"lost": doc["lost"], "duplicated": doc["duplicated"],
                "delivered": doc["delivered"], "in_doubt": doc["in_doubt"], "pass": doc["pass"]})
        );
        r.docs.push(doc);
        last.shutdown();
    }
}

fn power_cuts(route: Route, weak: Weakness, cuts: u64) -> Report {
    let seed = seed();
    let mut rng = Rng(seed);
    println!("power cuts: seed {seed}, route {route:?}, weakened: {weak:?}");
    let mut r = Report::default();
    while r.cuts < cuts {
        r.rounds += 1;
        let round = Round::start(route, weak, &mut rng);
        while r.cuts < cuts && !round.cut_once(&mut rng, &mut r) {}
        round.finish(&mut rng, &mut r);
    }
    println!("{r:#?}", r = Summary(&r));
    r
}

/// The report without the checker documents.
struct Summary<'a>(&'a Report);
impl std::fmt::Debug for Summary<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self.0;
        f.debug_struct("Report")
            .field("cuts", &r.cuts)
            .field("rounds", &r.rounds)
            .field("writes_kept", &r.writes_kept)
            .field("writes_dropped", &r.writes_dropped)
            .field("entries_kept", &r.entries_kept)
            .field("entries_dropped", &r.entries_dropped)
            .field("guard_refusals", &r.guard_refusals)
            .field("lost", &r.lost)
            .field("duplicated", &r.duplicated)
            .field("unexpected", &r.unexpected)
            .field("sent_after_optout", &r.sent_after_optout)
            .field("in_doubt", &r.in_doubt)
            .field("in_doubt_delivered", &r.in_doubt_delivered)
            .field("in_doubt_never_called", &r.in_doubt_never_called)
            .field("integrity_failures", &r.integrity_failures)
            .field("optouts", &r.optouts)
            .finish()
    }
}

/// Rows in doubt whose job the remote provider never received a request for.
fn never_called(db: &Path, cid: &str, request_log: &Path) -> u64 {
    let requests = crate::crash::workers::requests(request_log);
    let c = rusqlite::Connection::open(db).unwrap();
    let mut st = c
        .prepare("SELECT job_id FROM sends WHERE campaign_id = ?1 AND status = 'in_doubt'")
        .unwrap();
    let jobs: Vec<String> = st
        .query_map([cid], |row| row.get(0))
        .unwrap()
        .map(|j| j.unwrap())
        .collect();
    jobs.iter()
        .filter(|j| !requests.contains_key(&sendonce::domain::model::idempotency_key(j)))
        .count() as u64
}

fn assert_held(r: &Report, what: &str) {
    assert!(r.cuts >= cuts_wanted(), "{what}: only {} cuts", r.cuts);
    assert!(
        r.writes_dropped > 0,
        "{what}: no cut dropped an unsynced write: the filesystem is not cutting anything"
    );
    for doc in &r.docs {
        assert_pass(doc, what);
    }
    assert_eq!(
        r.guard_refusals, 0,
        "{what}: the database went behind its watermark"
    );
    assert_eq!(r.integrity_failures, 0, "{what}: integrity_check failed");
    assert!(r.optouts > 0, "{what}: no opt-out ever committed");
    // A cut parks in doubt at most the rows the killed workers held with their dispatch
    // marker before calling: --concurrency per worker per cut, in total over the cuts (counted
    // for the remote provider only: its request log says whether a call arrived).
    assert!(
        r.in_doubt_never_called <= r.cuts * WORKERS as u64 * CONCURRENCY,
        "{what}: {} rows in doubt never called, more than the cuts could hold",
        r.in_doubt_never_called
    );
}

#[test]
fn power_cuts_lose_nothing_and_send_nothing_twice_remote_provider() {
    let r = power_cuts(Route::Remote, Weakness::None, cuts_wanted());
    assert_held(&r, "remote provider, synchronous=FULL");
}

#[test]
fn power_cuts_lose_nothing_and_send_nothing_twice_outbox() {
    let r = power_cuts(Route::Outbox, Weakness::None, cuts_wanted());
    assert_held(&r, "outbox on the cut disk, synchronous=FULL");
}

/// The control: the same cuts at `synchronous=NORMAL` (a commit is not fsynced) must be
/// caught: a delivery sent twice or lost, or a database refused for going back in time.
#[test]
fn the_suite_catches_synchronous_normal() {
    let cuts = (cuts_wanted() / 2).max(20);
    let r = power_cuts(Route::Remote, Weakness::SyncNormal, cuts);
    let caught = r.duplicated + r.lost + r.guard_refusals;
    assert!(
        caught > 0,
        "synchronous=NORMAL went through {} cuts unnoticed: {:?}",
        r.cuts,
        Summary(&r)
    );
}

/// The second control: an outbox that acknowledges a line before fsyncing it loses, at a cut,
/// deliveries the ledger has already confirmed, and the suite must say so.
#[test]
fn the_suite_catches_an_outbox_without_fsync() {
    let cuts = (cuts_wanted() / 2).max(20);
    let r = power_cuts(Route::Outbox, Weakness::OutboxNoFsync, cuts);
    assert!(
        r.lost > 0,
        "an outbox without fsync went through {} cuts unnoticed: {:?}",
        r.cuts,
        Summary(&r)
    );
}

// ---------------------------------------------------------------- notify

fn notify(state: &Path, spec: &str, key: &str, to: &str) -> Command {
    let mut c = Command::new(BIN);
    c.args(["-q", "notify", "--provider", spec, "--key", key, "--to", to])
        .args([
            "--from",
            "ci@example.org",
            "--subject",
            "build",
            "--message",
            "done",
        ])
        .arg("--state")
        .arg(state)
        .env_remove("SENDONCE_CRASH_AT")
        .env("SENDONCE_TEST_NOTIFY_LEASE_MS", "1000")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

/// `sendonce notify` keeps its ledger in a state file (SQLite) on the cut disk: a first run is
/// killed and the power cut at a random moment, the retry runs with the power on. A remote
/// provider without idempotency keys sees each message at most once, and exactly once when the
/// retry says sent (exit 0); in doubt (exit 3) only where the call may have gone out.
#[test]
fn power_cuts_during_notify_send_each_message_at_most_once() {
    let seed = seed();
    let mut rng = Rng(seed ^ 0x6e6f_7469_6679);
    println!("notify power cuts: seed {seed}");
    let env = Env::new();
    let (disk, mnt) = (env.path("disk"), env.path("mnt"));
    std::fs::create_dir_all(&disk).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    let fake = start_fake(
        &env.path("deliveries.jsonl"),
        false,
        &["--latency", "1ms..30ms"],
    );
    let spec = webhook_spec(&fake, false);
    let state = mnt.join("notify.db");
    let mut r = Report::default();
    let mut outcomes = Vec::new();
    // Cuts by where they landed: [killed before the call, killed after it, finished without
    // a call (impossible), finished].
    let mut windows = [0u64; 4];
    for k in 0..(cuts_wanted() / 2).max(20) {
        let (key, to) = (format!("job-{k}"), format!("dev{k}@example.com"));
        let boot = Mounted::boot(&disk, &mnt, rng.next());
        let mut first = notify(&state, &spec, &key, &to).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(rng.below(250)));
        let finished = first.try_wait().unwrap().is_some();
        let _ = first.kill(); // SIGKILL, if it has not finished
        first.wait().unwrap();
        // The cut landed after the call went out and before the first run ended.
        let called = fake.lines().iter().any(|l| l.to == to);
        windows[usize::from(finished) * 2 + usize::from(called)] += 1;
        parse_cut(&boot.cut(), &mut r);
        r.cuts += 1;
        let boot = Mounted::boot(&disk, &mnt, rng.next());
        let retry = notify(&state, &spec, &key, &to).status().unwrap();
        boot.shutdown();
        outcomes.push((to, retry.code()));
    }
    let mut per_to: std::collections::HashMap<String, u64> = Default::default();
    for line in fake.lines() {
        *per_to.entry(line.to).or_default() += 1;
    }
    let (mut sent, mut doubt) = (0, 0);
    for (to, code) in &outcomes {
        let got = per_to.get(to).copied().unwrap_or(0);
        match code {
            Some(0) => {
                sent += 1;
                assert_eq!(
                    got, 1,
                    "{to}: the retry said sent; deliveries {got} (seed {seed})"
                );
            }
            Some(3) => {
                doubt += 1;
                assert!(
                    got <= 1,
                    "{to}: in doubt, delivered {got} times (seed {seed})"
                );
            }
            other => panic!("{to}: notify's retry exited {other:?} (seed {seed})"),
        }
    }
    println!(
        "notify: {} cuts (killed before its call {}, killed after it {}, finished {}), \
         retries sent {sent}, in doubt {doubt}; {:?}",
        r.cuts,
        windows[0],
        windows[1],
        windows[3],
        Summary(&r)
    );
    assert!(r.writes_dropped > 0, "no cut dropped an unsynced write");
    assert!(
        windows[0] > 0 && windows[1] + windows[3] > 0,
        "the cuts never landed on both sides of the call: {windows:?}"
    );
}

// ---------------------------------------------------------------- the fake provider's log

/// Eight clients posting to the fake at `url` at once until it dies; the job ids of the
/// messages it acknowledged.
fn post_until_killed(
    rt: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    url: &str,
    cut: u64,
) -> Vec<String> {
    rt.block_on(async {
        let mut tasks = Vec::new();
        for t in 0..8 {
            let (client, url) = (client.clone(), url.to_string());
            tasks.push(tokio::spawn(async move {
                let mut got = Vec::new();
                for i in 0.. {
                    let job = format!("c{cut}-t{t}-m{i}");
                    let body = serde_json::json!({"job_id": job, "to": "a@example.com",
                        "channel": "email", "subject": "Hi", "body": "hello",
                        "from": "news@example.com"});
                    let res = client
                        .post(&url)
                        .header("Idempotency-Key", format!("key-{job}"))
                        .json(&body)
                        .send()
                        .await;
                    match res {
                        Ok(r) if r.status().is_success() => got.push(job),
                        Ok(r) => panic!("the fake answered {}", r.status()),
                        Err(_) => break, // killed
                    }
                }
                got
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all
    })
}

/// `sendonce fake-provider` with its delivery log on the cut disk: a client posts messages one
/// after another and notes each one acknowledged (200); at a random moment the fake is killed
/// and the power cut, and it is started again on what survived. Every acknowledged message is
/// in the log at the end, once, and the fake always starts again on a log that a cut tore.
#[test]
fn power_cuts_keep_every_message_the_fake_provider_acknowledged() {
    let seed = seed();
    let mut rng = Rng(seed ^ 0x6661_6b65);
    println!("fake provider power cuts: seed {seed}");
    let env = Env::new();
    let (disk, mnt) = (env.path("disk"), env.path("mnt"));
    std::fs::create_dir_all(&disk).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    let rt = crate::common::rt();
    let client = crate::common::client();
    let mut acked: Vec<String> = Vec::new();
    let mut r = Report::default();
    for cut in 0..(cuts_wanted() / 2).max(20) {
        let boot = Mounted::boot(&disk, &mnt, rng.next());
        let mut fake = Fake::start(&mnt.join("log.jsonl"), &["--no-idempotent"]);
        let url = fake.url("/send");
        let stop = Instant::now() + Duration::from_millis(20 + rng.below(300));
        // Eight clients at once, and the kill lands while they send: often between a
        // group's write and its fsync.
        let pid = fake.child.id() as i32;
        let killer = std::thread::spawn(move || {
            std::thread::sleep(stop.saturating_duration_since(Instant::now()));
            // SAFETY: kill(2) on the fake, our child, not reaped before this thread is joined.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        });
        let got = post_until_killed(&rt, &client, &url, cut);
        acked.extend(got);
        killer.join().unwrap();
        let _ = fake.child.wait();
        parse_cut(&boot.cut(), &mut r);
        r.cuts += 1;
    }
    let boot = Mounted::boot(&disk, &mnt, rng.next());
    // It starts again on the torn log, and reads back what it kept.
    let fake = Fake::start(&mnt.join("log.jsonl"), &["--no-idempotent"]);
    let mut seen: std::collections::HashMap<String, u64> = Default::default();
    for line in fake.lines() {
        *seen.entry(line.job_id).or_default() += 1;
    }
    drop(fake);
    boot.shutdown();
    let missing: Vec<&String> = acked.iter().filter(|j| !seen.contains_key(*j)).collect();
    let twice: Vec<(&String, &u64)> = seen.iter().filter(|(_, n)| **n > 1).collect();
    println!(
        "fake provider: {} cuts, {} messages acknowledged, {} in the log; {:?}",
        r.cuts,
        acked.len(),
        seen.len(),
        Summary(&r)
    );
    assert!(
        acked.len() > 100,
        "too few messages to mean anything: {}",
        acked.len()
    );
    assert!(
        missing.is_empty(),
        "acknowledged but lost: {:?} (seed {seed})",
        &missing[..missing.len().min(5)]
    );
    assert!(
        twice.is_empty(),
        "in the log twice: {twice:?} (seed {seed})"
    );
    // Not asserted: that a cut dropped a write here. The fake fsyncs each group before it
    // answers, so only a kill between a group's write and its fsync leaves one to drop (a few
    // per 50 cuts); the other tests show the filesystem drops what it should.
}

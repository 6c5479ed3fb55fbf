//! Events out under SIGKILL (issue 42): two `sendonce run` workers send a campaign and deliver
//! its `send.sent` events to a receiver (tests/support/hook_receiver.py, verifying with the
//! `standardwebhooks` package) that fails 30% of the calls and keeps 10% without answering,
//! while one worker or the other is killed at random and started again. At the end every event
//! has arrived at least once (the receiver de-duplicates by `webhook-id` to exactly one per
//! event), each arrival is the event the feed shows, and nothing else arrived. On SQLite and on
//! PostgreSQL.

use crate::common::Env;
use crate::crash::workers::Rng;
use crate::http::events_out::{assert_received_once_each, free_port, Receiver};
use serde_json::Value;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const RECIPIENTS: usize = 150;

fn worker(env: &Env, name: &str) -> Child {
    env.cmd()
        .args(["run", "--worker-id", name, "--lease", "3s", "--provider"])
        .arg(format!("outbox:{}", env.path("outbox.jsonl").display()))
        .env("SENDONCE_EVENTS_ALLOW", "127.0.0.1")
        .env("SENDONCE_EVENTS_RETRY_BASE", "200ms")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn sendonce run")
}

/// Every `send.sent` event of account acme, through `sendonce events list`.
fn feed(env: &Env) -> Vec<Value> {
    let mut out = Vec::new();
    let mut after = "0-0".to_string();
    loop {
        let doc = env.ok(&[
            "--json",
            "events",
            "list",
            "--account",
            "acme",
            "--types",
            "send.sent",
            "--limit",
            "500",
            "--after",
            &after,
        ]);
        let page: Value = serde_json::from_str(&doc).unwrap();
        let events = page["events"].as_array().unwrap().clone();
        if events.is_empty() {
            return out;
        }
        out.extend(events);
        after = page["next"].as_str().unwrap().to_string();
    }
}

fn kill(c: &mut Child) {
    let _ = c.kill();
    let _ = c.wait();
}

fn killed_workers_deliver_every_event(env: &Env, seed: u64) {
    let (_, cid) = env.setup_campaign(RECIPIENTS);
    env.ok(&["campaign", "approve", &cid]);
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/hook");
    let out = env
        .cmd()
        .args([
            "--json",
            "endpoint",
            "add",
            "--account",
            "acme",
            "--url",
            &url,
        ])
        .args(["--types", "send.sent"])
        .env("SENDONCE_EVENTS_ALLOW", "127.0.0.1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let made: Value = serde_json::from_slice(&out.stdout).unwrap();
    let receiver = Receiver::start(env, port, &[made["secret"].as_str().unwrap()], 0.3, 0.1);
    let mut rng = Rng(seed);
    let mut workers = [worker(env, "w0"), worker(env, "w1")];
    let mut kills = 0;
    let chaos_until = Instant::now() + Duration::from_secs(15);
    while Instant::now() < chaos_until {
        std::thread::sleep(Duration::from_millis(200 + rng.below(800)));
        let i = rng.below(2) as usize;
        kill(&mut workers[i]);
        kills += 1;
        workers[i] = worker(env, &format!("w{i}-{kills}"));
    }
    // Calm: the workers finish the campaign and the deliveries (leases of killed workers
    // expire, failed calls are retried).
    let deadline = Instant::now() + Duration::from_secs(90);
    let (events, received) = loop {
        std::thread::sleep(Duration::from_secs(2));
        let events = feed(env);
        let got = receiver.received();
        let ids: std::collections::HashSet<&str> =
            got.iter().filter_map(|r| r["id"].as_str()).collect();
        let status: Value =
            serde_json::from_str(&env.ok(&["--json", "campaign", "status", &cid])).unwrap();
        let sent = status["sent"].as_u64().unwrap() as usize;
        let busy = status["queued"].as_u64().unwrap() + status["leased"].as_u64().unwrap();
        if busy == 0 && sent > 0 && events.len() == sent && ids.len() == sent {
            break (events, got);
        }
        assert!(
            Instant::now() < deadline,
            "seed {seed}: {} events, {} delivered, {sent} sent\n{}",
            events.len(),
            ids.len(),
            env.ok(&["endpoint", "show", "--account", "acme", "1"])
        );
    };
    for w in &mut workers {
        kill(w);
    }
    let (n, arrivals) = assert_received_once_each(&events, &received);
    println!("seed {seed}: {kills} kills, {n} events, {arrivals} arrivals");
    assert!(kills >= 10, "only {kills} kills");
}

#[test]
fn killed_workers_deliver_every_event_at_least_once_on_sqlite() {
    let env = Env::new();
    killed_workers_deliver_every_event(&env, 42);
}

#[test]
fn killed_workers_deliver_every_event_at_least_once_on_postgresql() {
    let mut env = Env::new();
    env.db = std::path::PathBuf::from(crate::common::pg::shared().fresh_url());
    killed_workers_deliver_every_event(&env, 7);
}

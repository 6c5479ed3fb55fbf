//! Send windows under kills, with the injectable clock (`SENDONCE_TEST_CLOCK_OFFSET_MS`):
//! workers started at simulated times across a day and a DST change, each SIGKILLed at a
//! random moment. Every recipient gets the campaign once, and only inside its send window in
//! its own zone, as Python's zoneinfo reads the delivery times the provider recorded.

use super::workers::{killed, worker_cmd};
use crate::common::{deliveries, Env};
use sendonce::domain::clock::now_ms;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The recipients' zones, by index in their address (`u{i}-{zone}@x.com`); the last one has
/// no `tz` attribute and falls back to the account's zone, Kathmandu (UTC+5:45).
const ZONES: &[&str] = &[
    "America/New_York",
    "Europe/Lisbon",
    "Australia/Lord_Howe",
    "Asia/Tokyo",
    "",
];
const ACCOUNT_ZONE: &str = "Asia/Kathmandu";

/// The crash points a worker may die at (the moments a send is half done).
const POINTS: &[&str] = &[
    "after_claim_commit",
    "after_dispatch_mark",
    "after_provider_accept",
    "mid_confirm_group",
    "after_confirm_commit",
];

/// A small deterministic generator (the kill schedule is printed with its seed).
fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

#[test]
fn killed_workers_send_each_recipient_once_inside_its_window() {
    let env = Env::new();
    let acct = env.setup_account();
    env.ok(&["account", "update", &acct, "--tz", ACCOUNT_ZONE]);
    let n = 300;
    let mut csv = String::from("email,tz\n");
    for i in 0..n {
        csv.push_str(&format!(
            "u{i}-{}@x.com,{}\n",
            i % ZONES.len(),
            ZONES[i % ZONES.len()]
        ));
    }
    let f = env.write("subs.csv", csv);
    env.import_csv(&acct, &f);
    let body = env.write("b.txt", "Good morning\n");
    let cid = env.ok(&[
        "campaign",
        "create",
        "--account",
        &acct,
        "--name",
        "morning",
        "--channel",
        "email",
        "--from",
        "news@example.org",
        "--subject",
        "Morning",
        "--body-file",
        body.to_str().unwrap(),
        "--send-window",
        "09:00-10:00",
    ]);
    env.ok(&["campaign", "approve", &cid]);
    let outbox = env.path("outbox.jsonl");
    let spec = format!("outbox:{}", outbox.display());
    // Simulated time: from 2027-03-27 12:02 UTC, five minutes a step, for 22 hours (Lisbon
    // moves to summer time at 01:00 UTC on the 28th; every zone's first window falls inside).
    // Steps fall at 2, 7, … 57 minutes past the hour, never within a worker's life of a
    // window's edge in any of these zones. Each step runs up to three workers, each killed at
    // a random crash point (the provider accepted, nothing recorded yet; …) or a random time.
    let t0 = sendonce::domain::clock::parse_rfc3339_ms("2027-03-27T12:02:00Z").unwrap();
    let seed0 = now_ms() as u64 | 1;
    let mut seed = seed0;
    let (mut kills, mut workers) = (0, 0);
    let steps = 22 * 12;
    for step in 0..steps {
        let sim = t0 + step * 300_000;
        for k in 0..3 {
            let mut cmd = worker_cmd(&env.db, &spec, &format!("w{step}-{k}"), &[]);
            cmd.env(
                "SENDONCE_TEST_CLOCK_OFFSET_MS",
                (sim - now_ms()).to_string(),
            );
            let point = POINTS[next(&mut seed) as usize % POINTS.len()];
            if next(&mut seed).is_multiple_of(2) {
                cmd.env(
                    "SENDONCE_CRASH_AT",
                    format!("{point}:{}", 1 + next(&mut seed) % 4),
                );
            }
            let mut w = cmd.spawn().unwrap();
            std::thread::sleep(Duration::from_millis(next(&mut seed) % 120));
            let _ = w.kill();
            let died = killed(w.wait().unwrap());
            kills += usize::from(died);
            workers += 1;
            if !died {
                break;
            }
        }
    }
    // After the last window: whatever a kill left is finished.
    let end = t0 + steps * 300_000;
    let code = run_to_completion_at(&env, &spec, end);
    assert_eq!(code, 0, "seed {seed0}");
    eprintln!("{workers} workers, {kills} killed (seed {seed0})");
    let sent = env.count(&format!(
        "SELECT count(*) FROM sends WHERE campaign_id = {cid} AND status = 'sent'"
    ));
    assert_eq!(sent, n as i64, "every row sent (seed {seed0})");
    let got = deliveries(&outbox);
    assert_eq!(got.len(), n, "every recipient reached (seed {seed0})");
    assert!(
        got.values().all(|&k| k == 1),
        "someone got two (seed {seed0})"
    );
    let outside = outside_windows(&outbox);
    assert!(
        outside.is_empty(),
        "delivered outside the window (seed {seed0}): {outside:?}"
    );
}

/// Run workers with the clock at simulated time `at` until one exits by itself; its code.
fn run_to_completion_at(env: &Env, spec: &str, at: i64) -> i32 {
    for attempt in 0..20 {
        let st = worker_cmd(&env.db, spec, &format!("finisher-{attempt}"), &[])
            .env("SENDONCE_TEST_CLOCK_OFFSET_MS", (at - now_ms()).to_string())
            .status()
            .unwrap();
        if !killed(st) {
            return st.code().unwrap_or(-1);
        }
    }
    panic!("the finisher kept dying");
}

/// The deliveries whose local time, in the recipient's zone as Python's zoneinfo has it, is
/// outside 09:00-10:00.
fn outside_windows(outbox: &std::path::Path) -> Vec<String> {
    let lines: Vec<serde_json::Value> = sendonce::provider::deliverylog::read_lines(outbox)
        .unwrap()
        .into_iter()
        .filter(|l| !l.replay)
        .map(|l| {
            let zone =
                l.to.split('-')
                    .nth(1)
                    .and_then(|z| z.split('@').next())
                    .and_then(|k| k.parse::<usize>().ok())
                    .map(|k| ZONES[k])
                    .unwrap_or("");
            let zone = if zone.is_empty() { ACCOUNT_ZONE } else { zone };
            serde_json::json!([l.to, zone, l.at])
        })
        .collect();
    let script = "import json, sys\nfrom datetime import datetime, timezone\nfrom zoneinfo import ZoneInfo\n\
        bad = []\nfor to, zone, at in json.load(sys.stdin):\n\
        \x20   t = datetime.fromtimestamp(at / 1000, tz=timezone.utc).astimezone(ZoneInfo(zone))\n\
        \x20   if not (9 <= t.hour < 10):\n\
        \x20       bad.append(f'{to} {zone} {t.isoformat()}')\n\
        print(json.dumps(bad))\n";
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let input = serde_json::to_vec(&lines).unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the zoneinfo check failed");
    assert_eq!(lines.len(), 300, "deliveries read");
    serde_json::from_slice(&out.stdout).unwrap()
}

//! Send windows and SMS quiet hours: the first open instant checked against Python's zoneinfo
//! across DST changes (tier 1), and the claim holding rows outside their window until it opens.

#[cfg(feature = "tier1")]
mod zoneinfo {
    use sendonce::domain::window::{country_zones, next_open, zone, Rule, Window};
    use serde_json::{json, Value};
    use std::io::Write;
    use std::path::Path;
    use std::process::{Command, Stdio};

    /// Unix ms of an RFC 3339 instant.
    fn ms(s: &str) -> i64 {
        sendonce::domain::clock::parse_rfc3339_ms(s).unwrap()
    }

    /// Each zone with its two 2026 transitions (UTC dates), and windows that start, end or lie
    /// inside the hours those transitions skip or repeat.
    const ZONES: &[(&str, [&str; 2])] = &[
        (
            "America/New_York",
            ["2026-03-08T07:00:00Z", "2026-11-01T06:00:00Z"],
        ),
        (
            "Europe/Lisbon",
            ["2026-03-29T01:00:00Z", "2026-10-25T01:00:00Z"],
        ),
        (
            "Australia/Lord_Howe",
            ["2026-04-04T15:00:00Z", "2026-10-03T15:30:00Z"],
        ),
        (
            "Asia/Kathmandu",
            ["2026-03-08T07:00:00Z", "2026-11-01T06:00:00Z"],
        ),
    ];
    const WINDOWS: &[&str] = &[
        "08:00-21:00",
        "01:30-02:15",
        "02:30-03:30",
        "02:00-02:30",
        "22:00-06:00",
        "23:45-00:15",
        "00:00-01:00",
    ];

    /// Our answer and Python's, case by case, for one-zone cases around every transition and
    /// for a country's zones together (the US's and Australia's quiet hours).
    #[test]
    fn next_open_agrees_with_python_zoneinfo_across_dst_changes() {
        let mut cases = Vec::new();
        for (z, transitions) in ZONES {
            for t in transitions {
                // Every 37 minutes from a day before the transition to a day after it.
                for k in 0..78 {
                    let now = ms(t) - 24 * 3600 * 1000 + k * 37 * 60 * 1000 + 1234;
                    for w in WINDOWS {
                        cases.push((now, vec![(w.to_string(), vec![z.to_string()])]));
                    }
                }
            }
        }
        for cc in ["US", "AU"] {
            let zones: Vec<String> = country_zones(cc).iter().map(|s| s.to_string()).collect();
            for t in [
                "2026-03-08T07:00:00Z",
                "2026-04-04T15:00:00Z",
                "2026-11-01T06:00:00Z",
            ] {
                for k in 0..12 {
                    let now = ms(t) - 12 * 3600 * 1000 + k * 119 * 60 * 1000;
                    cases.push((now, vec![("08:00-21:00".into(), zones.clone())]));
                    cases.push((
                        now,
                        vec![
                            ("08:00-21:00".into(), zones.clone()),
                            ("09:00-20:00".into(), vec!["America/Chicago".into()]),
                        ],
                    ));
                }
            }
        }
        let ours: Vec<Value> = cases.iter().map(|(now, rules)| ours(*now, rules)).collect();
        let theirs = python(&cases);
        assert_eq!(theirs.len(), cases.len());
        let mut wrong = Vec::new();
        for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            if a != b {
                wrong.push(format!("{:?}: ours {a}, zoneinfo {b}", cases[i]));
            }
        }
        assert!(
            wrong.is_empty(),
            "{} of {} cases differ:\n{}",
            wrong.len(),
            cases.len(),
            wrong
                .iter()
                .take(20)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        );
        let opened = ours.iter().filter(|v| !v.is_null()).count();
        assert!(opened > cases.len() / 2, "only {opened} cases open at all");
        eprintln!("{} cases agree with zoneinfo", cases.len());
    }

    fn ours(now: i64, rules: &[(String, Vec<String>)]) -> Value {
        let built: Vec<(Window, Vec<_>)> = rules
            .iter()
            .map(|(w, zs)| {
                (
                    Window::parse(w).unwrap(),
                    zs.iter().map(|z| zone(z).unwrap()).collect(),
                )
            })
            .collect();
        let rules: Vec<Rule> = built
            .iter()
            .map(|(w, zs)| Rule {
                window: *w,
                zones: zs,
            })
            .collect();
        json!(next_open(now, &rules))
    }

    /// A case: now, and each rule's window with its zones.
    type Case = (i64, Vec<(String, Vec<String>)>);

    fn python(cases: &[Case]) -> Vec<Value> {
        let input: Vec<Value> = cases
            .iter()
            .map(|(now, rules)| {
                json!({"now_ms": now, "rules": rules.iter()
                    .map(|(w, zs)| json!({"window": w, "zones": zs})).collect::<Vec<_>>()})
            })
            .collect();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/zone_windows.py");
        let mut child = Command::new("python3")
            .arg(&script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run python3 tests/support/zone_windows.py");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(serde_json::to_string(&input).unwrap().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "zone_windows.py failed");
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

use crate::common::Env;
use serde_json::Value;

/// The current UTC time as (Unix ms, hour), after waiting out the last seconds of an hour
/// so the windows built from it hold while the test runs.
fn this_hour() -> (i64, i64) {
    loop {
        let now = sendonce::domain::clock::now_ms();
        let into_hour = now % 3_600_000;
        if into_hour < 3_600_000 - 60_000 {
            return (now - into_hour, (now / 3_600_000) % 24);
        }
        std::thread::sleep(std::time::Duration::from_secs(5));
    }
}

/// `HH:00-HH:00` from hour `a` to hour `b` (mod 24).
fn hours(a: i64, b: i64) -> String {
    format!("{:02}:00-{:02}:00", a.rem_euclid(24), b.rem_euclid(24))
}

/// (address, status, visible_at) of every send of a campaign.
fn sends(env: &Env, cid: &str) -> Vec<(String, String, i64)> {
    let c = env.sqlite();
    let mut st = c
        .prepare("SELECT address, status, visible_at FROM sends WHERE campaign_id = ?1 ORDER BY id")
        .unwrap();
    st.query_map([cid], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn outbox_addresses(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["to"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

/// SMS quiet hours, read in each recipient's zone: a `tz` attribute, else the number's
/// country. A recipient inside them is sent to; one outside is not leased and waits, queued,
/// until the hour its quiet hours end, whatever the campaign's (UTC) zone says; a recipient
/// whose zone is unknown is not held. `run --once` leaves the held rows and says when.
#[test]
fn sms_quiet_hours_hold_rows_in_the_recipients_zone_until_they_open() {
    let env = Env::new();
    let acct = env.setup_account();
    let (hour_start, h) = this_hour();
    let add = |phone: &str, tz: Option<&str>| {
        let mut a = vec!["subscriber", "add", "--account", &acct, "--phone", phone];
        let attr = tz.map(|z| format!("tz={z}"));
        if let Some(t) = &attr {
            a.extend(["--attr", t]);
        }
        env.ok(&a);
    };
    // Open from h+3 to h+5 local: closed in UTC, open at UTC+4, closed in Tokyo (UTC+9).
    add("+351912345001", Some("UTC"));
    add("+351912345002", Some("Etc/GMT-4"));
    add("+81312345678", None);
    // Sao Tome (+239, one zone: Africa/Sao_Tome, UTC+0) without tz: closed too.
    add("+2399812345", None);
    let body = env.write("sms.txt", "Your code is ready\n");
    let quiet = hours(h + 3, h + 5);
    let created = env.ok(&[
        "--json",
        "campaign",
        "create",
        "--account",
        &acct,
        "--name",
        "q",
        "--channel",
        "sms",
        "--body-file",
        body.to_str().unwrap(),
        "--sms-hours",
        &quiet,
    ]);
    let created: Value = serde_json::from_str(&created).unwrap();
    assert_eq!(created["sms_hours"], quiet.as_str());
    assert_eq!(created["tz"], "UTC");
    let cid = created["id"].to_string();
    env.ok(&["campaign", "approve", &cid]);
    let outbox = env.path("o.jsonl");
    let provider = format!("outbox:{}", outbox.display());
    let run = env.ok(&["run", "--once", "--provider", &provider]);
    assert!(
        run.contains("wait for their send window (3 held by this run"),
        "{run}"
    );
    assert_eq!(outbox_addresses(&outbox), vec!["+351912345002".to_string()]);
    let utc_open = hour_start + 3 * 3_600_000;
    let tokyo_open = hour_start + 18 * 3_600_000; // (h+3) JST is h-6 UTC: 18 hours on
    let want = vec![
        ("+351912345001".to_string(), "queued".to_string(), utc_open),
        ("+351912345002".to_string(), "sent".to_string(), 0),
        ("+81312345678".to_string(), "queued".to_string(), tokyo_open),
        ("+2399812345".to_string(), "queued".to_string(), utc_open),
    ];
    let got: Vec<_> = sends(&env, &cid)
        .into_iter()
        .map(|(a, s, v)| {
            let v = if s == "queued" { v } else { 0 };
            (a, s, v)
        })
        .collect();
    assert_eq!(got, want);
    let status = env.ok(&["campaign", "status", &cid]);
    let first = sendonce::domain::clock::format_ms(utc_open);
    assert!(
        status.contains(&format!("nothing is due until {first}")),
        "{status}"
    );
    // A second run leaves them where they are, sends nothing more, and says until when.
    let again = env.ok(&["run", "--once", "--provider", &provider]);
    assert!(
        again.contains(&format!("0 held by this run; the next is due at {first}")),
        "{again}"
    );
    assert_eq!(outbox_addresses(&outbox).len(), 1);
    env.assert_counters();
}

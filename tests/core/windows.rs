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

    fn python(cases: &[(i64, Vec<(String, Vec<String>)>)]) -> Vec<Value> {
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

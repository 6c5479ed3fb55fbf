//! Smoke test of `sendonce bench` at a tiny size: every section is present with positive
//! figures. No timing assertions: thresholds are read from the output, not asserted here.
// Some tests here need tools outside Rust (tier 1); without them their helpers go unused.
#![cfg_attr(not(feature = "tier1"), allow(unused_imports, dead_code))]

use crate::common::Env;

#[test]
fn bench_reports_every_section() {
    let env = Env::new();
    let dir = env.path("bench");
    let out = env.ok(&[
        "--json",
        "bench",
        "--recipients",
        "2000",
        "--scale",
        "20000",
        "--concurrency",
        "16",
        "--latency",
        "20ms",
        "--dir",
        dir.to_str().unwrap(),
    ]);
    let doc: serde_json::Value = serde_json::from_str(&out).expect("one JSON document");
    let positive = |path: &str| {
        let v = doc
            .pointer(path)
            .unwrap_or_else(|| panic!("{path} missing: {doc:#}"));
        let f = v
            .as_f64()
            .unwrap_or_else(|| panic!("{path} is not a number: {v}"));
        assert!(f > 0.0, "{path} = {f}: {doc:#}");
    };
    for p in [
        "/limit/recipients",
        "/limit/per_second",
        "/limit/minimal_per_second",
        "/limit/ratio_to_minimal",
        "/pipeline/null/sent",
        "/pipeline/null/per_second",
        "/pipeline/null/ratio_to_limit",
        "/pipeline/outbox/sent",
        "/pipeline/outbox/per_second",
        "/pipeline/outbox/ratio_to_limit",
        "/scale/recipients",
        "/scale/list_build_seconds",
        "/scale/run_per_second",
        "/scale/peak_rss_mib",
        "/scale/status_ms",
        "/list_build/account_wide/us_per_row",
        "/list_build/targeted/us_per_row",
        "/list_build/targeted/seconds_per_million",
        "/list_build/ratio",
        "/latency/per_second",
        "/latency/ideal_per_second",
        "/latency/ratio",
        "/latency/slot_idle_p99_ms",
        "/wal/max_mib_run",
        "/wal/max_mib_list_build",
        "/restart/ms_to_first_claim",
        "/restart/ms_to_first_claim_unchecked",
        "/notify/ms",
        "/notify/first_ms",
    ] {
        positive(p);
    }
    // Every recipient but the opted-out ones (one in 1000) was sent, in every section.
    assert_eq!(doc["limit"]["recipients"], 1998);
    assert_eq!(doc["pipeline"]["null"]["sent"], 1998);
    assert_eq!(doc["pipeline"]["outbox"]["sent"], 1998);
    assert_eq!(doc["scale"]["recipients"], 19_980);
    // Every subscriber is in one of the three lists: both builds produce a row for each
    // (queued, or suppressed for the opted-out ones).
    assert_list_build(&doc["list_build"], 20_000);
    assert_eq!(
        doc["restart"]["samples_ms"].as_array().map(|a| a.len()),
        Some(3)
    );
    // Each timed notify was a real delivery, logged by the loopback provider.
    assert_eq!(doc["notify"]["delivered"], 6);
    assert_eq!(
        doc["notify"]["samples_ms"].as_array().map(|a| a.len()),
        Some(5)
    );
    assert!(doc["plans"].as_array().is_some_and(|a| a.len() >= 20));
    assert_eq!(doc["targets"].as_array().map(|a| a.len()), Some(11));
    // The outbox really delivered one line per recipient.
    let lines = std::fs::read_to_string(dir.join("outbox.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 1998);
}

/// Section 3b of a report: the row counts, the memberships of three lists overlapping by a
/// third (list k: part k and the first third of part k+1), positive timings.
fn assert_list_build(lb: &serde_json::Value, n: u64) {
    let part = n / 3;
    assert_eq!(lb["subscribers"], n, "{lb}");
    assert_eq!(lb["lists"], 3, "{lb}");
    assert_eq!(lb["memberships"], 3 * (part + part / 3), "{lb}");
    for build in ["account_wide", "targeted"] {
        assert_eq!(lb[build]["rows"], n, "{build}: {lb}");
        let us = lb[build]["us_per_row"].as_f64().unwrap();
        assert!(us > 0.0, "{build}: {lb}");
        let secs = lb[build]["seconds"].as_f64().unwrap();
        assert!((us - secs * 1e6 / n as f64).abs() < 1e-6, "{build}: {lb}");
    }
}

#[test]
fn bench_runs_the_throughput_sections_alone_in_three_rounds() {
    let env = Env::new();
    let out = env.ok(&[
        "--json",
        "bench",
        "--only",
        "throughput",
        "--recipients",
        "1000",
    ]);
    let doc: serde_json::Value = serde_json::from_str(&out).expect("one JSON document");
    let rounds = doc["rounds"].as_array().expect("rounds");
    assert_eq!(rounds.len(), 3, "{doc:#}");
    for r in rounds {
        for k in ["limit", "minimal", "pipeline_null", "pipeline_outbox"] {
            assert!(r[k].as_f64().is_some_and(|v| v > 0.0), "{k}: {doc:#}");
        }
    }
    // The medians are medians of the rounds.
    let mut limits: Vec<f64> = rounds
        .iter()
        .map(|r| r["limit"].as_f64().unwrap())
        .collect();
    limits.sort_by(f64::total_cmp);
    assert_eq!(doc["medians"]["limit"].as_f64(), Some(limits[1]), "{doc:#}");
    assert!(doc.get("scale").is_none(), "{doc:#}");
}

#[test]
fn bench_runs_list_building_alone() {
    let env = Env::new();
    let out = env.ok(&["--json", "bench", "--only", "list-build", "--scale", "9000"]);
    let doc: serde_json::Value = serde_json::from_str(&out).expect("one JSON document");
    assert_list_build(&doc["list_build"], 9000);
    // Only that section, and the plans of its statements (without and with lists, and with a
    // filter).
    assert!(
        doc.get("pipeline").is_none() && doc.get("scale").is_none(),
        "{doc:#}"
    );
    let plans: Vec<&str> = doc["plans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        plans,
        [
            "list: insert chunk (email)",
            "list: insert chunk (email, lists)",
            "list: insert chunk (email, lists, filter)"
        ]
    );
    let text = env.ok(&["bench", "--only", "list-build", "--scale", "3000"]);
    assert!(
        text.contains("3 lists (3999 memberships), 3000 rows"),
        "{text}"
    );
}

/// `bench --db postgres://…`: both loops at 1, 2 and 4 workers with positive figures and every
/// row accounted for (the bench itself fails when a loop marks fewer rows than it queued); the
/// database is empty again after; a database that holds accounts is refused untouched.
#[cfg(feature = "tier1")]
#[test]
fn bench_on_postgres_runs_both_loops_and_leaves_the_database_empty() {
    let cluster = crate::common::pg::shared();
    let url = cluster.fresh_url();
    let env = Env::new();
    let bench = |extra: &[&str]| {
        let mut c = env.cmd();
        c.env("SENDONCE_DB", &url).env_remove("SENDONCE_PUBLIC_URL");
        c.args(["--json", "bench", "--recipients", "600", "--batch", "50"]);
        c.args(extra);
        c.output().expect("run sendonce bench")
    };
    // Env::cmd passes --db t.db; the URL must win for the bench: it is given with --db.
    let out = bench(&["--db", &url]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["store"], "postgres", "{doc:#}");
    let arms = doc["arms"].as_array().expect("arms");
    let workers: Vec<u64> = arms
        .iter()
        .map(|a| a["workers"].as_u64().unwrap())
        .collect();
    assert_eq!(workers, [1, 2, 4], "{doc:#}");
    for a in arms {
        for k in ["original_per_second", "pipeline_per_second", "ratio"] {
            let v = a[k].as_f64().unwrap_or(0.0);
            assert!(v > 0.0, "{k} = {v}: {doc:#}");
        }
        assert_eq!(a["rounds"].as_array().map(Vec::len), Some(3), "{doc:#}");
    }
    let db = db_name(&url);
    let left = cluster.psql(
        db,
        "SELECT (SELECT count(*) FROM accounts) + (SELECT count(*) FROM sends)
              + (SELECT count(*) FROM pg_tables WHERE tablename = 'sendonce_bench_original')",
    );
    assert_eq!(left.trim(), "0", "the bench left rows behind");
    // A database with an account is refused, and keeps its account.
    cluster.psql(
        db,
        "INSERT INTO accounts (name, created_at) VALUES ('prod', 0)",
    );
    let out = bench(&["--db", &url]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("holds accounts"), "{err}");
    assert_eq!(
        cluster.psql(db, "SELECT count(*) FROM accounts").trim(),
        "1"
    );
}

/// `bench --only dashboard` on a small campaign: every GET route of the dashboard timed (or
/// named as not timed), the states of the sends seeded as asked, and the table's flags.
#[test]
fn bench_times_every_dashboard_page() {
    let env = Env::new();
    let out = env.ok(&["--json", "bench", "--only", "dashboard", "--scale", "4000"]);
    let doc: serde_json::Value = serde_json::from_str(&out).expect("one JSON document");
    assert_eq!(doc["recipients"], 4000, "{doc:#}");
    let st = &doc["states"];
    let total: u64 = ["sent", "failed", "in_doubt", "queued", "suppressed"]
        .iter()
        .map(|k| st[k].as_u64().unwrap())
        .sum();
    assert_eq!(total, 4000, "{st}");
    for k in ["sent", "failed", "in_doubt", "queued", "suppressed"] {
        assert!(st[k].as_u64().unwrap() > 0, "{k}: {st}");
    }
    assert!(st["sent"].as_u64().unwrap() > 3000, "{st}");
    let pages = doc["pages"].as_array().unwrap();
    let skipped = doc["skipped"].as_array().unwrap();
    for (method, route) in sendonce::http::dashboard::route_list() {
        if method != "GET" {
            continue;
        }
        let timed = pages.iter().any(|p| p["route"] == route);
        let named = skipped
            .iter()
            .any(|s| s.as_str().unwrap().starts_with(&format!("{route}:")));
        assert!(timed || named, "{route} neither timed nor named: {doc:#}");
    }
    for p in pages {
        let status = p["status"].as_u64().unwrap();
        assert!(status == 200 || status == 303, "{p}");
        let (median, max) = (
            p["median_ms"].as_f64().unwrap(),
            p["max_ms"].as_f64().unwrap(),
        );
        assert!(median > 0.0 && max >= median, "{p}");
        assert_eq!(p["slow"], median > 100.0, "{p}");
    }
    let campaigns = pages
        .iter()
        .find(|p| p["path"] == "/admin/campaigns")
        .expect("the campaigns page was timed");
    assert_eq!(campaigns["status"], 200, "{campaigns}");
}

/// `bench --only inbox` on a small log: the fake started over it (start time and memory
/// read), every request answered 200 with what it should find, the flags true to the target.
#[test]
fn bench_times_the_fake_providers_inbox() {
    let env = Env::new();
    let out = env.ok(&["--json", "bench", "--only", "inbox", "--scale", "2000"]);
    let doc: serde_json::Value = serde_json::from_str(&out).expect("one JSON document");
    assert_eq!(doc["messages"], 2000, "{doc:#}");
    assert!(doc["start_ms"].as_f64().unwrap() > 0.0, "{doc:#}");
    assert!(doc["rss_start_kib"].as_u64().unwrap() > 0, "{doc:#}");
    assert!(doc["index_bytes"].as_u64().unwrap() > 0, "{doc:#}");
    let requests = doc["requests"].as_array().unwrap();
    assert!(requests.len() >= 10, "{doc:#}");
    for r in requests {
        assert_eq!(r["status"], 200, "{r}");
        let (median, max) = (
            r["median_ms"].as_f64().unwrap(),
            r["max_ms"].as_f64().unwrap(),
        );
        assert!(median > 0.0 && max >= median, "{r}");
    }
    let found = |what: &str| {
        let r = requests.iter().find(|r| r["what"] == what).expect(what);
        r["found"].as_u64().unwrap()
    };
    // Five messages per recipient; one job id each; a Mailpit page of 50.
    assert_eq!(found("assertions: filtered list"), 5);
    assert_eq!(found("assertions: by job id"), 1);
    assert_eq!(found("mailpit: messages page"), 2000);
    assert_eq!(found("mailpit: search to:"), 5);
}

/// `bench --compare-pg` (here through SENDONCE_BENCH_PG, as a URL with a password would be
/// given): the SQLite bench runs the original design's loop on PostgreSQL at 1, 2 and 4
/// workers in the same run, names the best and adds the comparison to its targets; the
/// database is empty again after.
#[cfg(feature = "tier1")]
#[test]
fn bench_compares_the_pipeline_with_the_original_loop_on_postgres() {
    let cluster = crate::common::pg::shared();
    // The cluster trusts the socket, so a password is accepted and ignored: it must still
    // never be printed.
    let url = cluster
        .fresh_url()
        .replacen("@localhost/", ":Secret-Pw-4242@localhost/", 1);
    let env = Env::new();
    let mut c = env.cmd();
    c.env("SENDONCE_BENCH_PG", &url);
    c.args([
        "--json",
        "bench",
        "--recipients",
        "600",
        "--batch",
        "50",
        "--scale",
        "2000",
        "--concurrency",
        "16",
        "--latency",
        "20ms",
    ]);
    let out = c.output().expect("run sendonce bench");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for stream in [&out.stdout, &out.stderr] {
        assert!(
            !String::from_utf8_lossy(stream).contains("Secret-Pw-4242"),
            "the password was printed"
        );
    }
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let o = &doc["original_pg"];
    let workers: Vec<u64> = o["per_workers"]
        .as_array()
        .expect("per_workers")
        .iter()
        .map(|w| w[0].as_u64().unwrap())
        .collect();
    assert_eq!(workers, [1, 2, 4], "{doc:#}");
    // One row per subscriber (the PostgreSQL side seeds no opt-outs).
    assert_eq!(o["rows"], 600, "{doc:#}");
    let best = o["best_per_second"].as_f64().unwrap_or(0.0);
    let max = o["per_workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w[1].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert!(best > 0.0 && best == max, "{doc:#}");
    let names: Vec<&str> = doc["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["what"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"pipeline (null) / original loop on PostgreSQL, best"),
        "{names:?}"
    );
    let db = db_name(&url);
    let left = cluster.psql(
        db,
        "SELECT (SELECT count(*) FROM accounts)
              + (SELECT count(*) FROM pg_tables WHERE tablename = 'sendonce_bench_original')",
    );
    assert_eq!(left.trim(), "0", "the bench left rows behind");
}

/// `--compare-pg` takes only a postgres:// URL and only with the whole SQLite bench; a refused
/// value is not repeated (it may hold a password).
#[test]
fn bench_refuses_a_comparison_it_would_not_run_without_repeating_it() {
    let env = Env::new();
    for (value, extra, says) in [
        (
            "host=/tmp password=Hidden-Pw-77 dbname=x",
            &[][..],
            "postgres://",
        ),
        (
            "postgres://u:Hidden-Pw-77@localhost/x",
            &["--only", "throughput"][..],
            "whole SQLite bench only",
        ),
    ] {
        let mut c = env.cmd();
        c.env("SENDONCE_BENCH_PG", value).arg("bench").args(extra);
        let out = c.output().expect("run sendonce bench");
        assert_eq!(out.status.code(), Some(2), "{value}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{err}");
        assert!(!err.contains("Hidden-Pw-77"), "{err}");
    }
}

/// The database of a throwaway cluster's URL, postgres://USER@localhost/DB?host=DIR&port=PORT.
fn db_name(url: &str) -> &str {
    url.split("@localhost/")
        .nth(1)
        .and_then(|rest| rest.split('?').next())
        .expect("a cluster URL")
}

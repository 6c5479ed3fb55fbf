//! `sendonce notify`: once per CI job across retries and re-runs, keyed on the CI environment.

use crate::common;
use crate::common::{deliveries, BIN};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

const CI_VARS: &[&str] = &[
    "GITHUB_ACTIONS",
    "GITLAB_CI",
    "BUILDKITE",
    "CIRCLECI",
    "JENKINS_URL",
    "CI_PIPELINE_NUMBER",
    "DRONE",
];

fn notify(env: &[(&str, &str)], args: &[&str]) -> common::Run {
    let mut c = Command::new(BIN);
    for v in CI_VARS {
        c.env_remove(v);
    }
    c.env_remove("SENDONCE_PROVIDER");
    c.envs(env.iter().copied()).arg("notify").args(args);
    c.stdin(Stdio::null());
    c.output().unwrap().into()
}

const GH: &[(&str, &str)] = &[
    ("GITHUB_ACTIONS", "true"),
    ("GITHUB_REPOSITORY", "acme/app"),
    ("GITHUB_RUN_ID", "9001"),
    ("GITHUB_JOB", "deploy"),
    ("GITHUB_RUN_ATTEMPT", "1"),
];

fn with_attempt(n: &'static str) -> Vec<(&'static str, &'static str)> {
    let mut v: Vec<_> = GH
        .iter()
        .copied()
        .filter(|(k, _)| *k != "GITHUB_RUN_ATTEMPT")
        .collect();
    v.push(("GITHUB_RUN_ATTEMPT", n));
    v
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn a_retried_job_notifies_once() {
    let d = tempfile::tempdir().unwrap();
    let state = d.path().join("state.db");
    let outbox = d.path().join("o.jsonl");
    let spec = format!("outbox:{}?idempotent=false", outbox.display());
    let args = [
        "--to",
        "+14155550100",
        "--to",
        "ops@example.com",
        "--message",
        "deploy ok",
        "--state",
        s(&state),
        "--provider",
        &spec,
    ];
    let first = notify(&with_attempt("1"), &args);
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert_eq!(first.stdout.matches("sent ").count(), 2, "{}", first.stdout);
    let second = notify(&with_attempt("2"), &args);
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert_eq!(
        second.stdout.matches("already sent").count(),
        2,
        "{}",
        second.stdout
    );
    let per_job = deliveries(&outbox);
    assert_eq!(per_job.len(), 2);
    assert!(per_job.values().all(|&n| n == 1), "{per_job:?}");
    // Another job of the same run is another message.
    let mut other: Vec<_> = GH
        .iter()
        .copied()
        .filter(|(k, _)| *k != "GITHUB_JOB")
        .collect();
    other.push(("GITHUB_JOB", "test"));
    let third = notify(&other, &args);
    assert_eq!(third.code, 0);
    assert_eq!(deliveries(&outbox).len(), 4);
}

#[test]
fn on_an_ephemeral_runner_the_provider_key_prevents_the_duplicate() {
    let d = tempfile::tempdir().unwrap();
    let outbox = d.path().join("o.jsonl");
    let spec = format!("outbox:{}", outbox.display()); // idempotent
    for attempt in ["1", "2"] {
        // A fresh state file each time: the runner forgot everything.
        let state = d.path().join(format!("state-{attempt}.db"));
        let r = notify(
            &with_attempt(attempt),
            &[
                "--to",
                "ops@example.com",
                "--message",
                "m",
                "--state",
                s(&state),
                "--provider",
                &spec,
            ],
        );
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
    let lines = sendonce::provider::deliverylog::read_lines(&outbox).unwrap();
    assert_eq!(lines.len(), 2);
    assert_eq!(
        lines.iter().filter(|l| !l.replay).count(),
        1,
        "the second call is a replay"
    );
    assert_eq!(lines[0].idempotency_key, lines[1].idempotency_key);
    // Without provider idempotency the README's warning holds: a forgotten ledger re-sends.
    let plain = d.path().join("p.jsonl");
    let spec = format!("outbox:{}?idempotent=false", plain.display());
    for attempt in ["1", "2"] {
        let state = d.path().join(format!("plain-{attempt}.db"));
        notify(
            &with_attempt(attempt),
            &[
                "--to",
                "ops@example.com",
                "--message",
                "m",
                "--state",
                s(&state),
                "--provider",
                &spec,
            ],
        );
    }
    assert_eq!(
        deliveries(&plain)["notify:github-actions:acme/app:9001:deploy:ops@example.com"],
        2
    );
}

#[test]
fn gitlab_retry_keeps_the_key() {
    let d = tempfile::tempdir().unwrap();
    let state = d.path().join("st.db");
    let outbox = d.path().join("o.jsonl");
    let spec = format!("outbox:{}?idempotent=false", outbox.display());
    for job_id in ["100", "101"] {
        let env = [
            ("GITLAB_CI", "true"),
            ("CI_PROJECT_ID", "5"),
            ("CI_PIPELINE_ID", "77"),
            ("CI_JOB_NAME", "deploy"),
            ("CI_JOB_ID", job_id),
        ];
        let r = notify(
            &env,
            &[
                "--to",
                "a@b.co",
                "--message",
                "m",
                "--state",
                s(&state),
                "--provider",
                &spec,
                "--json",
            ],
        );
        assert_eq!(r.code, 0, "{}", r.stderr);
        let doc: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
        assert_eq!(doc["key"], "gitlab-ci:5:77:deploy");
    }
    assert_eq!(deliveries(&outbox).len(), 1);
}

#[test]
fn outside_ci_it_needs_a_key() {
    let d = tempfile::tempdir().unwrap();
    let state = d.path().join("st.db");
    let r = notify(
        &[],
        &[
            "--to",
            "a@b.co",
            "--message",
            "m",
            "--state",
            s(&state),
            "--provider",
            "null",
        ],
    );
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("--key"), "{}", r.stderr);
    assert!(!state.exists(), "nothing written");
    let r = notify(
        &[],
        &[
            "--to",
            "a@b.co",
            "--message",
            "m",
            "--state",
            s(&state),
            "--provider",
            "null",
            "--key",
            "nightly-2026-12-02",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn bad_input_is_refused_before_anything_is_written() {
    let d = tempfile::tempdir().unwrap();
    let state = d.path().join("st.db");
    for (to, needle) in [
        ("ops", "cannot tell the channel"),
        ("+123", "not a valid number for its country code"),
        ("a@b", "invalid email"),
    ] {
        let r = notify(
            GH,
            &[
                "--to",
                to,
                "--message",
                "m",
                "--state",
                s(&state),
                "--provider",
                "null",
            ],
        );
        assert_eq!(r.code, 2, "{to}");
        assert!(r.stderr.contains(needle), "{to}: {}", r.stderr);
    }
    let r = notify(
        GH,
        &[
            "--to",
            "a@b.co",
            "--message",
            "  ",
            "--state",
            s(&state),
            "--provider",
            "null",
        ],
    );
    assert_eq!(r.code, 2);
    let r = notify(
        GH,
        &["--to", "a@b.co", "--message", "m", "--state", s(&state)],
    );
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("no provider"), "{}", r.stderr);
    assert!(!state.exists());
}

#[test]
fn dry_run_writes_nothing_and_shows_the_key() {
    let d = tempfile::tempdir().unwrap();
    let state = d.path().join("st.db");
    let r = notify(
        GH,
        &[
            "--to",
            "a@b.co",
            "--message",
            "m",
            "--state",
            s(&state),
            "--dry-run",
            "--json",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(doc["recipients"][0]["outcome"], "would_send");
    assert_eq!(
        doc["recipients"][0]["job_id"],
        "notify:github-actions:acme/app:9001:deploy:a@b.co"
    );
    assert!(!state.exists());
}

#[test]
fn message_from_stdin() {
    let d = tempfile::tempdir().unwrap();
    let outbox = d.path().join("o.jsonl");
    let mut c = Command::new(BIN)
        .args([
            "notify",
            "--to",
            "a@b.co",
            "--key",
            "k1",
            "--state",
            s(&d.path().join("st.db")),
        ])
        .arg("--provider")
        .arg(format!("outbox:{}", outbox.display()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin
        .take()
        .unwrap()
        .write_all(b"from {{ stdin }}\n")
        .unwrap();
    assert_eq!(c.wait().unwrap().code(), Some(0));
    let lines = sendonce::provider::deliverylog::read_lines(&outbox).unwrap();
    assert_eq!(
        lines[0].body, "from {{ stdin }}\n",
        "sent verbatim, not as a template"
    );
}

/// A one-shot HTTP server on loopback answering every request with `response`.
fn canned_server(response: &'static str) -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for mut conn in l.incoming().flatten() {
            let mut buf = [0u8; 8192];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(response.as_bytes());
        }
    });
    addr
}

#[test]
fn exit_codes_for_doubt_and_permanent_failure() {
    let d = tempfile::tempdir().unwrap();
    // The server closes the connection without answering: unknown outcome, no key window.
    let dropper = canned_server("");
    let r = notify(
        &[],
        &[
            "--to",
            "a@b.co",
            "--message",
            "m",
            "--key",
            "k",
            "--state",
            s(&d.path().join("a.db")),
            "--provider",
            &format!("webhook:http://{dropper}/send#timeout=2s"),
        ],
    );
    assert_eq!(r.code, 3, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("IN DOUBT"), "{}", r.stdout);
    let refuser = canned_server("HTTP/1.1 422 Unprocessable Entity\r\nContent-Length: 21\r\nConnection: close\r\n\r\n{\"error\":\"bad phone\"}");
    let r = notify(
        &[],
        &[
            "--to",
            "a@b.co",
            "--message",
            "m",
            "--key",
            "k",
            "--state",
            s(&d.path().join("b.db")),
            "--provider",
            &format!("webhook:http://{refuser}/send"),
        ],
    );
    assert_eq!(r.code, 4, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("FAILED"), "{}", r.stdout);
}

/// A missing sender is the user's to fix: without `--from` (and no `from=` in the spec) notify
/// is a usage error that records nothing, so the same key sends once `--from` is given. A sender
/// that cannot be a header is refused the same way.
#[test]
fn a_missing_sender_is_a_usage_error_that_does_not_burn_the_key() {
    let d = tempfile::tempdir().unwrap();
    let state = d.path().join("state.db");
    let log = d.path().join("fake.jsonl");
    let fake = common::Fake::start(&log, &[]);
    let spec = format!("resend:?base_url={}&timeout=2s", fake.base());
    let env = [("SENDONCE_RESEND_API_KEY", "re_test_key")];
    let base = [
        "--to",
        "ops@example.org",
        "--message",
        "deploy finished",
        "--subject",
        "deploy",
        "--key",
        "deploy-77",
        "--provider",
        spec.as_str(),
        "--state",
        s(&state),
    ];
    let first = notify(&env, &base);
    assert_eq!(first.code, 2, "{first:?}");
    assert!(first.stderr.contains("--from"), "{first:?}");
    assert!(
        first.stderr.contains("nothing was sent or recorded"),
        "{first:?}"
    );

    let mut bad = base.to_vec();
    bad.extend(["--from", "CI <ci@example.org>\r\nBcc: x@evil.example"]);
    let refused = notify(&env, &bad);
    assert_eq!(refused.code, 2, "{refused:?}");

    let mut good = base.to_vec();
    good.extend(["--from", "CI <ci@example.org>"]);
    let sent = notify(&env, &good);
    assert_eq!(sent.code, 0, "{sent:?}");
    assert!(!sent.stdout.contains("FAILED"), "{sent:?}");
    assert_eq!(fake.lines().len(), 1, "one delivery");
}

/// A notification to an address erased from the notify account (`subscriber erase`) is
/// recorded under the address's erased form and suppressed at claim: the provider never gets
/// it, and the state file holds the address nowhere in clear (docs/privacy.md).
#[test]
fn a_notification_to_an_erased_address_is_recorded_suppressed_and_never_sent() {
    let d = tempfile::tempdir().unwrap();
    let state = d.path().join("state.db");
    let outbox = d.path().join("o.jsonl");
    let spec = format!("outbox:{}", outbox.display());
    let send = |key: &str| {
        let args = [
            "--to",
            "ann@example.org",
            "--key",
            key,
            "--message",
            "deploy ok",
        ];
        let mut all = args.to_vec();
        all.extend(["--state", s(&state), "--provider", &spec]);
        notify(&[], &all)
    };
    let first = send("k1");
    assert_eq!(first.code, 0, "{}", first.stderr);
    let erase: common::Run = Command::new(BIN)
        .arg("--db")
        .arg(&state)
        .args([
            "subscriber",
            "erase",
            "--account",
            "notify",
            "ann@example.org",
            "--yes",
        ])
        .env_remove("SENDONCE_DB")
        .output()
        .unwrap()
        .into();
    assert_eq!(erase.code, 0, "{}", erase.stderr);
    let second = send("k2");
    assert!(second.stdout.contains("suppressed"), "{second:?}");
    assert_eq!(
        deliveries(&outbox).len(),
        1,
        "the erased address got a message"
    );
    let c = rusqlite::Connection::open(&state).unwrap();
    let clear: i64 = c
        .query_row(
            "SELECT (SELECT count(*) FROM sends WHERE address LIKE '%ann@%' OR job_id LIKE '%ann@%')
                  + (SELECT count(*) FROM subscribers WHERE email LIKE '%ann@%'
                                                        OR email_norm LIKE '%ann@%')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(clear, 0, "the address in clear in the state file");
}

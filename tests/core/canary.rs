//! The secret canary: one distinctive fake secret planted in every secret variable the program
//! reads (provider credentials, link secrets, webhook secrets, the fake provider's), then every
//! provider made to fail every way it can — connection refused, 401, 500 (and the fake
//! provider's 503), a TLS error, a timeout; SMTP: refused, 535 at AUTH, 451 at MAIL, TLS error,
//! silence — in one `sendonce run --once -vv` per log format (human, json, journald), each
//! account routed to one failure by a config file. The canary must appear nowhere: stdout,
//! stderr, the database and its -wal/-shm, the outbox, the fake provider's delivery and request
//! logs. The runs must also have met the failures (rows failed or in doubt with the expected
//! error, stderr naming a 401 and a refused connection), so the test cannot pass by doing
//! nothing. tests/core/secrets.rs drives servers that echo the credentials back; this one is about
//! breadth: every variable, every failure, every log format, at the most verbose level.

use crate::common::{self, Env, Fake, Run};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// The fake secret (long enough for the link secret's 16-byte minimum).
const CANARY: &str = "canary-7f3a9c1e-5b2d-4e8f-a6b0-d3c4e5f60718";
const SID: &str = "AC0123456789abcdef0123456789abcdef";

/// Every secret variable the program reads, with the canary in the shape each expects.
fn secrets() -> Vec<(&'static str, String)> {
    vec![
        ("SENDONCE_SMTP_PASSWORD", CANARY.to_string()),
        ("SENDONCE_TWILIO_AUTH_TOKEN", CANARY.to_string()),
        ("SENDONCE_RESEND_API_KEY", CANARY.to_string()),
        ("SENDONCE_POSTMARK_TOKEN", CANARY.to_string()),
        ("SENDONCE_UNSUBSCRIBE_SECRET", CANARY.to_string()),
        (
            "SENDONCE_UNSUBSCRIBE_OLD_SECRETS",
            format!("2026-01-01:{CANARY}"),
        ),
        // The fake provider's callback secrets and a [[webhook]]'s secret_env (serve reads
        // them; planted so that nothing else prints them either).
        ("SENDONCE_FAKE_POSTMARK_AUTH", format!("user:{CANARY}")),
        ("SENDONCE_FAKE_MAILGUN_KEY", CANARY.to_string()),
        ("SENDONCE_FAKE_BREVO_AUTH", format!("user:{CANARY}")),
        ("ACME_WEBHOOK_SECRET", CANARY.to_string()),
    ]
}

fn cmd(env: &Env) -> Command {
    let mut c = env.cmd();
    for (k, v) in secrets() {
        c.env(k, v);
    }
    c.env_remove("SENDONCE_CONFIG")
        .env_remove("SENDONCE_PROVIDER")
        .env_remove("SENDONCE_LOG")
        .env_remove("JOURNAL_STREAM");
    c
}

fn ok(env: &Env, args: &[&str]) -> String {
    let r = Run::from(cmd(env).args(args).output().expect("run sendonce"));
    assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    assert_clean(&format!("{args:?} stdout"), r.stdout.as_bytes());
    assert_clean(&format!("{args:?} stderr"), r.stderr.as_bytes());
    r.stdout.trim().to_string()
}

fn assert_clean(what: &str, hay: &[u8]) {
    let text = String::from_utf8_lossy(hay);
    if let Some(i) = text.find(CANARY) {
        let from = text[..i]
            .char_indices()
            .rev()
            .nth(120)
            .map_or(0, |(j, _)| j);
        let to = (i + CANARY.len() + 60).min(text.len());
        panic!(
            "the canary leaked into {what}: …{}…",
            text.get(from..to).unwrap_or("")
        );
    }
    // Half of it is a leak too (a secret cut in two).
    for half in [&CANARY[..20], &CANARY[20..]] {
        assert!(
            !text.contains(half),
            "part of the canary leaked into {what}"
        );
    }
}

/// Every file under `dir` (database, -wal, -shm, outbox, the fake provider's logs).
fn assert_files_clean(dir: &Path) -> usize {
    let mut stack = vec![dir.to_path_buf()];
    let mut seen = 0;
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir") {
            let p = entry.expect("dir entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                assert_clean(&p.display().to_string(), &std::fs::read(&p).expect("read"));
                seen += 1;
            }
        }
    }
    seen
}

// ---------------------------------------------------------------------------------------------
// The failing peers

/// Accept and answer every connection with `reply` at once, before reading a byte (a plain
/// HTTP answer to a TLS ClientHello is a TLS error), or never (`None`: a timeout).
fn tcp_server(reply: Option<&'static str>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            thread::spawn(move || match reply {
                Some(r) => {
                    let _ = s.write_all(r.as_bytes());
                    let _ = s.flush();
                    thread::sleep(Duration::from_millis(200));
                }
                None => thread::sleep(Duration::from_secs(30)),
            });
        }
    });
    addr
}

/// An HTTP server answering every request with `status` after reading it.
fn http_server(status: &'static str) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { return };
            thread::spawn(move || {
                let _ = answer(s, status);
            });
        }
    });
    addr
}

fn answer(s: TcpStream, status: &str) -> std::io::Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut r = BufReader::new(s.try_clone()?);
    let mut len = 0usize;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Ok(());
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().unwrap_or(0);
            }
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    let text = r#"{"message":"no","code":20003,"ErrorCode":10,"Message":"no"}"#;
    let mut w = s;
    write!(
        w,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{text}",
        text.len()
    )?;
    w.flush()
}

#[derive(Clone, Copy)]
enum Smtp {
    /// 535 at AUTH.
    Auth535,
    /// AUTH accepted, 451 at MAIL FROM.
    Mail451,
}

fn smtp_server(mode: Smtp) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { return };
            thread::spawn(move || {
                let _ = smtp_session(s, mode);
            });
        }
    });
    addr
}

fn smtp_session(s: TcpStream, mode: Smtp) -> std::io::Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut r = BufReader::new(s.try_clone()?);
    let mut w = s;
    w.write_all(b"220 canary-test ESMTP\r\n")?;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let verb = line
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_ascii_uppercase();
        let reply: &str = match (verb.as_str(), mode) {
            ("EHLO", _) => "250-canary-test\r\n250-AUTH PLAIN LOGIN\r\n250 8BITMIME\r\n",
            ("HELO", _) => "250 canary-test\r\n",
            ("AUTH", Smtp::Auth535) => "535 5.7.8 Authentication credentials invalid\r\n",
            ("AUTH", Smtp::Mail451) => "235 2.7.0 Authentication successful\r\n",
            ("MAIL", _) => "451 4.3.0 Temporary local problem\r\n",
            ("RSET", _) | ("NOOP", _) => "250 OK\r\n",
            ("QUIT", _) => {
                w.write_all(b"221 bye\r\n")?;
                return Ok(());
            }
            _ => "500 5.5.2 what\r\n",
        };
        w.write_all(reply.as_bytes())?;
    }
}

// ---------------------------------------------------------------------------------------------
// The cases: one account (and one campaign) per provider and failure

struct Case {
    /// The account's name.
    name: String,
    channel: &'static str,
    spec: String,
    /// Row statuses the failure may end in.
    statuses: &'static [&'static str],
    /// One of these (lower-cased) in the row's last error.
    error: &'static [&'static str],
}

struct Peers {
    refused: u16,
    unauthorized: SocketAddr,
    server_error: SocketAddr,
    plain: SocketAddr,
    silent: SocketAddr,
    smtp_535: SocketAddr,
    smtp_451: SocketAddr,
    fake: String,
}

const FAILED_OR_DOUBT: &[&str] = &["failed", "in_doubt"];
const REFUSED: &[&str] = &["connection refused"];
const TLS: &[&str] = &["corrupt message", "tls", "certificate", "handshake"];
const TIMEOUT: &[&str] = &["timed out"];

fn cases(p: &Peers) -> Vec<Case> {
    let mut out = Vec::new();
    let http = |kind: &str, base: String| match kind {
        "twilio" => format!("twilio:{SID}?from=%2B15017122661&base_url={base}&timeout=700ms"),
        "resend" => format!("resend:?from=news@example.org&base_url={base}&timeout=700ms"),
        "postmark" => format!("postmark:?from=news@example.org&base_url={base}&timeout=700ms"),
        // Credentials in the webhook URL are secrets too.
        _ => {
            let (scheme, rest) = base.split_once("://").unwrap_or(("http", &base));
            format!("webhook:{scheme}://hook:{CANARY}@{rest}/send#timeout=700ms")
        }
    };
    for kind in ["twilio", "resend", "postmark", "webhook"] {
        let channel = if kind == "twilio" { "sms" } else { "email" };
        for (failure, base, statuses, error) in [
            (
                "refused",
                format!("http://127.0.0.1:{}", p.refused),
                FAILED_OR_DOUBT,
                REFUSED,
            ),
            (
                "401",
                format!("http://{}", p.unauthorized),
                &["failed"][..],
                &["401"][..],
            ),
            (
                "500",
                format!("http://{}", p.server_error),
                FAILED_OR_DOUBT,
                &["500"][..],
            ),
            ("503", p.fake.clone(), FAILED_OR_DOUBT, &["503"][..]),
            ("tls", format!("https://{}", p.plain), FAILED_OR_DOUBT, TLS),
            (
                "timeout",
                format!("http://{}", p.silent),
                &["in_doubt"][..],
                TIMEOUT,
            ),
        ] {
            out.push(Case {
                name: format!("{kind}-{failure}"),
                channel,
                spec: http(kind, base),
                statuses,
                error,
            });
        }
    }
    let smtp = |port: u16, tls: &str, timeout: &str| {
        format!("smtp://mailer@127.0.0.1:{port}?tls={tls}&timeout={timeout}")
    };
    for (failure, spec, statuses, error) in [
        (
            "refused",
            smtp(p.refused, "none", "2s"),
            FAILED_OR_DOUBT,
            REFUSED,
        ),
        (
            "535",
            smtp(p.smtp_535.port(), "none", "2s"),
            &["failed"][..],
            &["535"][..],
        ),
        (
            "451",
            smtp(p.smtp_451.port(), "none", "2s"),
            FAILED_OR_DOUBT,
            &["451"][..],
        ),
        (
            "tls",
            smtp(p.smtp_535.port(), "tls", "2s"),
            FAILED_OR_DOUBT,
            TLS,
        ),
        (
            "timeout",
            smtp(p.silent.port(), "none", "1s"),
            FAILED_OR_DOUBT,
            TIMEOUT,
        ),
    ] {
        out.push(Case {
            name: format!("smtp-{failure}"),
            channel: "email",
            spec,
            statuses,
            error,
        });
    }
    out
}

/// The config file routing each case's account to its provider, and the default (an outbox in
/// the scanned directory, which a last account reaches and succeeds on).
fn config(cases: &[Case], outbox: &Path) -> String {
    let mut t = format!("provider = \"outbox:{}\"\n", outbox.display());
    for c in cases {
        t.push_str(&format!(
            "\n[[route]]\naccount = \"{}\"\nprovider = \"{}\"\n",
            c.name, c.spec
        ));
    }
    t.push_str(
        "\n[[webhook]]\naccount = \"outbox-ok\"\nsource = \"standard\"\n\
         secret_env = \"ACME_WEBHOOK_SECRET\"\n",
    );
    t
}

/// One database with an approved one-recipient campaign per case (and one for the outbox).
fn setup(env: &Env, cases: &[Case]) {
    ok(env, &["init"]);
    let body = env.write("body.txt", "Hello {{ name }}\n");
    let names = cases
        .iter()
        .map(|c| (c.name.as_str(), c.channel))
        .chain([("outbox-ok", "email")]);
    for (name, channel) in names {
        ok(env, &["account", "add", name]);
        // Any hour: no SMS quiet hours (`core::windows` tests them).
        ok(env, &["account", "update", name, "--sms-hours", "off"]);
        let (flag, to) = match channel {
            "sms" => ("--phone", "+14155550100"),
            _ => ("--email", "ana@example.com"),
        };
        ok(
            env,
            &[
                "subscriber",
                "add",
                "--account",
                name,
                flag,
                to,
                "--name",
                "Ana",
            ],
        );
        let mut args = vec![
            "campaign",
            "create",
            "--account",
            name,
            "--name",
            name,
            "--channel",
            channel,
            "--body-file",
            body.to_str().unwrap(),
        ];
        if channel == "email" {
            args.extend(["--subject", "Hi", "--from", "news@example.org"]);
        }
        let id = ok(env, &args);
        ok(env, &["campaign", "approve", &id]);
    }
}

#[test]
fn the_canary_appears_nowhere_whatever_fails_and_however_it_is_logged() {
    let started = Instant::now();
    let scanned = Env::new();
    let fake_log = scanned.path("fake/deliveries.jsonl");
    std::fs::create_dir_all(fake_log.parent().unwrap()).unwrap();
    let request_log = scanned.path("fake/requests.log");
    let fake = Fake::start(
        &fake_log,
        &[
            "--fail-rate",
            "1",
            "--request-log",
            request_log.to_str().unwrap(),
        ],
    );
    let peers = Peers {
        refused: common::refused_port(),
        unauthorized: http_server("401 Unauthorized"),
        server_error: http_server("500 Internal Server Error"),
        plain: tcp_server(Some(
            "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
        )),
        silent: tcp_server(None),
        smtp_535: smtp_server(Smtp::Auth535),
        smtp_451: smtp_server(Smtp::Mail451),
        fake: fake.base(),
    };
    let cases = Arc::new(cases(&peers));
    // The config file holds the webhook URL credentials: it lives outside the scanned files.
    let cfg_dir = tempfile::tempdir().unwrap();

    let formats = ["human", "json", "journald"];
    let handles: Vec<_> = formats
        .iter()
        .map(|format| {
            let cases = cases.clone();
            let cfg_path = cfg_dir.path().join(format!("{format}.toml"));
            let format = format.to_string();
            let outbox = scanned.path(&format!("outbox-{format}.jsonl"));
            std::fs::write(&cfg_path, config(&cases, &outbox)).unwrap();
            let db = scanned.path(&format!("{format}.db"));
            thread::spawn(move || {
                let env = Env::new();
                let env = Env { db, ..env };
                setup(&env, &cases);
                let r = Run::from(
                    cmd(&env)
                        .args(["run", "--once", "-vv", "--log-format", &format])
                        .args(["--config", cfg_path.to_str().unwrap()])
                        .args(["--max-attempts", "2", "--retry-base", "10ms"])
                        .args(["--tick", "50ms"])
                        .output()
                        .expect("run sendonce"),
                );
                (format, env, r)
            })
        })
        .collect();
    let mut runs = Vec::new();
    for h in handles {
        runs.push(h.join().expect("a run thread"));
    }
    drop(fake);

    for (format, env, r) in &runs {
        // Exit 3: finished with sends in doubt (timeouts, 5xx).
        assert!(
            r.code == 3 || r.code == 0,
            "{format}: exit {}\n{}",
            r.code,
            r.stderr
        );
        assert_clean(&format!("{format} run stdout"), r.stdout.as_bytes());
        assert_clean(&format!("{format} run stderr"), r.stderr.as_bytes());
        // The failures happened, and the logs said so.
        let lower = r.stderr.to_lowercase();
        assert!(
            lower.contains("401"),
            "{format}: no 401 in stderr:\n{}",
            r.stderr
        );
        assert!(
            lower.contains("refused"),
            "{format}: no refused connection in stderr:\n{}",
            r.stderr
        );
        if format == "journald" {
            assert!(
                r.stderr.lines().any(|l| l.starts_with("<7>")
                    && l.contains("call failed")
                    && l.contains("401")),
                "journald: no <7> line for the 401:\n{}",
                r.stderr
            );
        }
        let conn = env.sqlite();
        let mut stmt = conn
            .prepare(
                "SELECT a.name, s.status, coalesce(s.last_error, '') FROM sends s \
                 JOIN accounts a ON a.id = s.account_id",
            )
            .unwrap();
        let rows: Vec<(String, String, String)> = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        for c in cases.iter() {
            let (_, status, error) = rows
                .iter()
                .find(|(n, _, _)| n == &c.name)
                .unwrap_or_else(|| panic!("{format}: no row for {}", c.name));
            assert!(
                c.statuses.contains(&status.as_str()),
                "{format} {}: status {status} ({error})",
                c.name
            );
            let e = error.to_lowercase();
            assert!(
                c.error.iter().any(|w| e.contains(w)),
                "{format} {}: last error {error:?} names none of {:?}",
                c.name,
                c.error
            );
        }
        let outbox_ok = rows.iter().find(|(n, _, _)| n == "outbox-ok").unwrap();
        assert_eq!(outbox_ok.1, "sent", "{format}: the outbox account");
    }
    // The fake provider was called (the 503s) and wrote its request log.
    let requests = std::fs::read_to_string(&request_log).unwrap_or_default();
    let sends = requests
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["method"] == "POST" && v["key"].is_string())
        .count();
    assert!(sends >= 3, "the fake provider's request log: {requests:?}");
    // Every file: three databases (+ -wal, -shm), three outboxes, the fake's logs.
    let files = assert_files_clean(scanned.dir.path());
    assert!(files > 3 + 3, "only {files} files scanned");
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "the canary test took {:?}",
        started.elapsed()
    );
}

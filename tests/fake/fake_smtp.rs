//! The fake provider's SMTP listener (`fake-provider --smtp`) driven by clients we did not write:
//! Python's smtplib (messages checked byte for byte and against Python's `email` parse), swaks,
//! and sendonce's own SMTP provider running a campaign; plus raw sockets for pipelining, the
//! protocol's error replies and a slow client, the chaos phases and AUTH.
// Some tests here need tools outside Rust (tier 1); without them their helpers go unused.
#![cfg_attr(not(feature = "tier1"), allow(unused_imports, dead_code))]

use crate::common;
use base64::Engine as _;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const CLIENT: &str = "tests/support/fake_smtp_client.py";

/// A fake provider with `--smtp`, its stderr in a file. Killed on drop. (Also used by
/// `crash::`.)
pub(crate) struct SmtpFake {
    child: Child,
    http: String,
    pub(crate) smtp: u16,
    pub(crate) log: PathBuf,
    stderr: PathBuf,
    rt: tokio::runtime::Runtime,
    _dir: tempfile::TempDir,
}

impl SmtpFake {
    pub(crate) fn start(extra: &[&str], env: &[(&str, &str)]) -> SmtpFake {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("deliveries.jsonl");
        let stderr = dir.path().join("stderr.txt");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sendonce"));
        cmd.args([
            "fake-provider",
            "--listen",
            "127.0.0.1:0",
            "--smtp",
            "127.0.0.1:0",
        ])
        .arg("--log")
        .arg(&log)
        .args(extra)
        .env_remove("SENDONCE_FAKE_SMTP_AUTH")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr).expect("stderr file"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn sendonce fake-provider");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let (mut first, mut second) = (String::new(), String::new());
        out.read_line(&mut first).expect("first line");
        out.read_line(&mut second).expect("second line");
        let http = first
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
            .to_string();
        let smtp: std::net::SocketAddr = second
            .trim()
            .strip_prefix("smtp listening on ")
            .unwrap_or_else(|| panic!("unexpected second line {second:?}"))
            .parse()
            .expect("an address");
        SmtpFake {
            child,
            http: format!("http://{http}"),
            smtp: smtp.port(),
            log,
            stderr,
            rt: common::rt(),
            _dir: dir,
        }
    }

    fn cert(&self) -> PathBuf {
        let mut s = self.log.as_os_str().to_owned();
        s.push(".smtp-cert.pem");
        PathBuf::from(s)
    }

    /// GET `path` on the HTTP side: status and body.
    fn get(&self, path: &str) -> (u16, Vec<u8>) {
        self.rt.block_on(async {
            let r = common::client()
                .get(format!("{}{path}", self.http))
                .send()
                .await
                .expect("GET the fake provider");
            let status = r.status().as_u16();
            (status, r.bytes().await.expect("body").to_vec())
        })
    }

    fn json(&self, path: &str) -> Value {
        let (status, body) = self.get(path);
        assert_eq!(
            status,
            200,
            "GET {path}: {}",
            String::from_utf8_lossy(&body)
        );
        serde_json::from_slice(&body).expect("JSON")
    }

    fn messages(&self) -> Vec<Value> {
        self.json("/messages")
            .as_array()
            .expect("an array of messages")
            .clone()
    }

    /// smtplib sends one message of `kind`; its JSON report.
    fn python(&self, kind: &str, tls: bool, auth: Option<(&str, &str)>) -> Value {
        let mut cmd = Command::new("python3");
        cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(CLIENT))
            .arg(self.smtp.to_string())
            .arg(kind);
        if tls {
            cmd.arg("--cafile").arg(self.cert());
        }
        if let Some((u, p)) = auth {
            cmd.args(["--user", u]).env("FAKE_SMTP_PASSWORD", p);
        }
        let out = cmd
            .output()
            .expect("python3 (tests/run.sh puts the test venv first on PATH)");
        assert!(
            out.status.success(),
            "{CLIENT} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{CLIENT} output {e}: {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }
}

impl Drop for SmtpFake {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The message id in a `250 2.0.0 OK queued as ID` reply.
fn queued_id(report: &Value) -> String {
    let last = report["replies"].as_array().and_then(|r| r.last()).cloned();
    let last = last.unwrap_or_else(|| panic!("no replies: {report}"));
    assert_eq!(last[0], 250, "{report}");
    last[1]
        .as_str()
        .and_then(|s| s.rsplit(' ').next())
        .expect("an id")
        .to_string()
}

fn lf(s: &str) -> String {
    s.replace("\r\n", "\n").trim_end().to_string()
}

#[cfg(feature = "tier1")]
#[test]
fn python_messages_come_back_byte_exact_and_parsed_the_same() {
    let fake = SmtpFake::start(&[], &[]);
    for kind in ["ascii", "alternative", "latin1", "utf8"] {
        let report = fake.python(kind, true, Some(("anyone", "any-password")));
        assert_eq!(report["tls"], "TLSv1.3", "{kind}: {report}");
        let id = queued_id(&report);
        let sent = base64::engine::general_purpose::STANDARD
            .decode(report["raw"].as_str().expect("raw"))
            .expect("base64");
        let (status, got) = fake.get(&format!("/messages/{id}/raw"));
        assert_eq!(status, 200, "{kind}");
        assert_eq!(
            got,
            sent,
            "{kind}: stored bytes differ:\n{}\n---\n{}",
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&sent)
        );
        let m = fake.json(&format!("/messages/{id}"));
        let py = &report["parsed"];
        assert_eq!(m["subject"], py["subject"], "{kind}: {m}");
        let from = py["from"].as_str().expect("from");
        assert!(
            from.contains(m["from"].as_str().expect("from")),
            "{kind}: {m}"
        );
        assert_eq!(m["to"][0], py["to"], "{kind}: {m}");
        assert_eq!(
            lf(m["text"].as_str().unwrap_or("")),
            lf(py["text"].as_str().unwrap_or("")),
            "{kind}: {m}"
        );
        match py["html"].as_str() {
            Some(h) => assert_eq!(lf(m["html"].as_str().unwrap_or("")), lf(h), "{kind}"),
            None => assert!(m["html"].is_null(), "{kind}: {m}"),
        }
        assert_eq!(m["via"], "smtp");
    }
    assert_eq!(fake.messages().len(), 4);
    // The latin-1 body survived as bytes, not as a UTF-8 re-encoding.
    let lines = sendonce::provider::deliverylog::read_lines(&fake.log).expect("log");
    assert!(lines
        .iter()
        .any(|l| l.subject.as_deref() == Some("Olá João ✓")
            && l.envelope.as_ref().map(|e| e.to[0].as_str()) == Some("joão@exemplo.org")));
}

#[cfg(feature = "tier1")]
#[test]
fn swaks_with_tls_and_auth_delivers_once() {
    let fake = SmtpFake::start(&[], &[]);
    let out = Command::new("swaks")
        .args(["--server", &format!("127.0.0.1:{}", fake.smtp)])
        .args(["--from", "shop@example.org", "--to", "kim@example.org"])
        .args(["--tls", "--tls-verify", "--tls-ca-path"])
        .arg(fake.cert())
        .args([
            "--auth",
            "LOGIN",
            "--auth-user",
            "kim",
            "--auth-password",
            "pw",
        ])
        .args(["--header", "Subject: from swaks"])
        .output()
        .expect("swaks (tests/run.sh installs Debian's swaks package)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "swaks: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("235 2.7.0"), "{text}");
    let msgs = fake.messages();
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert_eq!(msgs[0]["subject"], "from swaks");
    assert_eq!(msgs[0]["to"], "kim@example.org");
}

#[cfg(feature = "tier1")]
#[test]
fn a_lost_reply_still_stores_the_message_once() {
    let fake = SmtpFake::start(&["--smtp-chaos", "drop-after-accept=1"], &[]);
    let report = fake.python("ascii", false, None);
    assert!(report.get("disconnected").is_some(), "{report}");
    let msgs = fake.messages();
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert_eq!(msgs[0]["subject"], "Plain ASCII");
}

#[cfg(feature = "tier1")]
#[test]
fn each_refusal_phase_answers_its_code_and_stores_nothing() {
    for (chaos, code) in [
        ("connect=1:554", 554),
        ("connect=1", 421),
        ("mail=1:451", 451),
        ("rcpt=1:550", 550),
        ("data=1:452", 452),
        ("data=1", 451),
    ] {
        let fake = SmtpFake::start(&["--smtp-chaos", chaos, "--seed", "7"], &[]);
        let report = fake.python("ascii", false, None);
        let codes: Vec<i64> = report["replies"]
            .as_array()
            .expect("replies")
            .iter()
            .filter_map(|r| r[0].as_i64())
            .chain(report["error"][0].as_i64())
            .collect();
        assert!(codes.contains(&code), "{chaos}: {report}");
        assert!(
            report["error"].is_object() || report["error"].is_array(),
            "{chaos}: {report}"
        );
        assert!(fake.messages().is_empty(), "{chaos}: something was stored");
    }
    // Bad values are refused before anything listens (exit 2, the flag named).
    for bad in [
        "smile=0.1",
        "rcpt=2",
        "mail=0.5:250",
        "drop-after-accept=1:451",
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = Command::new(env!("CARGO_BIN_EXE_sendonce"))
            .args([
                "fake-provider",
                "--listen",
                "127.0.0.1:0",
                "--smtp",
                "127.0.0.1:0",
            ])
            .arg("--log")
            .arg(dir.path().join("log"))
            .args(["--smtp-chaos", bad])
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--smtp-chaos"), "{bad}: {err}");
    }
}

#[cfg(feature = "tier1")]
#[test]
fn configured_auth_refuses_wrong_and_missing_credentials_and_never_logs_the_password() {
    let password = "Sekr3t-Pa55-xyzzy";
    let fake = SmtpFake::start(
        &[],
        &[("SENDONCE_FAKE_SMTP_AUTH", &format!("kim:{password}"))],
    );
    let wrong = fake.python("none", true, Some(("kim", "not-the-password")));
    assert_eq!(wrong["replies"][2][0], 535, "{wrong}");
    let none = fake.python("none", true, None);
    assert_eq!(none["replies"][2][0], 530, "{none}");
    let right = fake.python("ascii", true, Some(("kim", password)));
    assert_eq!(right["replies"][2][0], 235, "{right}");
    queued_id(&right);
    assert_eq!(fake.messages().len(), 1);
    // AUTH LOGIN too, through swaks.
    let out = Command::new("swaks")
        .args(["--server", &format!("127.0.0.1:{}", fake.smtp)])
        .args(["--from", "shop@example.org", "--to", "lee@example.org"])
        .args([
            "--tls",
            "--auth",
            "LOGIN",
            "--auth-user",
            "kim",
            "--auth-password",
            password,
        ])
        .output()
        .expect("swaks");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(fake.messages().len(), 2);
    for file in [fake.log.clone(), fake.stderr.clone()] {
        let text = std::fs::read(&file).expect("read");
        let text = String::from_utf8_lossy(&text);
        assert!(
            !text.contains(password),
            "the password is in {}",
            file.display()
        );
        let b64 = base64::engine::general_purpose::STANDARD.encode(password);
        assert!(
            !text.contains(&b64),
            "the encoded password is in {}",
            file.display()
        );
    }
}

/// Read replies until one whose 4th byte is a space (the last line of a reply), `n` times.
fn replies(r: &mut BufReader<TcpStream>, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    while out.len() < n {
        let mut line = String::new();
        if r.read_line(&mut line).expect("read a reply") == 0 {
            break;
        }
        if line.as_bytes().get(3) == Some(&b' ') {
            out.push(line.trim_end().to_string());
        }
    }
    out
}

#[test]
fn pipelined_commands_errors_and_dot_stuffing_over_a_raw_socket() {
    let fake = SmtpFake::start(&[], &[]);
    let s = TcpStream::connect(("127.0.0.1", fake.smtp)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    assert!(replies(&mut r, 1)[0].starts_with("220 "));
    // Sequence, unknown and syntax errors.
    w.write_all(b"MAIL FROM:<a@example.org>\r\nFOO\r\nEHLO\r\nVRFY kim\r\n")
        .unwrap();
    let got = replies(&mut r, 4);
    let codes: Vec<&str> = got.iter().map(|l| &l[..3]).collect();
    assert_eq!(codes, ["503", "500", "501", "252"], "{got:?}");
    // One write, five commands: every answer comes, in order.
    w.write_all(
        b"EHLO client.example\r\nMAIL FROM:<> SIZE=100\r\nRCPT TO:<kim@example.org>\r\nRCPT TO:<lee@example.org>\r\nDATA\r\n",
    )
    .unwrap();
    let got = replies(&mut r, 5);
    let codes: Vec<&str> = got.iter().map(|l| &l[..3]).collect();
    assert_eq!(codes, ["250", "250", "250", "250", "354"], "{got:?}");
    // A dot after a bare LF is content: neither unstuffed nor the end (RFC 5321 4.1.1.4), so
    // "\n.\nMAIL FROM" cannot smuggle a command out of a body.
    let body =
        b"Subject: dots\r\n\r\n..leading dot\r\nbare\nLF kept\n.\nMAIL FROM:<x@y>\r\n...\r\n.\r\n";
    w.write_all(body).unwrap();
    let done = replies(&mut r, 1);
    assert!(done[0].starts_with("250 2.0.0 OK queued as "), "{done:?}");
    let id = done[0].rsplit(' ').next().unwrap();
    let (_, raw) = fake.get(&format!("/messages/{id}/raw"));
    assert_eq!(
        &raw[..],
        b"Subject: dots\r\n\r\n.leading dot\r\nbare\nLF kept\n.\nMAIL FROM:<x@y>\r\n..\r\n"
    );
    let m = fake.json(&format!("/messages/{id}"));
    assert_eq!(m["envelope"]["from"], "", "{m}");
    assert_eq!(m["envelope"]["to"][1], "lee@example.org", "{m}");
    // 100 recipients per message: the 101st gets 452 (RFC 5321's "too many recipients"), the
    // first 100 stay.
    let mut rcpts = b"MAIL FROM:<a@example.org>\r\n".to_vec();
    for i in 0..101 {
        rcpts.extend_from_slice(format!("RCPT TO:<r{i}@example.org>\r\n").as_bytes());
    }
    w.write_all(&rcpts).unwrap();
    let got = replies(&mut r, 102);
    assert!(got[..101].iter().all(|l| l.starts_with("250")), "{got:?}");
    assert!(got[101].starts_with("452"), "{:?}", got[101]);
    w.write_all(b"RSET\r\n").unwrap();
    assert!(replies(&mut r, 1)[0].starts_with("250"));
    // Too big for the declared size; RSET; QUIT.
    w.write_all(b"MAIL FROM:<a@example.org> SIZE=999999999999\r\nRSET\r\nQUIT\r\n")
        .unwrap();
    let got = replies(&mut r, 3);
    let codes: Vec<&str> = got.iter().map(|l| &l[..3]).collect();
    assert_eq!(codes, ["552", "250", "221"], "{got:?}");
}

/// Commands pipelined behind STARTTLS arrived in clear text: the server must drop them, not
/// run them inside the TLS session (a man in the middle could inject them). Python's ssl does
/// the handshake; a RCPT after it gets 503, so the injected MAIL was never taken.
#[cfg(feature = "tier1")]
#[test]
fn commands_pipelined_behind_starttls_are_discarded() {
    let fake = SmtpFake::start(&[], &[]);
    let script = r#"
import json, socket, ssl, sys
port, cafile = int(sys.argv[1]), sys.argv[2]
raw = socket.create_connection(("127.0.0.1", port), timeout=10)
def reply(f):
    while True:
        line = f.readline().decode()
        if line[3:4] != "-":
            return line.strip()
f = raw.makefile("rb")
out = [reply(f)]
raw.sendall(b"EHLO t\r\n"); out.append(reply(f))
raw.sendall(b"STARTTLS\r\nMAIL FROM:<injected@example.org>\r\n"); out.append(reply(f))
tls = ssl.create_default_context(cafile=cafile).wrap_socket(raw, server_hostname="localhost")
g = tls.makefile("rb")
tls.sendall(b"EHLO t\r\n"); out.append(reply(g))
tls.sendall(b"RCPT TO:<kim@example.org>\r\n"); out.append(reply(g))
tls.sendall(b"QUIT\r\n"); out.append(reply(g))
print(json.dumps(out))
"#;
    let out = Command::new("python3")
        .args(["-c", script, &fake.smtp.to_string()])
        .arg(fake.cert())
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Vec<String> = serde_json::from_slice(&out.stdout).expect("JSON");
    let codes: Vec<&str> = got.iter().map(|l| &l[..3]).collect();
    assert_eq!(codes, ["220", "250", "220", "250", "503", "221"], "{got:?}");
}

#[test]
fn oversized_long_lines_and_slow_clients_are_cut() {
    let fake = SmtpFake::start(
        &["--smtp-max-size", "1000", "--smtp-idle-timeout", "1s"],
        &[],
    );
    let connect = || {
        let s = TcpStream::connect(("127.0.0.1", fake.smtp)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let w = s.try_clone().unwrap();
        let mut r = BufReader::new(s);
        assert!(replies(&mut r, 1)[0].starts_with("220 "));
        (r, w)
    };
    // A message past --smtp-max-size: read to the dot, then 552; nothing stored.
    let (mut r, mut w) = connect();
    w.write_all(b"EHLO c\r\nMAIL FROM:<a@example.org>\r\nRCPT TO:<b@example.org>\r\nDATA\r\n")
        .unwrap();
    let ehlo = replies(&mut r, 4);
    w.write_all(&b"x".repeat(600)).unwrap();
    w.write_all(b"\r\n").unwrap();
    w.write_all(&b"y".repeat(600)).unwrap();
    w.write_all(b"\r\n.\r\nNOOP\r\n").unwrap();
    let got = replies(&mut r, 2);
    assert!(got[0].starts_with("552 "), "{got:?}");
    assert!(got[1].starts_with("250 "), "{got:?}");
    assert!(fake.messages().is_empty());
    assert!(ehlo
        .iter()
        .all(|l| l.starts_with("250") || l.starts_with("354")));
    // A command line past 64 KiB: 500, and the third closes the connection.
    let long = vec![b'A'; 70 << 10];
    for _ in 0..3 {
        w.write_all(&long).unwrap();
        w.write_all(b"\r\n").unwrap();
    }
    let got = replies(&mut r, 3);
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(got[0].starts_with("500 5.5.2 line too long"), "{got:?}");
    assert!(got[2].starts_with("421 "), "{got:?}");
    let mut rest = Vec::new();
    let _ = r.read_to_end(&mut rest);
    assert!(rest.is_empty());
    // A slow client: 421 after the idle timeout, then the connection is closed.
    let (mut r, _w) = connect();
    std::thread::sleep(Duration::from_millis(1500));
    let got = replies(&mut r, 1);
    assert!(got[0].starts_with("421 4.4.2 idle timeout"), "{got:?}");
    let mut rest = Vec::new();
    assert_eq!(r.read_to_end(&mut rest).unwrap_or(0), 0);
    // Twenty bad commands: 421.
    let (mut r, mut w) = connect();
    w.write_all(&b"BOGUS\r\n".repeat(20)).unwrap();
    let got = replies(&mut r, 20);
    assert!(got[18].starts_with("500 "), "{got:?}");
    assert!(got[19].starts_with("421 "), "{got:?}");
}

#[test]
fn sendonce_smtp_provider_delivers_a_campaign_to_the_fake_over_starttls() {
    let fake = SmtpFake::start(&[], &[]);
    let env = common::Env::new();
    let acct = env.setup_account();
    let n = 12;
    let mut csv = String::from("email,name\n");
    for i in 0..n {
        csv.push_str(&format!("user{i}@example.com,Zoë {i}\n"));
    }
    let f = env.write("subs.csv", csv);
    env.import_csv(&acct, &f);
    let body = env.write("body.txt", "Hello {{ name }}\n");
    let cid = env.ok(&[
        "campaign",
        "create",
        "--account",
        &acct,
        "--name",
        "smtp-fake",
        "--channel",
        "email",
        "--from",
        "news@example.org",
        "--subject",
        "Olá {{ name }}",
        "--body-file",
        body.to_str().unwrap(),
    ]);
    env.ok(&["campaign", "approve", &cid]);
    let spec = format!(
        "smtp://127.0.0.1:{}?tls=starttls&ca_file={}&pool=3",
        fake.smtp,
        fake.cert().display()
    );
    let r = env.run(&[
        "--json",
        "run",
        "--once",
        "--provider",
        &spec,
        "--tick",
        "50ms",
    ]);
    assert_eq!(r.code, 0, "{}\n{}", r.stderr, r.stdout);
    let st: Value = serde_json::from_str(&env.ok(&["--json", "campaign", "status", &cid])).unwrap();
    assert_eq!(st["sent"], n, "{st}");
    assert_eq!(st["in_doubt"], 0, "{st}");
    let msgs = fake.messages();
    assert_eq!(msgs.len(), n, "{msgs:?}");
    let mut jobs = std::collections::HashSet::new();
    let mut to = std::collections::HashSet::new();
    for m in &msgs {
        let job = m["job_id"].as_str().expect("job_id");
        assert!(job.starts_with(&format!("campaign:{cid}:sub:")), "{m}");
        assert!(jobs.insert(job.to_string()), "twice: {job}");
        assert!(to.insert(m["to"].as_str().expect("to").to_string()));
        let i = m["to"]
            .as_str()
            .and_then(|t| t.strip_prefix("user"))
            .and_then(|t| t.strip_suffix("@example.com"))
            .expect("a user address");
        assert_eq!(m["subject"], format!("Olá Zoë {i}"), "{m}");
    }
    let filtered = fake.json(&format!(
        "/messages?job_id={}",
        msgs[0]["job_id"].as_str().unwrap()
    ));
    assert_eq!(filtered.as_array().map(Vec::len), Some(1));
}

#[test]
fn the_101st_session_is_refused_and_sigterm_tells_idle_sessions_421() {
    let mut fake = SmtpFake::start(&[], &[]);
    let open = || {
        let s = TcpStream::connect(("127.0.0.1", fake.smtp)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut r = BufReader::new(s);
        let first = replies(&mut r, 1);
        (r, first[0].clone())
    };
    let mut held = Vec::new();
    for _ in 0..100 {
        let (r, greeting) = open();
        assert!(greeting.starts_with("220 "), "{greeting}");
        held.push(r);
    }
    let (_r, refused) = open();
    assert!(
        refused.starts_with("421 4.3.2 too many connections"),
        "{refused}"
    );
    // SIGTERM: every idle session hears 421 and is closed; the process exits 0.
    // SAFETY: kill(2) on our own child, not reaped yet.
    unsafe {
        libc::kill(fake.child.id() as i32, libc::SIGTERM);
    }
    for r in held.iter_mut().take(3) {
        let got = replies(r, 1);
        assert!(
            got[0].starts_with("421 4.3.2 the fake provider is shutting down"),
            "{got:?}"
        );
    }
    drop(held);
    let status = fake.child.wait().expect("wait");
    assert!(status.success(), "{status:?}");
}

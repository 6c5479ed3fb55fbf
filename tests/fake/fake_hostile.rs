//! `sendonce fake-provider` against hostile clients: slow bodies and headers cut, idle
//! keep-alive connections closed (a `/messages/wait` in flight is not), the connection cap,
//! oversized bodies refused on every send endpoint, the JSON request log, SIGTERM and
//! `--ready-file`. Raw sockets, so nothing between the test and the server retries or buffers.

use crate::common::Fake;
use serde_json::Value;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{client, rt};

/// Read until the server closes (EOF or reset) or `limit` passes; what was read and whether it
/// closed.
async fn until_closed(s: &mut tokio::net::tcp::OwnedReadHalf, limit: Duration) -> (String, bool) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let end = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(end, s.read(&mut buf)).await {
            Err(_) => return (String::from_utf8_lossy(&got).into_owned(), false),
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&got).into_owned(), true),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// Read one response with a Content-Length body; its status and body.
async fn response(s: &mut TcpStream) -> (u16, String) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).await.expect("read a response");
        assert!(
            n > 0,
            "closed mid-response: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let head = &text[..end];
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            if got.len() >= end + 4 + len {
                let status = head[9..12].parse().expect("a status");
                return (status, text[end + 4..end + 4 + len].to_string());
            }
        }
    }
}

#[test]
fn slow_bodies_and_slow_headers_are_cut() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::start(&dir.path().join("d.jsonl"), &[]);
    let addr = fake.addr;
    let started = Instant::now();
    let closed: Vec<(String, Duration, bool)> = rt().block_on(async move {
        let mut tasks = Vec::new();
        for i in 0..12 {
            tasks.push(tokio::spawn(async move {
                let s = TcpStream::connect(addr).await.unwrap();
                let (mut r, mut w) = s.into_split();
                let slow_headers = i >= 10;
                let head = if slow_headers {
                    "POST /send HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ".to_string()
                } else {
                    format!(
                        "POST /send HTTP/1.1\r\nHost: 127.0.0.1\r\nIdempotency-Key: slow-{i}\r\n\
                         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
                    )
                };
                w.write_all(head.as_bytes()).await.unwrap();
                // One byte a second, until the server closes.
                let writer = tokio::spawn(async move {
                    for _ in 0..60 {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        if w.write_all(b"a").await.is_err() {
                            break;
                        }
                    }
                });
                let t = Instant::now();
                let (got, closed) = until_closed(&mut r, Duration::from_secs(20)).await;
                writer.abort();
                (got, t.elapsed(), closed)
            }));
        }
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    });
    for (i, (got, after, closed)) in closed.iter().enumerate() {
        let what = if i >= 10 { "slow headers" } else { "slow body" };
        assert!(*closed, "{what} {i}: still open after 20 s");
        assert!(
            *after < Duration::from_secs(13) && *after >= Duration::from_secs(9),
            "{what} {i}: closed after {after:?} (want about 10 s)"
        );
        // The 408 may be lost to a reset (the client is still writing); when read, it is 408.
        if i < 10 && !got.is_empty() {
            assert!(got.starts_with("HTTP/1.1 408"), "slow body {i}: {got:?}");
        }
    }
    assert!(started.elapsed() < Duration::from_secs(15));
    assert!(fake.lines().is_empty(), "nothing stored");
}

#[test]
fn idle_connections_close_but_a_wait_in_flight_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::start(&dir.path().join("d.jsonl"), &["--idle-timeout", "2s"]);
    let addr = fake.addr;
    rt().block_on(async move {
        let mut idle = TcpStream::connect(addr).await.unwrap();
        idle.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(response(&mut idle).await.0, 200);
        let mut waiting = TcpStream::connect(addr).await.unwrap();
        waiting
            .write_all(
                b"GET /messages/wait?to=nobody@example.com&count=1&timeout=5s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
            )
            .await
            .unwrap();
        let t = Instant::now();
        let (mut r, _w) = idle.into_split();
        let (_, closed) = until_closed(&mut r, Duration::from_secs(4)).await;
        assert!(closed, "an idle keep-alive connection still open after 4 s");
        let idle_for = t.elapsed();
        assert!(idle_for >= Duration::from_millis(1500), "{idle_for:?}");
        // The wait runs its whole 5 s (then 408: nothing arrived), on a live connection.
        let (status, body) = response(&mut waiting).await;
        assert_eq!(status, 408, "{body}");
        assert!(t.elapsed() >= Duration::from_millis(4500), "{:?}", t.elapsed());
        // And the same connection still serves a request afterwards.
        waiting
            .write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(response(&mut waiting).await.0, 200);
    });
}

#[test]
fn past_the_connection_cap_new_connections_get_503_and_close() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::start(
        &dir.path().join("d.jsonl"),
        &["--max-connections", "4", "--idle-timeout", "5s"],
    );
    let addr = fake.addr;
    rt().block_on(async move {
        let mut held = Vec::new();
        for _ in 0..9 {
            held.push(TcpStream::connect(addr).await.unwrap().into_split());
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        for (i, (r, _)) in held.iter_mut().enumerate() {
            // Refused ones that send nothing get their 503 after the server's 1 s wait.
            let wait = if i < 4 { 300 } else { 2500 };
            let (got, closed) = until_closed(r, Duration::from_millis(wait)).await;
            if i < 4 {
                assert!(!closed && got.is_empty(), "admitted {i}: {got:?}");
            } else {
                assert!(closed, "over the cap {i}: not closed");
                assert!(got.starts_with("HTTP/1.1 503"), "over the cap {i}: {got:?}");
                assert!(
                    got.to_ascii_lowercase().contains("connection: close"),
                    "{got}"
                );
            }
        }
        // Still full: a request on a fresh connection is read, then refused the same way.
        let fresh = client().get(format!("http://{addr}/health")).send().await;
        match fresh {
            Ok(r) => assert_eq!(r.status(), 503),
            Err(e) => panic!("a full fake should answer 503, got {e}"),
        }
        // The idle ones are closed after the idle timeout; then it serves again.
        for (i, (r, _)) in held.iter_mut().take(4).enumerate() {
            let (_, closed) = until_closed(r, Duration::from_secs(7)).await;
            assert!(closed, "admitted {i}: not closed by the idle timeout");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let r = client()
            .get(format!("http://{addr}/health"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    });
}

#[test]
fn oversized_bodies_get_413_on_every_send_endpoint_and_nothing_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::start(&dir.path().join("d.jsonl"), &[]);
    let base = fake.base();
    let fake_addr = fake.addr;
    let big = "x".repeat((16 << 20) + 1);
    rt().block_on(async {
        let c = client();
        let json_body = format!("{{\"job_id\":\"j\",\"to\":\"a@example.com\",\"body\":\"{big}\"}}");
        let sends = [
            c.post(format!("{base}/send"))
                .header("Idempotency-Key", "k1")
                .header("Content-Type", "application/json")
                .body(json_body.clone()),
            c.post(format!("{base}/emails"))
                .header("Authorization", "Bearer re_test")
                .header("Idempotency-Key", "k2")
                .header("Content-Type", "application/json")
                .body(json_body.clone()),
            c.post(format!("{base}/email"))
                .header("X-Postmark-Server-Token", "t")
                .header("Content-Type", "application/json")
                .body(json_body.clone()),
            c.post(format!("{base}/2010-04-01/Accounts/AC1/Messages.json"))
                .basic_auth("AC1", Some("token"))
                .header("Content-Type", "application/x-www-form-urlencoded")
                .body(format!("To=%2B14155550100&From=%2B14155550199&Body={big}")),
        ];
        for s in sends {
            let r = s.send().await.expect("an answer, not a reset");
            let url = r.url().clone();
            assert_eq!(r.status(), 413, "{url}");
        }
        // Headers past the 64 KiB buffer: refused before any handler.
        let r = c
            .get(format!("{base}/health"))
            .header("X-Big", "h".repeat(70 << 10))
            .send()
            .await;
        // hyper answers 431 and closes; a client still writing may see the close first.
        if let Ok(r) = r {
            assert_eq!(r.status(), 431);
        }
        let mut raw = TcpStream::connect(fake_addr).await.unwrap();
        let head = format!(
            "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: {}\r\n\r\n",
            "h".repeat(70 << 10)
        );
        let _ = raw.write_all(head.as_bytes()).await;
        let (mut r, _w) = raw.into_split();
        let (got, closed) = until_closed(&mut r, Duration::from_secs(5)).await;
        assert!(closed, "an oversized head: not closed");
        assert!(
            !got.contains(" 200 "),
            "an oversized head was served: {got:?}"
        );
        // And a just-small-enough body still goes through.
        let ok = c
            .post(format!("{base}/send"))
            .header("Idempotency-Key", "k-ok")
            .json(&serde_json::json!({"job_id": "ok", "to": "a@example.com", "body": "hi"}))
            .send()
            .await
            .unwrap();
        assert_eq!(ok.status(), 200);
    });
    let lines = fake.lines();
    assert_eq!(lines.len(), 1, "only the small message is stored");
    assert_eq!(lines[0].job_id, "ok");
}

#[test]
fn request_log_is_one_json_object_per_request_and_sigterm_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let requests = dir.path().join("requests.log");
    let mut fake = Fake::start(
        &dir.path().join("d.jsonl"),
        &["--request-log", requests.to_str().unwrap()],
    );
    let base = fake.base();
    let key = "a key  with spaces 1700000000000";
    rt().block_on(async {
        let c = client();
        let r = c
            .post(format!("{base}/send"))
            .header("Idempotency-Key", key)
            .json(&serde_json::json!({"job_id": "j1", "to": "a@example.com", "body": "hi"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let r = c
            .post(format!("{base}/emails"))
            .header("Authorization", "Bearer re_secret_token_value")
            .header("Idempotency-Key", "k2")
            .json(
                &serde_json::json!({"from": "a@example.com", "to": "b@example.com",
                                      "subject": "s", "text": "t"}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{:?}", r.text().await);
        for path in ["/health", "/messages?to=b@example.com", "/nowhere"] {
            c.get(format!("{base}{path}")).send().await.unwrap();
        }
    });
    assert!(fake.sigterm().success(), "SIGTERM exits 0");
    assert_eq!(fake.lines().len(), 2, "both messages in the delivery log");
    let text = std::fs::read_to_string(&requests).unwrap();
    assert!(!text.contains("re_secret_token_value"), "{text}");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    assert_eq!(lines.len(), 5, "{text}");
    assert_eq!(lines[0]["key"], key, "the key read back exactly");
    assert_eq!(lines[0]["method"], "POST");
    assert_eq!(lines[0]["path"], "/send");
    assert_eq!(lines[0]["api"], "webhook");
    assert_eq!(lines[1]["api"], "resend");
    assert_eq!(lines[2]["key"], Value::Null);
    assert_eq!(lines[3]["path"], "/messages", "no query string");
    for l in &lines {
        assert!(l["at"].as_i64().unwrap() > 1_600_000_000_000, "{l}");
    }
}

#[test]
fn ready_file_names_both_addresses() {
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready.json");
    // Started the way a script would: nobody reads its stdout.
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_sendonce"))
        .args([
            "fake-provider",
            "--listen",
            "127.0.0.1:0",
            "--smtp",
            "127.0.0.1:0",
            "--log",
        ])
        .arg(dir.path().join("d.jsonl"))
        .arg("--ready-file")
        .arg(&ready)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut fake = Fake {
        child,
        addr: "127.0.0.1:1".parse().unwrap(),
        log: dir.path().join("d.jsonl"),
        smtp: None,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ready.exists() {
        assert!(Instant::now() < deadline, "no ready file after 10 s");
        assert!(fake.child.try_wait().unwrap().is_none(), "exited");
        std::thread::sleep(Duration::from_millis(20));
    }
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&ready).unwrap()).unwrap();
    let http: SocketAddr = v["http"]
        .as_str()
        .expect("an HTTP address")
        .parse()
        .unwrap();
    fake.addr = http;
    let health = rt().block_on(async { client().get(fake.url("/health")).send().await });
    assert_eq!(
        health
            .expect("/health on the ready file's address")
            .status(),
        200
    );
    let smtp: SocketAddr = v["smtp"]
        .as_str()
        .expect("an SMTP address")
        .parse()
        .unwrap();
    assert_ne!(smtp.port(), 0);
    assert_ne!(smtp, fake.addr);
    // The SMTP address is a listening socket.
    std::net::TcpStream::connect(smtp).expect("connect to the ready file's SMTP address");
    assert_eq!(v.as_object().unwrap().len(), 2, "{v}");
}

/// One request on a fresh connection with this `Host`; the answer's status and body.
async fn with_host(addr: SocketAddr, method: &str, path: &str, host: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\n\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    response(&mut s).await
}

/// Issue 37 F8: a page whose name is rebound to 127.0.0.1 (DNS rebinding) sends its own name as
/// `Host`: the inbox (assertions API, Mailpit API, web inbox) and the send endpoints refuse it,
/// nothing is deleted; loopback names and addresses are answered; `--allow-host` adds names.
#[test]
fn other_hosts_are_refused_against_dns_rebinding() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::start(&dir.path().join("d.jsonl"), &[]);
    let addr = fake.addr;
    let port = addr.port();
    rt().block_on(async move {
        let sent = client()
            .post(format!("http://{addr}/send"))
            .header("idempotency-key", "k1")
            .json(&serde_json::json!({"job_id": "j1", "to": "kim@example.org",
                                      "body": "reset: https://app.example/reset/s3cret"}))
            .send()
            .await
            .unwrap();
        assert_eq!(sent.status(), 200);
        for (method, path) in [
            ("GET", "/messages"),
            ("GET", "/messages/latest"),
            ("GET", "/api/v1/messages"),
            ("GET", "/api/v1/message/latest"),
            ("DELETE", "/api/v1/messages"),
            ("GET", "/"),
            ("POST", "/clear"),
            ("POST", "/send"),
        ] {
            for host in ["attacker.example", &format!("attacker.example:{port}")] {
                let (status, body) = with_host(addr, method, path, host).await;
                assert_eq!(status, 403, "{method} {path} Host {host}: {body}");
                assert!(
                    body.contains("--allow-host attacker.example") && !body.contains("s3cret"),
                    "{body}"
                );
            }
        }
        for host in [
            "localhost".to_string(),
            format!("localhost:{port}"),
            format!("127.0.0.1:{port}"),
            "127.0.0.1".to_string(),
            format!("[::1]:{port}"),
        ] {
            let (status, body) = with_host(addr, "GET", "/messages", &host).await;
            assert_eq!(status, 200, "Host {host}: {body}");
            assert!(
                body.contains("s3cret"),
                "not deleted by the refused DELETE: {body}"
            );
        }
        let (status, _) = with_host(addr, "GET", "/api/v1/messages", "localhost").await;
        assert_eq!(status, 200);
    });
    // --allow-host names another (a Docker service name, say), with or without a port.
    let fake = Fake::start(
        &dir.path().join("e.jsonl"),
        &["--allow-host", "Fake-Box", "--allow-host", "other.test:81"],
    );
    let addr = fake.addr;
    rt().block_on(async move {
        for (host, want) in [
            ("fake-box", 200),
            ("fake-box:9000", 200),
            ("other.test:81", 200),
            ("other.test:82", 403),
            ("attacker.example", 403),
        ] {
            let (status, body) = with_host(addr, "GET", "/api/v1/messages", host).await;
            assert_eq!(status, want, "Host {host}: {body}");
        }
    });
}

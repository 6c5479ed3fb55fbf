//! `sendonce serve` against connection floods and slow bodies (issue 37 F3), with the
//! descriptor limit systemd gives a service by default (`ulimit -n 1024`): 1,100 sockets that
//! send a request head and never its body leave `/healthz` answered; a `Content-Length` over the
//! body limit is refused before the body; a stalled body is cut after `--body-timeout`; past
//! the cap with every connection working, a newcomer gets a fast 503; a cap that does not fit
//! the limit is refused at start. Raw sockets, so nothing between the test and the server
//! retries or buffers.

use crate::common::{rt, token, Env, Server, BIN, TEST_PUBLIC_URL, TEST_UNSUBSCRIBE_SECRET};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// systemd's default soft limit of open files for a service.
const NOFILE: u64 = 1024;
/// The head of a login form post whose 100-byte body never comes (the login form reads its
/// body before anything else: no account or token needed).
const STALLED_HEAD: &[u8] = b"POST /admin/login HTTP/1.1\r\nHost: 127.0.0.1\r\n\
      Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\n";

/// Let this test process open `n` descriptors (its soft limit up to the hard one).
fn raise_own_limit(n: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on structs we own.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        if lim.rlim_cur < n {
            lim.rlim_cur = n.min(lim.rlim_max);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
        }
        assert!(lim.rlim_cur >= n, "this test needs {n} open files: {lim:?}");
    }
}

/// `sendonce serve --listen 127.0.0.1:0 ARGS` with at most `NOFILE` open files.
fn command(env: &Env, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.arg("--db")
        .arg(&env.db)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .env_remove("SENDONCE_PROVIDER")
        .env_remove("SENDONCE_LISTEN")
        .env("SENDONCE_PUBLIC_URL", TEST_PUBLIC_URL)
        .env("SENDONCE_UNSUBSCRIBE_SECRET", TEST_UNSUBSCRIBE_SECRET);
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: NOFILE,
                rlim_max: NOFILE,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

/// The server started by `command`, its address read from its first line.
fn start(env: &Env, args: &[&str]) -> (Server, SocketAddr) {
    let server = Server::spawn(&mut command(env, args));
    let addr = server
        .base
        .strip_prefix("http://")
        .unwrap()
        .parse()
        .unwrap();
    (server, addr)
}

/// Read one answer (head and Content-Length body) within `limit`: its status, head and body.
async fn answer(s: &mut TcpStream, limit: Duration) -> Option<(u16, String, String)> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let end = tokio::time::Instant::now() + limit;
    loop {
        let n = match tokio::time::timeout_at(end, s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => n,
            _ => return None,
        };
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).into_owned();
        let Some(at) = text.find("\r\n\r\n") else {
            continue;
        };
        let head = text[..at].to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if got.len() >= at + 4 + len {
            let status = head.get(9..12)?.parse().ok()?;
            return Some((status, head, text[at + 4..at + 4 + len].to_string()));
        }
    }
}

/// `GET /healthz` on a new connection: the status, and how long the answer took.
async fn healthz(addr: SocketAddr, limit: Duration) -> (Option<u16>, Duration) {
    let started = Instant::now();
    let probe = async {
        let mut s = TcpStream::connect(addr).await.ok()?;
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .ok()?;
        answer(&mut s, limit).await.map(|a| a.0)
    };
    let status = tokio::time::timeout(limit, probe).await.ok().flatten();
    (status, started.elapsed())
}

/// Whether the server closes `s` within `limit` (EOF or reset), after what it wrote.
async fn closed_within(s: &mut TcpStream, limit: Duration) -> (bool, String) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let end = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(end, s.read(&mut buf)).await {
            Err(_) => return (false, String::from_utf8_lossy(&got).into_owned()),
            Ok(Ok(0)) | Ok(Err(_)) => return (true, String::from_utf8_lossy(&got).into_owned()),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

#[test]
fn healthz_answers_while_1100_sockets_hold_a_head_without_its_body() {
    raise_own_limit(4096);
    let env = Env::new();
    env.ok(&["init"]);
    let (mut server, addr) = start(&env, &[]);
    rt().block_on(async move {
        let (before, _) = healthz(addr, Duration::from_secs(5)).await;
        assert_eq!(before, Some(200));
        let mut flood = Vec::new();
        let started = Instant::now();
        for _ in 0..1100 {
            // A server that no longer accepts leaves connects waiting in the backlog: bounded.
            let Ok(Ok(mut s)) =
                tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr)).await
            else {
                continue;
            };
            let _ = s.write_all(STALLED_HEAD).await;
            flood.push(s);
        }
        eprintln!(
            "{} flood sockets opened in {:?}",
            flood.len(),
            started.elapsed()
        );
        // While they are open (none has sent its body), health checks are answered at once.
        for i in 0..5 {
            let (status, took) = healthz(addr, Duration::from_secs(2)).await;
            assert_eq!(status, Some(200), "probe {i} while flooded: {took:?}");
            assert!(took < Duration::from_secs(2), "probe {i} took {took:?}");
        }
        drop(flood);
    });
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "the server died"
    );
    assert!(server.sigterm().success());
}

#[test]
fn a_content_length_over_the_limit_is_refused_before_the_body() {
    let env = Env::new();
    let account = env.setup_account();
    let tok = token(&env, &account, "send");
    let (_server, addr) = start(&env, &["--body-limit", "4096"]);
    rt().block_on(async move {
        for (path, auth) in [
            ("/admin/login", String::new()),
            ("/v1/messages", format!("Authorization: Bearer {tok}\r\n")),
        ] {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let head = format!(
                "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Idempotency-Key: k\r\n\
                 Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n"
            );
            s.write_all(head.as_bytes()).await.unwrap();
            // Not a byte of the body is sent.
            let started = Instant::now();
            let got = answer(&mut s, Duration::from_secs(3)).await;
            let (status, head, body) = got.unwrap_or_else(|| panic!("{path}: no answer"));
            assert_eq!(status, 413, "{path}: {body}");
            assert!(started.elapsed() < Duration::from_secs(1), "{path}");
            assert!(head.contains("connection: close"), "{path}: {head}");
            assert!(
                body.contains("too_large") && body.contains("4096"),
                "{body}"
            );
            assert!(
                closed_within(&mut s, Duration::from_secs(2)).await.0,
                "{path}"
            );
        }
    });
}

#[test]
fn a_body_that_stalls_is_cut_after_the_body_timeout() {
    let env = Env::new();
    env.ok(&["init"]);
    let (_server, addr) = start(&env, &["--body-timeout", "1s"]);
    rt().block_on(async move {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(STALLED_HEAD).await.unwrap();
        s.write_all(b"name=ana&password=").await.unwrap();
        let started = Instant::now();
        let (closed, got) = closed_within(&mut s, Duration::from_secs(10)).await;
        let took = started.elapsed();
        assert!(closed, "still open after {took:?}: {got}");
        assert!(
            took >= Duration::from_millis(900),
            "cut too early: {took:?}"
        );
        assert!(took < Duration::from_secs(4), "cut after {took:?}");
        assert!(got.starts_with("HTTP/1.1 408"), "{got}");
        assert!(got.contains("--body-timeout"), "{got}");
        // A body that arrives in time is served as before.
        let (status, _) = healthz(addr, Duration::from_secs(2)).await;
        assert_eq!(status, Some(200));
    });
}

#[test]
fn past_the_cap_with_every_connection_working_a_newcomer_gets_503_at_once() {
    let env = Env::new();
    let account = env.setup_account();
    let tok = token(&env, &account, "send");
    let (_server, addr) = start(&env, &["--max-connections", "2"]);
    rt().block_on(async move {
        // Two requests that wait 3 s for an outcome (no worker runs): both connections work.
        let mut busy = Vec::new();
        for i in 0..2 {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let body =
                r#"{"to":"kim@example.org","from":"a@example.org","subject":"s","text":"t"}"#;
            let req = format!(
                "POST /v1/messages?wait=3s HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                 Authorization: Bearer {tok}\r\nIdempotency-Key: busy-{i}\r\n\
                 Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            s.write_all(req.as_bytes()).await.unwrap();
            busy.push(s);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let started = Instant::now();
        let (status, took) = healthz(addr, Duration::from_secs(2)).await;
        assert_eq!(status, Some(503), "{took:?}");
        assert!(started.elapsed() < Duration::from_secs(1), "{took:?}");
        for mut s in busy {
            let got = answer(&mut s, Duration::from_secs(10)).await;
            assert!(got.is_some_and(|a| a.0 < 300), "a working request was cut");
        }
        let (status, _) = healthz(addr, Duration::from_secs(2)).await;
        assert_eq!(status, Some(200), "served again once they are done");
    });
}

#[test]
fn a_cap_that_does_not_fit_the_descriptor_limit_is_refused_at_start() {
    let env = Env::new();
    env.ok(&["init"]);
    let out = command(&env, &["--max-connections", "2000"])
        .output()
        .expect("run sendonce serve");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--max-connections 2000") && err.contains("1024"),
        "{err}"
    );
}

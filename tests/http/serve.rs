//! `sendonce serve` as a real process on 127.0.0.1:0, driven by a real HTTP client: health,
//! tokens and account scoping, transactional messages with Idempotency-Key (replays, two
//! concurrent requests with one key, a changed body), body limits and unknown fields, and a
//! SIGTERM drain with a request in flight. Deliveries are counted at the fake provider.

use crate::common::{client, rt, token, Env, Fake, Server, BIN};
use serde_json::{json, Value};
use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Accounts acme and other; a fake provider; a server with a worker sending through it.
pub(crate) fn setup(env: &Env, fake_extra: &[&str], serve_extra: &[&str]) -> (Fake, Server) {
    env.setup_account();
    env.ok(&["account", "add", "other"]);
    let fake = Fake::start(&env.path("fake.jsonl"), fake_extra);
    let spec = format!("webhook:{}", fake.url("/send"));
    let mut args = vec!["--worker", "--provider", spec.as_str()];
    args.extend_from_slice(serve_extra);
    let server = Server::start(env, &args);
    (fake, server)
}

struct Reply {
    status: u16,
    replayed: bool,
    body: Value,
}

async fn post(
    c: &reqwest::Client,
    s: &Server,
    tok: &str,
    key: Option<&str>,
    q: &str,
    body: &Value,
) -> Reply {
    let mut r = c
        .post(s.url(&format!("/v1/messages{q}")))
        .bearer_auth(tok)
        .json(body);
    if let Some(k) = key {
        r = r.header("Idempotency-Key", k);
    }
    let res = r.send().await.unwrap();
    let status = res.status().as_u16();
    let replayed = res.headers().get("idempotent-replayed").is_some();
    let body = res.json().await.unwrap_or(Value::Null);
    Reply {
        status,
        replayed,
        body,
    }
}

fn message(to: &str) -> Value {
    json!({"to": to, "from": "app@example.org", "subject": "Reset", "text": "Your code is 123456"})
}

/// Non-replay deliveries at the fake provider to `to`.
fn delivered(fake: &Fake, to: &str) -> usize {
    fake.lines()
        .iter()
        .filter(|l| l.to == to && !l.replay)
        .count()
}

#[test]
fn health_and_errors_share_one_shape_and_sigterm_exits_zero() {
    let env = Env::new();
    let (_fake, mut server) = setup(&env, &[], &[]);
    let rt = rt();
    rt.block_on(async {
        let c = client();
        let h = c.get(server.url("/healthz")).send().await.unwrap();
        assert_eq!(h.status(), 200);
        let r: Value = c
            .get(server.url("/readyz"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(r["status"], "ready", "{r}");
        assert_eq!(r["worker"], "running", "{r}");
        // The schema version is the store's own, named with its store (doctor says the same).
        assert_eq!(r["store"], "sqlite", "{r}");
        assert_eq!(r["schema_version"], sendonce::store::SCHEMA_VERSION, "{r}");
        let res = c.get(server.url("/nope")).send().await.unwrap();
        assert_eq!(res.status(), 404);
        let id = res.headers()["x-request-id"].to_str().unwrap().to_string();
        let e: Value = res.json().await.unwrap();
        assert_eq!(e["error"]["code"], "not_found");
        assert_eq!(e["error"]["request_id"], id.as_str());
        // No token, a malformed token, a forged one: 401, never echoing what was sent.
        for auth in [
            None,
            Some("nonsense"),
            Some("so_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
        ] {
            let mut r = c.post(server.url("/v1/messages")).json(&message("a@x.org"));
            if let Some(a) = auth {
                r = r.bearer_auth(a);
            }
            let res = r.send().await.unwrap();
            assert_eq!(res.status(), 401, "{auth:?}");
            let text = res.text().await.unwrap();
            assert!(auth.is_none_or(|a| !text.contains(a)), "{text}");
            assert!(text.contains("\"unauthorized\""), "{text}");
        }
    });
    let status = server.sigterm();
    assert!(status.success(), "{status:?}");
}

#[test]
fn a_message_is_sent_once_and_a_retry_gets_the_first_answer() {
    let env = Env::new();
    let (fake, _server) = setup(&env, &[], &[]);
    let tok = token(&env, "acme", "send");
    let rt = rt();
    rt.block_on(async {
        let c = client();
        let s = &_server;
        let first = post(
            &c,
            s,
            &tok,
            Some("reset-1"),
            "?wait=10s",
            &message("Kim@Example.org"),
        )
        .await;
        assert_eq!(first.status, 200, "{}", first.body);
        assert_eq!(first.body["status"], "sent", "{}", first.body);
        assert_eq!(first.body["to"], "kim@example.org");
        assert!(!first.replayed);
        for _ in 0..3 {
            let again = post(
                &c,
                s,
                &tok,
                Some("reset-1"),
                "?wait=10s",
                &message("Kim@Example.org"),
            )
            .await;
            assert_eq!((again.status, &again.body), (200, &first.body));
            assert!(again.replayed);
        }
        // The same key with another body is refused, and sends nothing.
        let other = post(
            &c,
            s,
            &tok,
            Some("reset-1"),
            "",
            &message("lee@example.org"),
        )
        .await;
        assert_eq!(other.status, 422, "{}", other.body);
        assert_eq!(other.body["error"]["code"], "idempotency_key_reused");
        // GET follows it; the key is the caller's own, per account.
        let id = first.body["id"].as_i64().unwrap();
        let got: Value = c
            .get(s.url(&format!("/v1/messages/{id}")))
            .bearer_auth(&tok)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(got["status"], "sent");
        assert!(got["provider_message_id"].is_string(), "{got}");
        // The message's hidden one-row campaign is not a campaign of the API.
        let admin = token(&env, "acme", "admin");
        let res = c
            .get(s.url("/v1/campaigns/1"))
            .bearer_auth(&admin)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 404);
        // Without waiting: 202 queued, then sent.
        let q = post(
            &c,
            s,
            &tok,
            Some("reset-2"),
            "",
            &message("lee@example.org"),
        )
        .await;
        assert_eq!(q.status, 202, "{}", q.body);
        assert_eq!(q.body["status"], "queued");
        let missing = post(&c, s, &tok, None, "", &message("lee@example.org")).await;
        assert_eq!(missing.status, 400, "{}", missing.body);
        assert!(missing.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Idempotency-Key"));
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while delivered(&fake, "lee@example.org") == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(delivered(&fake, "kim@example.org"), 1);
    assert_eq!(delivered(&fake, "lee@example.org"), 1);
}

#[test]
fn concurrent_requests_with_one_key_deliver_once() {
    let env = Env::new();
    let (fake, server) = setup(&env, &["--latency", "300ms"], &[]);
    let tok = token(&env, "acme", "send");
    let rt = rt();
    let url = server.url("/v1/messages?wait=10s");
    let replies: Vec<Reply> = rt.block_on(async {
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (url, tok) = (url.clone(), tok.clone());
                tokio::spawn(async move {
                    let res = client()
                        .post(url)
                        .bearer_auth(tok)
                        .header("Idempotency-Key", "same")
                        .json(&message("kim@example.org"))
                        .send()
                        .await
                        .unwrap();
                    let status = res.status().as_u16();
                    let replayed = res.headers().get("idempotent-replayed").is_some();
                    let body = res.json().await.unwrap_or(Value::Null);
                    Reply {
                        status,
                        replayed,
                        body,
                    }
                })
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    });
    let firsts: Vec<&Reply> = replies
        .iter()
        .filter(|r| r.status == 200 && !r.replayed)
        .collect();
    assert_eq!(firsts.len(), 1, "exactly one request made the message");
    for r in &replies {
        assert!(
            r.status == 409 || (r.status == 200 && r.body == firsts[0].body),
            "{} {}",
            r.status,
            r.body
        );
    }
    assert_eq!(delivered(&fake, "kim@example.org"), 1);
    assert_eq!(env.count("SELECT count(*) FROM sends"), 1);
}

#[test]
fn tokens_are_scoped_to_their_account_and_their_scope() {
    let env = Env::new();
    let (_fake, server) = setup(&env, &[], &[]);
    let acme = token(&env, "acme", "send");
    let other = token(&env, "other", "admin");
    let reader = token(&env, "acme", "read");
    let rt = rt();
    rt.block_on(async {
        let c = client();
        let mut mine = Vec::new();
        for i in 0..5 {
            let key = format!("k{i}");
            let r = post(
                &c,
                &server,
                &acme,
                Some(&key),
                "",
                &message(&format!("u{i}@x.org")),
            )
            .await;
            assert_eq!(r.status, 202, "{}", r.body);
            mine.push(r.body["id"].as_i64().unwrap());
        }
        // The same key in another account is another message.
        let r = post(&c, &server, &other, Some("k0"), "", &message("u0@x.org")).await;
        assert_eq!((r.status, r.replayed), (202, false), "{}", r.body);
        let theirs = r.body["id"].as_i64().unwrap();
        let r = post(&c, &server, &reader, Some("k9"), "", &message("u9@x.org")).await;
        assert_eq!(r.status, 403, "{}", r.body);
        // 1,000 reads with ids of both accounts and ids that exist nowhere: each token sees
        // its own account's messages, and a 404 for everything else.
        let mut leaks = 0;
        let mut seed = 7u64;
        for _ in 0..1000 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let pick = (seed >> 33) % 4;
            let (tok, id, own) = match pick {
                0 => (&acme, mine[(seed >> 40) as usize % mine.len()], true),
                1 => (&acme, theirs, false),
                2 => (&other, mine[(seed >> 40) as usize % mine.len()], false),
                _ => (&reader, 1000 + (seed >> 50) as i64, false),
            };
            let res = c
                .get(server.url(&format!("/v1/messages/{id}")))
                .bearer_auth(tok)
                .send()
                .await
                .unwrap();
            let status = res.status().as_u16();
            if (own && status != 200) || (!own && status != 404) {
                leaks += 1;
            }
        }
        assert_eq!(leaks, 0);
    });
}

#[test]
fn bodies_are_bounded_and_unknown_fields_refused() {
    let env = Env::new();
    let (_fake, server) = setup(&env, &[], &["--body-limit", "4096"]);
    let tok = token(&env, "acme", "send");
    let rt = rt();
    rt.block_on(async {
        let c = client();
        let big = json!({"to": "a@x.org", "from": "a@x.org", "subject": "s", "text": "x".repeat(10_000)});
        let r = post(&c, &server, &tok, Some("big"), "", &big).await;
        assert_eq!(r.status, 413, "{}", r.body);
        assert_eq!(r.body["error"]["code"], "too_large");
        let odd = json!({"to": "a@x.org", "from": "a@x.org", "subject": "s", "text": "t", "bcc": "b@x.org"});
        let r = post(&c, &server, &tok, Some("odd"), "", &odd).await;
        assert_eq!(r.status, 400, "{}", r.body);
        assert!(r.body["error"]["message"].as_str().unwrap().contains("bcc"), "{}", r.body);
        let hostile = json!({"to": "a@x.org", "from": "a@x.org", "subject": "s\r\nBcc: b@x.org", "text": "t"});
        let r = post(&c, &server, &tok, Some("hostile"), "", &hostile).await;
        assert_eq!(r.status, 400, "{}", r.body);
        let r = post(&c, &server, &tok, Some("w"), "?wait=1h", &message("a@x.org")).await;
        assert_eq!(r.status, 400, "{}", r.body);
        let no_from = json!({"to": "a@x.org", "subject": "s", "text": "t"});
        let r = post(&c, &server, &tok, Some("nf"), "", &no_from).await;
        assert_eq!(r.status, 400, "{}", r.body);
        let m = r.body["error"]["message"].as_str().unwrap();
        assert!(m.contains("from") && !m.contains("--"), "in the API's words: {m}");
    });
    assert_eq!(
        env.count("SELECT count(*) FROM sends"),
        0,
        "nothing refused was queued"
    );
}

#[test]
fn sigterm_lets_a_request_in_flight_finish() {
    let env = Env::new();
    let (fake, mut server) = setup(&env, &["--latency", "1s"], &["--drain", "10s"]);
    let tok = token(&env, "acme", "send");
    let rt = rt();
    let pid = server.child.id() as i32;
    let reply = rt.block_on(async {
        let c = client();
        let m = message("kim@example.org");
        let req = post(&c, &server, &tok, Some("late"), "?wait=10s", &m);
        let kill = async {
            tokio::time::sleep(Duration::from_millis(400)).await;
            // SAFETY: kill(2) on our own child.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        };
        let (r, ()) = tokio::join!(req, kill);
        r
    });
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body["status"], "sent", "{}", reply.body);
    let status = server.sigterm();
    assert!(status.success(), "{status:?}");
    assert_eq!(delivered(&fake, "kim@example.org"), 1);
}

#[test]
fn the_config_file_serve_section_is_read_and_flags_win() {
    let env = Env::new();
    env.setup_account();
    let fake = Fake::start(&env.path("fake.jsonl"), &[]);
    let cfg = env.write(
        "sendonce.toml",
        format!(
            "provider = \"webhook:{}\"\n[serve]\nlisten = \"127.0.0.1:0\"\nworker = true\n\
             body_limit = 2048\n",
            fake.url("/send")
        ),
    );
    let cfg = cfg.to_str().unwrap();
    let server = Server::start_with(&env, &["--config", cfg]);
    let tok = token(&env, "acme", "send");
    let rt = rt();
    rt.block_on(async {
        let c = client();
        let r: Value = c
            .get(server.url("/readyz"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(r["worker"], "running", "worker = true in [serve]: {r}");
        let big =
            json!({"to": "a@x.org", "from": "a@x.org", "subject": "s", "text": "x".repeat(3000)});
        let r = post(&c, &server, &tok, Some("big"), "", &big).await;
        assert_eq!(r.status, 413, "body_limit from the file: {}", r.body);
    });
    drop(server);
    // A flag wins over the file.
    let server = Server::start_with(&env, &["--config", cfg, "--body-limit", "65536"]);
    rt.block_on(async {
        let big =
            json!({"to": "a@x.org", "from": "a@x.org", "subject": "s", "text": "x".repeat(3000)});
        let r = post(&client(), &server, &tok, Some("big"), "?wait=10s", &big).await;
        assert_eq!(r.status, 200, "{}", r.body);
    });
    let bad = env.write("bad.toml", "[serve]\nlisten = 1\n");
    let r = env.run(&["serve", "--config", bad.to_str().unwrap()]);
    assert_eq!(r.code, 2, "{}", r.stderr);
}

#[test]
fn request_logs_name_the_route_and_never_the_token() {
    let env = Env::new();
    env.setup_account();
    let log = std::fs::File::create(env.path("serve.log")).unwrap();
    let mut child = Command::new(BIN)
        .arg("--db")
        .arg(&env.db)
        .args(["--log-format", "json", "serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("spawn sendonce serve");
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let base = first
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_string();
    let mut server = Server { child, base };
    let tok = token(&env, "acme", "send");
    let rt = rt();
    rt.block_on(async {
        let c = client();
        let r = post(
            &c,
            &server,
            &tok,
            Some("k-1"),
            "",
            &message("kim@example.org"),
        )
        .await;
        assert_eq!(r.status, 202, "{}", r.body);
        let res = c
            .get(server.url("/v1/messages/999"))
            .bearer_auth(&tok)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 404);
    });
    assert!(server.sigterm().success());
    let text = std::fs::read_to_string(env.path("serve.log")).unwrap();
    assert!(!text.contains(&tok), "the token is in the log");
    assert!(!text.contains(&tok[3..]), "the token's body is in the log");
    let lines: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &Value| v["fields"]["message"] == "request")
        .collect();
    let seen: Vec<(String, u64)> = lines
        .iter()
        .map(|v| {
            (
                v["fields"]["route"].as_str().unwrap_or("").to_string(),
                v["fields"]["status"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert!(
        seen.contains(&("/v1/messages".into(), 202)),
        "{seen:?}\n{text}"
    );
    assert!(
        seen.contains(&("/v1/messages/{id}".into(), 404)),
        "{seen:?}"
    );
    assert!(
        lines.iter().all(|v| v["fields"]["request_id"].is_string()),
        "{text}"
    );
}

#[test]
fn a_client_that_trickles_its_headers_is_cut_off() {
    use std::io::{Read, Write};
    let env = Env::new();
    env.setup_account();
    let server = Server::start(&env, &[]);
    let addr = server.base.strip_prefix("http://").unwrap().to_string();
    let mut sock = std::net::TcpStream::connect(&addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let started = Instant::now();
    sock.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    // One more header byte now and then never completes the head.
    let mut buf = Vec::new();
    let _ = sock.write_all(b"X");
    let _ = sock.read_to_end(&mut buf);
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(25),
        "the connection stayed open {took:?}"
    );
    assert!(took >= Duration::from_secs(5), "closed too early: {took:?}");
    // The server still serves others.
    let mut ok = std::net::TcpStream::connect(&addr).unwrap();
    ok.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    ok.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[test]
fn a_first_request_that_never_answered_gets_409_then_its_answer_from_the_ledger() {
    let env = Env::new();
    let (fake, server) = setup(&env, &[], &[]);
    let tok = token(&env, "acme", "send");
    let rt = rt();
    let first = rt.block_on(async {
        post(
            &client(),
            &server,
            &tok,
            Some("crash"),
            "?wait=10s",
            &message("kim@example.org"),
        )
        .await
    });
    assert_eq!(first.status, 200, "{}", first.body);
    // As if the first request had died after queueing its message but before answering.
    let forget = |age_ms: i64| {
        env.sqlite()
            .execute(
                "UPDATE api_messages SET response_status = NULL, response_body = NULL,
                        created_at = ?1",
                [sendonce::domain::clock::now_ms() - age_ms],
            )
            .unwrap();
    };
    forget(1_000);
    let again = rt.block_on(post(
        &client(),
        &server,
        &tok,
        Some("crash"),
        "",
        &message("kim@example.org"),
    ));
    assert_eq!(again.status, 409, "still in progress: {}", again.body);
    forget(3 * 60 * 1000);
    let late = rt.block_on(post(
        &client(),
        &server,
        &tok,
        Some("crash"),
        "",
        &message("kim@example.org"),
    ));
    assert_eq!(late.status, 200, "answered from the ledger: {}", late.body);
    assert_eq!(late.body["status"], "sent");
    assert_eq!(late.body["id"], first.body["id"]);
    assert_eq!(
        delivered(&fake, "kim@example.org"),
        1,
        "never a second send"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM api_messages WHERE response_status = 200"),
        1
    );
}

//! Events out over HTTP (`GET /v1/events`, `/v1/webhooks`, `crates/core/src/worker/hooks.rs`):
//! the feed pages with cursors, filters and waits; endpoint URLs inside the operator's network
//! are refused when saved and again at each call; and (tier 1) every delivery verifies with the
//! `standardwebhooks` PyPI package (tests/support/hook_receiver.py) while the receiver fails a
//! third of the calls or keeps the event without answering: each event arrives, at least once,
//! exactly as the feed shows it, and nothing else arrives.

use crate::common::{client, refused_port, rt, token, Env, Fake, Server};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// GET `path` with the token: (status, JSON).
pub(crate) async fn get(c: &reqwest::Client, s: &Server, tok: &str, path: &str) -> (u16, Value) {
    let res = c.get(s.url(path)).bearer_auth(tok).send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// A server with the worker on the fake provider; `vars` for its environment.
pub(crate) fn serve(env: &Env, vars: &[(&str, &str)]) -> (Fake, Server) {
    let fake = Fake::start(&env.path("fake.jsonl"), &[]);
    let spec = format!("webhook:{}", fake.url("/send"));
    let server = Server::start_with_env(
        env,
        &["--listen", "127.0.0.1:0", "--worker", "--provider", &spec],
        vars,
    );
    (fake, server)
}

/// The account's events after `after` of `types` (all pages).
pub(crate) async fn feed(c: &reqwest::Client, s: &Server, tok: &str, types: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut after = String::from("0-0");
    loop {
        let path = format!("/v1/events?after={after}&types={types}&limit=500");
        let (status, page) = get(c, s, tok, &path).await;
        assert_eq!(status, 200, "{page}");
        let events = page["events"].as_array().unwrap().clone();
        if events.is_empty() {
            return out;
        }
        out.extend(events);
        after = page["next"].as_str().unwrap().to_string();
    }
}

#[test]
fn the_feed_pages_with_cursors_filters_by_type_and_waits_for_the_next_event() {
    let env = Env::new();
    env.setup_account();
    let (_fake, server) = serve(&env, &[]);
    let tok = token(&env, "acme", "admin");
    rt().block_on(async {
        let c = client();
        for i in 0..5 {
            let body = json!({"channel": "email", "address": format!("a{i}@x.com")});
            let res = c
                .post(server.url("/v1/suppressions"))
                .bearer_auth(&tok)
                .json(&body)
                .send()
                .await
                .unwrap();
            assert!(res.status().is_success(), "{:?}", res.text().await);
        }
        let all = feed(&c, &server, &tok, "suppression.*").await;
        let addresses: Vec<&str> = all
            .iter()
            .map(|e| e["data"]["address"].as_str().unwrap())
            .collect();
        assert_eq!(
            addresses,
            ["a0@x.com", "a1@x.com", "a2@x.com", "a3@x.com", "a4@x.com"]
        );
        assert!(all.iter().all(|e| e["type"] == "suppression.added"));
        // One at a time with the cursor: the same events, in the same order.
        let mut after = "0-0".to_string();
        let mut one_by_one = Vec::new();
        loop {
            let path = format!("/v1/events?after={after}&limit=1&types=suppression.added");
            let (_, page) = get(&c, &server, &tok, &path).await;
            let events = page["events"].as_array().unwrap();
            if events.is_empty() {
                break;
            }
            one_by_one.push(events[0]["id"].clone());
            after = page["next"].as_str().unwrap().to_string();
        }
        let ids: Vec<Value> = all.iter().map(|e| e["id"].clone()).collect();
        assert_eq!(one_by_one, ids);
        // A read that waits returns as soon as the next event commits.
        let started = Instant::now();
        let waiting = {
            let (c, tok, url) = (
                c.clone(),
                tok.clone(),
                server.url(&format!("/v1/events?after={after}&wait=20s")),
            );
            tokio::spawn(async move {
                let res = c.get(url).bearer_auth(tok).send().await.unwrap();
                res.json::<Value>().await.unwrap()
            })
        };
        tokio::time::sleep(Duration::from_millis(600)).await;
        let res = c
            .delete(server.url("/v1/suppressions/email/a0@x.com"))
            .bearer_auth(&tok)
            .send()
            .await
            .unwrap();
        assert!(res.status().is_success());
        let page = waiting.await.unwrap();
        let took = started.elapsed();
        assert_eq!(page["events"][0]["type"], "suppression.removed", "{page}");
        assert!(
            took >= Duration::from_millis(500) && took < Duration::from_secs(10),
            "{took:?}"
        );
        // Bad input names the problem.
        for (path, words) in [
            ("/v1/events?after=xyz", "not a cursor"),
            ("/v1/events?types=send.opened", "send.opened"),
            ("/v1/events?wait=5m", "wait"),
            ("/v1/events?limit=0", "limit"),
        ] {
            let (status, body) = get(&c, &server, &tok, path).await;
            assert_eq!(status, 400, "{path}: {body}");
            assert!(body.to_string().contains(words), "{path}: {body}");
        }
    });
}

/// POST /v1/webhooks: (status, JSON).
async fn create(c: &reqwest::Client, s: &Server, tok: &str, body: &Value) -> (u16, Value) {
    let res = c
        .post(s.url("/v1/webhooks"))
        .bearer_auth(tok)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// Wait until the endpoint's latest delivery has an error containing `words`.
async fn wait_for_error(c: &reqwest::Client, s: &Server, tok: &str, id: i64, words: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, list) = get(c, s, tok, &format!("/v1/webhooks/{id}/deliveries")).await;
        if let Some(d) = list.as_array().and_then(|l| l.first()) {
            if d["last_error"].as_str().is_some_and(|e| e.contains(words)) {
                return d.clone();
            }
        }
        assert!(Instant::now() < deadline, "no error with {words:?}: {list}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[test]
fn endpoints_inside_the_network_are_refused_when_saved_and_again_at_each_call() {
    let env = Env::new();
    env.setup_account();
    let port = refused_port();
    {
        let (_fake, server) = serve(&env, &[]);
        let tok = token(&env, "acme", "admin");
        rt().block_on(async {
            let c = client();
            for (url, words) in [
                (format!("http://127.0.0.1:{port}/h"), "loopback"),
                (format!("http://localhost:{port}/h"), "loopback"),
                ("http://[::1]/h".to_string(), "loopback"),
                ("http://169.254.169.254/latest".to_string(), "metadata"),
                ("http://10.1.2.3/h".to_string(), "private"),
                ("ftp://example.com/h".to_string(), "http"),
                ("https://user:pw@example.com/h".to_string(), "credentials"),
            ] {
                let (status, body) = create(&c, &server, &tok, &json!({"url": url})).await;
                assert_eq!(status, 400, "{url}: {body}");
                assert!(body.to_string().contains(words), "{url}: {body}");
                assert!(!body.to_string().contains("pw@"), "{body}");
            }
            let (status, body) = create(
                &c,
                &server,
                &tok,
                &json!({"url": "https://example.com/h", "types": ["send.opened"]}),
            )
            .await;
            assert_eq!(status, 400, "{body}");
            assert!(body.to_string().contains("send.opened"), "{body}");
        });
    }
    // Saved while the operator allowed loopback (by name and as an address)...
    let allow = [("SENDONCE_EVENTS_ALLOW", "127.0.0.1, ::1")];
    let tok = token(&env, "acme", "admin");
    let ids: Vec<i64> = {
        let (_fake, server) = serve(&env, &allow);
        rt().block_on(async {
            let c = client();
            let mut ids = Vec::new();
            for host in ["127.0.0.1", "localhost"] {
                let url = format!("http://{host}:{port}/h");
                let (status, body) = create(&c, &server, &tok, &json!({"url": url})).await;
                assert_eq!(status, 201, "{body}");
                assert!(body["secret"].as_str().unwrap().starts_with("whsec_"));
                ids.push(body["id"].as_i64().unwrap());
            }
            ids
        })
    };
    // ...and called after the permission was taken away: the call is refused before it is made.
    let (_fake, server) = serve(&env, &[]);
    rt().block_on(async {
        let c = client();
        let res = c
            .post(server.url("/v1/suppressions"))
            .bearer_auth(&tok)
            .json(&json!({"channel": "email", "address": "z@x.com"}))
            .send()
            .await
            .unwrap();
        assert!(res.status().is_success());
        let literal = wait_for_error(&c, &server, &tok, ids[0], "loopback").await;
        assert_eq!(literal["last_status"], Value::Null, "{literal}");
        let named = wait_for_error(&c, &server, &tok, ids[1], "loopback").await;
        assert!(
            named["last_error"]
                .as_str()
                .unwrap()
                .contains("localhost resolves to"),
            "{named}"
        );
        assert_eq!(named["status"], "pending", "retried later: {named}");
    });
}

/// A failed call's error names "the endpoint", never its URL: a token in the query string
/// stays out of the delivery's error, the attempt log and `endpoint show`.
#[test]
fn a_failed_calls_error_never_shows_the_endpoints_url() {
    let env = Env::new();
    env.setup_account();
    let port = refused_port();
    let (_fake, server) = serve(&env, &[("SENDONCE_EVENTS_ALLOW", "127.0.0.1")]);
    let tok = token(&env, "acme", "admin");
    let id = rt().block_on(async {
        let c = client();
        let url = format!("http://127.0.0.1:{port}/h?token=s3cret-in-the-query");
        let (status, body) = create(&c, &server, &tok, &json!({"url": url})).await;
        assert_eq!(status, 201, "{body}");
        let id = body["id"].as_i64().unwrap();
        let res = c
            .post(server.url("/v1/suppressions"))
            .bearer_auth(&tok)
            .json(&json!({"channel": "email", "address": "q@x.com"}))
            .send()
            .await
            .unwrap();
        assert!(res.status().is_success());
        let d = wait_for_error(&c, &server, &tok, id, "the endpoint").await;
        assert!(!d.to_string().contains("s3cret"), "{d}");
        id
    });
    let shown = env.ok(&["endpoint", "show", "--account", "acme", &id.to_string()]);
    assert!(shown.contains("the endpoint"), "{shown}");
    // The URL on the endpoint's own line (the operator's setting), and nowhere else.
    assert_eq!(shown.matches("s3cret").count(), 1, "{shown}");
}

/// `doctor` warns of the endpoints the circuit breaker turned off, names them and how to turn
/// them back on; after `endpoint update --enable` it has nothing to say.
#[test]
fn doctor_names_the_endpoints_the_breaker_turned_off() {
    let env = Env::new();
    env.setup_account();
    env.ok(&[
        "endpoint",
        "add",
        "--account",
        "acme",
        "--url",
        "https://93.184.216.34/hooks",
    ]);
    let finding = |env: &Env| -> (i32, Value) {
        let r = env.run(&["--json", "doctor"]);
        let doc: Value = serde_json::from_str(&r.stdout).expect("doctor --json");
        let f = doc["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "webhook_endpoints")
            .cloned()
            .unwrap_or_else(|| panic!("no webhook_endpoints finding: {doc}"));
        (r.code, f)
    };
    assert_eq!(finding(&env).1["level"], "ok");
    // Five days of failures, as the breaker leaves an endpoint.
    env.sqlite()
        .execute(
            "UPDATE hook_endpoints SET status = 'broken', failing_since = 1",
            [],
        )
        .unwrap();
    let (code, f) = finding(&env);
    assert_ne!(code, 0, "{f}");
    assert_eq!(f["level"], "warn", "{f}");
    assert!(
        f["detail"]
            .as_str()
            .unwrap()
            .contains("endpoint 1 (account 1)"),
        "{f}"
    );
    let hint = f["hint"].as_str().unwrap();
    assert!(
        hint.contains("endpoint update --account 1 1 --enable"),
        "{f}"
    );
    env.ok(&["endpoint", "update", "--account", "1", "1", "--enable"]);
    assert_eq!(finding(&env).1["level"], "ok");
}

/// tests/support/hook_receiver.py on `port`, verifying with `secrets`, logging to `log`.
#[cfg(feature = "tier1")]
pub(crate) struct Receiver {
    child: std::process::Child,
    pub log: std::path::PathBuf,
}

#[cfg(feature = "tier1")]
impl Receiver {
    pub(crate) fn start(env: &Env, port: u16, secrets: &[&str], fail: f64, drop: f64) -> Receiver {
        use std::io::BufRead;
        let log = env.path("received.jsonl");
        let mut cmd = std::process::Command::new("python3");
        cmd.arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/support/hook_receiver.py"
        ))
        .arg(&log)
        .args(["--port", &port.to_string()])
        .args(["--fail", &fail.to_string(), "--drop", &drop.to_string()]);
        for s in secrets {
            cmd.args(["--secret", s]);
        }
        let mut child = cmd
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 (tests/run.sh puts the venv with standardwebhooks first on PATH)");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.starts_with("listening on"), "receiver said {line:?}");
        Receiver { child, log }
    }

    /// What it received and verified, in order (and whatever did not verify).
    pub(crate) fn received(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

#[cfg(feature = "tier1")]
impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free port on loopback (bound, then released for the receiver to take).
#[cfg(feature = "tier1")]
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Check what a receiver got against the feed: every event of `types` arrived at least once,
/// each arrival verified and equal to the feed's own rendering, nothing else arrived. Returns
/// (events, arrivals).
#[cfg(feature = "tier1")]
pub(crate) fn assert_received_once_each(feed: &[Value], received: &[Value]) -> (usize, usize) {
    use std::collections::HashMap;
    let by_id: HashMap<&str, &Value> = feed
        .iter()
        .map(|e| (e["id"].as_str().unwrap(), e))
        .collect();
    let mut arrivals: HashMap<&str, usize> = HashMap::new();
    for r in received {
        assert_eq!(r["verified"], true, "a delivery did not verify: {r}");
        let id = r["id"].as_str().unwrap();
        let want = by_id.get(id).unwrap_or_else(|| panic!("made up: {r}"));
        assert_eq!(&&r["body"], want, "the delivery differs from the feed");
        *arrivals.entry(id).or_default() += 1;
    }
    let missing: Vec<&&str> = by_id
        .keys()
        .filter(|id| !arrivals.contains_key(*id))
        .collect();
    assert!(missing.is_empty(), "never delivered: {missing:?}");
    (by_id.len(), received.len())
}

#[cfg(feature = "tier1")]
#[test]
fn every_delivery_verifies_with_standardwebhooks_and_each_event_arrives() {
    let env = Env::new();
    env.setup_account();
    let (_fake, server) = serve(&env, &[("SENDONCE_EVENTS_ALLOW", "127.0.0.1")]);
    let tok = token(&env, "acme", "admin");
    let port = free_port();
    rt().block_on(async {
        let c = client();
        let url = format!("http://127.0.0.1:{port}/hook");
        let (status, made) = create(
            &c,
            &server,
            &tok,
            &json!({"url": url, "types": ["send.sent"]}),
        )
        .await;
        assert_eq!(status, 201, "{made}");
        let secret = made["secret"].as_str().unwrap().to_string();
        let receiver = Receiver::start(&env, port, &[&secret], 0.3, 0.1);
        for i in 0..30 {
            let body = json!({"to": format!("r{i}@example.org"), "from": "shop@example.org",
                              "subject": "Receipt", "text": "Thanks", "metadata": {"order": i}});
            let res = c
                .post(server.url("/v1/messages"))
                .bearer_auth(&tok)
                .header("Idempotency-Key", format!("order-{i}"))
                .json(&body)
                .send()
                .await
                .unwrap();
            assert!(res.status().is_success());
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        let (events, received) = loop {
            let events = feed(&c, &server, &tok, "send.sent").await;
            let got = receiver.received();
            let ids: std::collections::HashSet<&str> =
                got.iter().filter_map(|r| r["id"].as_str()).collect();
            if events.len() == 30 && ids.len() == 30 {
                break (events, got);
            }
            assert!(
                Instant::now() < deadline,
                "{} events, {} delivered",
                events.len(),
                ids.len()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let (n, arrivals) = assert_received_once_each(&events, &received);
        for e in &events {
            let i = e["data"]["metadata"]["order"].as_i64().unwrap();
            assert_eq!(e["data"]["idempotency_key"], format!("order-{i}"), "{e}");
            assert_eq!(e["data"]["address"], format!("r{i}@example.org"), "{e}");
        }
        let (_, deliveries) = get(&c, &server, &tok, "/v1/webhooks/1/deliveries").await;
        let retried = deliveries
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["attempts"].as_i64().unwrap() > 1)
            .count();
        assert!(retried > 0, "nothing was retried: {deliveries}");
        println!("{n} events, {arrivals} arrivals, {retried} deliveries retried");
        // A rotation: the new secret and, until the overlap ends, the old one both sign.
        let res = c
            .post(server.url("/v1/webhooks/1/rotate"))
            .bearer_auth(&tok)
            .json(&json!({"overlap": "1h"}))
            .send()
            .await
            .unwrap();
        let rotated: Value = res.json().await.unwrap();
        let new_secret = rotated["secret"].as_str().unwrap().to_string();
        assert_ne!(new_secret, secret);
        drop(receiver);
        std::fs::remove_file(env.path("received.jsonl")).unwrap();
        let receiver = Receiver::start(&env, port, &[&secret, &new_secret], 0.0, 0.0);
        let res = c
            .post(server.url("/v1/messages"))
            .bearer_auth(&tok)
            .header("Idempotency-Key", "after-rotation")
            .json(&json!({"to": "z@example.org", "from": "shop@example.org",
                          "subject": "s", "text": "t"}))
            .send()
            .await
            .unwrap();
        assert!(res.status().is_success());
        let deadline = Instant::now() + Duration::from_secs(30);
        let got = loop {
            let got = receiver.received();
            if !got.is_empty() {
                break got;
            }
            assert!(Instant::now() < deadline, "nothing after the rotation");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(got[0]["secrets"], json!([0, 1]), "{}", got[0]);
        assert_eq!(got[0]["signatures"], 2, "{}", got[0]);
    });
}

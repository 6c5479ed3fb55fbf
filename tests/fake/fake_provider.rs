//! `sendonce fake-provider` run as a real process on 127.0.0.1, and the webhook provider's
//! classification of every kind of answer (against the fake provider and tiny raw servers).

use crate::common::Fake;
use sendonce::domain::address::Channel;
use sendonce::provider::deliverylog::DeliveryLine;
use sendonce::provider::{from_spec, CallResult, Message, Provider};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn client() -> reqwest::Client {
    // reqwest is built without a default crypto backend (see Cargo.toml).
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().no_proxy().build().unwrap()
}

fn payload(job: &str, to: &str, body: &str) -> Value {
    json!({"job_id": job, "to": to, "channel": "email", "subject": "Hi", "body": body,
           "from": "news@example.com", "metadata": {"job_id": job}})
}

async fn post(
    c: &reqwest::Client,
    url: &str,
    key: Option<&str>,
    body: &Value,
) -> reqwest::Response {
    let mut r = c.post(url).json(body);
    if let Some(k) = key {
        r = r.header("Idempotency-Key", k);
    }
    r.send().await.expect("a response")
}

async fn id_of(r: reqwest::Response) -> String {
    let v: Value = r.json().await.unwrap();
    v["id"].as_str().expect("an id").to_string()
}

fn msg(job: &str, to: &str, body: &str) -> Message {
    Message {
        status_callback: None,
        reply_to: None,
        job_id: job.into(),
        idempotency_key: format!("key-{job}"),
        channel: Channel::Email,
        from: Some("news@example.com".into()),
        to: to.into(),
        subject: Some("Hi".into()),
        body: body.into(),
        html: None,
        unsubscribe: None,
        attachments: Vec::new(),
    }
}

fn webhook(url: &str) -> Arc<dyn Provider> {
    from_spec(&format!("webhook:{url}#timeout=2s")).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn accepts_replays_conflicts_validates_and_filters() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::start(&dir.path().join("log.jsonl"), &[]);
    let c = client();
    let send = fake.url("/send");

    let r = post(
        &c,
        &send,
        Some("k1"),
        &payload("j1", "a@example.com", "hello"),
    )
    .await;
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("idempotent-replayed").is_none());
    let id1 = id_of(r).await;
    let lines = fake.lines();
    assert_eq!(
        lines.len(),
        1,
        "the acceptance is in the log before the answer"
    );
    assert_eq!(lines[0].message_id, id1);
    assert_eq!(lines[0].idempotency_key, "k1");
    assert_eq!(lines[0].job_id, "j1");
    assert_eq!(lines[0].to, "a@example.com");
    assert_eq!(lines[0].subject.as_deref(), Some("Hi"));
    assert_eq!(lines[0].from.as_deref(), Some("news@example.com"));
    assert_eq!(lines[0].metadata, Some(json!({"job_id": "j1"})));
    assert!(!lines[0].replay);

    // Same key, same payload: the first id, logged as a replay.
    let r = post(
        &c,
        &send,
        Some("k1"),
        &payload("j1", "a@example.com", "hello"),
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["idempotent-replayed"], "true");
    assert_eq!(id_of(r).await, id1);
    let lines = fake.lines();
    assert_eq!(lines.len(), 2);
    assert!(lines[1].replay);
    assert_eq!(lines[1].message_id, id1);

    // Same key, different body: 409, not a delivery.
    let r = post(
        &c,
        &send,
        Some("k1"),
        &payload("j1", "a@example.com", "changed"),
    )
    .await;
    assert_eq!(r.status(), 409);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["error"],
        "idempotency key reused with a different payload"
    );
    assert_eq!(fake.lines().len(), 2);

    // Validation: no key -> 400, missing fields -> 422; nothing logged.
    let r = post(&c, &send, None, &payload("j2", "b@example.com", "x")).await;
    assert_eq!(r.status(), 400);
    for missing in ["to", "body", "job_id"] {
        let mut p = payload("j2", "b@example.com", "x");
        p.as_object_mut().unwrap().remove(missing);
        let r = post(&c, &send, Some("k2"), &p).await;
        assert_eq!(r.status(), 422, "missing {missing}");
        let v: Value = r.json().await.unwrap();
        assert!(v["error"].as_str().unwrap().contains(missing));
    }
    assert_eq!(fake.lines().len(), 2);

    // POST / works too; then the /messages filters.
    let r = post(
        &c,
        &fake.url("/"),
        Some("k3"),
        &payload("j3", "+14155550100", "sms"),
    )
    .await;
    assert_eq!(r.status(), 200);
    let r = post(
        &c,
        &send,
        Some("k4"),
        &payload("j4", "a@example.com", "again"),
    )
    .await;
    assert_eq!(r.status(), 200);
    let get = |q: &str| {
        let c = c.clone();
        let u = fake.url(&format!("/messages{q}"));
        async move {
            let r = c.get(u).send().await.unwrap();
            assert_eq!(r.status(), 200);
            r.json::<Vec<DeliveryLine>>().await.unwrap()
        }
    };
    // Replays are hidden unless asked for: 3 deliveries, 4 lines.
    let all = get("").await;
    assert_eq!(all.len(), 3);
    assert!(all.iter().all(|l| !l.replay));
    let with_replays = get("?replays=true").await;
    assert_eq!(with_replays.len(), 4);
    assert_eq!(with_replays.iter().filter(|l| l.replay).count(), 1);
    let to_a = get("?to=a%40example.com&replays=true").await;
    assert_eq!(to_a.len(), 3);
    assert!(to_a.iter().all(|l| l.to == "a@example.com"));
    assert_eq!(get("?to=a%40example.com").await.len(), 2);
    let phone = get("?to=%2B14155550100").await;
    assert_eq!(phone.len(), 1);
    assert_eq!(phone[0].job_id, "j3");
    let both = get("?to=a@example.com&job_id=j1&replays=true").await;
    assert_eq!(both.len(), 2);
    assert!(both.iter().all(|l| l.job_id == "j1"));
    assert_eq!(get("?job_id=j4").await.len(), 1);
    assert!(get("?job_id=nope").await.is_empty());

    let r = c.get(fake.url("/health")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = c.get(fake.url("/elsewhere")).send().await.unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn without_idempotency_a_replay_is_a_second_delivery() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::start(&dir.path().join("log.jsonl"), &["--no-idempotent"]);
    let c = client();
    let p = payload("j1", "a@example.com", "hello");
    let r1 = post(&c, &fake.url("/send"), Some("k1"), &p).await;
    assert_eq!(r1.status(), 200);
    let r2 = post(&c, &fake.url("/send"), Some("k1"), &p).await;
    assert_eq!(r2.status(), 200);
    assert!(r2.headers().get("idempotent-replayed").is_none());
    let (a, b) = (id_of(r1).await, id_of(r2).await);
    assert_ne!(a, b);
    let lines = fake.lines();
    assert_eq!(lines.len(), 2);
    assert!(lines.iter().all(|l| !l.replay && l.idempotency_key == "k1"));
    // A different payload is not a conflict either.
    let r = post(
        &c,
        &fake.url("/send"),
        Some("k1"),
        &payload("j1", "a@example.com", "x"),
    )
    .await;
    assert_eq!(r.status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dropped_reply_is_closed_without_response_but_logged() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::start(
        &dir.path().join("log.jsonl"),
        &["--drop-after-accept-rate", "1.0", "--seed", "7"],
    );
    let c = client();
    let err = c
        .post(fake.url("/send"))
        .header("Idempotency-Key", "k1")
        .json(&payload("j1", "a@example.com", "hello"))
        .send()
        .await
        .expect_err("no response at all");
    assert!(err.status().is_none());
    assert!(!err.is_connect(), "the request was written: {err:?}");
    let lines = fake.lines();
    assert_eq!(
        lines.len(),
        1,
        "the delivery is durable although unanswered"
    );
    assert_eq!(lines[0].job_id, "j1");

    // The webhook provider cannot know what happened: ambiguous. The fake logged it.
    let res = webhook(&fake.url("/send"))
        .send(&msg("j2", "b@example.com", "x"))
        .await;
    assert!(matches!(res, CallResult::Ambiguous { .. }), "{res:?}");
    assert_eq!(fake.lines().len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_injected_failure_is_a_503_and_not_logged() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::start(&dir.path().join("log.jsonl"), &["--fail-rate", "1"]);
    let c = client();
    let r = post(
        &c,
        &fake.url("/send"),
        Some("k1"),
        &payload("j1", "a@b.c", "x"),
    )
    .await;
    assert_eq!(r.status(), 503);
    let res = webhook(&fake.url("/send"))
        .send(&msg("j2", "b@example.com", "x"))
        .await;
    assert!(matches!(res, CallResult::Ambiguous { .. }), "{res:?}");
    assert!(fake.lines().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_key_table_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log.jsonl");
    let c = client();
    let p = payload("j1", "a@example.com", "hello");
    let mut fake = Fake::start(&log, &[]);
    let id1 = id_of(post(&c, &fake.url("/send"), Some("k1"), &p).await).await;
    fake.child.kill().unwrap(); // SIGKILL: no clean shutdown
    fake.child.wait().unwrap();
    drop(fake);
    assert!(dir.path().join("log.jsonl.keys").exists());

    let fake = Fake::start(&log, &[]);
    let r = post(&c, &fake.url("/send"), Some("k1"), &p).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["idempotent-replayed"], "true");
    assert_eq!(id_of(r).await, id1);
    let r = post(
        &c,
        &fake.url("/send"),
        Some("k1"),
        &payload("j1", "a@example.com", "other"),
    )
    .await;
    assert_eq!(r.status(), 409);
    drop(fake);

    // Even with the key table gone, the log itself still knows the key.
    std::fs::remove_file(dir.path().join("log.jsonl.keys")).unwrap();
    let fake = Fake::start(&log, &[]);
    let r = post(&c, &fake.url("/send"), Some("k1"), &p).await;
    assert_eq!(id_of(r).await, id1);
    let lines = fake.lines();
    assert_eq!(lines.iter().filter(|l| !l.replay).count(), 1);
    assert_eq!(lines.iter().filter(|l| l.replay).count(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_finishes_in_flight_requests_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let mut fake = Fake::start(&dir.path().join("log.jsonl"), &["--latency", "1500ms"]);
    let c = client();
    let url = fake.url("/send");
    let inflight = tokio::spawn(async move {
        post(
            &c,
            &url,
            Some("k1"),
            &payload("j1", "a@example.com", "hello"),
        )
        .await
    });
    // Time for the request to be accepted; it then sleeps 1.5 s inside the server.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let status = tokio::task::block_in_place(|| fake.sigterm());
    assert_eq!(status.code(), Some(0), "{status:?}");
    let r = inflight.await.unwrap();
    assert_eq!(r.status(), 200, "the in-flight request was answered");
    assert_eq!(fake.lines().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn load_every_request_accepted_and_logged_once() {
    const N: usize = 2000;
    const CLIENTS: usize = 32;
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::start(&dir.path().join("log.jsonl"), &[]);
    let c = client();
    let url = fake.url("/send");
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..CLIENTS {
        let (c, url) = (c.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for i in (w..N).step_by(CLIENTS) {
                let job = format!("job-{i}");
                let r = post(
                    &c,
                    &url,
                    Some(&format!("k-{i}")),
                    &payload(&job, "a@b.c", "x"),
                )
                .await;
                assert_eq!(r.status(), 200);
                ids.push((i, id_of(r).await));
            }
            ids
        }));
    }
    let mut ids = Vec::new();
    for t in tasks {
        ids.extend(t.await.unwrap());
    }
    let elapsed = start.elapsed();
    eprintln!(
        "fake provider: {N} requests, {CLIENTS} clients, {:.0} req/s (unoptimised test build)",
        N as f64 / elapsed.as_secs_f64()
    );
    assert_eq!(ids.len(), N);
    let lines = fake.lines();
    assert_eq!(lines.len(), N);
    let mut keys: Vec<&str> = lines.iter().map(|l| l.idempotency_key.as_str()).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), N, "every key logged exactly once");
    assert!(lines.iter().all(|l| !l.replay));
    for (i, id) in ids {
        let l = lines
            .iter()
            .find(|l| l.job_id == format!("job-{i}"))
            .unwrap();
        assert_eq!(&l.message_id, &id);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn webhook_against_the_fake_provider() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::start(&dir.path().join("log.jsonl"), &[]);
    let p = webhook(&fake.url("/send"));
    let m = msg("campaign:1:sub:2", "a@example.com", "hello");
    let first = p.send(&m).await;
    let CallResult::Accepted {
        provider_id,
        replay: false,
    } = first.clone()
    else {
        panic!("{first:?}")
    };
    assert_eq!(
        p.send(&m).await,
        CallResult::Accepted {
            provider_id: provider_id.clone(),
            replay: true
        }
    );
    let changed = Message {
        body: "changed".into(),
        ..m.clone()
    };
    let res = p.send(&changed).await;
    assert!(matches!(res, CallResult::AlreadyAccepted { .. }), "{res:?}");
    let lines = fake.lines();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0].idempotency_key, m.idempotency_key);
    assert_eq!(lines[0].job_id, m.job_id);
    assert_eq!(lines[0].channel, "email");
    assert_eq!(lines[0].metadata, Some(json!({"job_id": m.job_id})));
}

/// A one-shot raw HTTP server: answers every request with `response` (or never, or closes).
async fn raw_server(response: Option<&'static str>) -> SocketAddr {
    crate::common::raw_http_server(response.map(str::to_string))
        .await
        .0
}

fn canned(status: &str, extra: &str, body: &str) -> &'static str {
    Box::leak(
        format!(
            "HTTP/1.1 {status}\r\n{extra}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_boxed_str(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn webhook_classifies_every_kind_of_answer() {
    let m = msg("j1", "a@example.com", "hello");
    let call = |resp: Option<&'static str>| {
        let m = m.clone();
        async move {
            let addr = raw_server(resp).await;
            from_spec(&format!("webhook:http://{addr}/send#timeout=500ms"))
                .unwrap()
                .send(&m)
                .await
        }
    };

    for status in [
        "400 Bad Request",
        "401 Unauthorized",
        "404 Not Found",
        "422 Unprocessable Entity",
        "403 Forbidden",
    ] {
        let res = call(Some(canned(status, "", r#"{"error":"bad address"}"#))).await;
        match res {
            CallResult::Permanent {
                error,
                suppress: None,
            } => {
                assert!(error.contains(&status[..3]), "{error}");
                assert!(error.contains("bad address"), "{error}");
            }
            other => panic!("{status}: {other:?}"),
        }
    }
    let res = call(Some(canned(
        "429 Too Many Requests",
        "Retry-After: 7\r\n",
        "",
    )))
    .await;
    assert!(
        matches!(res, CallResult::NotSent { retry_after: Some(d), .. } if d == Duration::from_secs(7)),
        "{res:?}"
    );
    let res = call(Some(canned(
        "409 Conflict",
        "",
        r#"{"error":"key reused"}"#,
    )))
    .await;
    assert!(matches!(res, CallResult::AlreadyAccepted { .. }), "{res:?}");
    for status in [
        "500 Internal Server Error",
        "502 Bad Gateway",
        "503 Service Unavailable",
    ] {
        let res = call(Some(canned(status, "", ""))).await;
        assert!(
            matches!(res, CallResult::Ambiguous { .. }),
            "{status}: {res:?}"
        );
    }
    let res = call(Some(canned(
        "200 OK",
        "Idempotent-Replayed: true\r\n",
        r#"{"id":"m-9"}"#,
    )))
    .await;
    assert_eq!(
        res,
        CallResult::Accepted {
            provider_id: "m-9".into(),
            replay: true
        }
    );
    let res = call(Some(canned("201 Created", "", "no json"))).await;
    assert_eq!(
        res,
        CallResult::Accepted {
            provider_id: "unknown".into(),
            replay: false
        }
    );

    // Read the request, then close without a word: the request left, so ambiguous.
    let res = call(Some("")).await;
    assert!(matches!(res, CallResult::Ambiguous { .. }), "{res:?}");

    // Never answered: timeout, ambiguous.
    let t = Instant::now();
    let res = call(None).await;
    assert!(matches!(res, CallResult::Ambiguous { .. }), "{res:?}");
    assert!(t.elapsed() < Duration::from_secs(10));

    // Nobody listening: refused before the request left, definitely not sent.
    let port = crate::common::refused_port();
    let res = from_spec(&format!("webhook:http://127.0.0.1:{port}/send"))
        .unwrap()
        .send(&m)
        .await;
    assert!(
        matches!(
            res,
            CallResult::NotSent {
                retry_after: None,
                ..
            }
        ),
        "{res:?}"
    );
}

#[test]
fn webhook_spec_errors_name_the_problem() {
    let e = from_spec("webhook:http://127.0.0.1:1/send#retries=3")
        .err()
        .unwrap();
    assert!(e.message.contains("retries"), "{}", e.message);
    let e = from_spec("webhook:").err().unwrap();
    assert!(e.message.contains("URL"), "{}", e.message);
    let e = from_spec("carrier-pigeon").err().unwrap();
    assert!(e.message.contains("webhook:URL"), "{}", e.message);
    let p = from_spec("webhook:http://127.0.0.1:1/send#key_window=30m&timeout=3s").unwrap();
    assert_eq!(p.capabilities().key_window, Some(Duration::from_secs(1800)));
    assert_eq!(p.capabilities().call_timeout, Duration::from_secs(3));
}

//! The Twilio, Resend and Postmark providers over real sockets on 127.0.0.1: successful sends
//! through `sendonce fake-provider` (run as a real process) and what it logged; every error
//! mapping against tiny raw servers answering with each API's documented error bodies; Postmark
//! lookup; Twilio's signature test vector; SMS segment counts; secrets kept out of every
//! result; and one `sendonce run --once` through the Resend endpoint of the fake.

use crate::common;
use crate::common::Fake;

use sendonce::domain::address::Channel;
use sendonce::provider::{from_spec, CallResult, Lookup, Message};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The credential every test uses; it must never appear in a result.
const TOKEN: &str = "tok-5ecret-0123456789abcdef";

/// A file holding the token, as the `*_file=` options expect.
fn token_file(dir: &Path) -> PathBuf {
    let f = dir.join("token");
    std::fs::write(&f, format!("{TOKEN}\n")).unwrap();
    f
}

const FORM: &str = "application/x-www-form-urlencoded";

/// A form-encoded body (reqwest is built without its `form` feature).
fn form(pairs: &[(&str, &str)]) -> String {
    let mut f = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        f.append_pair(k, v);
    }
    f.finish()
}

fn client() -> reqwest::Client {
    // reqwest is built without a default crypto backend (see Cargo.toml).
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().no_proxy().build().unwrap()
}

fn email(job: &str, to: &str, body: &str) -> Message {
    Message {
        status_callback: None,
        reply_to: None,
        job_id: job.into(),
        idempotency_key: sendonce::domain::model::idempotency_key(job),
        channel: Channel::Email,
        from: None,
        to: to.into(),
        subject: Some("Hello".into()),
        body: body.into(),
        html: Some(format!("<p>{body}</p>")),
        unsubscribe: None,
        attachments: Vec::new(),
    }
}

fn sms(job: &str, to: &str, body: &str) -> Message {
    Message {
        status_callback: None,
        reply_to: None,
        job_id: job.into(),
        idempotency_key: sendonce::domain::model::idempotency_key(job),
        channel: Channel::Sms,
        from: None,
        to: to.into(),
        subject: None,
        body: body.into(),
        html: None,
        unsubscribe: None,
        attachments: Vec::new(),
    }
}

/// Nothing the caller could see carries the token.
fn assert_no_secret(what: &impl std::fmt::Debug) {
    let text = format!("{what:?}");
    assert!(!text.contains(TOKEN), "the token leaked: {text}");
}

fn twilio_spec(base: &str, tf: &Path, extra: &str) -> String {
    format!(
        "twilio:AC0123456789abcdef?from=%2B15017122661&base_url={base}&auth_token_file={}&timeout=2s{extra}",
        tf.display()
    )
}

fn resend_spec(base: &str, tf: &Path) -> String {
    format!(
        "resend:?from=news@example.com&base_url={base}&api_key_file={}&timeout=2s",
        tf.display()
    )
}

fn postmark_spec(base: &str, tf: &Path) -> String {
    format!(
        "postmark:?from=news@example.com&base_url={base}&token_file={}&timeout=2s",
        tf.display()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn twilio_through_the_fake_provider() {
    let dir = tempfile::tempdir().unwrap();
    let tf = token_file(dir.path());
    let fake = Fake::start(
        &dir.path().join("log.jsonl"),
        &["--twilio-opted-out", "+1 415 555 0199"],
    );
    let p = from_spec(&twilio_spec(
        &fake.base(),
        &tf,
        "&status_callback=https%3A%2F%2Fhooks.example.com%2Ftwilio",
    ))
    .unwrap();
    assert_eq!(p.capabilities().key_window, None);
    assert!(!p.capabilities().can_lookup);
    assert_no_secret(p.capabilities());

    let m = sms("campaign:7:sub:42", "+14155550100", "Sale today: 20% off");
    let res = p.send(&m).await;
    let CallResult::Accepted {
        provider_id,
        replay: false,
    } = &res
    else {
        panic!("{res:?}")
    };
    assert!(
        provider_id.starts_with("SM") && provider_id.len() == 34,
        "{provider_id}"
    );
    let lines = fake.lines();
    assert_eq!(lines.len(), 1);
    let l = &lines[0];
    assert_eq!(l.api.as_deref(), Some("twilio"));
    assert_eq!(&l.message_id, provider_id);
    assert_eq!(l.job_id, m.job_id, "the job id travels in StatusCallback");
    assert_eq!(l.channel, "sms");
    assert_eq!(l.to, "+14155550100");
    assert_eq!(l.from.as_deref(), Some("+15017122661"));
    assert_eq!(l.body, m.body);
    assert_eq!(
        l.metadata.as_ref().unwrap()["StatusCallback"],
        "https://hooks.example.com/twilio?job_id=campaign%3A7%3Asub%3A42"
    );
    assert_eq!(
        l.metadata.as_ref().unwrap()["account_sid"],
        "AC0123456789abcdef"
    );

    // No idempotency: the same message again is a second delivery.
    let again = p.send(&m).await;
    assert!(matches!(&again, CallResult::Accepted { provider_id: id, .. } if id != provider_id));
    assert_eq!(fake.lines().len(), 2);

    // Opted out: 21610, permanent, suppressed, not logged.
    let res = p.send(&sms("campaign:7:sub:43", "+14155550199", "x")).await;
    assert_eq!(
        res,
        CallResult::Permanent {
            error: "twilio: HTTP 400, error 21610: Attempt to send to unsubscribed recipient"
                .into(),
            suppress: Some("opted out (Twilio 21610)".into()),
        }
    );
    assert_eq!(fake.lines().len(), 2);

    // The fake speaks Twilio's formats: 401 without basic auth, 201 resource with segments.
    let c = client();
    let url = format!("{}/2010-04-01/Accounts/AC1/Messages.json", fake.base());
    let r = c
        .post(&url)
        .header("content-type", FORM)
        .body(form(&[
            ("To", "+14155550100"),
            ("From", "+15017122661"),
            ("Body", "x"),
        ]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        (v["code"].as_i64(), v["status"].as_i64()),
        (Some(20003), Some(401))
    );
    let long = "a".repeat(161);
    let r = c
        .post(&url)
        .basic_auth("AC1", Some("t"))
        .header("content-type", FORM)
        .body(form(&[
            ("To", "+14155550100"),
            ("MessagingServiceSid", "MG1"),
            ("Body", &long),
        ]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["num_segments"], "2");
    assert_eq!(v["messaging_service_sid"], "MG1");
    assert_eq!(v["account_sid"], "AC1");
    assert!(v["sid"].as_str().unwrap().starts_with("SM"));
    for (fields, code) in [
        (vec![("From", "+15017122661"), ("Body", "x")], 21604),
        (vec![("To", "+14155550100"), ("Body", "x")], 21603),
        (
            vec![("To", "+14155550100"), ("From", "+15017122661")],
            21602,
        ),
        (
            vec![
                ("To", "4155550100"),
                ("From", "+15017122661"),
                ("Body", "x"),
            ],
            21211,
        ),
    ] {
        let r = c
            .post(&url)
            .basic_auth("AC1", Some("t"))
            .header("content-type", FORM)
            .body(form(&fields))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["code"].as_i64(), Some(code), "{v}");
    }
    // Job id of a message sent without a status callback: unknown, but still logged.
    let no_cb = from_spec(&twilio_spec(&fake.base(), &tf, "")).unwrap();
    let res = no_cb.send(&sms("j-x", "+14155550101", "hi")).await;
    assert!(matches!(res, CallResult::Accepted { .. }), "{res:?}");
    assert_eq!(fake.lines().last().unwrap().job_id, "");
}

#[tokio::test(flavor = "multi_thread")]
async fn resend_through_the_fake_provider() {
    let dir = tempfile::tempdir().unwrap();
    let tf = token_file(dir.path());
    let fake = Fake::start(&dir.path().join("log.jsonl"), &[]);
    let p = from_spec(&resend_spec(&fake.base(), &tf)).unwrap();
    assert_eq!(
        p.capabilities().key_window,
        Some(Duration::from_secs(24 * 3600))
    );
    let m = email("campaign:1:sub:2", "ana@example.com", "Hi Ana");
    let res = p.send(&m).await;
    let CallResult::Accepted { provider_id, .. } = res.clone() else {
        panic!("{res:?}")
    };
    assert!(uuid::Uuid::parse_str(&provider_id).is_ok(), "{provider_id}");
    let l = &fake.lines()[0];
    assert_eq!(l.api.as_deref(), Some("resend"));
    assert_eq!(l.job_id, m.job_id);
    assert_eq!(l.idempotency_key, m.idempotency_key);
    assert_eq!(l.from.as_deref(), Some("news@example.com"));
    assert_eq!(l.to, "ana@example.com");
    assert_eq!(l.subject.as_deref(), Some("Hello"));
    assert_eq!(l.body, "Hi Ana");
    assert_eq!(
        l.headers.as_ref().unwrap().get("X-Sendonce-Job"),
        Some(&m.job_id)
    );

    // The same key and payload: the first id again, logged as a replay, not a delivery.
    let res = p.send(&m).await;
    assert!(
        matches!(&res, CallResult::Accepted { provider_id: id, .. } if *id == provider_id),
        "{res:?}"
    );
    let lines = fake.lines();
    assert_eq!(lines.len(), 2);
    assert!(lines[1].replay);

    // The same key with another payload: 409 invalid_idempotent_request, already accepted.
    let changed = Message {
        body: "changed".into(),
        ..m.clone()
    };
    let res = p.send(&changed).await;
    assert!(
        matches!(&res, CallResult::AlreadyAccepted { detail } if detail.contains("invalid_idempotent_request")),
        "{res:?}"
    );
    assert_eq!(fake.lines().len(), 2);

    // Error bodies of the fake follow Resend's shape.
    let c = client();
    let r = c
        .post(format!("{}/emails", fake.base()))
        .json(&json!({"from": "a@b.co", "to": "c@d.co", "subject": "s", "text": "t"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["name"], "missing_api_key");
    assert_eq!(v["statusCode"], 401);
    let r = c
        .post(format!("{}/emails", fake.base()))
        .bearer_auth("k")
        .json(&json!({"from": "a@b.co", "to": "c@d.co", "text": "t"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["name"], "missing_required_field");
}

#[tokio::test(flavor = "multi_thread")]
async fn postmark_through_the_fake_provider_with_lookup() {
    let dir = tempfile::tempdir().unwrap();
    let tf = token_file(dir.path());
    let fake = Fake::start(&dir.path().join("log.jsonl"), &[]);
    let p = from_spec(&postmark_spec(&fake.base(), &tf)).unwrap();
    assert_eq!(p.capabilities().key_window, None);
    assert!(p.capabilities().can_lookup);

    let m = email("campaign:3:sub:9", "bo@example.com", "Hi Bo");
    let other = email("campaign:3:sub:10", "cy@example.com", "Hi Cy");
    assert_eq!(p.lookup(&m).await, Lookup::NotFound, "nothing sent yet");

    let res = p.send(&m).await;
    let CallResult::Accepted { provider_id, .. } = res.clone() else {
        panic!("{res:?}")
    };
    let l = &fake.lines()[0];
    assert_eq!(l.api.as_deref(), Some("postmark"));
    assert_eq!(l.message_id, provider_id);
    assert_eq!(l.job_id, m.job_id);
    assert_eq!(l.metadata, Some(json!({"sendonce_job": m.job_id})));
    assert_eq!(
        l.headers.as_ref().unwrap().get("X-Sendonce-Job"),
        Some(&m.job_id)
    );
    assert_eq!(l.body, "Hi Bo");

    assert_eq!(
        p.lookup(&m).await,
        Lookup::Found {
            provider_id: provider_id.clone()
        }
    );
    assert_eq!(p.lookup(&other).await, Lookup::NotFound);
    let res = p.send(&other).await;
    assert!(matches!(res, CallResult::Accepted { .. }), "{res:?}");
    assert!(matches!(p.lookup(&other).await, Lookup::Found { .. }));

    // The fake's search and errors follow Postmark's shapes.
    let c = client();
    let search = format!("{}/messages/outbound", fake.base());
    let r = c
        .get(format!("{search}?count=50&offset=0"))
        .header("X-Postmark-Server-Token", "t")
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["TotalCount"], 2);
    assert_eq!(
        v["Messages"][0]["Metadata"]["sendonce_job"], other.job_id,
        "newest first"
    );
    assert_eq!(v["Messages"][1]["MessageID"], provider_id);
    assert_eq!(v["Messages"][1]["Recipients"], json!(["bo@example.com"]));
    let r = c
        .get(format!(
            "{search}?count=5&offset=0&recipient=BO%40example.com"
        ))
        .header("X-Postmark-Server-Token", "t")
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["TotalCount"], 1);
    let r = c
        .get(format!("{search}?count=5&offset=0"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["ErrorCode"], 10);
    let r = c
        .get(&search)
        .header("X-Postmark-Server-Token", "t")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let r = c
        .post(format!("{}/email", fake.base()))
        .header("X-Postmark-Server-Token", "t")
        .json(&json!({"From": "a@b.co", "Subject": "s", "TextBody": "t"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["ErrorCode"], 300);
    assert_eq!(fake.lines().len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn injected_faults_apply_to_the_provider_endpoints() {
    let dir = tempfile::tempdir().unwrap();
    let tf = token_file(dir.path());
    // Every request recorded, then the reply dropped: each provider sees an ambiguous outcome.
    let fake = Fake::start(
        &dir.path().join("log.jsonl"),
        &["--drop-after-accept-rate", "1", "--seed", "3"],
    );
    let m = email("j-drop", "a@example.com", "x");
    for spec in [
        resend_spec(&fake.base(), &tf),
        postmark_spec(&fake.base(), &tf),
    ] {
        let res = from_spec(&spec).unwrap().send(&m).await;
        assert!(
            matches!(res, CallResult::Ambiguous { .. }),
            "{spec}: {res:?}"
        );
        assert_no_secret(&res);
    }
    let res = from_spec(&twilio_spec(&fake.base(), &tf, ""))
        .unwrap()
        .send(&sms("j-drop", "+14155550100", "x"))
        .await;
    assert!(matches!(res, CallResult::Ambiguous { .. }), "{res:?}");
    let apis: Vec<_> = fake
        .lines()
        .iter()
        .map(|l| l.api.clone().unwrap())
        .collect();
    assert_eq!(
        apis,
        ["resend", "postmark", "twilio"],
        "durable although unanswered"
    );
    drop(fake);

    // Injected failures: answered in each provider's error format, not recorded, ambiguous.
    let log = dir.path().join("fail.jsonl");
    let fake = Fake::start(&log, &["--fail-rate", "1"]);
    for spec in [
        resend_spec(&fake.base(), &tf),
        postmark_spec(&fake.base(), &tf),
    ] {
        let res = from_spec(&spec).unwrap().send(&m).await;
        assert!(
            matches!(res, CallResult::Ambiguous { .. }),
            "{spec}: {res:?}"
        );
    }
    let res = from_spec(&twilio_spec(&fake.base(), &tf, ""))
        .unwrap()
        .send(&sms("j", "+14155550100", "x"))
        .await;
    assert!(
        matches!(&res, CallResult::Ambiguous { error } if error.contains("20503")),
        "{res:?}"
    );
    assert!(fake.lines().is_empty());
}

/// A raw HTTP server answering every request with `response` (`None`: never answer; `""`:
/// close without a word). Requests are kept for inspection.
async fn raw_server(response: Option<String>) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    common::raw_http_server(response).await
}

fn canned(status: &str, extra: &str, body: &str) -> Option<String> {
    Some(format!(
        "HTTP/1.1 {status}\r\n{extra}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ))
}

/// Call `spec_for(base)` against a raw server answering `response`; every result is checked
/// for the token.
async fn call_raw(
    spec_for: impl Fn(&str) -> String,
    msg: &Message,
    response: Option<String>,
) -> (CallResult, Vec<String>) {
    let (addr, seen) = raw_server(response).await;
    let res = from_spec(&spec_for(&format!("http://{addr}")))
        .unwrap()
        .send(msg)
        .await;
    assert_no_secret(&res);
    let requests = seen.lock().unwrap().clone();
    (res, requests)
}

/// Connection refused, timeout and a reply lost after the request: the same for every API.
async fn transport_cases(spec_for: impl Fn(&str) -> String, msg: &Message) {
    let res = from_spec(&spec_for(&format!(
        "http://127.0.0.1:{}",
        common::refused_port()
    )))
    .unwrap()
    .send(msg)
    .await;
    assert!(
        matches!(
            res,
            CallResult::NotSent {
                retry_after: None,
                ..
            }
        ),
        "refused: {res:?}"
    );
    assert_no_secret(&res);
    let (res, _) = call_raw(&spec_for, msg, Some(String::new())).await;
    assert!(
        matches!(res, CallResult::Ambiguous { .. }),
        "closed: {res:?}"
    );
    let t = Instant::now();
    let (res, _) = call_raw(&spec_for, msg, None).await;
    assert!(
        matches!(res, CallResult::Ambiguous { .. }),
        "timeout: {res:?}"
    );
    assert!(t.elapsed() < Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread")]
async fn twilio_error_mapping() {
    let dir = tempfile::tempdir().unwrap();
    let tf = token_file(dir.path());
    let spec = |base: &str| twilio_spec(base, &tf, "").replace("timeout=2s", "timeout=700ms");
    let m = sms("j1", "+14155550100", "hi");
    let err = |status: &str, code: i64, msg: &str| {
        let body = json!({"code": code, "message": msg,
            "more_info": format!("https://www.twilio.com/docs/errors/{code}"),
            "status": status[..3].parse::<u16>().unwrap()})
        .to_string();
        canned(status, "", &body)
    };

    let (res, reqs) = call_raw(
        &spec,
        &m,
        canned("201 Created", "", r#"{"sid":"SM0001","status":"queued"}"#),
    )
    .await;
    assert_eq!(
        res,
        CallResult::Accepted {
            provider_id: "SM0001".into(),
            replay: false
        }
    );
    // What went on the wire: the path, basic auth, a form body.
    let req = &reqs[0];
    assert!(
        req.starts_with("POST /2010-04-01/Accounts/AC0123456789abcdef/Messages.json "),
        "{req}"
    );
    let auth = base64_basic("AC0123456789abcdef", TOKEN);
    assert!(
        req.contains(&format!("authorization: Basic {auth}")),
        "{req}"
    );
    assert!(
        req.contains("content-type: application/x-www-form-urlencoded"),
        "{req}"
    );
    assert!(
        req.ends_with("To=%2B14155550100&From=%2B15017122661&Body=hi"),
        "{req}"
    );

    let (res, _) = call_raw(
        &spec,
        &m,
        err(
            "400 Bad Request",
            21610,
            "Attempt to send to unsubscribed recipient",
        ),
    )
    .await;
    assert!(
        matches!(&res, CallResult::Permanent { suppress: Some(s), .. } if s == "opted out (Twilio 21610)"),
        "{res:?}"
    );
    for code in [21211, 21614] {
        let (res, _) = call_raw(&spec, &m, err("400 Bad Request", code, "bad number")).await;
        assert!(
            matches!(&res, CallResult::Permanent { suppress: Some(s), .. } if s.contains(&code.to_string())),
            "{code}: {res:?}"
        );
    }
    let (res, _) = call_raw(
        &spec,
        &m,
        err("400 Bad Request", 21606, "From is not SMS capable"),
    )
    .await;
    assert!(
        matches!(res, CallResult::Permanent { suppress: None, .. }),
        "{res:?}"
    );
    let (res, _) = call_raw(&spec, &m, err("401 Unauthorized", 20003, "Authenticate")).await;
    assert!(
        matches!(res, CallResult::Permanent { suppress: None, .. }),
        "{res:?}"
    );
    let (res, _) = call_raw(
        &spec,
        &m,
        canned(
            "429 Too Many Requests",
            "Retry-After: 7\r\n",
            &json!({"code": 20429, "message": "Too Many Requests", "status": 429}).to_string(),
        ),
    )
    .await;
    assert_eq!(
        res,
        CallResult::NotSent {
            error: "twilio: HTTP 429, error 20429: Too Many Requests".into(),
            retry_after: Some(Duration::from_secs(7))
        }
    );
    for status in ["500 Internal Server Error", "503 Service Unavailable"] {
        let (res, _) = call_raw(&spec, &m, err(status, 20500, "Internal Server Error")).await;
        assert!(
            matches!(res, CallResult::Ambiguous { .. }),
            "{status}: {res:?}"
        );
    }
    // An error body that echoes the token: scrubbed.
    let (res, _) = call_raw(
        &spec,
        &m,
        err(
            "400 Bad Request",
            21601,
            &format!("bad request with {TOKEN}"),
        ),
    )
    .await;
    assert!(
        matches!(&res, CallResult::Permanent { error, .. } if error.contains("[redacted]")),
        "{res:?}"
    );
    // Not a phone number: refused before any call.
    let res = from_spec(&spec("http://127.0.0.1:9"))
        .unwrap()
        .send(&sms("j2", "not-a-number", "x"))
        .await;
    assert!(
        matches!(res, CallResult::Permanent { suppress: None, .. }),
        "{res:?}"
    );
    transport_cases(&spec, &m).await;
}

fn base64_basic(user: &str, pass: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn resend_error_mapping() {
    let dir = tempfile::tempdir().unwrap();
    let tf = token_file(dir.path());
    let spec = |base: &str| resend_spec(base, &tf).replace("timeout=2s", "timeout=700ms");
    let m = email("j1", "a@example.com", "hi");
    let err = |status: &str, name: &str, msg: &str| {
        let code: u16 = status[..3].parse().unwrap();
        canned(
            status,
            "",
            &json!({"statusCode": code, "name": name, "message": msg}).to_string(),
        )
    };

    let (res, reqs) = call_raw(&spec, &m, canned("200 OK", "", r#"{"id":"re-1"}"#)).await;
    assert_eq!(
        res,
        CallResult::Accepted {
            provider_id: "re-1".into(),
            replay: false
        }
    );
    let req = &reqs[0];
    assert!(req.starts_with("POST /emails "), "{req}");
    assert!(
        req.contains(&format!("authorization: Bearer {TOKEN}")),
        "{req}"
    );
    assert!(
        req.contains(&format!("idempotency-key: {}", m.idempotency_key)),
        "{req}"
    );
    let body: Value = serde_json::from_str(&req[req.find("\r\n\r\n").unwrap() + 4..]).unwrap();
    assert_eq!(
        body,
        json!({"from": "news@example.com", "to": ["a@example.com"], "subject": "Hello",
               "text": "hi", "html": "<p>hi</p>", "headers": {"X-Sendonce-Job": "j1"},
               // The job in hex, for Resend's webhooks (tags allow only [A-Za-z0-9_-]).
               "tags": [{"name": "sendonce_job", "value": "6a31"}]})
    );

    let (res, _) = call_raw(
        &spec,
        &m,
        err(
            "409 Conflict",
            "invalid_idempotent_request",
            "Same key, other payload",
        ),
    )
    .await;
    assert!(matches!(res, CallResult::AlreadyAccepted { .. }), "{res:?}");
    let (res, _) = call_raw(
        &spec,
        &m,
        err(
            "409 Conflict",
            "concurrent_idempotent_requests",
            "In progress",
        ),
    )
    .await;
    assert!(matches!(res, CallResult::Ambiguous { .. }), "{res:?}");
    let (res, _) = call_raw(
        &spec,
        &m,
        canned(
            "429 Too Many Requests",
            "Retry-After: 2\r\n",
            &json!({"statusCode": 429, "name": "rate_limit_exceeded", "message": "slow down"})
                .to_string(),
        ),
    )
    .await;
    assert!(
        matches!(res, CallResult::NotSent { retry_after: Some(d), .. } if d == Duration::from_secs(2)),
        "{res:?}"
    );
    for (status, name) in [
        ("400 Bad Request", "validation_error"),
        ("401 Unauthorized", "missing_api_key"),
        ("403 Forbidden", "invalid_api_key"),
        ("422 Unprocessable Entity", "invalid_from_address"),
    ] {
        let (res, _) = call_raw(&spec, &m, err(status, name, "no")).await;
        assert!(
            matches!(&res, CallResult::Permanent { suppress: None, error } if error.contains(name)),
            "{status}: {res:?}"
        );
    }
    for status in ["500 Internal Server Error", "502 Bad Gateway"] {
        let (res, _) = call_raw(&spec, &m, err(status, "internal_server_error", "oops")).await;
        assert!(
            matches!(res, CallResult::Ambiguous { .. }),
            "{status}: {res:?}"
        );
    }
    transport_cases(&spec, &m).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn postmark_error_mapping_and_lookup_failures() {
    let dir = tempfile::tempdir().unwrap();
    let tf = token_file(dir.path());
    let spec = |base: &str| postmark_spec(base, &tf).replace("timeout=2s", "timeout=700ms");
    let m = email("j1", "a@example.com", "hi");
    postmark_accepts_with_the_documented_request(&spec, &m).await;
    postmark_errors_map_to_results(&spec, &m).await;
    transport_cases(&spec, &m).await;
    postmark_lookups_that_cannot_tell(&spec, &m).await;
}

/// A Postmark error answer with `status`, its `ErrorCode` and `Message`.
fn postmark_error(status: &str, code: i64, msg: &str) -> Option<String> {
    canned(
        status,
        "",
        &json!({"ErrorCode": code, "Message": msg}).to_string(),
    )
}

/// A send Postmark accepts: its message id, and the request as Postmark documents it.
async fn postmark_accepts_with_the_documented_request(spec: &impl Fn(&str) -> String, m: &Message) {
    let (res, reqs) = call_raw(
        spec,
        m,
        canned(
            "200 OK",
            "",
            r#"{"To":"a@example.com","SubmittedAt":"2024-01-01T00:00:00Z","MessageID":"pm-1","ErrorCode":0,"Message":"OK"}"#,
        ),
    )
    .await;
    assert_eq!(
        res,
        CallResult::Accepted {
            provider_id: "pm-1".into(),
            replay: false
        }
    );
    let req = &reqs[0];
    assert!(req.starts_with("POST /email "), "{req}");
    assert!(
        req.contains(&format!("x-postmark-server-token: {TOKEN}")),
        "{req}"
    );
    let body: Value = serde_json::from_str(&req[req.find("\r\n\r\n").unwrap() + 4..]).unwrap();
    assert_eq!(
        body,
        json!({"From": "news@example.com", "To": "a@example.com", "Subject": "Hello",
               "TextBody": "hi", "HtmlBody": "<p>hi</p>",
               "Headers": [{"Name": "X-Sendonce-Job", "Value": "j1"}],
               "Metadata": {"sendonce_job": "j1"}})
    );
}

/// Postmark's error answers: inactive recipient, other refusals, account pending, rate limit, 5xx.
async fn postmark_errors_map_to_results(spec: &impl Fn(&str) -> String, m: &Message) {
    let (res, _) = call_raw(
        spec,
        m,
        postmark_error(
            "422 Unprocessable Entity",
            406,
            "You tried to send to a recipient that has been marked as inactive.",
        ),
    )
    .await;
    assert!(
        matches!(&res, CallResult::Permanent { suppress: Some(s), .. } if s == "inactive recipient (Postmark 406)"),
        "{res:?}"
    );
    let (res, _) = call_raw(
        spec,
        m,
        postmark_error("422 Unprocessable Entity", 300, "Invalid email request"),
    )
    .await;
    assert!(
        matches!(res, CallResult::Permanent { suppress: None, .. }),
        "{res:?}"
    );
    let (res, _) = call_raw(
        spec,
        m,
        postmark_error("401 Unauthorized", 10, "Bad or missing server token"),
    )
    .await;
    assert!(
        matches!(res, CallResult::Permanent { suppress: None, .. }),
        "{res:?}"
    );
    let (res, _) = call_raw(
        spec,
        m,
        postmark_error("422 Unprocessable Entity", 412, "Account pending"),
    )
    .await;
    assert!(matches!(res, CallResult::NotSent { .. }), "{res:?}");
    let (res, _) = call_raw(
        spec,
        m,
        canned(
            "429 Too Many Requests",
            "Retry-After: 3\r\n",
            &json!({"ErrorCode": 429, "Message": "Rate limit exceeded"}).to_string(),
        ),
    )
    .await;
    assert!(
        matches!(res, CallResult::NotSent { retry_after: Some(d), .. } if d == Duration::from_secs(3)),
        "{res:?}"
    );
    for status in ["500 Internal Server Error", "503 Service Unavailable"] {
        let (res, _) = call_raw(spec, m, postmark_error(status, 100, "Maintenance")).await;
        assert!(
            matches!(res, CallResult::Ambiguous { .. }),
            "{status}: {res:?}"
        );
    }
}

/// Lookups that cannot tell: an error answer, a search that ignored the filter, a refused call.
async fn postmark_lookups_that_cannot_tell(spec: &impl Fn(&str) -> String, m: &Message) {
    let lookup = |resp: Option<String>| {
        let m = m.clone();
        async move {
            let (addr, seen) = raw_server(resp).await;
            let l = from_spec(&spec(&format!("http://{addr}")))
                .unwrap()
                .lookup(&m)
                .await;
            assert_no_secret(&l);
            let requests = seen.lock().unwrap().clone();
            (l, requests)
        }
    };
    let (l, reqs) = lookup(postmark_error("500 Internal Server Error", 0, "oops")).await;
    assert!(matches!(l, Lookup::Unknown { .. }), "{l:?}");
    let req = &reqs[0];
    assert!(
        req.starts_with("GET /messages/outbound?count=1&offset=0&metadata_sendonce_job=j1 "),
        "{req}"
    );
    assert!(
        req.contains(&format!("x-postmark-server-token: {TOKEN}")),
        "{req}"
    );
    let (l, _) = lookup(canned(
        "200 OK",
        "",
        &json!({"TotalCount": 3, "Messages": [{"MessageID": "x", "Metadata": {"sendonce_job": "other"}}]}).to_string(),
    ))
    .await;
    assert!(matches!(l, Lookup::Unknown { .. }), "{l:?}");
    let (l, _) = lookup(canned("200 OK", "", r#"{"TotalCount":0,"Messages":[]}"#)).await;
    assert_eq!(l, Lookup::NotFound);
    let l = from_spec(&spec(&format!(
        "http://127.0.0.1:{}",
        common::refused_port()
    )))
    .unwrap()
    .lookup(m)
    .await;
    assert!(matches!(l, Lookup::Unknown { .. }), "{l:?}");
}

#[test]
fn specs_need_credentials_and_keep_them_out_of_errors() {
    // No file option and (in this test process) no environment variable: a clear error that
    // names where the credential comes from.
    for (spec, env) in [
        (
            "twilio:AC1?from=%2B15017122661",
            "SENDONCE_TWILIO_AUTH_TOKEN",
        ),
        ("resend:?from=a@example.com", "SENDONCE_RESEND_API_KEY"),
        ("postmark:?from=a@example.com", "SENDONCE_POSTMARK_TOKEN"),
    ] {
        if std::env::var_os(env).is_some() {
            continue;
        }
        let e = from_spec(spec).err().expect("no credential");
        assert!(e.message.contains(env), "{}", e.message);
    }
    // Unknown options are refused, and a credential-looking option does not exist.
    let e = from_spec(&format!("resend:?api_key={TOKEN}"))
        .err()
        .unwrap();
    assert!(e.message.contains("unknown resend option"), "{}", e.message);
    assert!(!e.message.contains(TOKEN), "{}", e.message);
    let e = from_spec(&format!("postmark:?base_url=http://u:{TOKEN}@127.0.0.1:9/"))
        .err()
        .unwrap();
    assert!(!e.message.contains(TOKEN), "{}", e.message);
    let e = from_spec("carrier-pigeon").err().unwrap();
    for name in ["twilio:", "resend:", "postmark:"] {
        assert!(e.message.contains(name), "{}", e.message);
    }
}

#[test]
fn twilio_signature_published_vector() {
    let params = [
        ("CallSid", "CA1234567890ABCDE"),
        ("Caller", "+12349013030"),
        ("Digits", "1234"),
        ("From", "+12349013030"),
        ("To", "+18005551212"),
    ];
    let url = "https://mycompany.com/myapp.php?foo=1&bar=2";
    assert_eq!(
        sendonce::provider::twilio_signature("12345", url, &params),
        "0/KCTR6DLpKmkAf8muzZqo1nDgQ="
    );
    assert!(sendonce::provider::validate_twilio_signature(
        "12345",
        url,
        &params,
        "0/KCTR6DLpKmkAf8muzZqo1nDgQ="
    ));
    // Any change to the URL, a value or the token breaks it.
    assert!(!sendonce::provider::validate_twilio_signature(
        "12345",
        "https://mycompany.com/myapp.php?foo=1&bar=3",
        &params,
        "0/KCTR6DLpKmkAf8muzZqo1nDgQ="
    ));
    let mut changed = params;
    changed[2].1 = "1235";
    assert!(!sendonce::provider::validate_twilio_signature(
        "12345",
        url,
        &changed,
        "0/KCTR6DLpKmkAf8muzZqo1nDgQ="
    ));
}

#[test]
fn sms_segment_counts() {
    use sendonce::domain::sms::{segments, Encoding};
    let c = |s: &str| {
        let r = segments(s);
        (r.encoding, r.units, r.segments)
    };
    assert_eq!(c("Hello"), (Encoding::Gsm7, 5, 1));
    assert_eq!(c(&"x".repeat(160)), (Encoding::Gsm7, 160, 1));
    assert_eq!(c(&"x".repeat(161)), (Encoding::Gsm7, 161, 2));
    assert_eq!(c(&"x".repeat(306)), (Encoding::Gsm7, 306, 2));
    assert_eq!(c(&"x".repeat(307)), (Encoding::Gsm7, 307, 3));
    // Extension-table characters (€ [ ] { } ~ ^ | \ and form feed) take two septets.
    assert_eq!(c("Only 5€ {today}"), (Encoding::Gsm7, 18, 1));
    assert_eq!(c(&"€".repeat(81)), (Encoding::Gsm7, 162, 2));
    // Anything outside GSM 03.38 turns the whole text into UCS-2.
    assert_eq!(c(&"y".repeat(70)), (Encoding::Gsm7, 70, 1));
    assert_eq!(c(&format!("{}ç", "y".repeat(69))), (Encoding::Ucs2, 70, 1));
    assert_eq!(c(&format!("{}ç", "y".repeat(70))), (Encoding::Ucs2, 71, 2));
    assert_eq!(c(&"я".repeat(134)), (Encoding::Ucs2, 134, 2));
    assert_eq!(c(&"я".repeat(135)), (Encoding::Ucs2, 135, 3));
    assert_eq!(c("Hi 👋"), (Encoding::Ucs2, 5, 1));
    assert_eq!(
        sendonce::domain::sms::body_report(&"x".repeat(161)),
        "GSM-7, 161 characters (161 septets), 2 segments"
    );
    assert!(sendonce::domain::sms::check_e164("+44 20 7946 0958").is_ok());
    assert!(sendonce::domain::sms::check_e164("020 7946 0958").is_err());
}

/// `sendonce run --once` with the Resend provider pointed at the fake: every recipient
/// delivered once, even with replies lost after acceptance (the retries reuse the key inside
/// the 24 h window and are answered as replays).
#[test]
fn run_once_with_resend_against_the_fake_delivers_each_recipient_once() {
    const N: usize = 25;
    let env = common::Env::new();
    let (_acct, cid) = env.setup_campaign(N);
    env.ok(&["campaign", "approve", &cid]);
    let log = env.path("fake.jsonl");
    let fake = Fake::start(&log, &["--drop-after-accept-rate", "0.3", "--seed", "11"]);
    let spec = format!(
        "resend:?base_url={}&from=news@example.com&timeout=2s",
        fake.base()
    );
    let out = env
        .cmd()
        .args([
            "--json",
            "run",
            "--once",
            "--provider",
            &spec,
            "--tick",
            "50ms",
            "--retry-base",
            "20ms",
            "--concurrency",
            "4",
        ])
        .env("SENDONCE_RESEND_API_KEY", TOKEN)
        .output()
        .unwrap();
    let r = common::Run::from(out);
    assert_eq!(r.code, 0, "{}\n{}", r.stderr, r.stdout);
    assert!(!r.stdout.contains(TOKEN) && !r.stderr.contains(TOKEN));
    let per_job = common::deliveries(&log);
    assert_eq!(per_job.len(), N, "{per_job:?}");
    assert!(per_job.values().all(|&n| n == 1), "{per_job:?}");
    let lines = fake.lines();
    assert!(lines.iter().all(|l| l.api.as_deref() == Some("resend")));
    assert!(
        lines.iter().any(|l| l.replay),
        "some replies were dropped, so some retries were replays"
    );
    let st: Value = serde_json::from_str(&env.ok(&["--json", "campaign", "status", &cid])).unwrap();
    assert_eq!(st["status"], "sent");
    assert_eq!(st["sent"], N as i64);
    assert_eq!(st["in_doubt"], 0);
    // Every ledger row carries the id the fake handed out.
    let csv = env.ok(&["campaign", "report", &cid]);
    for l in lines.iter().filter(|l| !l.replay) {
        assert!(
            csv.contains(&l.message_id),
            "{} missing from\n{csv}",
            l.message_id
        );
    }
}

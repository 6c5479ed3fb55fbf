//! The fake provider's assertions API end to end over HTTP: the `/messages` filters, replays
//! hidden unless `?replays=true`, one message parsed (headers, text, links: the unsubscribe
//! link is then followed), the synthesized source of an HTTP email read by Python's `email`
//! package, `/messages/wait` returning as soon as a message arrives (and 408 when none does),
//! bad parameters refused with their name, `DELETE /messages`.

use super::send;
use crate::common::{client, raw_http_server, rt, Env, Fake};
use serde_json::{json, Value};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// GET a path: status and JSON body.
async fn get(c: &reqwest::Client, fake: &Fake, path: &str) -> (u16, Value) {
    let r = c.get(fake.url(path)).send().await.expect("GET");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// The ids of a listing, in order.
async fn ids(c: &reqwest::Client, fake: &Fake, query: &str) -> Vec<String> {
    let (status, v) = get(c, fake, &format!("/messages{query}")).await;
    assert_eq!(status, 200, "/messages{query}: {v}");
    v.as_array()
        .unwrap_or_else(|| panic!("/messages{query} is not an array: {v}"))
        .iter()
        .map(|m| m["id"].as_str().expect("an id").to_string())
        .collect()
}

/// The ids of the three messages sent at the start, and the unsubscribe link lee's carries.
struct Sent {
    kim: String,
    lee: String,
    sms: String,
    unsubscribe: String,
}

/// Sends kim's welcome twice (a replay), lee's invoice with an unsubscribe link to `site`, an SMS.
async fn send_three(c: &reqwest::Client, fake: &Fake, site: std::net::SocketAddr) -> Sent {
    let welcome = json!({"job_id": "job-1", "to": "kim@example.org", "from": "news@example.com",
        "subject": "Welcome Kim", "body": "Hi Kim, start at https://app.example/welcome now."});
    let kim = send(c, fake, "k-kim", welcome.clone()).await;
    // The same key again: a replay, listed only with ?replays=true.
    assert_eq!(send(c, fake, "k-kim", welcome).await, kim);
    let unsubscribe = format!("http://{site}/unsubscribe?u=lee");
    let r = c
        .post(fake.url("/emails"))
        .bearer_auth("re_test")
        .header("Idempotency-Key", "k-lee")
        .json(
            &json!({"from": "Billing <billing@example.com>", "to": "lee@example.org",
            "subject": "Your invoice", "text": "Invoice 7 is ready.",
            "headers": {"List-Unsubscribe": format!("<{unsubscribe}>"),
                        "X-Sendonce-Job": "job-3"}}),
        )
        .send()
        .await
        .expect("POST /emails");
    assert_eq!(r.status(), 200);
    let lee = r.json::<Value>().await.unwrap()["id"]
        .as_str()
        .expect("an id")
        .to_string();
    let sms = send(
        c,
        fake,
        "k-sms",
        json!({"job_id": "job-2", "channel": "sms", "to": "+14155550100",
            "body": "Your code is 123456"}),
    )
    .await;
    Sent {
        kim,
        lee,
        sms,
        unsubscribe,
    }
}

/// Checks the listings (oldest first, replays hidden by default) and every filter.
async fn check_listings_and_filters(
    c: &reqwest::Client,
    fake: &Fake,
    sent: &Sent,
    since_before: &str,
) {
    let (kim, lee, sms) = (&sent.kim, &sent.lee, &sent.sms);
    // Listings: oldest first, replays hidden by default.
    assert_eq!(
        ids(c, fake, "").await,
        [kim.as_str(), lee.as_str(), sms.as_str()]
    );
    let (_, all) = get(c, fake, "/messages?replays=true").await;
    let all = all.as_array().expect("an array").clone();
    assert_eq!(all.len(), 4);
    assert_eq!(all.iter().filter(|m| m["replay"] == true).count(), 1);
    assert_eq!(
        ids(c, fake, "?replays=1&to=kim@example.org").await,
        [kim.as_str(), kim.as_str()]
    );

    // Filters.
    for (q, want) in [
        ("?to=kim%40example.org", vec![kim.as_str()]),
        ("?to=KIM@EXAMPLE.ORG", vec![kim.as_str()]),
        ("?to=%2B14155550100", vec![sms.as_str()]),
        ("?to=+14155550100", vec![sms.as_str()]),
        ("?from=news@example.com", vec![kim.as_str()]),
        ("?subject=INVOICE", vec![lee.as_str()]),
        ("?job_id=job-2", vec![sms.as_str()]),
        ("?job_id=job-3", vec![lee.as_str()]),
        ("?channel=sms", vec![sms.as_str()]),
        ("?channel=email", vec![kim.as_str(), lee.as_str()]),
        (since_before, vec![kim.as_str(), lee.as_str(), sms.as_str()]),
        ("?since=2100-01-01T00:00:00Z", Vec::<&str>::new()),
        ("?q=code%20is", vec![sms.as_str()]),
        ("?q=welcome&channel=email", vec![kim.as_str()]),
        ("?to=nobody@example.org", Vec::<&str>::new()),
    ] {
        assert_eq!(ids(c, fake, q).await, want, "filter {q}");
    }
}

/// Checks lee's message parsed (its unsubscribe link followed), kim's, the SMS and an unknown id.
async fn check_one_message(
    c: &reqwest::Client,
    fake: &Fake,
    sent: &Sent,
    seen: &Mutex<Vec<String>>,
) {
    let (kim, lee, sms, unsubscribe) = (&sent.kim, &sent.lee, &sent.sms, &sent.unsubscribe);
    // One message, parsed; its unsubscribe link followed.
    let (status, m) = get(c, fake, &format!("/messages/{lee}")).await;
    assert_eq!(status, 200, "{m}");
    assert_eq!(m["id"], json!(lee));
    assert_eq!(m["via"], "resend");
    assert_eq!(m["channel"], "email");
    assert_eq!(m["subject"], "Your invoice");
    assert_eq!(m["to"], json!(["lee@example.org"]));
    assert_eq!(m["text"], "Invoice 7 is ready.");
    let header = |name: &str| {
        m["headers"]
            .as_array()
            .expect("headers")
            .iter()
            .find(|h| h["name"].as_str().unwrap().eq_ignore_ascii_case(name))
            .map(|h| h["value"].clone())
    };
    assert_eq!(header("Subject"), Some(json!("Your invoice")));
    assert_eq!(
        header("List-Unsubscribe"),
        Some(json!(format!("<{unsubscribe}>")))
    );
    assert_eq!(m["links"], json!([unsubscribe]));
    let r = c
        .get(m["links"][0].as_str().unwrap())
        .send()
        .await
        .expect("follow the unsubscribe link");
    assert_eq!(r.status(), 200);
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 1);
    assert!(
        requests[0].starts_with("GET /unsubscribe?u=lee "),
        "{requests:?}"
    );

    let (_, m) = get(c, fake, &format!("/messages/{kim}")).await;
    assert_eq!(m["links"], json!(["https://app.example/welcome"]));
    assert_eq!(m["replay"], false);
    let (_, m) = get(c, fake, &format!("/messages/{sms}")).await;
    assert_eq!(m["channel"], "sms");
    assert_eq!(m["sms"]["segments"], 1);
    let (status, v) = get(c, fake, "/messages/fake-nope").await;
    assert_eq!(status, 404);
    assert!(v["error"].as_str().unwrap().contains("fake-nope"));
}

/// Checks the synthesized source of kim's HTTP email, read by Python's email package.
async fn check_raw_source(c: &reqwest::Client, fake: &Fake, env: &Env, kim: &str) {
    // The source of an HTTP email (synthesized), read by Python's email package.
    let r = c
        .get(fake.url(&format!("/messages/{kim}/raw")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "message/rfc822");
    let raw = r.bytes().await.unwrap();
    let path = env.write("kim.eml", &raw);
    let script = r#"
import json, sys
from email import policy
from email.parser import BytesParser
with open(sys.argv[1], "rb") as f:
    m = BytesParser(policy=policy.default).parse(f)
print(json.dumps({"from": m["From"], "to": m["To"], "subject": m["Subject"],
    "source": m["X-Fake-Provider-Source"], "body": m.get_body(("plain",)).get_content().rstrip("\r\n"),
    "defects": len(m.defects)}))
"#;
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(&path)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let parsed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        parsed,
        json!({"from": "news@example.com", "to": "kim@example.org",
            "subject": "Welcome Kim", "source": "synthesized",
            "body": "Hi Kim, start at https://app.example/welcome now.", "defects": 0})
    );
}

/// Checks that `/messages/wait` returns once a message arrives, and 408 when the time is up.
async fn check_wait(c: &reqwest::Client, fake: &Fake, kim: &str) {
    // /messages/wait returns as soon as the message arrives (sent 300 ms later)...
    let c2 = c.clone();
    let url = fake.url("/send");
    let later = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let r = c2
            .post(url)
            .header("Idempotency-Key", "k-wait")
            .json(&json!({"job_id": "job-4", "to": "wait@example.org", "body": "here"}))
            .send()
            .await
            .expect("POST /send");
        assert_eq!(r.status(), 200);
    });
    let started = Instant::now();
    let (status, v) = get(c, fake, "/messages/wait?to=wait@example.org&timeout=10s").await;
    let took = started.elapsed();
    later.await.unwrap();
    assert_eq!(status, 200, "{v}");
    assert_eq!(v.as_array().map(Vec::len), Some(1));
    assert_eq!(v[0]["to"], "wait@example.org");
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(3),
        "wait returned after {took:?} (timeout 10s, message sent after 300 ms)"
    );
    // ... and with 408 and what it found when the time is up.
    let started = Instant::now();
    let (status, v) = get(
        c,
        fake,
        "/messages/wait?to=kim@example.org&count=2&timeout=400ms",
    )
    .await;
    assert_eq!(status, 408, "{v}");
    assert!(started.elapsed() >= Duration::from_millis(390));
    assert_eq!(v["wanted"], 2);
    assert_eq!(v["found"], 1);
    assert_eq!(v["messages"][0]["id"], json!(kim));
}

/// Checks that bad parameters get a 400 naming the parameter.
async fn check_bad_parameters(c: &reqwest::Client, fake: &Fake) {
    // Bad parameters: 400 naming the parameter.
    for (q, name) in [
        ("/messages?channel=fax", "channel"),
        ("/messages?since=yesterday", "since"),
        ("/messages?replays=maybe", "replays"),
        ("/messages/wait?count=0", "count"),
        ("/messages/wait?count=two", "count"),
        ("/messages/wait?timeout=soon", "timeout"),
        ("/messages/wait?timeout=10m", "timeout"),
        ("/messages/wait?channel=fax", "channel"),
    ] {
        let (status, v) = get(c, fake, q).await;
        assert_eq!(status, 400, "{q}: {v}");
        assert!(
            v["error"].as_str().unwrap_or("").contains(name),
            "{q}: {v} does not name {name}"
        );
    }
}

/// Checks that `DELETE /messages` empties the inbox and a retry of kim's welcome stays a replay.
async fn check_delete(c: &reqwest::Client, fake: &Fake, kim: &str) {
    // DELETE /messages empties the inbox; a retry of a message sent before is still a
    // replay (the key table stays), so it is not listed again.
    let r = c.delete(fake.url("/messages")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["deleted"], 4);
    assert!(ids(c, fake, "").await.is_empty());
    assert!(fake.lines().is_empty());
    let again = json!({"job_id": "job-1", "to": "kim@example.org", "from": "news@example.com",
        "subject": "Welcome Kim", "body": "Hi Kim, start at https://app.example/welcome now."});
    assert_eq!(send(c, fake, "k-kim", again).await, kim);
    assert!(ids(c, fake, "").await.is_empty());
    assert_eq!(ids(c, fake, "?replays=true").await, [kim]);
}

#[test]
fn the_assertions_api_filters_parses_waits_and_resets() {
    let env = Env::new();
    let fake = Fake::start(&env.path("deliveries.jsonl"), &[]);
    let c = client();
    rt().block_on(async {
        // A site whose unsubscribe link the test follows.
        let (site, seen) = raw_http_server(Some(
            "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".into(),
        ))
        .await;
        let since_before = format!("?since={}", sendonce::domain::clock::now_ms() - 1);
        let sent = send_three(&c, &fake, site).await;
        check_listings_and_filters(&c, &fake, &sent, &since_before).await;
        check_one_message(&c, &fake, &sent, &seen).await;
        check_raw_source(&c, &fake, &env, &sent.kim).await;
        check_wait(&c, &fake, &sent.kim).await;
        check_bad_parameters(&c, &fake).await;
        check_delete(&c, &fake, &sent.kim).await;
    });
}

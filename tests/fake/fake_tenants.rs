//! Per-tenant inboxes in the fake provider: messages filed by `X-Fake-Tenant`, by the
//! `/t/{tenant}/` prefix they were sent through, by the SMTP user and by a fingerprint of the
//! API key (never the key); every read API and the web inbox under `/t/{tenant}/` see, open
//! and clear only that tenant's messages, while `/` still sees them all.

use crate::common::{rt, Env, Fake};
use base64::Engine;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a client")
}

fn resend(fake: &Fake, path: &str, key: &str, tenant: Option<&str>, to: &str) -> (u16, Value) {
    rt().block_on(async {
        let mut r = http()
            .post(fake.url(path))
            .bearer_auth(key)
            .json(&json!({"from": "shop@example.org", "to": to, "subject": "Hi", "text": "x"}));
        if let Some(t) = tenant {
            r = r.header("X-Fake-Tenant", t);
        }
        let res = r.send().await.expect("an answer");
        (
            res.status().as_u16(),
            res.json().await.unwrap_or(Value::Null),
        )
    })
}

fn get(fake: &Fake, path: &str) -> (u16, String) {
    rt().block_on(async {
        let r = http().get(fake.url(path)).send().await.expect("an answer");
        (r.status().as_u16(), r.text().await.expect("a body"))
    })
}

/// The recipients a listing at `path` (the assertions API) shows, in order.
fn listed(fake: &Fake, path: &str) -> Vec<String> {
    let (status, body) = get(fake, path);
    assert_eq!(status, 200, "{path}: {body}");
    let v: Value = serde_json::from_str(&body).expect("JSON");
    v.as_array()
        .expect("a list")
        .iter()
        .map(|m| m["to"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// One message over SMTP, authenticated as `user` (any password: the fake has no AUTH list).
fn smtp_as(port: u16, user: &str, to: &str) {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    let last = |r: &mut BufReader<TcpStream>| loop {
        let mut l = String::new();
        r.read_line(&mut l).expect("a reply");
        if l.as_bytes().get(3) != Some(&b'-') {
            return l;
        }
    };
    assert!(last(&mut r).starts_with("220"));
    let plain = base64::engine::general_purpose::STANDARD.encode(format!("\0{user}\0pw"));
    for cmd in [
        "EHLO t.example".to_string(),
        format!("AUTH PLAIN {plain}"),
        "MAIL FROM:<shop@example.org>".into(),
        format!("RCPT TO:<{to}>"),
        "DATA".into(),
    ] {
        w.write_all(format!("{cmd}\r\n").as_bytes()).unwrap();
        let reply = last(&mut r);
        assert!(
            reply.starts_with('2') || reply.starts_with('3'),
            "{cmd}: {reply}"
        );
    }
    w.write_all(b"Subject: over smtp\r\n\r\nhello\r\n.\r\n")
        .unwrap();
    assert!(last(&mut r).starts_with("250"));
}

#[test]
fn each_tenant_sees_and_clears_only_its_own_messages() {
    let env = Env::new();
    let fake = Fake::start(&env.path("d.jsonl"), &["--smtp", "127.0.0.1:0"]);
    assert_eq!(
        resend(
            &fake,
            "/emails",
            "re_secret_A",
            Some("suite-a"),
            "a1@example.org"
        )
        .0,
        200
    );
    assert_eq!(
        resend(
            &fake,
            "/t/suite-a/emails",
            "re_secret_A",
            None,
            "a2@example.org"
        )
        .0,
        200
    );
    assert_eq!(
        resend(
            &fake,
            "/t/suite-b/emails",
            "re_secret_B",
            None,
            "b1@example.org"
        )
        .0,
        200
    );
    assert_eq!(
        resend(&fake, "/emails", "re_secret_C", None, "c1@example.org").0,
        200
    );
    smtp_as(fake.smtp.expect("smtp").port(), "suite-b", "b2@example.org");
    assert_eq!(
        listed(&fake, "/t/suite-a/messages"),
        ["a1@example.org", "a2@example.org"]
    );
    assert_eq!(
        listed(&fake, "/t/suite-b/messages"),
        ["b1@example.org", "b2@example.org"]
    );
    assert_eq!(
        listed(&fake, "/messages").len(),
        5,
        "the root sees every tenant"
    );
    // A key is filed under its fingerprint, never as itself.
    let all: Value = serde_json::from_str(&get(&fake, "/messages?to=c1@example.org").1).unwrap();
    let t = all[0]["tenant"].as_str().expect("a tenant").to_string();
    assert!(t.starts_with("key-") && t.len() == 20, "{t}");
    let log = std::fs::read_to_string(env.path("d.jsonl")).unwrap();
    assert!(!log.contains("re_secret"), "no key in the delivery log");
    assert_eq!(
        listed(&fake, &format!("/t/{t}/messages")),
        ["c1@example.org"]
    );
    // Mailpit's API and the web inbox under the prefix: the same view, links kept inside it.
    let (_, mp) = get(&fake, "/t/suite-b/api/v1/messages");
    let mp: Value = serde_json::from_str(&mp).unwrap();
    assert_eq!(mp["messages"].as_array().unwrap().len(), 2, "{mp}");
    let (status, page) = get(&fake, "/t/suite-b/");
    assert_eq!(status, 200);
    let page = page.replace("&#x2f;", "/");
    assert!(page.contains("b1@example.org") && !page.contains("a1@example.org"));
    assert!(
        page.contains("href=\"/t/suite-b/inbox/") && page.contains("action=\"/t/suite-b/clear\"")
    );
    // Another tenant's message is not found through this view.
    let a1 = fake
        .lines()
        .into_iter()
        .find(|l| l.to == "a1@example.org")
        .unwrap();
    assert_eq!(
        get(&fake, &format!("/t/suite-b/messages/{}", a1.message_id)).0,
        404
    );
    assert_eq!(
        get(&fake, &format!("/t/suite-a/messages/{}", a1.message_id)).0,
        200
    );
    // Clearing a tenant clears only it.
    let cleared = rt().block_on(async {
        http()
            .delete(fake.url("/t/suite-a/messages"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    });
    assert_eq!(cleared, 200);
    assert!(listed(&fake, "/t/suite-a/messages").is_empty());
    assert_eq!(listed(&fake, "/messages").len(), 3);
}

#[test]
fn a_tenant_that_cannot_name_an_inbox_is_refused_and_nothing_is_stored() {
    let env = Env::new();
    let fake = Fake::start(&env.path("d.jsonl"), &[]);
    let (status, body) = resend(&fake, "/emails", "re_x", Some("two words"), "a@example.org");
    assert_eq!(status, 400);
    assert!(
        body["message"].as_str().unwrap().contains("X-Fake-Tenant"),
        "{body}"
    );
    assert_eq!(get(&fake, "/t/no%20spaces/messages").0, 400);
    assert_eq!(
        get(&fake, &format!("/t/{}/messages", "x".repeat(65))).0,
        400
    );
    assert!(fake.lines().is_empty());
}

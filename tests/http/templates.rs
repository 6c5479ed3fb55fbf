//! Stored templates and attachments of API messages (`schema/0021_templates.sql`): a template's
//! versions never change, a message is rendered from one when accepted and a retry sends the
//! same bytes after a new version is saved; attachments reach Resend, Postmark and SMTP byte
//! for byte (the SMTP message read back with mail-parser, a parser we did not write).

use super::stream::post;
use crate::common::{client, rt, token, Env, Fake, Server};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use mail_parser::MimeHeaders;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// GET `path` with the token: (status, JSON).
async fn get(c: &reqwest::Client, s: &Server, tok: &str, path: &str) -> (u16, Value) {
    let res = c.get(s.url(path)).bearer_auth(tok).send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// Wait until the fake has logged `n` lines.
fn wait_lines(fake: &Fake, n: usize) -> Vec<sendonce::provider::deliverylog::DeliveryLine> {
    let deadline = Instant::now() + Duration::from_secs(15);
    while fake.lines().len() < n && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    fake.lines()
}

/// Saves: versions 1, 2, 3 of one name; refusals that name the problem; scopes. Messages: the
/// latest version rendered with the data, a pinned version, the refusals (missing variable,
/// template and content together); a retried key after a new version replays and sends nothing
/// more; the message says which version it came from.
#[test]
fn templates_are_versioned_checked_rendered_once_and_frozen_per_message() {
    let env = Env::new();
    let (fake, server) = crate::http::serve::setup(&env, &[], &[]);
    let (admin, send) = (token(&env, "acme", "admin"), token(&env, "acme", "send"));
    rt().block_on(async {
        let c = client();
        let save = |body: Value| {
            let (c, server, admin) = (c.clone(), &server, admin.clone());
            async move { post(&c, server, &admin, "/v1/templates", None, &body).await }
        };
        let v1 = json!({"name": "reset", "subject": "Reset {{ name }}",
                        "text": "Code {{ code }}", "html": "<p>Code <b>{{ code }}</b></p>"});
        assert_eq!(save(v1).await.1["version"], 1);
        let v2 = json!({"name": "reset", "subject": "Your code, {{ name }}",
                        "text": "Code: {{ code }}"});
        let (status, got) = save(v2).await;
        assert_eq!((status, got["version"].as_i64()), (201, Some(2)), "{got}");
        for (body, says) in [
            (json!({"name": "bad", "text": "{% if %}"}), "does not parse"),
            (json!({"name": "bad", "subject": "x"}), "text, html or both"),
            (json!({"name": "a/b", "text": "x"}), "name"),
        ] {
            let (status, got) = save(body).await;
            let msg = got["error"]["message"].as_str().unwrap_or_default();
            assert!(status == 400 && msg.contains(says), "{status} {got}");
        }
        let (status, _) = post(&c, &server, &send, "/v1/templates", None, &json!({})).await;
        assert_eq!(status, 403, "a send token saves no template");
        let (_, list) = get(&c, &server, &admin, "/v1/templates").await;
        assert_eq!(list["templates"][0]["version"], 2, "{list}");
        let (_, one) = get(&c, &server, &admin, "/v1/templates/reset?version=1").await;
        assert_eq!(one["html"], "<p>Code <b>{{ code }}</b></p>", "{one}");
        let (status, _) = get(&c, &server, &admin, "/v1/templates/reset?version=9").await;
        assert_eq!(status, 404);

        let msg = |key: &str, body: Value| {
            let (c, server, send, key) = (c.clone(), &server, send.clone(), key.to_string());
            async move {
                post(
                    &c,
                    server,
                    &send,
                    "/v1/messages?wait=10s",
                    Some(&key),
                    &body,
                )
                .await
            }
        };
        let latest = json!({"to": "kim@example.org", "from": "shop@example.org",
                            "template": "reset", "data": {"name": "Kim", "code": "4711"}});
        let (status, got) = msg("k-latest", latest.clone()).await;
        assert_eq!(
            (status, got["status"].as_str()),
            (200, Some("sent")),
            "{got}"
        );
        assert_eq!(
            (got["template"].as_str(), got["template_version"].as_i64()),
            (Some("reset"), Some(2))
        );
        let pinned = json!({"to": "lee@example.org", "from": "shop@example.org",
                            "template": "reset", "template_version": 1,
                            "data": {"name": "<Lee>", "code": "42"}});
        let (status, got) = msg("k-pinned", pinned).await;
        assert_eq!(
            (status, got["template_version"].as_i64()),
            (200, Some(1)),
            "{got}"
        );
        for (body, says) in [
            (
                json!({"to": "a@example.org", "from": "shop@example.org", "template": "reset",
                    "data": {"name": "A"}}),
                "code",
            ),
            (
                json!({"to": "a@example.org", "from": "shop@example.org", "template": "reset",
                    "subject": "x", "data": {}}),
                "not both",
            ),
            (
                json!({"to": "a@example.org", "from": "shop@example.org", "template": "nope"}),
                "unknown template",
            ),
        ] {
            let (status, got) = msg("k-refused", body).await;
            let text = got["error"]["message"].as_str().unwrap_or_default();
            assert!(status == 400 || status == 404, "{status} {got}");
            assert!(text.contains(says), "{says}: {got}");
        }
        // Version 3, then the first request again: the first answer, nothing sent again.
        save(json!({"name": "reset", "subject": "v3", "text": "v3 {{ code }}"})).await;
        let (status, again) = msg("k-latest", latest.clone()).await;
        assert_eq!(
            (status, again["template_version"].as_i64()),
            (200, Some(2)),
            "{again}"
        );
        // Version 4 needs a variable the first request's data lacks: the retry still replays;
        // a new key with that body is refused, naming the variable.
        save(json!({"name": "reset", "subject": "v4", "text": "{{ code }} {{ extra }}"})).await;
        let (status, again) = msg("k-latest", latest.clone()).await;
        assert_eq!(
            (status, again["template_version"].as_i64()),
            (200, Some(2)),
            "{again}"
        );
        let (status, got) = msg("k-new", latest).await;
        let text = got["error"]["message"].as_str().unwrap_or_default();
        assert!(status == 400 && text.contains("extra"), "{status} {got}");
        // A batch renders each message with its own data (one lookup of the version for all).
        let one = |to: &str, code: Option<&str>| {
            let mut data = json!({"name": to});
            if let Some(c) = code {
                data["code"] = json!(c);
            }
            json!({"to": to, "from": "shop@example.org", "template": "reset",
                   "template_version": 1, "data": data})
        };
        let batch = json!({"messages": [one("b1@example.org", Some("1")),
            one("b2@example.org", None), one("b3@example.org", Some("3"))]});
        let (status, got) = post(&c, &server, &send, "/v1/messages/batch", Some("b"), &batch).await;
        assert_eq!((status, got["accepted"].as_u64()), (200, Some(2)), "{got}");
        let refused = got["results"][1]["error"]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(refused.contains("code"), "{got}");
    });
    wait_lines(&fake, 4);
    std::thread::sleep(Duration::from_millis(300));
    let lines = fake.lines();
    let kim: Vec<_> = lines.iter().filter(|l| l.to == "kim@example.org").collect();
    assert_eq!(kim.len(), 1, "one delivery for the key: {kim:?}");
    assert_eq!(kim[0].subject.as_deref(), Some("Your code, Kim"));
    assert_eq!(kim[0].body, "Code: 4711");
    let lee = lines
        .iter()
        .find(|l| l.to == "lee@example.org")
        .expect("lee's message");
    assert_eq!(
        lee.subject.as_deref(),
        Some("Reset <Lee>"),
        "data unescaped in the subject"
    );
    assert_eq!(lee.body, "Code 42");
    let b3 = lines
        .iter()
        .find(|l| l.to == "b3@example.org")
        .expect("b3's message");
    assert_eq!(
        (b3.subject.as_deref(), b3.body.as_str()),
        (Some("Reset b3@example.org"), "Code 3")
    );
}

/// The files of the tests below: binary bytes, a text file with bare LF line ends (which a 7bit
/// part would have rewritten) and an inline image.
fn files() -> Vec<(&'static str, &'static str, Vec<u8>, Option<&'static str>)> {
    vec![
        (
            "receipt.pdf",
            "application/pdf",
            (0u8..=255).rev().collect(),
            None,
        ),
        (
            "notes.txt",
            "text/plain",
            b"line one\nline two\n\n".to_vec(),
            None,
        ),
        (
            "logo.png",
            "image/png",
            vec![0x89, b'P', b'N', b'G', 0, 1, 2],
            Some("logo"),
        ),
    ]
}

fn with_files(to: &str) -> Value {
    let atts: Vec<Value> = files()
        .iter()
        .map(|(name, ty, data, cid)| {
            let mut a =
                json!({"filename": name, "content_type": ty, "content": STANDARD.encode(data)});
            if let Some(cid) = cid {
                a["content_id"] = json!(cid);
            }
            a
        })
        .collect();
    json!({"to": to, "from": "shop@example.org", "subject": "Your receipt",
           "html": "<p>Thanks</p><img src=\"cid:logo\">", "attachments": atts})
}

/// One message with three files through each of Resend, Postmark and SMTP (the fake's three
/// doors, one `serve --worker` each): every file arrives with its name, type, content id and
/// bytes; the API says how many files the message has.
#[test]
fn attachments_reach_resend_postmark_and_smtp_byte_for_byte() {
    let env = Env::new();
    env.setup_account();
    let fake = Fake::start(&env.path("fake.jsonl"), &["--smtp", "127.0.0.1:0"]);
    let key_file = env.path("key");
    std::fs::write(&key_file, "test-token-0123456789\n").unwrap();
    let tok = token(&env, "acme", "send");
    let specs = [
        format!(
            "resend:?base_url={}&api_key_file={}&timeout=5s",
            fake.base(),
            key_file.display()
        ),
        format!(
            "postmark:?base_url={}&token_file={}&timeout=5s",
            fake.base(),
            key_file.display()
        ),
        format!("smtp://{}?tls=none&timeout=10s", fake.smtp.expect("smtp")),
    ];
    for (i, spec) in specs.iter().enumerate() {
        let server = Server::start(&env, &["--worker", "--provider", spec]);
        rt().block_on(async {
            let body = with_files(&format!("to{i}@example.org"));
            let key = format!("files-{i}");
            let (status, got) = post(
                &client(),
                &server,
                &tok,
                "/v1/messages?wait=10s",
                Some(&key),
                &body,
            )
            .await;
            assert_eq!(
                (status, got["status"].as_str()),
                (200, Some("sent")),
                "{spec}: {got}"
            );
            assert_eq!(got["attachments"], 3, "{got}");
        });
    }
    let lines = wait_lines(&fake, 3);
    for (i, api) in ["resend", "postmark"].into_iter().enumerate() {
        let l = lines
            .iter()
            .find(|l| l.to == format!("to{i}@example.org"))
            .expect(api);
        assert_eq!(l.api.as_deref(), Some(api));
        let got: Vec<_> = l
            .attachments
            .iter()
            .map(|a| {
                let cid = a
                    .content_id
                    .as_deref()
                    .map(|c| c.trim_start_matches("cid:").to_string());
                (
                    a.filename.as_str(),
                    a.content_type.as_deref(),
                    STANDARD.decode(&a.content).unwrap(),
                    cid,
                )
            })
            .collect();
        let want: Vec<_> = files()
            .into_iter()
            .map(|(n, t, d, c)| (n, Some(t), d, c.map(str::to_string)))
            .collect();
        assert_eq!(got, want, "{api}");
    }
    let smtp = lines
        .iter()
        .find(|l| l.to == "to2@example.org")
        .expect("smtp");
    let raw = STANDARD
        .decode(smtp.raw_base64.as_deref().expect("raw"))
        .unwrap();
    smtp_files_match(&raw);
}

/// The SMTP message as mail-parser reads it: the three files with their names, types, content
/// ids and exact bytes, and the HTML body.
fn smtp_files_match(raw: &[u8]) {
    let m = mail_parser::MessageParser::default()
        .parse(raw)
        .expect("parses");
    assert_eq!(
        m.body_html(0).as_deref().map(str::trim),
        Some("<p>Thanks</p><img src=\"cid:logo\">")
    );
    let got: Vec<_> = m
        .attachments()
        .map(|a| {
            let ct = a
                .content_type()
                .map(|c| format!("{}/{}", c.ctype(), c.subtype().unwrap_or("")));
            (
                a.attachment_name().map(str::to_string),
                ct,
                a.contents().to_vec(),
                a.content_id().map(str::to_string),
            )
        })
        .collect();
    let want: Vec<_> = files()
        .into_iter()
        .map(|(n, t, d, c)| {
            (
                Some(n.to_string()),
                Some(t.to_string()),
                d,
                c.map(str::to_string),
            )
        })
        .collect();
    assert_eq!(got.len(), 3, "{}", String::from_utf8_lossy(raw));
    for w in &want {
        assert!(got.contains(w), "{:?} not in {got:?}", w.0);
    }
}

/// Refusals before anything is written: an SMS with a file, bad base64, too many files, a
/// file name that would break a header.
#[test]
fn attachments_that_cannot_go_are_refused_with_their_field() {
    let env = Env::new();
    let (_fake, server) = crate::http::serve::setup(&env, &[], &[]);
    let tok = token(&env, "acme", "send");
    let a = |name: &str, content: &str| json!({"filename": name, "content": content});
    let cases = [
        (
            json!({"to": "+14155550123", "text": "hi", "attachments": [a("a.txt", "YQ==")]}),
            "SMS",
        ),
        (
            json!({"to": "k@example.org", "from": "s@example.org", "subject": "s", "text": "t",
                "attachments": [a("a.txt", "@@@")]}),
            "attachments[0]",
        ),
        (
            json!({"to": "k@example.org", "from": "s@example.org", "subject": "s", "text": "t",
                "attachments": vec![a("a.txt", "YQ=="); 21]}),
            "at most 20",
        ),
        (
            json!({"to": "k@example.org", "from": "s@example.org", "subject": "s", "text": "t",
                "attachments": [a("a\r\nBcc: x@example.org", "YQ==")]}),
            "file name",
        ),
    ];
    rt().block_on(async {
        let c = client();
        for (i, (body, says)) in cases.iter().enumerate() {
            let (status, got) = post(
                &c,
                &server,
                &tok,
                "/v1/messages",
                Some(&format!("bad-{i}")),
                body,
            )
            .await;
            let text = got["error"]["message"].as_str().unwrap_or_default();
            assert!(
                status == 400 && text.contains(says),
                "{says}: {status} {got}"
            );
        }
    });
    assert_eq!(
        env.count("SELECT count(*) FROM api_messages"),
        0,
        "nothing written"
    );
}

/// Through a real SMTP server we did not write (aiosmtpd) and read back by Python's own `email`
/// package: the same three files, byte for byte, the image inline and the others attached, no
/// MIME defect.
#[cfg(feature = "tier1")]
#[test]
fn attachments_through_a_real_smtp_server_read_back_by_python_email() {
    let env = Env::new();
    env.setup_account();
    let smtp = crate::core::smtp::RealServer::start();
    let spec = format!("smtp://127.0.0.1:{}?tls=none&timeout=10s", smtp.port);
    let server = Server::start(&env, &["--worker", "--provider", &spec]);
    let tok = token(&env, "acme", "send");
    rt().block_on(async {
        let body = with_files("py@example.org");
        let (status, got) = post(
            &client(),
            &server,
            &tok,
            "/v1/messages?wait=10s",
            Some("py"),
            &body,
        )
        .await;
        assert_eq!(
            (status, got["status"].as_str()),
            (200, Some("sent")),
            "{got}"
        );
    });
    let (raw, _) = smtp.messages().pop().expect("one message");
    let eml = env.path("m.eml");
    std::fs::write(&eml, &raw).unwrap();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/mime_files.py");
    let out = std::process::Command::new("python3")
        .arg(script)
        .arg(&eml)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["defects"], json!([]), "{doc}");
    assert_eq!(
        doc["html"].as_str().map(str::trim),
        Some("<p>Thanks</p><img src=\"cid:logo\">")
    );
    let want: Vec<Value> = files()
        .into_iter()
        .map(|(n, t, d, c)| {
            json!({"filename": n, "content_type": t, "content_id": c,
                   "disposition": if c.is_some() { "inline" } else { "attachment" },
                   "content": STANDARD.encode(d)})
        })
        .collect();
    let mut got = doc["files"].as_array().unwrap().clone();
    got.sort_by_key(|f| f["filename"].to_string());
    let mut want = want;
    want.sort_by_key(|f| f["filename"].to_string());
    assert_eq!(got, want);
}

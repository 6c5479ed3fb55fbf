//! The fake provider's Mailpit-compatible API checked with a client nobody here wrote: the
//! `mailpit-api` npm package (tests/support/mailpit, installed by tests/run.sh) lists, reads,
//! searches, waits for, marks read, tags and deletes messages sent over the fake's HTTP endpoints
//! and one sent to its SMTP listener by Python's smtplib (built by Python's `email` package).

use crate::common::{client, rt, Env, Fake};
use serde_json::{json, Value};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// A multipart message (text, HTML, one attachment) built by Python's email package and sent
/// with smtplib to `port` (envelope: bounce@ to kim@ and audit@): the exact bytes, and the
/// attachment's SHA-256.
fn smtp_send(port: u16) -> (Vec<u8>, String) {
    let script = r#"
import hashlib, smtplib, sys
from email.message import EmailMessage
from email import policy
m = EmailMessage(policy=policy.SMTP)
m["From"] = "Shop <shop@example.org>"
m["To"] = "Kim <kim@example.org>"
m["Subject"] = "Your receipt"
m["Date"] = "Tue, 01 Dec 2026 10:00:00 +0000"
m["Message-ID"] = "<receipt-1@example.org>"
m["List-Unsubscribe"] = "<mailto:u@example.org>, <https://shop.example/u/kim>"
m.set_content("Thanks Kim. Total: 12 EUR.\n")
m.add_alternative("<p>Thanks <b>Kim</b>. Total: 12 EUR.</p>\n", subtype="html")
data = b"line one\nline two\n"
m.add_attachment(data, maintype="text", subtype="plain", filename="receipt.txt")
raw = m.as_bytes()
with smtplib.SMTP("127.0.0.1", int(sys.argv[1]), timeout=10) as s:
    refused = s.sendmail("bounce@example.org", ["kim@example.org", "audit@example.org"], raw)
    assert not refused, refused
sys.stderr.write(hashlib.sha256(data).hexdigest())
sys.stdout.buffer.write(raw)
"#;
    let out = Command::new("python3")
        .args(["-c", script, &port.to_string()])
        .output()
        .expect("run python3 (tests/run.sh puts the venv's first on PATH)");
    assert!(
        out.status.success(),
        "python3: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (out.stdout, String::from_utf8(out.stderr).expect("hex"))
}

/// Run the npm client with a plan; its JSON answers.
fn run_client(base: &str, plan: &Value) -> Value {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support/mailpit");
    assert!(
        dir.join("node_modules/mailpit-api").is_dir(),
        "the mailpit-api npm package is not installed in {}: run the tests with tests/run.sh \
         (it runs npm ci there)",
        dir.display()
    );
    let mut child = Command::new("node")
        .arg(dir.join("client.mjs"))
        .arg(base)
        .current_dir(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("run node (tests/run.sh checks it is installed)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(plan.to_string().as_bytes())
        .expect("write the plan");
    let out = child.wait_with_output().expect("node's output");
    assert!(out.status.success(), "node client.mjs failed");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "client.mjs printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn ids_of(list: &Value) -> Vec<String> {
    list["messages"]
        .as_array()
        .unwrap_or_else(|| panic!("no messages in {list}"))
        .iter()
        .map(|m| m["ID"].as_str().expect("an ID").to_string())
        .collect()
}

#[test]
fn the_mailpit_api_client_reads_searches_and_deletes_the_fakes_messages() {
    let env = Env::new();
    let log = env.path("deliveries.jsonl");
    let fake = Fake::start(&log, &["--smtp", "127.0.0.1:0"]);
    let smtp_addr = fake.smtp.expect("the SMTP address");
    // A message over SMTP first: the oldest in the inbox.
    let (raw, attachment_sha) = smtp_send(smtp_addr.port());
    let c = client();
    let (welcome, sale, sms) = rt().block_on(async {
        let send = |key: &'static str, body: Value| {
            let c = c.clone();
            let url = fake.url("/send");
            async move {
                let r = c
                    .post(url)
                    .header("Idempotency-Key", key)
                    .json(&body)
                    .send()
                    .await
                    .expect("POST /send");
                assert_eq!(r.status(), 200);
                let v: Value = r.json().await.unwrap();
                v["id"].as_str().expect("an id").to_string()
            }
        };
        let welcome_body = json!({"job_id": "j1", "to": "lee@example.org", "from": "news@example.com",
            "subject": "Welcome Lee", "body": "Hello Lee, confirm at https://app.example/confirm/1"});
        let welcome = send("k-welcome", welcome_body.clone()).await;
        // The same key again: a replay, which Mailpit's API never lists.
        assert_eq!(send("k-welcome", welcome_body).await, welcome);
        let r = c
            .post(fake.url("/emails"))
            .bearer_auth("re_test")
            .header("Idempotency-Key", "k-sale")
            .json(&json!({"from": "Shop <shop@example.org>", "to": ["max@example.org"],
                "subject": "Big sale", "text": "The sale starts now.",
                "headers": {"List-Unsubscribe": "<https://shop.example/u/max>"}}))
            .send()
            .await
            .expect("POST /emails");
        assert_eq!(r.status(), 200);
        let sale = r.json::<Value>().await.unwrap()["id"]
            .as_str()
            .expect("an id")
            .to_string();
        let sms = send(
            "k-sms",
            json!({"job_id": "j2", "channel": "sms", "to": "+14155550100",
                "from": "+14155550199", "body": "Your code is 123456"}),
        )
        .await;
        (welcome, sale, sms)
    });
    let smtp = {
        let lines = fake.lines();
        assert!(
            lines[0].envelope.is_some(),
            "the first line is not the SMTP message"
        );
        lines[0].message_id.clone()
    };

    // Endpoints the npm client does not call: /api/v1/message/{ID}/html and a search without
    // a query.
    rt().block_on(async {
        let r = c
            .get(fake.url(&format!("/api/v1/message/{smtp}/html")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert!(r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html"));
        let csp = r.headers()["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("sandbox") && csp.contains("default-src 'none'"));
        assert!(r.text().await.unwrap().contains("<b>Kim</b>"));
        let r = c.get(fake.url("/api/v1/search")).send().await.unwrap();
        assert_eq!(r.status(), 400);
        let r = c
            .get(fake.url("/api/v1/messages?limit=many"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        assert!(r.text().await.unwrap().contains("limit"));
    });

    let plan = json!({
        "searches": ["to:kim", "subject:sale", "\"code is\"", "from:shop -subject:sale",
                     "to:+14155550100", "lee confirm", "nothing-like-this"],
        "wait": "subject:receipt",
        "delete": [welcome],
        "marks": {"read": [sale], "tag": [smtp, sms], "tags": ["Receipts", "b2b!"],
                  "searches": ["is:read", "is:unread", "tag:receipts", "is:unread -tag:b2b"]},
    });
    let out = run_client(&fake.base(), &plan);
    let show = |v: &Value| serde_json::to_string_pretty(v).unwrap();

    assert_eq!(out["info"]["Messages"], 4, "{}", show(&out["info"]));
    assert_eq!(out["info"]["RuntimeStats"]["SMTPAccepted"], 1);
    assert_eq!(out["list"]["total"], 4, "{}", show(&out["list"]));
    assert_eq!(out["list"]["messages_count"], 4);
    // Newest first; the replay is not a message.
    assert_eq!(
        ids_of(&out["list"]),
        [sms.as_str(), sale.as_str(), welcome.as_str(), smtp.as_str()],
        "{}",
        show(&out["list"])
    );
    assert_eq!(out["page"]["start"], 1);
    assert_eq!(ids_of(&out["page"]), [sale.as_str()]);
    let entry = &out["list"]["messages"][3];
    assert_eq!(entry["Attachments"], 1);
    assert_eq!(entry["Read"], false);
    assert_eq!(entry["Snippet"], "Thanks Kim. Total: 12 EUR.");

    // The SMTP message, parsed from its exact bytes.
    let m = &out["messages"][smtp.as_str()];
    let s = &m["summary"];
    assert_eq!(
        s["From"],
        json!({"Name": "Shop", "Address": "shop@example.org"})
    );
    assert_eq!(
        s["To"],
        json!([{"Name": "Kim", "Address": "kim@example.org"}])
    );
    // The envelope recipient the headers do not name.
    assert_eq!(
        s["Bcc"],
        json!([{"Name": "", "Address": "audit@example.org"}])
    );
    assert_eq!(s["ReturnPath"], "bounce@example.org");
    assert_eq!(s["MessageID"], "receipt-1@example.org");
    assert_eq!(s["Subject"], "Your receipt");
    assert_eq!(s["Size"], raw.len());
    assert!(s["Date"]
        .as_str()
        .unwrap()
        .starts_with("2026-12-01T10:00:00"));
    assert_eq!(
        s["Text"].as_str().unwrap().trim_end(),
        "Thanks Kim. Total: 12 EUR."
    );
    assert!(s["HTML"].as_str().unwrap().contains("<b>Kim</b>"));
    assert_eq!(
        s["ListUnsubscribe"]["Links"],
        json!(["mailto:u@example.org", "https://shop.example/u/kim"])
    );
    let att = &s["Attachments"][0];
    assert_eq!(att["FileName"], "receipt.txt", "{}", show(s));
    assert_eq!(att["ContentType"], "text/plain");
    assert_eq!(att["Size"], 18);
    assert_eq!(att["Checksums"]["SHA256"], attachment_sha);
    assert_eq!(m["source"].as_str().unwrap().as_bytes(), &raw[..]);
    assert_eq!(m["headers"]["Subject"], json!(["Your receipt"]));
    assert_eq!(
        m["headers"]["Message-Id"],
        json!(["<receipt-1@example.org>"])
    );
    assert!(m["html"].as_str().unwrap().contains("<b>Kim</b>"));
    assert_eq!(
        m["text"].as_str().unwrap().trim_end(),
        "Thanks Kim. Total: 12 EUR."
    );

    // An HTTP email: a synthesized source Mailpit's client reads like any other.
    let m = &out["messages"][welcome.as_str()];
    assert_eq!(m["summary"]["To"][0]["Address"], "lee@example.org");
    assert_eq!(m["summary"]["Subject"], "Welcome Lee");
    assert!(m["source"]
        .as_str()
        .unwrap()
        .contains("X-Fake-Provider-Source: synthesized"));
    assert_eq!(m["headers"]["To"], json!(["lee@example.org"]));
    assert_eq!(
        m["headers"]["X-Fake-Provider-Source"],
        json!(["synthesized"])
    );
    // No HTML part: Mailpit answers 404, and the client throws.
    assert!(
        m["html"]["error"].as_str().unwrap_or("").contains("404"),
        "{}",
        show(&m["html"])
    );
    let s = &out["messages"][sale.as_str()]["summary"];
    assert_eq!(
        s["From"],
        json!({"Name": "Shop", "Address": "shop@example.org"})
    );
    assert_eq!(
        s["ListUnsubscribe"]["Links"],
        json!(["https://shop.example/u/max"])
    );
    assert_eq!(s["Text"], "The sale starts now.");

    // An SMS: the numbers as addresses, the body as text and source.
    let m = &out["messages"][sms.as_str()];
    assert_eq!(m["summary"]["From"]["Address"], "+14155550199");
    assert_eq!(m["summary"]["To"][0]["Address"], "+14155550100");
    assert_eq!(m["summary"]["Text"], "Your code is 123456");
    assert_eq!(m["source"], "Your code is 123456");
    assert_eq!(m["text"], "Your code is 123456");

    assert_eq!(out["latest"]["ID"], json!(sms));
    assert!(
        out["missing"]["error"]
            .as_str()
            .unwrap_or("")
            .contains("404"),
        "{}",
        show(&out["missing"])
    );

    let search = |q: &str| {
        let r = &out["searches"][q];
        assert_eq!(r["total"], 4, "{q}: {}", show(r));
        assert_eq!(r["messages_count"], r["messages"].as_array().unwrap().len());
        ids_of(r)
    };
    assert_eq!(search("to:kim"), [smtp.as_str()]);
    assert_eq!(search("subject:sale"), [sale.as_str()]);
    assert_eq!(search("\"code is\""), [sms.as_str()]);
    assert_eq!(search("from:shop -subject:sale"), [smtp.as_str()]);
    assert_eq!(search("to:+14155550100"), [sms.as_str()]);
    assert_eq!(search("lee confirm"), [welcome.as_str()]);
    assert!(search("nothing-like-this").is_empty());
    assert_eq!(out["waited"]["ID"], json!(smtp), "{}", show(&out["waited"]));

    marks(&out["marks"], [&sms, &sale, &welcome, &smtp]);

    assert_eq!(out["deleted"], "ok", "{}", show(&out["deleted"]));
    assert_eq!(
        ids_of(&out["afterDelete"]),
        [sms.as_str(), sale.as_str(), smtp.as_str()]
    );
    assert_eq!(out["deletedAll"], "ok");
    assert_eq!(out["afterDeleteAll"]["total"], 0);
    assert_eq!(out["infoAfter"]["Messages"], 0);
    assert!(fake.lines().is_empty());
}

/// Read flags and tags set by the client: `ids` are the messages newest first (sms, sale,
/// welcome, smtp); sale was marked read, smtp and sms tagged `Receipts` and `b2b` (its `!`
/// dropped, as Mailpit does).
fn marks(m: &Value, ids: [&String; 4]) {
    let show = || serde_json::to_string_pretty(m).unwrap();
    let [sms, sale, welcome, smtp] = ids;
    for step in ["allUnread", "read", "tagged", "renamed", "deletedTag"] {
        assert_eq!(m[step], "ok", "{step}: {}", show());
    }
    assert_eq!(m["tags"], json!(["b2b", "Receipts"]), "{}", show());
    let search = |q: &str| ids_of(&m["searches"][q]);
    assert_eq!(search("is:read"), [sale.as_str()]);
    assert_eq!(
        search("is:unread"),
        [sms.as_str(), welcome.as_str(), smtp.as_str()]
    );
    assert_eq!(search("tag:receipts"), [sms.as_str(), smtp.as_str()]);
    assert_eq!(search("is:unread -tag:b2b"), [welcome.as_str()]);
    let list = &m["list"];
    assert_eq!(
        (list["unread"].clone(), list["tags"].clone()),
        (json!(3), json!(["b2b", "Receipts"]))
    );
    let first = &list["messages"][0];
    assert_eq!(
        (first["Read"].clone(), first["Tags"].clone()),
        (json!(false), json!(["b2b", "Receipts"]))
    );
    assert_eq!(list["messages"][1]["Read"], true);
    assert_eq!(m["tagsAfter"], json!(["Renamed"]), "{}", show());
}

//! Provider webhooks on a real `sendonce serve` (`/hooks/{twilio,postmark,resend,standard}/
//! {account}`): Twilio's documented signature example and signed STOP/START messages feeding
//! the SMS suppression list (and the next campaign), the `standardwebhooks` PyPI package as an
//! independent signer (and verifier of ours), more than a thousand forged or altered requests
//! that all fail and change nothing, a replayed event applied once, and delivery reports
//! settling rows in doubt, including one that arrives while the row is still leased.
// Some tests here need tools outside Rust (tier 1); without them their helpers go unused.
#![cfg_attr(not(feature = "tier1"), allow(unused_imports, dead_code))]

use crate::common::{client, rt, Env, Server};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use sendonce::domain::webhook::{job_tag, sign};
use sendonce::provider::twilio::{twilio_signature, validate_twilio_signature};
use serde_json::{json, Value};
use std::process::{Command, Stdio};

const PUBLIC: &str = "https://hooks.example.org";
const TWILIO_TOKEN: &str = "twilio-auth-token-0123456789";
const POSTMARK_AUTH: &str = "hooker:pm-pa55word";
/// Standard Webhooks / Svix secrets (base64 of 24 bytes).
const ACME_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const OTHER_SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

fn key(secret: &str) -> Vec<u8> {
    sendonce::domain::webhook::decode_secret(secret).unwrap()
}

fn now() -> i64 {
    sendonce::domain::clock::now_ms() / 1000
}

/// Accounts acme (every source) and other (standard only, its own secret); a server with
/// those webhooks and the public URL.
fn setup(env: &Env) -> Server {
    env.setup_account();
    env.ok(&["account", "add", "other"]);
    let f = |name: &str, v: &str| env.write(name, v).display().to_string();
    let cfg = format!(
        r#"public_url = "{PUBLIC}"
[[webhook]]
account = "acme"
source = "twilio"
secret_file = "{}"
[[webhook]]
account = "acme"
source = "postmark"
secret_file = "{}"
[[webhook]]
account = "acme"
source = "resend"
secret_file = "{}"
[[webhook]]
account = 1
source = "standard"
secret_file = "{}"
[[webhook]]
account = "other"
source = "standard"
secret_file = "{}"
"#,
        f("twilio.secret", TWILIO_TOKEN),
        f("postmark.secret", POSTMARK_AUTH),
        f("resend.secret", ACME_SECRET),
        f("standard.secret", ACME_SECRET),
        f("other.secret", OTHER_SECRET),
    );
    let cfg = env.write("sendonce.toml", cfg);
    serve(
        env,
        &["--listen", "127.0.0.1:0", "--config", cfg.to_str().unwrap()],
    )
}

/// The secret of the links the server writes (a configured public URL needs it).
const LINK_SECRET: &str = "0123456789abcdef0123456789abcdef";

/// `sendonce serve ARGS` with the link secret set (the configured public URL needs it) and no
/// public URL from the environment (the config file's `public_url` is the one Twilio signs).
pub(crate) fn serve(env: &Env, args: &[&str]) -> Server {
    Server::start_with_env(
        env,
        args,
        &[
            ("SENDONCE_UNSUBSCRIBE_SECRET", LINK_SECRET),
            ("SENDONCE_PUBLIC_URL", ""),
        ],
    )
}

/// One request to send: path, headers, body.
#[derive(Clone, Debug)]
struct Hook {
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Hook {
    fn header(mut self, k: &str, v: &str) -> Hook {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(k));
        self.headers.push((k.to_string(), v.to_string()));
        self
    }
    fn without(mut self, k: &str) -> Hook {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(k));
        self
    }
}

async fn send(c: &reqwest::Client, s: &Server, h: &Hook) -> (u16, String) {
    let mut r = c.post(s.url(&h.path)).body(h.body.clone());
    for (k, v) in &h.headers {
        r = r.header(k.as_str(), v.as_str());
    }
    let res = r.send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.text().await.unwrap_or_default())
}

/// A Twilio form request signed with `token` over PUBLIC + path.
fn twilio_hook(path: &str, params: &[(&str, &str)], token: &str) -> Hook {
    let body = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(params)
        .finish();
    let sig = twilio_signature(token, &format!("{PUBLIC}{path}"), params);
    Hook {
        path: path.into(),
        headers: vec![
            (
                "content-type".into(),
                "application/x-www-form-urlencoded".into(),
            ),
            ("x-twilio-signature".into(), sig),
        ],
        body: body.into_bytes(),
    }
}

/// A Standard Webhooks (`prefix` webhook) or Svix (`prefix` svix) request.
fn signed_hook(path: &str, prefix: &str, secret: &str, id: &str, ts: i64, body: &Value) -> Hook {
    let body = body.to_string().into_bytes();
    let sig = sign(&key(secret), id, ts, &body);
    Hook {
        path: path.into(),
        headers: vec![
            ("content-type".into(), "application/json".into()),
            (format!("{prefix}-id"), id.into()),
            (format!("{prefix}-timestamp"), ts.to_string()),
            (format!("{prefix}-signature"), sig),
        ],
        body,
    }
}

fn postmark_hook(path: &str, auth: &str, body: &Value) -> Hook {
    Hook {
        path: path.into(),
        headers: vec![
            ("content-type".into(), "application/json".into()),
            (
                "authorization".into(),
                format!("Basic {}", STANDARD.encode(auth)),
            ),
        ],
        body: body.to_string().into_bytes(),
    }
}

pub(crate) fn suppressions(env: &Env) -> Vec<(String, String, String)> {
    let c = env.sqlite();
    let mut st = c
        .prepare("SELECT channel, address, source FROM suppressions ORDER BY 1, 2")
        .unwrap();
    st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// Every row of the tables a webhook may change, as text.
pub(crate) fn dump(env: &Env) -> String {
    let c = env.sqlite();
    let mut out = String::new();
    for t in ["suppressions", "webhook_events", "sends"] {
        let mut st = c
            .prepare(&format!("SELECT * FROM {t} ORDER BY 1, 2, 3"))
            .unwrap();
        let n = st.column_count();
        let rows = st
            .query_map([], |r| {
                let mut line = String::new();
                for i in 0..n {
                    let v: rusqlite::types::Value = r.get(i)?;
                    line.push_str(&format!("{v:?}|"));
                }
                Ok(line)
            })
            .unwrap();
        out.push_str(t);
        out.push('\n');
        for r in rows {
            out.push_str(&r.unwrap());
            out.push('\n');
        }
    }
    out
}

#[test]
fn twilio_documented_example_and_signed_stop_and_start() {
    // Twilio's published example, through the function the endpoint verifies with.
    let url = "https://mycompany.com/myapp.php?foo=1&bar=2";
    let params = [
        ("CallSid", "CA1234567890ABCDE"),
        ("Caller", "+12349013030"),
        ("Digits", "1234"),
        ("From", "+12349013030"),
        ("To", "+18005551212"),
    ];
    assert_eq!(
        twilio_signature("12345", url, &params),
        "0/KCTR6DLpKmkAf8muzZqo1nDgQ="
    );
    assert!(validate_twilio_signature(
        "12345",
        url,
        &params,
        "0/KCTR6DLpKmkAf8muzZqo1nDgQ="
    ));

    let env = Env::new();
    let server = setup(&env);
    let acct = "1";
    for phone in ["+14155550100", "+14155550101"] {
        env.ok(&["subscriber", "add", "--account", acct, "--phone", phone]);
    }
    let rt = rt();
    let c = client();
    rt.block_on(async {
        let path = "/hooks/twilio/acme";
        let stop = twilio_hook(
            path,
            &[
                ("MessageSid", "SM0001"),
                ("From", "+14155550100"),
                ("To", "+15550001111"),
                ("Body", "  stop "),
            ],
            TWILIO_TOKEN,
        );
        let (st, body) = send(&c, &server, &stop).await;
        assert_eq!(st, 200, "{body}");
        assert!(body.contains("<Response/>"), "{body}");
        assert_eq!(
            suppressions(&env),
            vec![("sms".into(), "+14155550100".into(), "twilio".into())]
        );
        // The same number texts START: the suppression is removed.
        let start = twilio_hook(
            path,
            &[
                ("MessageSid", "SM0002"),
                ("From", "+14155550100"),
                ("Body", "START"),
            ],
            TWILIO_TOKEN,
        );
        assert_eq!(send(&c, &server, &start).await.0, 200);
        assert!(suppressions(&env).is_empty());
        // The other number opts out for good.
        let quit = twilio_hook(
            path,
            &[
                ("MessageSid", "SM0003"),
                ("From", "+14155550101"),
                ("Body", "QUIT"),
            ],
            TWILIO_TOKEN,
        );
        assert_eq!(send(&c, &server, &quit).await.0, 200);
        // START lifts only what Twilio put there: an operator's suppression of a number stays.
        env.ok(&[
            "suppress",
            "add",
            "--account",
            acct,
            "--channel",
            "sms",
            "+14155550102",
        ]);
        let start_other = twilio_hook(
            path,
            &[
                ("MessageSid", "SM0005"),
                ("From", "+14155550102"),
                ("Body", "START"),
            ],
            TWILIO_TOKEN,
        );
        assert_eq!(send(&c, &server, &start_other).await.0, 200);
        assert!(
            suppressions(&env)
                .iter()
                .any(|(_, a, src)| a == "+14155550102" && src != "twilio"),
            "{:?}",
            suppressions(&env)
        );
        // A wrong token, or the URL of another account, is refused.
        let forged = twilio_hook(
            path,
            &[
                ("MessageSid", "SM0004"),
                ("From", "+14155550100"),
                ("Body", "STOP"),
            ],
            "another-token",
        );
        assert_eq!(send(&c, &server, &forged).await.0, 401);
    });
    // The next SMS campaign skips the number that said QUIT and sends to the one that said
    // START again.
    let body = env.write("sms.txt", "Sale today");
    let cid = env.ok(&[
        "campaign",
        "create",
        "--account",
        acct,
        "--name",
        "s",
        "--channel",
        "sms",
        "--body-file",
        body.to_str().unwrap(),
    ]);
    env.ok(&["campaign", "approve", &cid]);
    let out = env.path("out.jsonl");
    let spec = format!("outbox:{}", out.display());
    env.ok(&["run", "--once", "--provider", &spec, "--tick", "50ms"]);
    let status = |a: &str| -> String {
        env.sqlite()
            .query_row("SELECT status FROM sends WHERE address = ?1", [a], |r| {
                r.get(0)
            })
            .unwrap()
    };
    assert_eq!(status("+14155550100"), "sent");
    assert_eq!(status("+14155550101"), "suppressed");
}

/// Signs with the `standardwebhooks` package: prints {"id", "timestamp", "signature"} for the
/// body on stdin, or, with "verify", checks headers given in argv against ours.
const PY_SIGN: &str = r#"
import json, sys, datetime
from standardwebhooks.webhooks import Webhook
secret, msg_id, ts = sys.argv[1], sys.argv[2], int(sys.argv[3])
body = sys.stdin.read()
wh = Webhook(secret)
if len(sys.argv) > 4:
    wh.verify(body, {"webhook-id": msg_id, "webhook-timestamp": str(ts),
                     "webhook-signature": sys.argv[4]})
    print(json.dumps({"verified": True}))
else:
    sig = wh.sign(msg_id, datetime.datetime.fromtimestamp(ts, tz=datetime.timezone.utc), body)
    print(json.dumps({"signature": sig}))
"#;

fn python(args: &[&str], stdin: &str) -> Value {
    use std::io::Write;
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(PY_SIGN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (tests/run.sh puts the venv with standardwebhooks first on PATH)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "python: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[cfg(feature = "tier1")]
#[test]
fn the_standardwebhooks_package_signs_what_we_accept_and_accepts_what_we_sign() {
    let env = Env::new();
    let server = setup(&env);
    let rt = rt();
    let c = client();
    let ts = now();
    rt.block_on(async {
        for (path, prefix, id, to) in [
            (
                "/hooks/standard/acme",
                "webhook",
                "msg_py_1",
                "py1@example.com",
            ),
            ("/hooks/resend/acme", "svix", "msg_py_2", "py2@example.com"),
        ] {
            let body = match prefix {
                "webhook" => json!({"type": "message.bounced", "data": {"to": to}}),
                _ => json!({"type": "email.bounced", "created_at": "2026-01-01T00:00:00Z",
                            "data": {"email_id": "e1", "to": [to]}}),
            };
            let text = body.to_string();
            let sig = python(&[ACME_SECRET, id, &ts.to_string()], &text)["signature"]
                .as_str()
                .unwrap()
                .to_string();
            let h = Hook {
                path: path.into(),
                headers: vec![
                    ("content-type".into(), "application/json".into()),
                    (format!("{prefix}-id"), id.into()),
                    (format!("{prefix}-timestamp"), ts.to_string()),
                    (format!("{prefix}-signature"), sig),
                ],
                body: text.into_bytes(),
            };
            let (st, b) = send(&c, &server, &h).await;
            assert_eq!(st, 200, "{path}: {b}");
            let r: Value = serde_json::from_str(&b).unwrap();
            assert_eq!(r["action"], "suppressed", "{r}");
        }
    });
    let mut sources: Vec<String> = suppressions(&env).into_iter().map(|s| s.2).collect();
    sources.sort();
    assert_eq!(sources, vec!["resend", "standard"]);
    // Our signer, checked by the package.
    let body = r#"{"type":"message.delivered","data":{"job_id":"j"}}"#;
    let ours = sign(&key(ACME_SECRET), "msg_ours", ts, body.as_bytes());
    let v = python(&[ACME_SECRET, "msg_ours", &ts.to_string(), &ours], body);
    assert_eq!(v["verified"], true);
}

/// Valid requests for each endpoint (fresh ids), used as the originals of the forgeries.
fn originals(ts: i64, n: usize) -> Vec<Hook> {
    let mut v = Vec::new();
    for i in 0..n {
        let to = format!("victim{i}@example.com");
        v.push(signed_hook(
            "/hooks/standard/acme",
            "webhook",
            ACME_SECRET,
            &format!("std_{i}"),
            ts,
            &json!({"type": "message.bounced", "data": {"to": to}}),
        ));
        v.push(signed_hook(
            "/hooks/resend/acme",
            "svix",
            ACME_SECRET,
            &format!("svix_{i}"),
            ts,
            &json!({"type": "email.complained", "data": {"to": [to]}}),
        ));
        v.push(postmark_hook(
            "/hooks/postmark/acme",
            POSTMARK_AUTH,
            &json!({"RecordType": "SpamComplaint", "MessageID": format!("pm{i}"),
                    "Email": to, "BouncedAt": "2026-01-01T00:00:00Z"}),
        ));
        v.push(twilio_hook(
            "/hooks/twilio/acme",
            &[
                ("MessageSid", &format!("SMF{i}")),
                ("From", &format!("+1415555{:04}", i)),
                ("Body", "STOP"),
            ],
            TWILIO_TOKEN,
        ));
    }
    v
}

/// Altered copies of a valid request: each must be refused.
fn forgeries(h: &Hook, i: usize, ts: i64) -> Vec<Hook> {
    let mut out = Vec::new();
    // One body byte changed (Postmark signs nothing: its Basic auth covers the sender only).
    if !h.path.contains("postmark") {
        let mut b = h.clone();
        let at = i % b.body.len();
        b.body[at] ^= 0x01;
        out.push(b);
    }
    // Bad signature values.
    for (name, _) in h.headers.iter().filter(|(n, _)| {
        n.ends_with("-signature") || n == "x-twilio-signature" || n == "authorization"
    }) {
        let bad = match name.as_str() {
            "authorization" => format!("Basic {}", STANDARD.encode("hooker:pm-pa55wore")),
            "x-twilio-signature" => "0/KCTR6DLpKmkAf8muzZqo1nDgQ=".to_string(),
            _ => "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=".to_string(),
        };
        out.push(h.clone().header(name, &bad));
        out.push(h.clone().without(name));
    }
    // Old and future timestamps (signed correctly for them).
    if let Some((idh, id)) = h.headers.iter().find(|(n, _)| n.ends_with("-id")).cloned() {
        let prefix = idh.trim_end_matches("-id").to_string();
        let body: Value = serde_json::from_slice(&h.body).unwrap();
        for skew in [-400 - (i as i64 % 1000), 400 + (i as i64 % 1000)] {
            let path = h.path.clone();
            out.push(signed_hook(
                &path,
                &prefix,
                ACME_SECRET,
                &id,
                ts + skew,
                &body,
            ));
        }
        // Another account's secret.
        out.push(signed_hook(&h.path, &prefix, OTHER_SECRET, &id, ts, &body));
        out.push(h.clone().without(&format!("{prefix}-timestamp")));
        out.push(h.clone().without(&idh));
    }
    // The same request at the other account's URL (its secret differs; or nothing is configured).
    let mut other = h.clone();
    other.path = h.path.replace("/acme", "/other");
    out.push(other);
    out
}

#[test]
fn a_thousand_forged_requests_are_refused_and_change_nothing() {
    let env = Env::new();
    let server = setup(&env);
    let rt = rt();
    let c = client();
    let ts = now();
    rt.block_on(async {
        // One applied event per endpoint first, so a replayed id with a new body is testable.
        let seen = originals(ts, 1);
        for h in &seen {
            let (st, b) = send(&c, &server, h).await;
            assert_eq!(st, 200, "{}: {b}", h.path);
        }
        let before = dump(&env);
        let mut sent = 0;
        let mut statuses = std::collections::BTreeMap::new();
        // Replayed ids with a new body (standard and resend: the id is the replay key).
        for h in seen.iter().filter(|h| !h.path.contains("twilio") && !h.path.contains("postmark")) {
            let prefix = if h.path.contains("resend") { "svix" } else { "webhook" };
            let id = h
                .headers
                .iter()
                .find(|(n, _)| n == &format!("{prefix}-id"))
                .unwrap()
                .1
                .clone();
            for j in 0..20 {
                let body = json!({"type": if prefix == "svix" {"email.bounced"} else {"message.bounced"},
                                  "data": {"to": format!("new{j}@example.com")}});
                let f = signed_hook(&h.path, prefix, ACME_SECRET, &id, ts, &body);
                let (st, b) = send(&c, &server, &f).await;
                assert_eq!(st, 409, "replayed id with a new body: {b}");
                sent += 1;
            }
        }
        let base = originals(ts, 40);
        for (i, h) in base.iter().enumerate() {
            for f in forgeries(h, i, ts) {
                let (st, b) = send(&c, &server, &f).await;
                assert!(
                    matches!(st, 401 | 403 | 404),
                    "forgery accepted ({st}) at {}: {b}\n{f:?}",
                    f.path
                );
                assert!(!b.contains(TWILIO_TOKEN) && !b.contains("pa55word"), "{b}");
                *statuses.entry(st).or_insert(0) += 1;
                sent += 1;
            }
        }
        assert!(sent >= 1000, "only {sent} forgeries");
        eprintln!("{sent} forged requests refused: {statuses:?}");
        assert_eq!(before, dump(&env), "a forged request changed the database");
    });
}

#[test]
fn a_replayed_event_is_applied_once_and_a_changed_body_is_refused() {
    let env = Env::new();
    let server = setup(&env);
    let rt = rt();
    let c = client();
    rt.block_on(async {
        let body = json!({"type": "message.complained", "data": {"to": "r@example.com"}});
        let h = signed_hook(
            "/hooks/standard/acme",
            "webhook",
            ACME_SECRET,
            "evt_1",
            now(),
            &body,
        );
        let (s1, b1) = send(&c, &server, &h).await;
        let (s2, b2) = send(&c, &server, &h).await;
        assert_eq!((s1, s2), (200, 200), "{b1} {b2}");
        let r2: Value = serde_json::from_str(&b2).unwrap();
        assert_eq!(r2["replay"], true);
        assert_eq!(r2["action"], "suppressed");
        assert_eq!(env.count("SELECT count(*) FROM webhook_events"), 1);
        assert_eq!(env.count("SELECT count(*) FROM suppressions"), 1);
        // Taken off the list by hand, a replay does not put it back: it changes nothing.
        env.sqlite()
            .execute("DELETE FROM suppressions", [])
            .unwrap();
        assert_eq!(send(&c, &server, &h).await.0, 200);
        assert_eq!(env.count("SELECT count(*) FROM suppressions"), 0);
        // The same id at the other account is another event (its own secret).
        let o = signed_hook(
            "/hooks/standard/other",
            "webhook",
            OTHER_SECRET,
            "evt_1",
            now(),
            &body,
        );
        assert_eq!(send(&c, &server, &o).await.0, 200);
        assert_eq!(env.count("SELECT count(*) FROM webhook_events"), 2);
    });
}

/// An email campaign of `n` sent through the outbox; returns the job ids in send order.
pub(crate) fn sent_campaign(env: &Env, n: usize) -> Vec<(i64, String)> {
    let (_acct, cid) = env.setup_campaign(n);
    env.ok(&["campaign", "approve", &cid]);
    let spec = format!("outbox:{}", env.path("out.jsonl").display());
    env.ok(&["run", "--once", "--provider", &spec, "--tick", "50ms"]);
    let c = env.sqlite();
    let mut st = c
        .prepare("SELECT id, job_id FROM sends ORDER BY id")
        .unwrap();
    st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

pub(crate) fn status(env: &Env, id: i64) -> String {
    env.sqlite()
        .query_row("SELECT status FROM sends WHERE id = ?1", [id], |r| r.get(0))
        .unwrap()
}

/// The provider message id of each row of the (one) campaign, by job id, as `campaign report`
/// says.
fn provider_ids(env: &Env) -> std::collections::HashMap<String, Option<String>> {
    let cid = env.count("SELECT min(campaign_id) FROM sends").to_string();
    let report: Value =
        serde_json::from_str(&env.ok(&["campaign", "report", &cid, "--format", "json"]))
            .expect("report JSON");
    report
        .as_array()
        .expect("an array")
        .iter()
        .map(|r| {
            let id = r["provider_message_id"].as_str().map(str::to_string);
            (r["job_id"].as_str().expect("job_id").to_string(), id)
        })
        .collect()
}

/// Each report names the provider's message (Standard `data.message_id`, Resend
/// `data.email_id`, Postmark `MessageID`): a row the report settles as sent gets that id, as
/// the worker would have recorded it had it seen the provider's answer. A row in doubt that has
/// an id keeps its own; a row settled as failed gets none.
#[test]
fn delivery_reports_settle_rows_in_doubt_and_wait_for_leased_ones() {
    let env = Env::new();
    let jobs = sent_campaign(&env, 5);
    let server = setup_existing(&env);
    let db = env.sqlite();
    // In doubt: the worker never saw the provider's answer, so no id (the fifth has one).
    for (id, _) in &jobs[..3] {
        db.execute(
            "UPDATE sends SET status = 'in_doubt', doubt_since = sent_at, sent_at = NULL,
             provider_message_id = NULL WHERE id = ?1",
            [id],
        )
        .unwrap();
    }
    db.execute(
        "UPDATE sends SET status = 'in_doubt', doubt_since = sent_at, sent_at = NULL
         WHERE id = ?1",
        [jobs[4].0],
    )
    .unwrap();
    let own_id = provider_ids(&env)[&jobs[4].1]
        .clone()
        .expect("the outbox's id");
    // The fourth: dispatched by a worker that died, its lease not expired yet.
    let lease_end = sendonce::domain::clock::now_ms() + 3_600_000;
    db.execute(
        "UPDATE sends SET status = 'leased', lease_token = 7, dispatched_at = ?2,
         visible_at = ?3, sent_at = NULL, provider_message_id = NULL WHERE id = ?1",
        rusqlite::params![jobs[3].0, lease_end - 3_600_000, lease_end],
    )
    .unwrap();
    db.execute("UPDATE campaigns SET status = 'sending'", [])
        .unwrap();
    let rt = rt();
    let c = client();
    rt.block_on(async {
        let std_hook = |id: &str, typ: &str, job: &str| {
            signed_hook(
                "/hooks/standard/acme",
                "webhook",
                ACME_SECRET,
                id,
                now(),
                &json!({"type": typ, "data": {"job_id": job, "message_id": format!("wh-{id}")}}),
            )
        };
        let (st, b) = send(
            &c,
            &server,
            &std_hook("d1", "message.delivered", &jobs[0].1),
        )
        .await;
        assert_eq!(st, 200, "{b}");
        assert!(b.contains("settled_sent"), "{b}");
        let (_, b) = send(&c, &server, &std_hook("f1", "message.failed", &jobs[1].1)).await;
        assert!(b.contains("settled_failed"), "{b}");
        // Resend's tag and Postmark's metadata name the job too.
        let r = signed_hook(
            "/hooks/resend/acme",
            "svix",
            ACME_SECRET,
            "svix_d3",
            now(),
            &json!({"type": "email.delivered", "data": {"to": ["user2@example.com"],
                    "email_id": "4ef9a417-02e9-4d39-ad75-9611e0fcc33c",
                    "tags": {"sendonce_job": job_tag(&jobs[2].1)}}}),
        );
        let (_, b) = send(&c, &server, &r).await;
        assert!(b.contains("settled_sent"), "{b}");
        let p = postmark_hook(
            "/hooks/postmark/acme",
            POSTMARK_AUTH,
            &json!({"RecordType": "Delivery", "MessageID": "pm-4", "Recipient": "user3@example.com",
                    "DeliveredAt": "2026-01-01T00:00:00Z",
                    "Metadata": {"sendonce_job": jobs[3].1}}),
        );
        let (_, b) = send(&c, &server, &p).await;
        assert!(
            b.contains("\"recorded\""),
            "a leased row is only recorded: {b}"
        );
        let (_, b) = send(
            &c,
            &server,
            &std_hook("d5", "message.delivered", &jobs[4].1),
        )
        .await;
        assert!(b.contains("settled_sent"), "{b}");
    });
    assert_eq!(status(&env, jobs[0].0), "sent");
    assert_eq!(status(&env, jobs[1].0), "failed");
    assert_eq!(status(&env, jobs[2].0), "sent");
    assert_eq!(status(&env, jobs[3].0), "leased");
    assert_eq!(status(&env, jobs[4].0), "sent");
    let ids = provider_ids(&env);
    assert_eq!(ids[&jobs[0].1].as_deref(), Some("wh-d1"), "{ids:?}");
    assert_eq!(ids[&jobs[1].1], None, "settled failed: {ids:?}");
    assert_eq!(
        ids[&jobs[2].1].as_deref(),
        Some("4ef9a417-02e9-4d39-ad75-9611e0fcc33c"),
        "{ids:?}"
    );
    assert_eq!(ids[&jobs[3].1], None, "still leased: {ids:?}");
    assert_eq!(ids[&jobs[4].1].as_deref(), Some(own_id.as_str()), "{ids:?}");
    // Each report's id is kept with its event.
    assert_eq!(
        env.count(
            "SELECT count(*) FROM webhook_events WHERE provider_message_id IN
             ('wh-d1', 'wh-f1', '4ef9a417-02e9-4d39-ad75-9611e0fcc33c', 'pm-4', 'wh-d5')"
        ),
        5
    );
    // The lease expires; the next claim finds the report and settles the row as sent instead
    // of parking it in doubt, and the provider is not called again.
    db.execute("UPDATE sends SET visible_at = 0 WHERE id = ?1", [jobs[3].0])
        .unwrap();
    let before = std::fs::read_to_string(env.path("out.jsonl")).unwrap();
    let spec = format!("outbox:{}", env.path("out.jsonl").display());
    env.ok(&["run", "--once", "--provider", &spec, "--tick", "50ms"]);
    assert_eq!(status(&env, jobs[3].0), "sent");
    assert_eq!(
        provider_ids(&env)[&jobs[3].1].as_deref(),
        Some("pm-4"),
        "settled by the claim from the kept Postmark report"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM sends WHERE status = 'in_doubt'"),
        0
    );
    let after = std::fs::read_to_string(env.path("out.jsonl")).unwrap();
    assert_eq!(before, after, "the provider was called again");
}

/// `setup` for an Env whose database and account acme exist already.
pub(crate) fn setup_existing(env: &Env) -> Server {
    env.ok(&["account", "add", "other"]);
    let f = |name: &str, v: &str| env.write(name, v).display().to_string();
    let cfg = format!(
        r#"public_url = "{PUBLIC}"
[[webhook]]
account = "acme"
source = "postmark"
secret_file = "{}"
[[webhook]]
account = "acme"
source = "resend"
secret_file = "{}"
[[webhook]]
account = "acme"
source = "standard"
secret_file = "{}"
"#,
        f("postmark.secret", POSTMARK_AUTH),
        f("resend.secret", ACME_SECRET),
        f("standard.secret", ACME_SECRET),
    );
    let cfg = env.write("sendonce.toml", cfg);
    serve(
        env,
        &["--listen", "127.0.0.1:0", "--config", cfg.to_str().unwrap()],
    )
}

/// `sendonce fake-provider` with delivery callbacks to `server`, signed with ACME_SECRET.
pub(crate) fn fake_with_callbacks(
    env: &Env,
    server: &Server,
    extra: &[&str],
) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = Command::new(crate::common::BIN)
        .args(["fake-provider", "--listen", "127.0.0.1:0", "--log"])
        .arg(env.path("fake.jsonl"))
        .args(["--callbacks", &server.base, "--callback-account", "acme"])
        .args(extra)
        .env("SENDONCE_FAKE_WEBHOOK_SECRET", ACME_SECRET)
        .env("SENDONCE_FAKE_POSTMARK_AUTH", POSTMARK_AUTH)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn sendonce fake-provider");
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let addr = first
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_string();
    (child, format!("http://{addr}"))
}

/// Every row the fake provider delivered has the fake's message id as its provider message id,
/// whether the worker recorded the provider's answer or a delivery callback settled the row.
fn assert_provider_ids_are_the_fakes(env: &Env) {
    let lines = sendonce::provider::deliverylog::read_lines(&env.path("fake.jsonl")).unwrap();
    let db = env.sqlite();
    for l in lines.iter().filter(|l| !l.replay) {
        let id: Option<String> = db
            .query_row(
                "SELECT provider_message_id FROM sends WHERE job_id = ?1",
                [&l.job_id],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(id.as_deref(), Some(l.message_id.as_str()), "{}", l.job_id);
    }
}

/// Kill -9 right after the provider accepted, before the worker recorded it, with a provider
/// that has no idempotency key: the provider's delivery callback reaches the server while the
/// row is still leased, and the restarted worker settles the row as sent from it, with the
/// message id the callback named. Nothing in doubt, one delivery.
#[cfg(feature = "crash-points")]
#[test]
fn a_worker_killed_after_the_call_leaves_nothing_in_doubt_when_the_provider_calls_back() {
    let env = Env::new();
    let (_acct, cid) = env.setup_campaign(3);
    env.ok(&["campaign", "approve", &cid]);
    let server = setup_existing(&env);
    let (mut fake, fake_base) = fake_with_callbacks(&env, &server, &["--no-idempotent"]);
    let spec = format!("webhook:{fake_base}/send");
    let run = |crash: Option<&str>| {
        let mut c = env.cmd();
        c.args([
            "run",
            "--once",
            "--provider",
            &spec,
            "--lease",
            "2s",
            "--tick",
            "50ms",
        ]);
        c.args(["--concurrency", "1", "--batch", "1"]);
        if let Some(at) = crash {
            c.env("SENDONCE_CRASH_AT", at);
        }
        c.output().unwrap()
    };
    let killed = run(Some("after_provider_accept:2"));
    assert!(!killed.status.success(), "the worker was not killed");
    // The callback for the second message arrives while its row is leased: recorded only.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while env.count("SELECT count(*) FROM webhook_events WHERE delivery = 'sent'") < 2 {
        assert!(std::time::Instant::now() < deadline, "no callback arrived");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(
        env.count(
            "SELECT count(*) FROM sends WHERE status = 'leased' AND dispatched_at IS NOT NULL"
        ),
        1
    );
    let again = run(None);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(
        env.count("SELECT count(*) FROM sends WHERE status = 'in_doubt'"),
        0
    );
    assert_eq!(
        env.count("SELECT count(*) FROM sends WHERE status = 'sent'"),
        3
    );
    let log = std::fs::read_to_string(env.path("fake.jsonl")).unwrap();
    assert_eq!(
        log.lines().count(),
        3,
        "each message delivered once:\n{log}"
    );
    assert_provider_ids_are_the_fakes(&env);
    let _ = fake.kill();
    let _ = fake.wait();
}

/// The same with Twilio end to end: the worker asks for a status callback at this server
/// (its public URL), the fake Twilio posts `MessageStatus=delivered` there signed with the
/// auth token, and the row of a worker killed after the call is settled from it.
#[cfg(feature = "crash-points")]
#[test]
fn twilio_status_callbacks_name_the_job_and_settle_a_killed_workers_row() {
    let env = Env::new();
    env.setup_account();
    for phone in ["+14155550100", "+14155550101"] {
        env.ok(&["subscriber", "add", "--account", "1", "--phone", phone]);
    }
    let body = env.write("sms.txt", "Sale today");
    let cid = env.ok(&[
        "campaign",
        "create",
        "--account",
        "1",
        "--name",
        "s",
        "--channel",
        "sms",
        "--body-file",
        body.to_str().unwrap(),
    ]);
    env.ok(&["campaign", "approve", &cid]);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let public = format!("http://127.0.0.1:{port}");
    let token_file = env.write("twilio.secret", TWILIO_TOKEN);
    let cfg = env.write(
        "sendonce.toml",
        format!(
            "public_url = \"{public}\"\n[[webhook]]\naccount = \"acme\"\nsource = \"twilio\"\n\
             secret_file = \"{}\"\n",
            token_file.display()
        ),
    );
    let listen = format!("127.0.0.1:{port}");
    let server = serve(
        &env,
        &["--listen", &listen, "--config", cfg.to_str().unwrap()],
    );
    let (mut fake, fake_base) = fake_with_callbacks(&env, &server, &[]);
    let spec = format!("twilio:AC123?from=%2B15017122661&base_url={fake_base}");
    let run = |crash: Option<&str>| {
        let mut c = env.cmd();
        c.args([
            "run",
            "--once",
            "--provider",
            &spec,
            "--lease",
            "2s",
            "--tick",
            "50ms",
        ]);
        c.args([
            "--concurrency",
            "1",
            "--batch",
            "1",
            "--public-url",
            &public,
        ]);
        c.env("SENDONCE_TWILIO_AUTH_TOKEN", TWILIO_TOKEN);
        c.env(
            "SENDONCE_UNSUBSCRIBE_SECRET",
            "0123456789abcdef0123456789abcdef",
        );
        if let Some(at) = crash {
            c.env("SENDONCE_CRASH_AT", at);
        }
        c.output().unwrap()
    };
    let killed = run(Some("after_provider_accept:1"));
    assert!(!killed.status.success(), "the worker was not killed");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while env.count("SELECT count(*) FROM webhook_events WHERE delivery = 'sent'") < 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "no status callback arrived"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let job: String = env
        .sqlite()
        .query_row("SELECT job_id FROM webhook_events", [], |r| r.get(0))
        .unwrap();
    assert!(job.starts_with("campaign:"), "{job}");
    let again = run(None);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(
        env.count("SELECT count(*) FROM sends WHERE status = 'in_doubt'"),
        0
    );
    assert_eq!(
        env.count("SELECT count(*) FROM sends WHERE status = 'sent'"),
        2
    );
    let log = std::fs::read_to_string(env.path("fake.jsonl")).unwrap();
    assert_eq!(
        log.lines().count(),
        2,
        "each message delivered once:\n{log}"
    );
    assert_provider_ids_are_the_fakes(&env);
    let _ = fake.kill();
    let _ = fake.wait();
}

/// A double opt-in confirmation is a ledger row like any other: a delivery report naming its
/// `confirm:` job settles it when it is in doubt.
#[test]
fn a_delivery_report_settles_a_confirmation_in_doubt() {
    let env = Env::new();
    let server = setup(&env);
    env.ok(&[
        "list",
        "create",
        "--account",
        "acme",
        "news",
        "--double-opt-in",
        "--confirm-from",
        "news@example.org",
    ]);
    env.ok(&[
        "subscriber",
        "add",
        "--account",
        "acme",
        "--email",
        "kim@example.org",
        "--list",
        "news",
    ]);
    let db = env.sqlite();
    let (id, job): (i64, String) = db
        .query_row(
            "SELECT id, job_id FROM sends WHERE job_id LIKE 'confirm:%'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("one confirmation queued");
    db.execute(
        "UPDATE sends SET status = 'in_doubt', doubt_since = ?2, attempts = 1 WHERE id = ?1",
        rusqlite::params![id, sendonce::domain::clock::now_ms()],
    )
    .unwrap();
    let hook = signed_hook(
        "/hooks/standard/acme",
        "webhook",
        ACME_SECRET,
        "confirm-d1",
        now(),
        &json!({"type": "message.delivered", "data": {"job_id": job}}),
    );
    let (st, body) = rt().block_on(send(&client(), &server, &hook));
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("settled_sent"), "{body}");
    let status: String = db
        .query_row("SELECT status FROM sends WHERE id = ?1", [id], |r| r.get(0))
        .unwrap();
    assert_eq!(status, "sent");
}

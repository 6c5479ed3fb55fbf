//! The bounce webhooks of issue 45 on a real `sendonce serve` (`/hooks/{mailgun,sendgrid,brevo,
//! ses}/{account}`): requests signed by implementations we did not write (ring's HMAC, ECDSA
//! P-256 and RSA signers in tier 0; Python's hmac and the openssl CLI in tier 1), a real
//! published SNS notification and its certificate, hard bounces and complaints suppressing for
//! their account only, deliveries settling rows in doubt, replays changing nothing, and more
//! than a thousand forged or altered requests all refused with the tables unchanged.
// Some tests here need tools outside Rust (tier 1); without them their helpers go unused.
#![cfg_attr(not(feature = "tier1"), allow(unused_imports, dead_code))]

use super::hooks::{dump, sent_campaign, serve, status};
use crate::common::{client, rt, Env, Fake, Server};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{self as sig, EcdsaKeyPair, RsaKeyPair};
use serde_json::{json, Value};

const MAILGUN_KEY: &str = "mg-signing-key-0123456789abcdef";
const OTHER_MAILGUN_KEY: &str = "mg-other-key-fedcba9876543210";
const BREVO_AUTH: &str = "brevo-hook:br-pa55word";
const TOPIC: &str = "arn:aws:sns:us-east-1:123456789012:ses-bounces";
const CERT_URL: &str = "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0123.pem";
const SNS_KEY: &[u8] = include_bytes!("../fixtures/bounces/sns-test.key.pk8");
const SNS_CERT: &str = include_str!("../fixtures/bounces/sns-test.cert.pem");
const SG_KEY: &[u8] = include_bytes!("../fixtures/bounces/sendgrid-test.key.pk8");
const SG_PUB: &str = include_str!("../fixtures/bounces/sendgrid-test.pub.b64");
const PUBLISHED_CERT: &str = include_str!("../fixtures/bounces/sns-published.cert.pem");
const PUBLISHED_SNS: &str = include_str!("../fixtures/bounces/sns-published-v1.json");

fn now() -> i64 {
    sendonce::domain::clock::now_ms() / 1000
}

/// acme: every new source; other: Mailgun only (its own key) and SES with the published
/// certificate and topic. `sendonce serve` with those.
fn setup(env: &Env, init: bool) -> Server {
    if init {
        env.setup_account();
    }
    env.ok(&["account", "add", "other"]);
    let f = |name: &str, v: &str| env.write(name, v).display().to_string();
    let cfg = format!(
        r#"[[webhook]]
account = "acme"
source = "mailgun"
secret_file = "{}"
[[webhook]]
account = "acme"
source = "sendgrid"
secret_file = "{}"
[[webhook]]
account = "acme"
source = "brevo"
secret_file = "{}"
[[webhook]]
account = "acme"
source = "ses"
certificate_file = "{}"
topic_arn = "{TOPIC}"
[[webhook]]
account = "other"
source = "mailgun"
secret_file = "{}"
[[webhook]]
account = "other"
source = "ses"
certificate_file = "{}"
topic_arn = "arn:aws:sns:us-east-1:041977924901:foo"
"#,
        f("mailgun.secret", MAILGUN_KEY),
        f("sendgrid.pub", SG_PUB),
        f("brevo.secret", BREVO_AUTH),
        f("sns.pem", SNS_CERT),
        f("other-mailgun.secret", OTHER_MAILGUN_KEY),
        f("published.pem", PUBLISHED_CERT),
    );
    let cfg = env.write("sendonce.toml", cfg);
    serve(
        env,
        &["--listen", "127.0.0.1:0", "--config", cfg.to_str().unwrap()],
    )
}

/// One request: path, headers, body.
#[derive(Clone, Debug)]
struct Req {
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Req {
    fn header(mut self, k: &str, v: &str) -> Req {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(k));
        self.headers.push((k.to_string(), v.to_string()));
        self
    }
    fn without(mut self, k: &str) -> Req {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(k));
        self
    }
    fn at(mut self, path: &str) -> Req {
        self.path = path.to_string();
        self
    }
}

async fn send(c: &reqwest::Client, s: &Server, r: &Req) -> (u16, String) {
    let mut b = c.post(s.url(&r.path)).body(r.body.clone());
    for (k, v) in &r.headers {
        b = b.header(k.as_str(), v.as_str());
    }
    let res = b.send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.text().await.unwrap_or_default())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A Mailgun request for `account`, signed with `key` by ring's HMAC-SHA256.
fn mailgun(account: &str, key: &str, ts: i64, token: &str, data: Value) -> Req {
    let k = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key.as_bytes());
    let tag = ring::hmac::sign(&k, format!("{ts}{token}").as_bytes());
    let body = json!({"signature": {"timestamp": ts.to_string(), "token": token,
                                    "signature": hex(tag.as_ref())},
                      "event-data": data});
    Req {
        path: format!("/hooks/mailgun/{account}"),
        headers: vec![("content-type".into(), "application/json".into())],
        body: body.to_string().into_bytes(),
    }
}

/// A SendGrid batch signed at `ts` with the test P-256 key by ring's ECDSA.
fn sendgrid(events: Value, ts: i64) -> Req {
    let body = events.to_string().into_bytes();
    let rng = SystemRandom::new();
    let kp = EcdsaKeyPair::from_pkcs8(&sig::ECDSA_P256_SHA256_ASN1_SIGNING, SG_KEY, &rng).unwrap();
    let mut msg = ts.to_string().into_bytes();
    msg.extend_from_slice(&body);
    let s = kp.sign(&rng, &msg).unwrap();
    Req {
        path: "/hooks/sendgrid/acme".into(),
        headers: vec![
            ("content-type".into(), "application/json".into()),
            (
                "x-twilio-email-event-webhook-signature".into(),
                STANDARD.encode(s.as_ref()),
            ),
            (
                "x-twilio-email-event-webhook-timestamp".into(),
                ts.to_string(),
            ),
        ],
        body,
    }
}

fn brevo(auth: &str, body: Value) -> Req {
    Req {
        path: "/hooks/brevo/acme".into(),
        headers: vec![
            ("content-type".into(), "application/json".into()),
            ("authorization".into(), auth.to_string()),
        ],
        body: body.to_string().into_bytes(),
    }
}

fn basic(userpass: &str) -> String {
    format!("Basic {}", STANDARD.encode(userpass))
}

/// SNS's string to sign, written here from AWS's description (not the server's code).
fn sns_string(m: &serde_json::Map<String, Value>) -> String {
    let keys: &[&str] = match m["Type"].as_str() {
        Some("Notification") => &[
            "Message",
            "MessageId",
            "Subject",
            "Timestamp",
            "TopicArn",
            "Type",
        ],
        _ => &[
            "Message",
            "MessageId",
            "SubscribeURL",
            "Timestamp",
            "Token",
            "TopicArn",
            "Type",
        ],
    };
    keys.iter()
        .filter_map(|k| Some(format!("{k}\n{}\n", m.get(*k)?.as_str()?)))
        .collect()
}

/// An SNS message of `kind` (fields in `extra`) signed with the test RSA key by ring:
/// SignatureVersion 2, SHA256withRSA (ring signs no SHA-1; version 1 is checked with the
/// published example and, in tier 1, with openssl).
fn sns(kind: &str, id: &str, topic: &str, message: &str, extra: Value) -> Req {
    let mut m = serde_json::Map::new();
    m.insert("Type".into(), json!(kind));
    m.insert("MessageId".into(), json!(id));
    m.insert("TopicArn".into(), json!(topic));
    m.insert("Message".into(), json!(message));
    m.insert("Timestamp".into(), json!("2026-01-01T00:00:00.000Z"));
    if let Value::Object(x) = extra {
        m.extend(x);
    }
    m.insert("SignatureVersion".into(), json!("2"));
    m.entry("SigningCertURL").or_insert(json!(CERT_URL));
    let kp = RsaKeyPair::from_pkcs8(SNS_KEY).unwrap();
    let mut s = vec![0; kp.public().modulus_len()];
    kp.sign(
        &sig::RSA_PKCS1_SHA256,
        &SystemRandom::new(),
        sns_string(&m).as_bytes(),
        &mut s,
    )
    .unwrap();
    m.insert("Signature".into(), json!(STANDARD.encode(&s)));
    Req {
        path: "/hooks/ses/acme".into(),
        headers: vec![("content-type".into(), "text/plain; charset=UTF-8".into())],
        body: Value::Object(m).to_string().into_bytes(),
    }
}

fn ses_bounce(id: &str, typ: &str, to: &[&str], job: Option<&str>) -> Req {
    let recipients: Vec<Value> = to.iter().map(|a| json!({"emailAddress": a})).collect();
    let headers: Vec<Value> = job
        .map(|j| vec![json!({"name": "X-Sendonce-Job", "value": j})])
        .unwrap_or_default();
    let message = json!({"notificationType": "Bounce",
        "bounce": {"bounceType": typ, "bouncedRecipients": recipients},
        "mail": {"messageId": format!("ses-{id}"), "headers": headers}});
    sns("Notification", id, TOPIC, &message.to_string(), json!({}))
}

/// (account, address, source) of every suppression.
fn suppressed(env: &Env) -> Vec<(i64, String, String)> {
    let c = env.sqlite();
    let mut st = c
        .prepare("SELECT account_id, address, source FROM suppressions ORDER BY 1, 2")
        .unwrap();
    st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn body(b: &str) -> Value {
    serde_json::from_str(b).unwrap_or_else(|_| panic!("not JSON: {b}"))
}

/// Hard bounces and complaints from each source suppress the address for acme only; soft
/// bounces and temporary failures change nothing; a replay answers the first action.
#[test]
fn hard_bounces_and_complaints_suppress_for_their_account_only() {
    let env = Env::new();
    let server = setup(&env, true);
    let (rt, c, ts) = (rt(), client(), now());
    rt.block_on(async {
        let ok = |r: (u16, String)| {
            assert_eq!(r.0, 200, "{}", r.1);
            body(&r.1)
        };
        let mg = |tok: &str, ev: &str, sev: &str, to: &str| {
            mailgun("acme", MAILGUN_KEY, ts, tok, json!({"id": tok, "event": ev,
                "severity": sev, "recipient": to}))
        };
        let r = ok(send(&c, &server, &mg("tok-1", "failed", "permanent", "Hard@Example.com")).await);
        assert_eq!(r["action"], "suppressed", "{r}");
        let r = ok(send(&c, &server, &mg("tok-2", "failed", "temporary", "soft@example.com")).await);
        assert_eq!(r["action"], "ignored", "{r}");
        ok(send(&c, &server, &mg("tok-3", "complained", "", "mg-spam@example.com")).await);
        let batch = json!([
            {"sg_event_id": "sg-1", "event": "bounce", "type": "bounce", "email": "sg-hard@example.com"},
            {"sg_event_id": "sg-2", "event": "bounce", "type": "blocked", "email": "sg-blocked@example.com"},
            {"sg_event_id": "sg-3", "event": "spamreport", "email": "sg-spam@example.com"},
            {"sg_event_id": "sg-4", "event": "open", "email": "sg-open@example.com"}]);
        let r = ok(send(&c, &server, &sendgrid(batch.clone(), ts)).await);
        let actions: Vec<&str> = r["events"].as_array().unwrap().iter()
            .map(|e| e["action"].as_str().unwrap()).collect();
        assert_eq!(actions, ["suppressed", "ignored", "suppressed", "ignored"], "{r}");
        for (ev, to) in [("hard_bounce", "br-hard@example.com"), ("spam", "br-spam@example.com"),
                         ("soft_bounce", "br-soft@example.com")] {
            let b = json!({"event": ev, "email": to, "message-id": "<m1@brevo>", "ts_event": ts});
            ok(send(&c, &server, &brevo(&basic(BREVO_AUTH), b)).await);
        }
        let r = ok(send(&c, &server, &ses_bounce("sns-1", "Permanent",
            &["ses-a@example.com", "ses-b@example.com"], None)).await);
        assert_eq!(r["events"].as_array().unwrap().len(), 2, "{r}");
        ok(send(&c, &server, &ses_bounce("sns-2", "Transient", &["ses-soft@example.com"], None)).await);
        let complaint = json!({"notificationType": "Complaint", "complaint":
            {"complainedRecipients": [{"emailAddress": "ses-spam@example.com"}]}, "mail": {}});
        ok(send(&c, &server, &sns("Notification", "sns-3", TOPIC, &complaint.to_string(),
            json!({"Subject": "Amazon SES Email Event Notification"}))).await);
        let before = dump(&env);
        // Replays: the same action again, nothing changed.
        let r = ok(send(&c, &server, &sendgrid(batch, ts)).await);
        assert!(r["events"].as_array().unwrap().iter().all(|e| e["replay"] == true), "{r}");
        let r = ok(send(&c, &server, &mg("tok-1", "failed", "permanent", "Hard@Example.com")).await);
        assert_eq!((r["action"].as_str(), r["replay"].as_bool()), (Some("suppressed"), Some(true)));
        assert_eq!(before, dump(&env), "a replay changed the database");
    });
    let got = suppressed(&env);
    let acme = env.count("SELECT id FROM accounts WHERE name = 'acme'");
    assert!(got.iter().all(|(a, _, _)| *a == acme), "{got:?}");
    let mut addrs: Vec<(&str, &str)> = got
        .iter()
        .map(|(_, a, s)| (a.as_str(), s.as_str()))
        .collect();
    addrs.sort();
    assert_eq!(
        addrs,
        [
            ("br-hard@example.com", "brevo"),
            ("br-spam@example.com", "brevo"),
            ("hard@example.com", "mailgun"),
            ("mg-spam@example.com", "mailgun"),
            ("ses-a@example.com", "ses"),
            ("ses-b@example.com", "ses"),
            ("ses-spam@example.com", "ses"),
            ("sg-hard@example.com", "sendgrid"),
            ("sg-spam@example.com", "sendgrid"),
        ]
    );
}

/// Delivery reports of each source settle a row in doubt as sent, with the provider's id.
#[test]
fn deliveries_settle_rows_in_doubt() {
    let env = Env::new();
    let jobs = sent_campaign(&env, 4);
    let server = setup(&env, false);
    let db = env.sqlite();
    for (id, _) in &jobs {
        db.execute(
            "UPDATE sends SET status = 'in_doubt', doubt_since = sent_at, sent_at = NULL,
             provider_message_id = NULL WHERE id = ?1",
            [id],
        )
        .unwrap();
    }
    let (rt, c, ts) = (rt(), client(), now());
    rt.block_on(async {
        let reqs = [
            mailgun(
                "acme",
                MAILGUN_KEY,
                ts,
                "tok-d",
                json!({"id": "e1", "event": "delivered",
                "recipient": "user0@example.com", "user-variables": {"sendonce_job": jobs[0].1},
                "message": {"headers": {"message-id": "mg-0@example.org"}}}),
            ),
            sendgrid(
                json!([{"sg_event_id": "d1", "event": "delivered", "email": "user1@example.com",
                "sendonce_job": jobs[1].1, "sg_message_id": "sg-1.filter"}]),
                ts,
            ),
            brevo(&format!("Bearer {}", "unused"), json!({})),
            sns(
                "Notification",
                "sns-d",
                TOPIC,
                &json!({"notificationType": "Delivery",
                "delivery": {"recipients": ["user3@example.com"]},
                "mail": {"messageId": "ses-3", "tags": {"sendonce_job":
                    [sendonce::domain::webhook::job_tag(&jobs[3].1)]}}})
                .to_string(),
                json!({}),
            ),
        ];
        let brevo_ok = brevo(
            &basic(BREVO_AUTH),
            json!({"event": "delivered",
            "email": "user2@example.com", "message-id": "<br-2@brevo>", "ts_event": ts,
            "X-Mailin-custom": format!("sendonce_job:{}", jobs[2].1)}),
        );
        for r in [&reqs[0], &reqs[1], &brevo_ok, &reqs[3]] {
            let (st, b) = send(&c, &server, r).await;
            assert_eq!(st, 200, "{}: {b}", r.path);
            assert!(b.contains("settled_sent"), "{}: {b}", r.path);
        }
        // A bearer token that is not the configured credential is refused.
        assert_eq!(send(&c, &server, &reqs[2]).await.0, 401);
    });
    for (id, _) in &jobs {
        assert_eq!(status(&env, *id), "sent");
    }
    let ids: Vec<Option<String>> = {
        let mut st = db
            .prepare("SELECT provider_message_id FROM sends ORDER BY id")
            .unwrap();
        st.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    assert_eq!(
        ids,
        [
            Some("mg-0@example.org".into()),
            Some("sg-1.filter".into()),
            Some("<br-2@brevo>".into()),
            Some("ses-3".into())
        ]
    );
}

/// The fake provider's delivery callbacks for its four cloud shapes (`--callbacks`): a message
/// sent through its SES, SendGrid, Mailgun and Brevo APIs (raw HTTP, each carrying the job as
/// that provider lets a sender) is reported back to `serve`, signed with the keys `serve` is
/// configured with (the SNS and SendGrid test keys, Mailgun's signing key, Brevo's
/// credential), and settles the row left in doubt with the fake's message id.
#[test]
fn the_fakes_cloud_callbacks_settle_rows_in_doubt_through_serve() {
    let env = Env::new();
    let jobs = sent_campaign(&env, 4);
    let server = setup(&env, false);
    for (id, _) in &jobs {
        env.sqlite()
            .execute(
                "UPDATE sends SET status = 'in_doubt', doubt_since = sent_at, sent_at = NULL,
                 provider_message_id = NULL WHERE id = ?1",
                [id],
            )
            .unwrap();
    }
    let fixture = |f: &str| format!("{}/tests/fixtures/bounces/{f}", env!("CARGO_MANIFEST_DIR"));
    let (sg_key, sns_key) = (
        fixture("sendgrid-test.key.pk8"),
        fixture("sns-test.key.pk8"),
    );
    let fake = Fake::start_with_env(
        &env.path("fake.jsonl"),
        &["--callbacks", &server.base, "--callback-account", "acme"],
        &[
            ("SENDONCE_FAKE_MAILGUN_KEY", MAILGUN_KEY),
            ("SENDONCE_FAKE_BREVO_AUTH", BREVO_AUTH),
            ("SENDONCE_FAKE_SENDGRID_KEY_FILE", &sg_key),
            ("SENDONCE_FAKE_SNS_KEY_FILE", &sns_key),
            ("SENDONCE_FAKE_SNS_TOPIC", TOPIC),
        ],
    );
    let to = |i: usize| format!("user{i}@example.com");
    let raw = format!(
        "From: shop@example.org\r\nTo: {}\r\nSubject: Hi\r\nX-Sendonce-Job: {}\r\n\r\nhello\r\n",
        to(0),
        jobs[0].1
    );
    let ses = json!({"FromEmailAddress": "shop@example.org", "Destination": {"ToAddresses": [to(0)]},
                     "Content": {"Raw": {"Data": STANDARD.encode(raw)}}});
    let sendgrid = json!({"from": {"email": "shop@example.org"}, "subject": "Hi",
        "personalizations": [{"to": [{"email": to(1)}], "custom_args": {"sendonce_job": jobs[1].1}}],
        "content": [{"type": "text/plain", "value": "hello"}]});
    let brevo = json!({"sender": {"email": "shop@example.org"}, "to": [{"email": to(2)}],
        "subject": "Hi", "textContent": "hello",
        "headers": {"X-Mailin-custom": format!("sendonce_job:{}", jobs[2].1)}});
    let sigv4 = "AWS4-HMAC-SHA256 Credential=AKIDOFFLINETEST/20261207/us-east-1/ses/aws4_request, \
                 SignedHeaders=content-type;host;x-amz-date, Signature=00";
    rt().block_on(async {
        let c = client();
        let answers = [
            c.post(fake.url("/v2/email/outbound-emails"))
                .header("authorization", sigv4)
                .json(&ses),
            c.post(fake.url("/v3/mail/send"))
                .bearer_auth("SG.test")
                .json(&sendgrid),
            c.post(fake.url("/v3/smtp/email"))
                .header("api-key", "xkeysib-test")
                .json(&brevo),
            c.post(fake.url("/v3/mg.example.org/messages"))
                .basic_auth("api", Some("key-test"))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(
                    form_urlencoded::Serializer::new(String::new())
                        .extend_pairs([
                            ("from", "shop@example.org"),
                            ("to", to(3).as_str()),
                            ("subject", "Hi"),
                            ("text", "hello"),
                            ("v:sendonce_job", jobs[3].1.as_str()),
                        ])
                        .finish(),
                ),
        ];
        for a in answers {
            let res = a.send().await.expect("an answer");
            assert!(res.status().is_success(), "{:?}", res.text().await);
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while jobs.iter().any(|(id, _)| status(&env, *id) != "sent") {
        assert!(
            std::time::Instant::now() < deadline,
            "callbacks did not settle every row: {}",
            dump(&env)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let lines = fake.lines();
    let sources: Vec<(String, String, Option<String>)> = {
        let db = env.sqlite();
        let mut st = db
            .prepare(
                "SELECT w.source, w.action, s.provider_message_id FROM webhook_events w
                 JOIN sends s ON s.job_id = w.job_id ORDER BY s.id",
            )
            .unwrap();
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let names: Vec<(&str, &str)> = sources
        .iter()
        .map(|(s, a, _)| (s.as_str(), a.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("ses", "settled_sent"),
            ("sendgrid", "settled_sent"),
            ("brevo", "settled_sent"),
            ("mailgun", "settled_sent")
        ]
    );
    for (i, (_, _, id)) in sources.iter().enumerate() {
        let line = lines
            .iter()
            .find(|l| l.job_id == jobs[i].1)
            .expect("logged");
        let id = id.as_deref().expect("a provider id");
        // Mailgun's webhooks name the Message-ID without its brackets, Brevo's with them.
        assert_eq!(
            id.trim_matches(['<', '>']),
            line.message_id.trim_matches(['<', '>']),
            "row {i} keeps the fake's id"
        );
    }
}

/// A real SNS notification, as published with the certificate that signed it, passes the
/// signature check end to end (its Message is plain text, not an SES event: 400 after the
/// check); one changed byte or another certificate fails it (401). A signed SubscriptionConfirmation
/// is answered with its SubscribeURL and changes nothing.
#[test]
fn a_published_sns_message_verifies_and_subscriptions_are_shown() {
    let env = Env::new();
    let server = setup(&env, true);
    let (rt, c) = (rt(), client());
    rt.block_on(async {
        let published = Req {
            path: "/hooks/ses/other".into(),
            headers: vec![("content-type".into(), "text/plain; charset=UTF-8".into())],
            body: PUBLISHED_SNS.as_bytes().to_vec(),
        };
        let (st, b) = send(&c, &server, &published).await;
        assert_eq!(st, 400, "{b}");
        assert!(b.contains("ses notification"), "{b}");
        let tampered = Req {
            body: PUBLISHED_SNS
                .replace("test message", "TAMPERED MESSAGE")
                .into_bytes(),
            ..published.clone()
        };
        assert_eq!(send(&c, &server, &tampered).await.0, 401);
        assert_eq!(
            send(&c, &server, &published.clone().at("/hooks/ses/acme"))
                .await
                .0,
            401
        );
        let url =
            "https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&TopicArn=x&Token=t";
        let confirm = sns(
            "SubscriptionConfirmation",
            "sub-1",
            TOPIC,
            "You have chosen to subscribe",
            json!({"Token": "t0k", "SubscribeURL": url}),
        );
        let before = dump(&env);
        let (st, b) = send(&c, &server, &confirm).await;
        assert_eq!(st, 200, "{b}");
        let r = body(&b);
        assert_eq!(
            (r["subscribe_url"].as_str(), r["topic_arn"].as_str()),
            (Some(url), Some(TOPIC))
        );
        assert_eq!(before, dump(&env));
    });
}

/// Valid requests of each new source (fresh ids), the originals of the forgeries.
fn originals(ts: i64, n: usize) -> Vec<Req> {
    let mut v = Vec::new();
    for i in 0..n {
        let to = format!("victim{i}@example.com");
        v.push(mailgun(
            "acme",
            MAILGUN_KEY,
            ts,
            &format!("tok-f{i}"),
            json!({"id": i, "event": "failed", "severity": "permanent", "recipient": to}),
        ));
        v.push(sendgrid(
            json!([{"sg_event_id": format!("sgf-{i}"), "event": "bounce",
            "email": to}]),
            ts,
        ));
        v.push(brevo(
            &basic(BREVO_AUTH),
            json!({"event": "hard_bounce", "email": to,
            "message-id": format!("<f{i}@brevo>"), "ts_event": ts}),
        ));
        v.push(ses_bounce(&format!("snsf-{i}"), "Permanent", &[&to], None));
    }
    v
}

/// The SNS message of `r` with `f` applied to its JSON (the signature kept).
fn sns_edit(r: &Req, f: impl Fn(&mut serde_json::Map<String, Value>)) -> Req {
    let mut v: serde_json::Map<String, Value> = serde_json::from_slice(&r.body).unwrap();
    f(&mut v);
    Req {
        body: Value::Object(v).to_string().into_bytes(),
        ..r.clone()
    }
}

/// Altered copies of a valid request: each must be refused (401, 403 or 404).
fn forgeries(r: &Req, i: usize, ts: i64) -> Vec<Req> {
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    let mut out = vec![
        r.clone().at(&r.path.replace("/acme", "/other")),
        r.clone().at(&r.path.replace("/acme", "/nobody")),
    ];
    if r.path.contains("mailgun") {
        mailgun_forgeries(r, &v, i, ts, &mut out);
    } else if r.path.contains("sendgrid") {
        sendgrid_forgeries(r, &v, i, ts, &mut out);
    } else if r.path.contains("brevo") {
        brevo_forgeries(r, i, &mut out);
    } else {
        ses_forgeries(r, &v, i, &mut out);
    }
    out
}

/// `r` with one body byte changed.
fn flip(r: &Req, at: usize) -> Req {
    let mut b = r.clone();
    let at = at % b.body.len();
    b.body[at] ^= 0x01;
    b
}

fn mailgun_forgeries(r: &Req, v: &Value, i: usize, ts: i64, out: &mut Vec<Req>) {
    let data = v["event-data"].clone();
    let tok = v["signature"]["token"].as_str().unwrap().to_string();
    let sigv = v["signature"]["signature"].as_str().unwrap().to_string();
    for skew in [-400 - (i as i64 % 500), 400 + (i as i64 % 500)] {
        out.push(mailgun("acme", MAILGUN_KEY, ts + skew, &tok, data.clone()));
    }
    out.push(mailgun("acme", OTHER_MAILGUN_KEY, ts, &tok, data.clone()));
    // Another token under the same signature.
    let mut changed = v.clone();
    changed["signature"]["token"] = json!(format!("{tok}x"));
    out.push(Req {
        body: changed.to_string().into_bytes(),
        ..r.clone()
    });
    let mut bad = v.clone();
    bad["signature"]["signature"] = json!(format!(
        "{}{}",
        if sigv.starts_with('0') {
            {
                "1"
            }
        } else {
            {
                "0"
            }
        },
        &sigv[1..]
    ));
    out.push(Req {
        body: bad.to_string().into_bytes(),
        ..r.clone()
    });
    let mut none = v.clone();
    none.as_object_mut().unwrap().remove("signature");
    out.push(Req {
        body: none.to_string().into_bytes(),
        ..r.clone()
    });
}

fn sendgrid_forgeries(r: &Req, v: &Value, i: usize, ts: i64, out: &mut Vec<Req>) {
    out.push(flip(r, i * 7 + 3));
    out.push(flip(r, i * 13 + 1));
    for skew in [-400 - (i as i64 % 500), 400 + (i as i64 % 500)] {
        out.push(sendgrid(v.clone(), ts + skew));
    }
    out.push(r.clone().header(
        "x-twilio-email-event-webhook-timestamp",
        &(ts + 1).to_string(),
    ));
    out.push(r.clone().header("x-twilio-email-event-webhook-signature",
            "MEUCIQCtIHJeH93Y+qpYeWrySphQgpNGNr/U+UyUlBkU6n7RAwIgJTz2C+8a8xonZGi6BpSzoQsbVRamr2nlxFDWYNH3j/0="));
    out.push(r.clone().without("x-twilio-email-event-webhook-signature"));
    out.push(r.clone().without("x-twilio-email-event-webhook-timestamp"));
}

fn brevo_forgeries(r: &Req, i: usize, out: &mut Vec<Req>) {
    out.push(
        r.clone()
            .header("authorization", &basic("brevo-hook:br-pa55wore")),
    );
    out.push(
        r.clone()
            .header("authorization", &basic(&format!("x{i}:y"))),
    );
    out.push(r.clone().header("authorization", "Bearer br-pa55word"));
    out.push(
        r.clone()
            .header("authorization", &format!("Bearer {BREVO_AUTH}x")),
    );
    out.push(r.clone().without("authorization"));
}

fn ses_forgeries(r: &Req, v: &Value, i: usize, out: &mut Vec<Req>) {
    let msg = v["Message"].as_str().unwrap().to_string();
    out.push(sns_edit(r, |m| {
        m.insert(
            "Message".into(),
            json!(msg.replace("Permanent", "Permanent ")),
        );
    }));
    out.push(sns_edit(r, |m| {
        m.insert("MessageId".into(), json!(format!("x{i}")));
    }));
    out.push(sns_edit(r, |m| {
        m.insert("SignatureVersion".into(), json!("1"));
    }));
    out.push(sns_edit(r, |m| {
        m.insert(
            "SigningCertURL".into(),
            json!("https://sns.us-east-1.amazonaws.com.evil.org/c.pem"),
        );
    }));
    out.push(sns_edit(r, |m| {
        m.insert(
            "SigningCertURL".into(),
            json!("http://sns.us-east-1.amazonaws.com/c.pem"),
        );
    }));
    out.push(sns_edit(r, |m| {
        m.insert("Signature".into(), json!("AAAA"));
    }));
    out.push(sns_edit(r, |m| {
        m.remove("Signature");
    }));
    out.push(sns_edit(r, |m| {
        m.insert("Subject".into(), json!("added"));
    }));
    // Correctly signed, for another topic: 403.
    out.push(sns(
        "Notification",
        &format!("t{i}"),
        "arn:aws:sns:us-east-1:123456789012:other",
        &msg,
        json!({}),
    ));
}

#[test]
fn a_thousand_forged_bounce_notifications_are_refused_and_change_nothing() {
    let env = Env::new();
    let server = setup(&env, true);
    let (rt, c, ts) = (rt(), client(), now());
    rt.block_on(async {
        // One applied event per source first, so replayed ids with new bodies are testable.
        let seen = originals(ts, 1);
        for r in &seen {
            let (st, b) = send(&c, &server, r).await;
            assert_eq!(st, 200, "{}: {b}", r.path);
        }
        let before = dump(&env);
        let mut statuses = std::collections::BTreeMap::new();
        let mut sent = 0;
        // A Mailgun token, a SendGrid event id and an SNS message id replayed with a new body.
        for j in 0..20 {
            let to = format!("new{j}@example.com");
            for f in [
                mailgun(
                    "acme",
                    MAILGUN_KEY,
                    ts,
                    "tok-f0",
                    json!({"id": j, "event": "failed",
                    "severity": "permanent", "recipient": to}),
                ),
                sendgrid(
                    json!([{"sg_event_id": "sgf-0", "event": "bounce", "email": to}]),
                    ts,
                ),
                ses_bounce("snsf-0", "Permanent", &[&to], None),
            ] {
                let (st, b) = send(&c, &server, &f).await;
                assert_eq!(st, 409, "replayed id with a new body at {}: {b}", f.path);
                sent += 1;
            }
        }
        for (i, r) in originals(ts, 40).iter().enumerate() {
            for f in forgeries(r, i, ts) {
                let (st, b) = send(&c, &server, &f).await;
                assert!(
                    matches!(st, 401 | 403 | 404),
                    "forgery accepted ({st}) at {}: {b}\n{f:?}",
                    f.path
                );
                assert!(!b.contains(MAILGUN_KEY) && !b.contains("pa55word"), "{b}");
                *statuses
                    .entry((f.path.split('/').nth(2).unwrap_or("").to_string(), st))
                    .or_insert(0) += 1;
                sent += 1;
            }
        }
        assert!(sent >= 1000, "only {sent} forgeries");
        eprintln!("{sent} forged bounce notifications refused: {statuses:?}");
        assert_eq!(before, dump(&env), "a forged request changed the database");
    });
}

/// `openssl dgst -DIGEST -sign KEY` of `data`, base64: a signer we did not write.
fn openssl_sign(digest: &str, key: &str, data: &[u8]) -> String {
    use std::io::Write;
    let key = format!(
        "{}/tests/fixtures/bounces/{key}",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut child = std::process::Command::new("openssl")
        .args(["dgst", &format!("-{digest}"), "-sign", &key])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("openssl (tier 1)");
    child.stdin.take().unwrap().write_all(data).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "openssl failed");
    STANDARD.encode(out.stdout)
}

/// Python's hmac module: Mailgun's signature of (timestamp, token) with `key`.
fn python_hmac(key: &str, ts: i64, token: &str) -> String {
    let code = "import hmac, hashlib, sys; print(hmac.new(sys.argv[1].encode(), \
                (sys.argv[2] + sys.argv[3]).encode(), hashlib.sha256).hexdigest())";
    let out = std::process::Command::new("python3")
        .args(["-c", code, key, &ts.to_string(), token])
        .output()
        .expect("python3 (tier 1)");
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Requests signed by openssl (SendGrid's ECDSA, SNS versions 1 and 2) and Python's hmac
/// (Mailgun) are accepted and applied.
#[cfg(feature = "tier1")]
#[test]
fn independent_signers_are_accepted() {
    let env = Env::new();
    let server = setup(&env, true);
    let (rt, c, ts) = (rt(), client(), now());
    let data = json!({"id": "py", "event": "failed", "severity": "permanent",
                      "recipient": "py-mg@example.com"});
    let mg_body = json!({"signature": {"timestamp": ts.to_string(), "token": "tok-py",
        "signature": python_hmac(MAILGUN_KEY, ts, "tok-py")}, "event-data": data});
    let mut reqs = vec![Req {
        path: "/hooks/mailgun/acme".into(),
        headers: vec![],
        body: mg_body.to_string().into_bytes(),
    }];
    let sg_body =
        json!([{"sg_event_id": "ossl-1", "event": "bounce", "email": "ossl-sg@example.com"}])
            .to_string();
    let sg_sig = openssl_sign(
        "sha256",
        "sendgrid-test.ec.pem",
        format!("{ts}{sg_body}").as_bytes(),
    );
    reqs.push(Req {
        path: "/hooks/sendgrid/acme".into(),
        headers: vec![
            ("x-twilio-email-event-webhook-signature".into(), sg_sig),
            (
                "x-twilio-email-event-webhook-timestamp".into(),
                ts.to_string(),
            ),
        ],
        body: sg_body.into_bytes(),
    });
    for (version, digest) in [("1", "sha1"), ("2", "sha256")] {
        let message = json!({"notificationType": "Complaint", "complaint": {"complainedRecipients":
            [{"emailAddress": format!("ossl-ses{version}@example.com")}]}, "mail": {}})
        .to_string();
        let mut m = serde_json::Map::new();
        for (k, v) in [
            ("Type", "Notification"),
            ("MessageId", &format!("ossl-{version}")),
            ("TopicArn", TOPIC),
            ("Message", &message),
            ("Timestamp", "2026-01-01T00:00:00.000Z"),
            ("SignatureVersion", version),
            ("SigningCertURL", CERT_URL),
        ] {
            m.insert(k.into(), json!(v));
        }
        let s = openssl_sign(digest, "sns-test.key.pem", sns_string(&m).as_bytes());
        m.insert("Signature".into(), json!(s));
        reqs.push(Req {
            path: "/hooks/ses/acme".into(),
            headers: vec![],
            body: Value::Object(m).to_string().into_bytes(),
        });
    }
    rt.block_on(async {
        for r in &reqs {
            let (st, b) = send(&c, &server, r).await;
            assert_eq!(st, 200, "{}: {b}", r.path);
            assert!(b.contains("suppressed"), "{}: {b}", r.path);
        }
    });
    let got: Vec<String> = suppressed(&env).into_iter().map(|s| s.1).collect();
    assert_eq!(
        got,
        [
            "ossl-ses1@example.com",
            "ossl-ses2@example.com",
            "ossl-sg@example.com",
            "py-mg@example.com"
        ]
    );
}

//! The transactional stream (`schema/0020_stream.sql`): API messages are rows of the account's
//! stream, one campaign row per (account, channel) that never completes, however many
//! messages; many messages to one address each go out once; a database from before the
//! stream keeps its messages, their keys and their states through the upgrade.

use crate::common::{client, rt, token, Env, Server};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

/// POST `body` to `path` with the token and, if given, an Idempotency-Key: (status, JSON).
pub(crate) async fn post(
    c: &reqwest::Client,
    s: &Server,
    tok: &str,
    path: &str,
    key: Option<&str>,
    body: &Value,
) -> (u16, Value) {
    let mut r = c.post(s.url(path)).bearer_auth(tok).json(body);
    if let Some(k) = key {
        r = r.header("Idempotency-Key", k);
    }
    let res = r.send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// Twenty receipts to one address and one SMS: each delivered once, with its own subject; the
/// account has two streams and no other campaign.
#[test]
fn many_messages_to_one_address_share_one_stream_and_each_goes_once() {
    let env = Env::new();
    let (fake, server) = crate::http::serve::setup(&env, &[], &[]);
    let tok = token(&env, "acme", "send");
    rt().block_on(async {
        let c = client();
        for i in 0..20 {
            let body = json!({"to": "kim@example.org", "from": "shop@example.org",
                              "subject": format!("Receipt {i}"), "text": format!("Order {i}")});
            let (status, got) = post(
                &c,
                &server,
                &tok,
                "/v1/messages?wait=10s",
                Some(&format!("order-{i}")),
                &body,
            )
            .await;
            assert_eq!(
                (status, got["status"].as_str()),
                (200, Some("sent")),
                "{got}"
            );
        }
        let sms = json!({"to": "+14155550123", "text": "Your code is 1234"});
        let (status, got) = post(
            &c,
            &server,
            &tok,
            "/v1/messages?wait=10s",
            Some("code-1"),
            &sms,
        )
        .await;
        assert_eq!(status, 200, "{got}");
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while fake.lines().len() < 21 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let lines = fake.lines();
    let mut subjects: Vec<String> = lines
        .iter()
        .filter(|l| l.to == "kim@example.org" && !l.replay)
        .map(|l| l.subject.clone().unwrap_or_default())
        .collect();
    subjects.sort();
    let mut want: Vec<String> = (0..20).map(|i| format!("Receipt {i}")).collect();
    want.sort();
    assert_eq!(subjects, want, "each receipt once, with its own subject");
    assert_eq!(lines.iter().filter(|l| l.to == "+14155550123").count(), 1);
    let streams = env.count("SELECT count(*) FROM campaigns WHERE stream = 1");
    assert_eq!(streams, 2, "one stream per channel");
    assert_eq!(
        env.count("SELECT count(*) FROM campaigns"),
        2,
        "no campaign per message"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM sends WHERE message_id IS NOT NULL AND status = 'sent'"),
        21
    );
    // The stream never completes, and an operator cannot stop it by its campaign id.
    let stream = env
        .count("SELECT min(id) FROM campaigns WHERE stream = 1")
        .to_string();
    for verb in ["pause", "cancel"] {
        let r = env.run(&["campaign", verb, stream.as_str()]);
        assert_ne!(r.code, 0, "{verb}: {}", r.stdout);
        assert!(
            r.stderr.contains("stream of transactional messages"),
            "{}",
            r.stderr
        );
    }
    assert_eq!(
        env.count("SELECT count(*) FROM campaigns WHERE stream = 1 AND status = 'sending'"),
        2
    );
    check_sees_the_streams_messages(&env, &fake);
}

/// `sendonce check` with no campaign checks the streams' messages: 21 delivered once pass; a
/// second delivery of one (a copy of its line, not a replay) fails as a duplicate.
fn check_sees_the_streams_messages(env: &Env, fake: &crate::common::Fake) {
    let log = fake.log.to_str().unwrap();
    let doc: Value = serde_json::from_str(&env.ok(&["--json", "check", "--log", log])).unwrap();
    assert_eq!(
        (doc["pass"].as_bool(), doc["messages"].as_u64()),
        (Some(true), Some(21)),
        "{doc}"
    );
    assert_eq!(doc["unexpected"], 0, "{doc}");
    let copy = env.path("twice.jsonl");
    let mut text = std::fs::read_to_string(&fake.log).unwrap();
    let first = text.lines().next().unwrap().to_string();
    text.push_str(&first);
    text.push('\n');
    std::fs::write(&copy, text).unwrap();
    let r = env.run(&["--json", "check", "--log", copy.to_str().unwrap()]);
    let doc: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_ne!(r.code, 0, "{doc}");
    assert_eq!(
        (doc["pass"].as_bool(), doc["duplicated"].as_u64()),
        (Some(false), Some(1)),
        "{doc}"
    );
}

/// A schema-19 file's API message (campaign 3, its own hidden campaign; key `order-1`, sent
/// with provider id `old-api-1`) after `init`: a row of the account's email stream with the
/// same send id, job id and state, its content kept, its hidden campaign gone; the API still
/// finds it by id and by key (the same key with another body is refused, naming it).
#[test]
fn an_upgrade_folds_hidden_message_campaigns_into_the_stream_keeping_their_keys() {
    let env = Env::new();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/schema-19.db");
    std::fs::copy(fixture, &env.db).expect("copy the fixture");
    env.ok(&["init"]);
    let c = env.sqlite();
    let (campaign, message_id, job, status, provider): (i64, i64, String, String, String) = c
        .query_row(
            "SELECT campaign_id, message_id, job_id, status, provider_message_id FROM sends
             WHERE id = 100",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .unwrap();
    assert_eq!(
        (message_id, job.as_str(), status.as_str(), provider.as_str()),
        (1, "api:1:1@0123456789abcdef", "sent", "old-api-1")
    );
    let (stream, kind, cstatus): (i64, String, String) = c
        .query_row(
            "SELECT stream, kind, status FROM campaigns WHERE id = ?1",
            [campaign],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(
        (stream, kind.as_str(), cstatus.as_str()),
        (1, "api", "sending")
    );
    assert_eq!(env.count("SELECT count(*) FROM campaigns WHERE id = 3"), 0);
    assert_eq!(
        env.count("SELECT count(*) FROM campaigns WHERE stream = 0 AND kind <> 'campaign'"),
        0,
        "the opt-in confirmation is folded into the stream too (0022)"
    );
    let content: (String, String, String) = c
        .query_row(
            "SELECT sender, subject, body FROM message_contents WHERE id = 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(
        content,
        ("news@example.org".into(), "Receipt".into(), "Paid.".into())
    );
    let key: (String, i64, i64) = c
        .query_row(
            "SELECT idempotency_key, send_id, campaign_id FROM api_messages WHERE id = 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(key, ("order-1".into(), 100, campaign));
    env.assert_counters();
    drop(c);

    let server = Server::start(&env, &[]);
    let tok = token(&env, "acme", "send");
    rt().block_on(async {
        let c = client();
        let got: Value = c
            .get(server.url("/v1/messages/1"))
            .bearer_auth(&tok)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(got["status"], "sent", "{got}");
        assert_eq!(got["provider_message_id"], "old-api-1", "{got}");
        let body = json!({"to": "api@example.org", "from": "news@example.org",
                          "subject": "Receipt", "text": "Paid again."});
        let res = c
            .post(server.url("/v1/messages"))
            .bearer_auth(&tok)
            .header("Idempotency-Key", "order-1")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), 422);
        let v: Value = res.json().await.unwrap();
        assert_eq!(v["error"]["code"], "idempotency_key_reused", "{v}");
    });
}

fn receipt(i: usize) -> Value {
    json!({"to": format!("u{i}@example.org"), "from": "shop@example.org",
           "subject": "Receipt", "text": format!("Order {i}")})
}

/// 500 messages in one batch, one of them with a bad address: 499 queued, that one refused
/// alone; the same batch again replays every answer and sends nothing twice; a single POST
/// with a batch message's key replays it too; a malformed batch is refused whole.
#[test]
fn a_batch_answers_each_message_and_a_retried_batch_sends_nothing_twice() {
    let env = Env::new();
    let (fake, server) = crate::http::serve::setup(&env, &[], &[]);
    let tok = token(&env, "acme", "send");
    let mut messages: Vec<Value> = (0..500).map(receipt).collect();
    messages[7] = json!({"to": "not-an-address", "from": "shop@example.org", "text": "x"});
    let body = json!({"messages": messages});
    rt().block_on(async {
        let c = client();
        let started = Instant::now();
        let (status, first) =
            post(&c, &server, &tok, "/v1/messages/batch", Some("b1"), &body).await;
        eprintln!("a batch of 500 answered in {:?}", started.elapsed());
        assert_eq!(status, 200, "{first}");
        assert_eq!(
            (first["accepted"].as_u64(), first["refused"].as_u64()),
            (Some(499), Some(1))
        );
        let results = first["results"].as_array().unwrap();
        assert_eq!(results.len(), 500);
        assert_eq!(results[7]["status"], 400, "{}", results[7]);
        assert_eq!(results[7]["error"]["code"], "invalid");
        assert_eq!(results[0]["status"], 202);
        assert_eq!(results[0]["message"]["idempotency_key"], "b1#0");
        let (status, again) =
            post(&c, &server, &tok, "/v1/messages/batch", Some("b1"), &body).await;
        assert_eq!(status, 200, "{again}");
        let again = again["results"].as_array().unwrap();
        for (i, (a, b)) in results.iter().zip(again).enumerate() {
            if i == 7 {
                assert_eq!(b["status"], 400);
                continue;
            }
            assert_eq!(b["replayed"], true, "{b}");
            assert_eq!((&a["status"], &a["message"]), (&b["status"], &b["message"]));
        }
        // A batch message's key, retried on its own, is the same message.
        let res = c
            .post(server.url("/v1/messages"))
            .bearer_auth(&tok)
            .header("Idempotency-Key", "b1#3")
            .json(&receipt(3))
            .send()
            .await
            .unwrap();
        assert!(res.headers().get("idempotent-replayed").is_some());
        let one: Value = res.json().await.unwrap();
        assert_eq!(one, results[3]["message"]);
        for (key, bad) in [
            (None, json!({"messages": [receipt(1)]})),
            (
                Some("x"),
                json!({"messages": [receipt(1)], "idempotency_keys": ["a"]}),
            ),
            (
                None,
                json!({"messages": [receipt(1), receipt(2)], "idempotency_keys": ["a"]}),
            ),
            (
                Some("big"),
                json!({"messages": (0..501).map(receipt).collect::<Vec<_>>()}),
            ),
        ] {
            let (status, doc) = post(&c, &server, &tok, "/v1/messages/batch", key, &bad).await;
            assert_eq!(status, 400, "{doc}");
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while fake.lines().len() < 499 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(300));
    let lines = fake.lines();
    let mut to: Vec<&str> = lines
        .iter()
        .filter(|l| !l.replay)
        .map(|l| l.to.as_str())
        .collect();
    to.sort();
    let n = to.len();
    to.dedup();
    assert_eq!((n, to.len()), (499, 499), "each message delivered once");
}

/// Schema 6's shape of an API message: its own hidden campaign (3), sent, key `order-1`.
#[cfg(feature = "tier1")]
const OLD_MESSAGE: &str = "DELETE FROM sendonce_schema WHERE version >= 7;
         INSERT INTO subscribers (id, account_id, email, email_norm, status, created_at, removed_at)
           VALUES (10, 1, 'api@example.org', 'api@example.org', 'unsubscribed', 1, 1);
         INSERT INTO campaigns (id, account_id, name, channel, sender, subject, body, templated,
                                status, scheduled_for, approved_at, started_at, finished_at,
                                list_complete, created_at, kind)
           VALUES (3, 1, 'api message 1', 'email', 'news@example.org', 'Receipt', 'Paid.', FALSE,
                   'sent', 1, 1, 1, 1, TRUE, 1, 'api');
         INSERT INTO api_messages (id, account_id, idempotency_key, request_hash, campaign_id,
                                   response_status, response_body, created_at)
           VALUES (1, 1, 'order-1', 'h', 3, 202, '{}', 1);
         INSERT INTO sends (id, account_id, campaign_id, subscriber_id, job_id, address, vars,
                            status, visible_at, attempts, provider_message_id, created_at,
                            updated_at, sent_at)
           VALUES (100, 1, 3, 10, 'api:1:1@x', 'api@example.org', '{}', 'sent', 1, 1,
                   'old-api-1', 1, 1, 1);
         UPDATE api_messages SET send_id = 100 WHERE id = 1;";

/// PostgreSQL's 0007 folds a hidden message campaign the same way: a database taken back to
/// schema 6 with one API message as its own campaign (sent, key `order-1`), then `init`: the
/// row is in the account's email stream with its id, job id and state, its content copied, its
/// key kept, the hidden campaign gone.
#[cfg(feature = "tier1")]
#[test]
fn the_postgres_upgrade_folds_hidden_message_campaigns_the_same_way() {
    let c = crate::common::pg::shared();
    let url = c.fresh_url();
    let db = crate::common::pg::db_name(&url);
    let mut env = Env::new();
    env.db = url.into();
    env.setup_account();
    c.psql(
        &db,
        &format!(
            "{} {} {} {} {}",
            crate::common::pg::UNDO_0013,
            crate::common::pg::UNDO_0012,
            crate::common::pg::UNDO_0011,
            crate::common::pg::UNDO_0007,
            OLD_MESSAGE
        ),
    );
    env.ok(&["init"]);
    let got = c.psql(
        &db,
        "SELECT k.stream, k.kind, k.status, s.id, s.job_id, s.status, s.message_id,
                m.idempotency_key, m.campaign_id = k.id, mc.subject, mc.body,
                (SELECT count(*) FROM campaigns WHERE id = 3)
         FROM sends s JOIN campaigns k ON k.id = s.campaign_id
         JOIN api_messages m ON m.send_id = s.id
         JOIN message_contents mc ON mc.id = s.message_id",
    );
    assert_eq!(
        got.trim(),
        "t|api|sending|100|api:1:1@x|sent|1|order-1|t|Receipt|Paid.|0"
    );
}

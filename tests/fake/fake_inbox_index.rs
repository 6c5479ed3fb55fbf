//! The fake provider's inbox index from the outside: a message is listed by every reader as soon
//! as its send is answered (read-your-writes, under concurrent senders), a fake killed with
//! SIGKILL and started again over the same log (its last line torn) lists the same inbox, and
//! Mailpit's read flags and tags over plain HTTP (`PUT /api/v1/messages`, `/api/v1/tags`,
//! `is:read`, `tag:`).

use super::send;
use crate::common::{client, Env, Fake};
use serde_json::{json, Value};
use std::io::Write;

async fn get(c: &reqwest::Client, fake: &Fake, path: &str) -> Value {
    let r = c.get(fake.url(path)).send().await.expect("GET");
    assert_eq!(r.status(), 200, "GET {path}");
    r.json().await.unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

async fn put(c: &reqwest::Client, fake: &Fake, path: &str, body: Value) {
    let r = c.put(fake.url(path)).json(&body).send().await.expect("PUT");
    assert_eq!(r.status(), 200, "PUT {path} {body}");
    assert_eq!(r.text().await.unwrap(), "ok");
}

/// The `id`s of an assertions listing, or the `ID`s of a Mailpit one.
fn ids(v: &Value) -> Vec<String> {
    let (list, key) = match v.get("messages") {
        Some(m) => (m, "ID"),
        None => (v, "id"),
    };
    list.as_array()
        .unwrap_or_else(|| panic!("not a listing: {v}"))
        .iter()
        .map(|m| m[key].as_str().expect("an id").to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_message_is_listed_by_every_reader_as_soon_as_its_send_is_answered() {
    let env = Env::new();
    let fake = Fake::start(&env.path("deliveries.jsonl"), &[]);
    let c = client();
    let mut tasks = Vec::new();
    for t in 0..8 {
        let (c, fake) = (c.clone(), Fake::url(&fake, ""));
        tasks.push(tokio::spawn(async move {
            for i in 0..25 {
                let to = format!("u{t}-{i}@example.org");
                let r = c
                    .post(format!("{fake}/send"))
                    .header("Idempotency-Key", format!("k-{t}-{i}"))
                    .json(
                        &json!({"job_id": format!("job-{t}-{i}"), "to": to, "body": "hi",
                                  "subject": format!("Hello {t} {i}")}),
                    )
                    .send()
                    .await
                    .expect("POST /send");
                assert_eq!(r.status(), 200);
                let id = r.json::<Value>().await.unwrap()["id"]
                    .as_str()
                    .expect("an id")
                    .to_string();
                // Right after the answer, with other groups being written meanwhile.
                let get = |path: String| {
                    let c = c.clone();
                    async move {
                        let r = c.get(path).send().await.expect("GET");
                        assert_eq!(r.status(), 200);
                        r.json::<Value>().await.unwrap()
                    }
                };
                let listed = get(format!("{fake}/messages?to={to}")).await;
                assert_eq!(ids(&listed), [id.as_str()], "{to}");
                let by_job = get(format!("{fake}/messages?job_id=job-{t}-{i}")).await;
                assert_eq!(ids(&by_job), [id.as_str()]);
                let one = get(format!("{fake}/messages/{id}")).await;
                assert_eq!(one["to"], json!([to]));
                let found = get(format!("{fake}/api/v1/search?query=to:{to}")).await;
                assert_eq!(ids(&found), [id.as_str()]);
                let latest = get(format!("{fake}/api/v1/message/latest?query=to:{to}")).await;
                assert_eq!(latest["ID"], json!(id));
            }
        }));
    }
    for t in tasks {
        t.await.expect("a sender task");
    }
    let all = get(&c, &fake, "/api/v1/messages?limit=1000").await;
    assert_eq!(all["total"], 200);
    assert_eq!(ids(&all).len(), 200);
}

/// Everything the readers list, to compare before and after a restart.
async fn snapshot(c: &reqwest::Client, fake: &Fake) -> Vec<Value> {
    let mut out = Vec::new();
    for path in [
        "/messages?replays=true",
        "/messages?to=kim@example.org",
        "/messages?channel=sms&q=code",
        "/api/v1/messages?limit=1000",
        "/api/v1/search?query=subject:welcome",
    ] {
        let mut v = get(c, fake, path).await;
        if let Some(list) = v.get_mut("messages").and_then(Value::as_array_mut) {
            // Read flags are kept in memory only: a restart shows every message unread.
            for m in list {
                m["Read"] = json!(false);
            }
            v["unread"] = v["total"].clone();
            v["messages_unread"] = v["messages_count"].clone();
        }
        out.push(v);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_after_sigkill_over_a_torn_log_lists_the_same_inbox() {
    let env = Env::new();
    let log = env.path("deliveries.jsonl");
    let mut fake = Fake::start(&log, &[]);
    let c = client();
    let mut first = String::new();
    for i in 0..30 {
        let to = ["kim@example.org", "lee@example.org", "+14155550100"][i % 3];
        let body = if i % 3 == 2 {
            json!({"job_id": format!("j{i}"), "channel": "sms", "to": to, "body": format!("code {i}")})
        } else {
            json!({"job_id": format!("j{i}"), "to": to, "subject": format!("Welcome {i}"),
                   "body": format!("Hello {i}"), "from": "news@example.com"})
        };
        let id = send(&c, &fake, &format!("k{i}"), body.clone()).await;
        if i == 0 {
            first = id.clone();
        }
        if i % 5 == 0 {
            // A replay: listed with replays=true only.
            assert_eq!(send(&c, &fake, &format!("k{i}"), body).await, id);
        }
    }
    put(
        &c,
        &fake,
        "/api/v1/messages",
        json!({"IDs": [first], "Read": true}),
    )
    .await;
    let before = snapshot(&c, &fake).await;
    assert_eq!(before[3]["total"], 30);
    assert_eq!(ids(&before[0]).len(), 36);

    fake.child.kill().unwrap(); // SIGKILL: no clean shutdown
    fake.child.wait().unwrap();
    // A line cut mid-append by the crash: never answered, never listed.
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    f.write_all(br#"{"job_id":"torn","idempotency_key":"k-torn","chan"#)
        .unwrap();
    drop(f);

    let fake = Fake::start(&log, &[]);
    assert_eq!(snapshot(&c, &fake).await, before);
    let after = get(&c, &fake, "/api/v1/messages").await;
    assert_eq!(after["unread"], 30, "read flags do not survive a restart");
    // The key table too: a retry is still a replay.
    let again = json!({"job_id": "j0", "to": "kim@example.org", "subject": "Welcome 0",
                       "body": "Hello 0", "from": "news@example.com"});
    assert_eq!(send(&c, &fake, "k0", again).await, first);
    // New messages append after the repaired line and are listed at once.
    let new = send(
        &c,
        &fake,
        "k-new",
        json!({"job_id": "jn", "to": "kim@example.org", "body": "new"}),
    )
    .await;
    let kim = get(&c, &fake, "/messages?to=kim@example.org").await;
    assert_eq!(ids(&kim).last(), Some(&new));
    assert_eq!(fake.lines().len(), 36 + 2);
    // A delete rewrites the log; the index follows it.
    let r = c
        .delete(fake.url("/api/v1/messages"))
        .json(&json!({"IDs": [first]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let kim = get(&c, &fake, "/messages?to=kim@example.org&replays=true").await;
    assert!(!ids(&kim).contains(&first));
    assert_eq!(ids(&kim).last(), Some(&new));
    let one = c
        .get(fake.url(&format!("/messages/{new}")))
        .send()
        .await
        .unwrap();
    assert_eq!(one.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mailpit_read_flags_and_tags_over_http() {
    let env = Env::new();
    let fake = Fake::start(&env.path("deliveries.jsonl"), &[]);
    let c = client();
    let mut sent = Vec::new();
    for (i, to) in ["kim@example.org", "lee@example.org", "max@example.org"]
        .iter()
        .enumerate()
    {
        let body = json!({"job_id": "j", "to": to, "subject": format!("Hi {i}"), "body": "x"});
        sent.push(send(&c, &fake, &format!("k{i}"), body).await);
    }
    let (kim, lee, max) = (&sent[0], &sent[1], &sent[2]);
    let search = |q: &str| format!("/api/v1/search?query={q}");
    let list = get(&c, &fake, "/api/v1/messages").await;
    assert_eq!(
        (list["unread"].clone(), list["messages"][0]["Read"].clone()),
        (json!(3), json!(false))
    );

    put(
        &c,
        &fake,
        "/api/v1/messages",
        json!({"IDs": [kim], "Read": true}),
    )
    .await;
    // Reading a message through the API marks it read, as Mailpit does.
    get(&c, &fake, &format!("/api/v1/message/{lee}")).await;
    assert_eq!(
        ids(&get(&c, &fake, &search("is:read")).await),
        [lee.as_str(), kim.as_str()]
    );
    let unread = get(&c, &fake, &search("is:unread")).await;
    assert_eq!(
        (ids(&unread), unread["unread"].clone()),
        (vec![max.clone()], json!(1))
    );
    put(
        &c,
        &fake,
        "/api/v1/messages",
        json!({"Search": "to:kim", "Read": false}),
    )
    .await;
    assert_eq!(
        ids(&get(&c, &fake, &search("is:unread")).await),
        [max.as_str(), kim.as_str()]
    );
    put(&c, &fake, "/api/v1/messages", json!({"Read": true})).await;
    assert_eq!(get(&c, &fake, "/api/v1/messages").await["unread"], 0);
    tags_over_http(&c, &fake, [kim, lee, max]).await;
}

/// Tags set, searched, renamed and deleted on the three messages (newest last), all read.
async fn tags_over_http(c: &reqwest::Client, fake: &Fake, [kim, lee, max]: [&String; 3]) {
    let search = |q: &str| format!("/api/v1/search?query={q}");
    put(
        c,
        fake,
        "/api/v1/tags",
        json!({"IDs": [kim, max], "Tags": ["Signup", "b2b!"]}),
    )
    .await;
    assert_eq!(get(c, fake, "/api/v1/tags").await, json!(["b2b", "Signup"]));
    let tagged = get(c, fake, &search("tag:signup")).await;
    assert_eq!(ids(&tagged), [max.as_str(), kim.as_str()]);
    assert_eq!(tagged["messages"][0]["Tags"], json!(["b2b", "Signup"]));
    assert_eq!(
        ids(&get(c, fake, &search("-is:tagged")).await),
        [lee.as_str()]
    );
    put(c, fake, "/api/v1/tags", json!({"IDs": [max]})).await;
    put(c, fake, "/api/v1/tags/Signup", json!({"Name": "Welcome"})).await;
    let r = c.delete(fake.url("/api/v1/tags/b2b")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let info = get(c, fake, "/api/v1/info").await;
    assert_eq!(info["Tags"], json!({"Welcome": 1}));
    assert_eq!(info["Unread"], 0);
    let r = c
        .put(fake.url("/api/v1/messages"))
        .body("{\"Read\": 1}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
}

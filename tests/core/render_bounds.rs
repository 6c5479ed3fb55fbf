//! The rendering budget (issue 37, F2): a template that goes over it is refused at create and
//! approve (API and CLI) with an error naming the bound and nothing written; one that goes
//! over it for one recipient only fails that row and the others are sent; and a campaign that
//! renders heavily (or hostilely) leaves `/healthz` and another account's API answering.

use crate::common::{client, rt, token, Env, Fake, Server};
use sendonce::store::prelude::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The probe's template: 10^10 turns of an empty loop.
const NESTED_RANGE: &str =
    "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}x";
/// The bound the errors name (`sendonce::domain::template::RENDER_FUEL`).
fn steps() -> String {
    format!(
        "exceeds the rendering budget ({} steps)",
        sendonce::domain::template::RENDER_FUEL
    )
}
/// Three loops over a subscriber's `bio`: about 3.5 × len³ steps, so a 6-character sample
/// is cheap, 30 characters is just inside the budget, 40 is over it and 1,000 would run for
/// minutes unbounded.
const CUBE: &str = "{% for a in bio %}{% for b in bio %}{% for c in bio %}{% endfor %}{% endfor %}\
                    {% endfor %}Hi {{ name }}";

fn campaigns(env: &Env) -> i64 {
    env.count("SELECT count(*) FROM campaigns WHERE kind = 'campaign'")
}

/// A draft written through the store, unchecked, as an earlier version could have created it.
fn unchecked_draft(env: &Env, body: &str) -> i64 {
    let store = sendonce::store::open(
        &sendonce::store::Target::File(env.db.clone()),
        &Default::default(),
    )
    .unwrap();
    let account = store.resolve_account("acme").unwrap();
    store
        .create_campaign(&sendonce::store::NewCampaign {
            account_id: account,
            name: "old",
            channel: sendonce::domain::address::Channel::Email,
            sender: Some("news@example.org"),
            subject: Some("Hi"),
            body,
            html: None,
            reply_to: None,
            filter: None,
            sms_footer: None,
            lists: &[],
            transactional: true,
            windows: &Default::default(),
        })
        .unwrap()
}

fn status(env: &Env, id: i64) -> String {
    env.sqlite()
        .query_row("SELECT status FROM campaigns WHERE id = ?1", [id], |r| {
            r.get(0)
        })
        .unwrap()
}

#[test]
fn create_and_approve_refuse_a_template_over_the_budget_on_the_cli() {
    let env = Env::new();
    env.setup_account();
    env.import_csv(
        "acme",
        &env.write("s.csv", "email,name\na@example.com,Ann\n"),
    );
    let body = env.write("body.txt", NESTED_RANGE);
    let started = Instant::now();
    let r = env.run(&[
        "campaign",
        "create",
        "--account",
        "acme",
        "--name",
        "probe",
        "--channel",
        "email",
        "--from",
        "news@example.org",
        "--subject",
        "Hi",
        "--body-file",
        body.to_str().unwrap(),
        "--transactional",
    ]);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains(&steps()), "{}", r.stderr);
    assert!(r.stderr.contains("the body template"), "{}", r.stderr);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(campaigns(&env), 0);

    let old = unchecked_draft(&env, NESTED_RANGE);
    let r = env.run(&["campaign", "approve", &old.to_string()]);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains(&steps()), "{}", r.stderr);
    assert_eq!(status(&env, old), "draft");

    // A list's confirmation message is checked with the same budget.
    let confirm = env.write("c.txt", format!("{NESTED_RANGE}{{{{ confirm_url }}}}"));
    let r = env.run(&[
        "list",
        "create",
        "--account",
        "acme",
        "news",
        "--double-opt-in",
        "--confirm-from",
        "news@example.org",
        "--confirm-body-file",
        confirm.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains(&steps()), "{}", r.stderr);
    assert_eq!(env.count("SELECT count(*) FROM lists"), 0);
}

#[test]
fn create_and_approve_refuse_a_template_over_the_budget_in_the_api() {
    let env = Env::new();
    env.setup_account();
    env.import_csv(
        "acme",
        &env.write("s.csv", "email,name\na@example.com,Ann\n"),
    );
    let tok = token(&env, "acme", "admin");
    let old = unchecked_draft(&env, NESTED_RANGE);
    let server = Server::start(&env, &[]);
    rt().block_on(async {
        let c = client();
        let post = |path: String, body: Value| {
            c.post(server.url(&path))
                .bearer_auth(&tok)
                .json(&body)
                .timeout(Duration::from_secs(20))
                .send()
        };
        let draft = |text: &str| {
            json!({"name": "probe", "channel": "email", "from": "news@example.org",
                   "subject": "Hi", "text": text, "transactional": true})
        };
        let huge = format!("{{{{ 'x' * {} }}}}", 3 * 1024 * 1024);
        for (text, bound) in [
            (NESTED_RANGE.to_string(), steps()),
            (
                huge,
                format!(
                    "exceeds the rendering budget ({} bytes of output)",
                    sendonce::domain::template::MAX_RENDERED_BYTES
                ),
            ),
        ] {
            let r = post("/v1/campaigns".into(), draft(&text)).await.unwrap();
            assert_eq!(r.status().as_u16(), 400);
            let doc: Value = r.json().await.unwrap();
            let msg = doc["error"]["message"].as_str().unwrap_or_default();
            assert!(msg.contains(&bound), "{doc}");
        }
        let r = post(format!("/v1/campaigns/{old}/approve"), json!({}))
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400);
        let doc: Value = r.json().await.unwrap();
        assert!(doc["error"]["message"].as_str().unwrap().contains(&steps()));
    });
    assert_eq!(campaigns(&env), 1, "only the unchecked draft");
    assert_eq!(status(&env, old), "draft");
}

/// Subscribers `(email, bio)` of account `acct`, imported from CSV.
fn import_bios(env: &Env, acct: &str, rows: &[(String, String)]) {
    let mut csv = String::from("email,name,bio\n");
    for (email, bio) in rows {
        csv.push_str(&format!("{email},N,{bio}\n"));
    }
    env.import_csv(acct, &env.write(&format!("{acct}.csv"), csv));
}

fn create_cube(env: &Env, acct: &str) -> String {
    let body = env.write("cube.txt", CUBE);
    let id = env.ok(&[
        "campaign",
        "create",
        "--account",
        acct,
        "--name",
        "cube",
        "--channel",
        "email",
        "--from",
        "news@example.org",
        "--subject",
        "Hi",
        "--body-file",
        body.to_str().unwrap(),
        "--transactional",
    ]);
    env.ok(&["campaign", "approve", &id]);
    id
}

#[test]
fn a_recipient_over_the_budget_fails_alone() {
    let env = Env::new();
    env.setup_account();
    let rows: Vec<(String, String)> = [("a", 5), ("over", 40), ("b", 30)]
        .iter()
        .map(|(n, len)| (format!("{n}@example.com"), "x".repeat(*len)))
        .collect();
    import_bios(&env, "acme", &rows);
    create_cube(&env, "acme");
    let spec = format!("outbox:{}", env.path("out.jsonl").display());
    let r = env.run(&["run", "--once", "--provider", &spec, "--tick", "20ms"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let db = env.sqlite();
    let mut q = db
        .prepare("SELECT address, status, coalesce(last_error, '') FROM sends ORDER BY address")
        .unwrap();
    let got: Vec<(String, String, String)> = q
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(got.len(), 3);
    for (address, status, error) in &got {
        if address.starts_with("over") {
            assert_eq!(status, "failed");
            assert!(error.contains(&steps()), "{error}");
            assert!(error.contains("the body template"), "{error}");
        } else {
            assert_eq!(status, "sent", "{address}: {error}");
        }
    }
}

/// Latencies of `/healthz` and of another account's `POST /v1/messages` while `server` works;
/// a request that gets no answer within 3 s counts as 3 s.
async fn latencies(server: &Server, tok: &str, for_: Duration) -> (Vec<Duration>, usize) {
    let c = client();
    let (mut all, mut accepted) = (Vec::new(), 0);
    let end = Instant::now() + for_;
    let mut i = 0;
    while Instant::now() < end {
        let t = Instant::now();
        let r = c
            .get(server.url("/healthz"))
            .timeout(Duration::from_secs(3))
            .send()
            .await;
        all.push(if r.is_ok() {
            t.elapsed()
        } else {
            Duration::from_secs(3)
        });
        i += 1;
        let msg = json!({"to": format!("r{i}@example.org"), "from": "app@example.org",
                         "subject": "Code", "text": "123456"});
        let t = Instant::now();
        let r = c
            .post(server.url("/v1/messages"))
            .bearer_auth(tok)
            .header("Idempotency-Key", format!("k{i}"))
            .json(&msg)
            .timeout(Duration::from_secs(3))
            .send()
            .await;
        match r {
            Ok(r) if r.status().is_success() => {
                accepted += 1;
                all.push(t.elapsed());
            }
            Ok(r) => panic!("POST /v1/messages: {} {:?}", r.status(), r.text().await),
            Err(_) => all.push(Duration::from_secs(3)),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (all, accepted)
}

#[test]
fn a_heavy_campaign_leaves_other_accounts_answered() {
    let env = Env::new();
    env.setup_account();
    env.ok(&["account", "add", "other"]);
    // A few recipients whose bio would take minutes unbounded, then many as heavy as the
    // budget allows.
    let mut rows: Vec<(String, String)> = (0..4)
        .map(|i| (format!("evil{i}@example.com"), "x".repeat(1000)))
        .collect();
    rows.extend((0..400).map(|i| (format!("u{i}@example.com"), "x".repeat(30))));
    import_bios(&env, "acme", &rows);
    let tok = token(&env, "other", "send");
    let fake = Fake::start(&env.path("fake.jsonl"), &[]);
    let spec = format!("webhook:{}", fake.url("/send"));
    let server = Server::start(&env, &["--worker", "--provider", &spec]);
    let cid = create_cube(&env, "acme");
    let (mut all, accepted) = rt().block_on(latencies(&server, &tok, Duration::from_secs(8)));
    all.sort();
    let p99 = all[(all.len() * 99 / 100).min(all.len() - 1)];
    let max = all[all.len() - 1];
    eprintln!(
        "{} requests, p99 {p99:?}, max {max:?}, {accepted} messages accepted",
        all.len()
    );
    assert!(all.len() >= 40, "only {} requests in 8 s", all.len());
    assert!(p99 < Duration::from_millis(500), "p99 {p99:?}");
    // The campaign did render meanwhile: the hostile rows failed on the budget.
    let deadline = Instant::now() + Duration::from_secs(30);
    let failed = |env: &Env| {
        env.count(&format!(
            "SELECT count(*) FROM sends WHERE campaign_id = {cid} AND status = 'failed' \
             AND last_error LIKE '%rendering budget%'"
        ))
    };
    while failed(&env) < 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(failed(&env), 4);
    let sent = env.count(&format!(
        "SELECT count(*) FROM sends WHERE campaign_id = {cid} AND status = 'sent'"
    ));
    assert!(sent > 0, "no heavy message was sent while measuring");
}

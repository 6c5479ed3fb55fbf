//! The resource routes of `sendonce serve` through a real server on 127.0.0.1:0 and a real
//! HTTP client: subscribers, lists, suppressions, campaigns and doubts (create, read, change,
//! delete, with the CLI's validation errors), scopes, and the cross-account test: over a
//! thousand seeded random requests with the other account's ids, zero leaks.

use crate::common::{client, rt, token, Env, Server};
use serde_json::{json, Value};

/// Accounts acme and other, and a server without a worker.
fn setup(env: &Env) -> Server {
    env.setup_account();
    env.ok(&["account", "add", "other"]);
    Server::start(env, &[])
}

/// A client with one token, against one server.
struct Api<'a> {
    c: reqwest::Client,
    s: &'a Server,
    tok: String,
}

/// A client of `s` with a new token of `account` with `scope`.
fn api<'a>(env: &Env, s: &'a Server, account: &str, scope: &str) -> Api<'a> {
    Api {
        c: client(),
        s,
        tok: token(env, account, scope),
    }
}

impl Api<'_> {
    /// One request: its status and body text.
    async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, String) {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut r = self.c.request(m, self.s.url(path)).bearer_auth(&self.tok);
        if let Some(b) = body {
            r = r.json(b);
        }
        let res = r.send().await.unwrap();
        (res.status().as_u16(), res.text().await.unwrap())
    }

    /// One request whose JSON answer must have `want` as status.
    async fn is(&self, method: &str, path: &str, body: Option<Value>, want: u16) -> Value {
        let (status, text) = self.call(method, path, body.as_ref()).await;
        assert_eq!(status, want, "{method} {path}: {text}");
        let doc: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if status >= 400 {
            assert!(doc["error"]["request_id"].is_string(), "{text}");
        }
        doc
    }

    /// Every id of a paged listing, following `next_after` from the start.
    async fn all_pages(&self, path: &str, key: &str) -> Vec<i64> {
        let (mut ids, mut after) = (Vec::new(), 0);
        let id_key = if key == "lines" { "send_id" } else { "id" };
        loop {
            let sep = if path.contains('?') { '&' } else { '?' };
            let p = format!("{path}{sep}after={after}&limit=2");
            let doc = self.is("GET", &p, None, 200).await;
            let items = doc[key].as_array().unwrap();
            assert!(items.len() <= 2, "{doc}");
            ids.extend(items.iter().map(|i| i[id_key].as_i64().unwrap()));
            match doc["next_after"].as_i64() {
                Some(n) => after = n,
                None => return ids,
            }
        }
    }
}

/// The error message of an answer contains `part`.
fn says(e: &Value, part: &str) -> bool {
    e["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains(part))
}

/// Five pending subscribers more (seven in all): pages of two give every one once, in id
/// order, with and without a status filter; bad filters are 400.
async fn paging(tok: &Api<'_>) {
    for i in 0..5 {
        let b = json!({"email": format!("p{i}@example.org"), "status": "pending"});
        tok.is("POST", "/v1/subscribers", Some(b), 201).await;
    }
    let ids = tok.all_pages("/v1/subscribers", "subscribers").await;
    assert_eq!(ids.len(), 7, "{ids:?}");
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    let pending = tok
        .all_pages("/v1/subscribers?status=pending", "subscribers")
        .await;
    assert_eq!(pending.len(), 5);
    tok.is("GET", "/v1/subscribers?status=gone", None, 400)
        .await;
    tok.is("GET", "/v1/subscribers?limit=0", None, 400).await;
    tok.is("GET", "/v1/subscribers?sort=id", None, 400).await;
}

#[test]
fn subscribers_are_created_read_changed_paged_and_removed() {
    let env = Env::new();
    let s = setup(&env);
    let tok = api(&env, &s, "acme", "admin");
    rt().block_on(async {
        let new = json!({"email": "Ann@Example.org", "name": "Ann", "attrs": {"plan": "pro"}});
        let ann = tok.is("POST", "/v1/subscribers", Some(new), 201).await;
        // Kept as written; found by its normalised form.
        assert_eq!(ann["email"], "Ann@Example.org", "{ann}");
        assert_eq!(
            (&ann["status"], &ann["attrs"]["plan"]),
            (&json!("confirmed"), &json!("pro"))
        );
        let id = ann["id"].as_i64().unwrap();
        // The CLI's errors: an invalid address named, 400; an unknown list 404 and nothing written.
        let bad = json!({"email": "not-an-email"});
        let e = tok.is("POST", "/v1/subscribers", Some(bad), 400).await;
        assert!(says(&e, "not-an-email"), "{e}");
        let nolist = json!({"email": "bo@example.org", "lists": ["nope"]});
        tok.is("POST", "/v1/subscribers", Some(nolist), 404).await;
        tok.is("GET", "/v1/subscribers/bo@example.org", None, 404)
            .await;
        let extra = json!({"email": "cy@example.org", "owner": 2});
        tok.is("POST", "/v1/subscribers", Some(extra), 400).await;
        // Read by id, email or phone.
        for key in [id.to_string(), "ANN@example.org".into()] {
            let got = tok
                .is("GET", &format!("/v1/subscribers/{key}"), None, 200)
                .await;
            assert_eq!(got["id"], id);
        }
        let sms = json!({"phone": "+14155550100"});
        tok.is("POST", "/v1/subscribers", Some(sms), 201).await;
        let got = tok
            .is("GET", "/v1/subscribers/+14155550100", None, 200)
            .await;
        assert_eq!(got["phone"], "+14155550100");
        // Change.
        let path = format!("/v1/subscribers/{id}");
        let ch = json!({"name": "Anna", "attrs": {"plan": "", "city": "Oslo"}});
        let got = tok.is("PATCH", &path, Some(ch), 200).await;
        assert_eq!(
            (&got["name"], &got["attrs"]),
            (&json!("Anna"), &json!({"city": "Oslo"}))
        );
        let e = tok.is("PATCH", &path, Some(json!({})), 400).await;
        assert!(says(&e, "nothing to change"), "{e}");
        let st = json!({"status": "gone"});
        tok.is("PATCH", &path, Some(st), 400).await;
        paging(&tok).await;
        // Remove.
        let r = tok.is("DELETE", &path, None, 200).await;
        assert_eq!(r["removed"], true);
        tok.is("GET", &path, None, 404).await;
        tok.is("DELETE", &path, None, 404).await;
    });
}

#[test]
fn lists_and_suppressions_are_created_read_and_removed() {
    let env = Env::new();
    let s = setup(&env);
    let tok = api(&env, &s, "acme", "admin");
    rt().block_on(async {
        let l = tok
            .is("POST", "/v1/lists", Some(json!({"name": "news"})), 201)
            .await;
        assert_eq!(
            (&l["name"], &l["optin"]),
            (&json!("news"), &json!("single"))
        );
        let e = tok
            .is("POST", "/v1/lists", Some(json!({"name": "news"})), 409)
            .await;
        assert_eq!(e["error"]["code"], "conflict");
        tok.is("POST", "/v1/lists", Some(json!({"name": "123"})), 400)
            .await;
        let b = json!({"name": "x", "optin": "triple"});
        tok.is("POST", "/v1/lists", Some(b), 400).await;
        let b = json!({"email": "ann@example.org", "lists": ["news"]});
        tok.is("POST", "/v1/subscribers", Some(b), 201).await;
        let all = tok.is("GET", "/v1/lists", None, 200).await;
        assert_eq!(all["lists"].as_array().unwrap().len(), 1, "{all}");
        let id = l["id"].as_i64().unwrap();
        let got = tok.is("GET", &format!("/v1/lists/{id}"), None, 200).await;
        assert_eq!(
            (&got["name"], &got["subscribed"]),
            (&json!("news"), &json!(1))
        );
        let r = tok.is("DELETE", "/v1/lists/news", None, 200).await;
        assert_eq!(r["memberships_removed"], 1);
        tok.is("GET", "/v1/lists/news", None, 404).await;
        // Suppressions: normalised, added once, removed once.
        let b = json!({"channel": "email", "address": "X@Example.org", "reason": "asked"});
        let a = tok
            .is("POST", "/v1/suppressions", Some(b.clone()), 201)
            .await;
        assert_eq!(
            (&a["address"], &a["added"]),
            (&json!("x@example.org"), &json!(true))
        );
        let a = tok.is("POST", "/v1/suppressions", Some(b), 200).await;
        assert_eq!(a["added"], false);
        let bad = json!({"channel": "email", "address": "nope"});
        tok.is("POST", "/v1/suppressions", Some(bad), 400).await;
        let bad = json!({"channel": "fax", "address": "x@example.org"});
        tok.is("POST", "/v1/suppressions", Some(bad), 400).await;
        let all = tok.is("GET", "/v1/suppressions", None, 200).await;
        assert_eq!(all["suppressions"][0]["reason"], "asked", "{all}");
        let path = "/v1/suppressions/email/x@example.org";
        tok.is("DELETE", path, None, 200).await;
        tok.is("DELETE", path, None, 404).await;
    });
}

/// `sendonce run --once` through an outbox: every approved campaign sent.
fn run_once(env: &Env) {
    let spec = format!("outbox:{}", env.path("out.jsonl").display());
    env.ok(&["run", "--once", "--provider", &spec, "--tick", "50ms"]);
}

/// Send `id` put in doubt, as a lost provider answer would leave it.
fn in_doubt(env: &Env, id: i64) {
    let n = env
        .sqlite()
        .execute(
            "UPDATE sends SET status = 'in_doubt', doubt_since = sent_at WHERE id = ?1",
            [id],
        )
        .unwrap();
    assert_eq!(n, 1);
}

fn campaign(name: &str, lists: &[&str]) -> Value {
    json!({"name": name, "channel": "email", "from": "news@example.org",
           "subject": "Hello {{ name }}", "text": "Hi {{ name }}", "lists": lists})
}

/// Send `send` put in doubt, listed at `doubts`, then resolved once by this token (and
/// recorded as its decision); an unknown send is 404.
async fn resolve_once(env: &Env, tok: &Api<'_>, doubts: &str, send: i64) {
    in_doubt(env, send);
    let d = tok.is("GET", doubts, None, 200).await;
    assert_eq!(d["in_doubt"][0]["send_id"], send, "{d}");
    let resolve = format!("/v1/doubts/{}/resolve", send);
    tok.is("POST", &resolve, Some(json!({"as": "maybe"})), 400)
        .await;
    let r = tok
        .is("POST", &resolve, Some(json!({"as": "sent"})), 200)
        .await;
    assert_eq!(r["status"], "sent");
    tok.is("POST", &resolve, Some(json!({"as": "sent"})), 409)
        .await;
    let by: String = env
        .sqlite()
        .query_row("SELECT last_error FROM sends WHERE id = ?1", [send], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(by.starts_with("resolved as sent by api token "), "{by}");
    tok.is(
        "POST",
        "/v1/doubts/99999/resolve",
        Some(json!({"as": "sent"})),
        404,
    )
    .await;
}

#[test]
fn campaigns_are_created_approved_reported_and_their_doubts_resolved() {
    let env = Env::new();
    let s = setup(&env);
    let tok = api(&env, &s, "acme", "admin");
    rt().block_on(async {
        for i in 0..3 {
            let b = json!({"email": format!("u{i}@example.org"), "name": format!("U{i}")});
            tok.is("POST", "/v1/subscribers", Some(b), 201).await;
        }
        // The CLI's checks: an empty name, a template error, an unknown list (nothing written).
        let mut bad = campaign(" ", &[]);
        tok.is("POST", "/v1/campaigns", Some(bad.clone()), 400)
            .await;
        bad["name"] = json!("x");
        bad["text"] = json!("Hi {{ name");
        tok.is("POST", "/v1/campaigns", Some(bad), 400).await;
        tok.is("POST", "/v1/campaigns", Some(campaign("x", &["nope"])), 404)
            .await;
        let none = tok.is("GET", "/v1/campaigns", None, 200).await;
        assert_eq!(none["campaigns"], json!([]), "{none}");
        let made = tok
            .is("POST", "/v1/campaigns", Some(campaign("spring", &[])), 201)
            .await;
        let id = made["id"].as_i64().unwrap();
        let path = |p: &str| format!("/v1/campaigns/{id}{p}");
        let st = tok.is("GET", &path(""), None, 200).await;
        assert_eq!(
            (&st["status"], &st["total"]),
            (&json!("draft"), &json!(0)),
            "{st}"
        );
        let a = tok.is("POST", &path("/approve"), None, 200).await;
        assert_eq!(a["status"], "approved");
        let e = tok.is("POST", &path("/approve"), None, 409).await;
        assert_eq!(e["error"]["code"], "conflict");
        tok.is("POST", &path("/pause"), None, 200).await;
        let r = tok.is("POST", &path("/resume"), None, 200).await;
        assert_eq!(r["status"], "approved");
        let list = tok
            .is("GET", "/v1/campaigns?status=approved", None, 200)
            .await;
        assert_eq!(list["campaigns"][0]["id"], id, "{list}");
        tok.is("GET", "/v1/campaigns?status=nope", None, 400).await;
        run_once(&env);
        let st = tok.is("GET", &path(""), None, 200).await;
        assert_eq!(
            (&st["status"], &st["sent"]),
            (&json!("sent"), &json!(3)),
            "{st}"
        );
        let sends = tok.all_pages(&path("/report"), "lines").await;
        assert_eq!(sends.len(), 3, "{sends:?}");
        resolve_once(&env, &tok, &path("/doubts"), sends[1]).await;
        // Cancel a second one; cancelling again is a conflict.
        let two = tok
            .is("POST", "/v1/campaigns", Some(campaign("two", &[])), 201)
            .await;
        let cancel = format!("/v1/campaigns/{}/cancel", two["id"]);
        let r = tok.is("POST", &cancel, None, 200).await;
        assert_eq!(r["status"], "cancelled");
        tok.is("POST", &cancel, None, 409).await;
    });
}

#[test]
fn a_read_token_cannot_write_and_a_send_token_cannot_read() {
    let env = Env::new();
    let s = setup(&env);
    let (read, send) = (api(&env, &s, "acme", "read"), api(&env, &s, "acme", "send"));
    rt().block_on(async {
        read.is("GET", "/v1/lists", None, 200).await;
        let b = json!({"name": "news"});
        let e = read.is("POST", "/v1/lists", Some(b), 403).await;
        assert_eq!(e["error"]["code"], "forbidden");
        let b = json!({"email": "a@example.org"});
        read.is("POST", "/v1/subscribers", Some(b), 403).await;
        read.is("POST", "/v1/campaigns/1/cancel", None, 403).await;
        send.is("GET", "/v1/subscribers", None, 403).await;
        send.is("GET", "/v1/campaigns", None, 403).await;
        send.is("GET", "/v1/suppressions", None, 403).await;
    });
    assert_eq!(env.count("SELECT count(*) FROM lists"), 0);
}

/// One account's data of every kind, and the strings that must never reach the other
/// account.
struct Data {
    subscribers: Vec<String>,
    lists: Vec<String>,
    suppressed: String,
    campaigns: Vec<i64>,
    sends: Vec<i64>,
    markers: Vec<String>,
}

/// Subscribers (with email, phone and name), a list, a suppression, a campaign sent (one send
/// in doubt) and a draft, all named after `tag`.
async fn populate(tok: &Api<'_>, tag: &str, n: u8) -> Data {
    let list = format!("{tag}-list");
    let l = tok
        .is("POST", "/v1/lists", Some(json!({"name": list})), 201)
        .await;
    let mut d = Data {
        subscribers: Vec::new(),
        lists: vec![l["id"].to_string(), list.clone()],
        suppressed: format!("{tag}-blocked@{tag}-mail.test"),
        campaigns: Vec::new(),
        sends: Vec::new(),
        markers: vec![list.clone(), format!("{tag}-mail.test")],
    };
    for i in 0..3 {
        let (email, phone, name) = (
            format!("{tag}{i}@{tag}-mail.test"),
            format!("+1415555{n}{i:03}"),
            format!("{tag}-person-{i}"),
        );
        let b = json!({"email": email, "phone": phone, "name": name, "lists": [list]});
        let sub = tok.is("POST", "/v1/subscribers", Some(b), 201).await;
        d.subscribers
            .extend([sub["id"].to_string(), email, phone.clone()]);
        d.markers.extend([phone, name]);
    }
    let b = json!({"channel": "email", "address": d.suppressed});
    tok.is("POST", "/v1/suppressions", Some(b), 201).await;
    for name in [format!("{tag}-campaign"), format!("{tag}-draft")] {
        let made = tok
            .is(
                "POST",
                "/v1/campaigns",
                Some(campaign(&name, &[&list])),
                201,
            )
            .await;
        d.campaigns.push(made["id"].as_i64().unwrap());
        d.markers.push(name);
    }
    let approve = format!("/v1/campaigns/{}/approve", d.campaigns[0]);
    tok.is("POST", &approve, None, 200).await;
    d
}

/// What the rows of both accounts look like (compared before and after the attack).
fn snapshot(env: &Env) -> String {
    let q = |sql: &str| -> String {
        env.sqlite()
            .query_row(sql, [], |r| r.get::<_, Option<String>>(0))
            .unwrap()
            .unwrap_or_default()
    };
    [
        "SELECT group_concat(id || name || status || coalesce(removed_at, ''), ',') FROM subscribers",
        "SELECT group_concat(id || name, ',') FROM lists",
        "SELECT group_concat(address, ',') FROM suppressions",
        "SELECT group_concat(id || status, ',') FROM campaigns",
        "SELECT group_concat(id || status, ',') FROM sends",
        "SELECT group_concat(subscriber_id || '/' || list_id, ',') FROM list_members",
    ]
    .iter()
    .map(|sql| q(sql))
    .collect::<Vec<_>>()
    .join("\n")
}

/// A request of the attack: route (as `ROUTES` names it), path, body, expected status.
struct Req {
    route: &'static str,
    method: &'static str,
    path: String,
    body: Option<Value>,
    want: u16,
}

fn req(route: &'static str, path: String, body: Option<Value>, want: u16) -> Req {
    let (method, route) = route.split_once(' ').unwrap();
    Req {
        route,
        method,
        path,
        body,
        want,
    }
}

/// The ids a test tries that belong to no account: 404 as well.
const ODD: [&str; 2] = ["999999", "abc"];

/// Every request a token may make with the ids of `victim` (404 each, or 400 for a body
/// naming an account, 200 for a listing that must not show them).
fn attacks(victim: &Data) -> Vec<Req> {
    let odd = ODD.map(String::from);
    let mut v = Vec::new();
    for k in victim.subscribers.iter().chain(&odd) {
        let p = format!("/v1/subscribers/{k}");
        let rename = Some(json!({"name": "mallory"}));
        v.push(req("GET /v1/subscribers/{id}", p.clone(), None, 404));
        v.push(req("PATCH /v1/subscribers/{id}", p.clone(), rename, 404));
        v.push(req("DELETE /v1/subscribers/{id}", p, None, 404));
    }
    for k in victim.lists.iter().chain(&odd) {
        let p = format!("/v1/lists/{k}");
        v.push(req("GET /v1/lists/{id}", p.clone(), None, 404));
        v.push(req("DELETE /v1/lists/{id}", p, None, 404));
        let b = json!({"email": "newcomer@own.test", "lists": [k]});
        v.push(req(
            "POST /v1/subscribers",
            "/v1/subscribers".into(),
            Some(b),
            404,
        ));
        let b = campaign("stolen", &[k]);
        v.push(req(
            "POST /v1/campaigns",
            "/v1/campaigns".into(),
            Some(b),
            404,
        ));
    }
    let p = format!("/v1/suppressions/email/{}", victim.suppressed);
    v.push(req(
        "DELETE /v1/suppressions/{channel}/{address}",
        p,
        None,
        404,
    ));
    v.extend(campaign_attacks(victim));
    // The account is never a body field: naming one is refused.
    let b = json!({"name": "mine", "account_id": 1});
    v.push(req("POST /v1/lists", "/v1/lists".into(), Some(b), 400));
    let b = json!({"channel": "email", "address": "a@own.test", "account": "other"});
    v.push(req(
        "POST /v1/suppressions",
        "/v1/suppressions".into(),
        Some(b),
        400,
    ));
    for (route, p) in [
        ("GET /v1/subscribers", "/v1/subscribers?limit=1000"),
        ("GET /v1/lists", "/v1/lists"),
        ("GET /v1/suppressions", "/v1/suppressions"),
        ("GET /v1/campaigns", "/v1/campaigns"),
    ] {
        v.push(req(route, p.into(), None, 200));
    }
    v
}

/// The campaign routes with `victim`'s campaign ids, and doubt resolutions with its send ids.
fn campaign_attacks(victim: &Data) -> Vec<Req> {
    let mut v = Vec::new();
    let ids = victim.campaigns.iter().map(i64::to_string);
    for id in ids.chain(ODD.map(String::from)) {
        for route in [
            "GET /v1/campaigns/{id}",
            "GET /v1/campaigns/{id}/report",
            "GET /v1/campaigns/{id}/doubts",
            "POST /v1/campaigns/{id}/approve",
            "POST /v1/campaigns/{id}/pause",
            "POST /v1/campaigns/{id}/resume",
            "POST /v1/campaigns/{id}/cancel",
        ] {
            let (_, path) = route.split_once(' ').unwrap();
            v.push(req(route, path.replace("{id}", &id), None, 404));
        }
    }
    let sends = victim.sends.iter().map(i64::to_string);
    for (i, id) in sends.chain(ODD.map(String::from)).enumerate() {
        let b = json!({"as": if i % 2 == 0 { "sent" } else { "requeue" }});
        let p = format!("/v1/doubts/{id}/resolve");
        v.push(req("POST /v1/doubts/{send_id}/resolve", p, Some(b), 404));
    }
    v
}

/// Reads of the caller's own data (the control group): 200.
fn controls(own: &Data) -> Vec<Req> {
    let mut v = Vec::new();
    for k in &own.subscribers {
        v.push(req(
            "GET /v1/subscribers/{id}",
            format!("/v1/subscribers/{k}"),
            None,
            200,
        ));
    }
    for k in &own.lists {
        v.push(req(
            "GET /v1/lists/{id}",
            format!("/v1/lists/{k}"),
            None,
            200,
        ));
    }
    for id in &own.campaigns {
        v.push(req(
            "GET /v1/campaigns/{id}",
            format!("/v1/campaigns/{id}"),
            None,
            200,
        ));
        let p = format!("/v1/campaigns/{id}/report");
        v.push(req("GET /v1/campaigns/{id}/report", p, None, 200));
        let p = format!("/v1/campaigns/{id}/doubts");
        v.push(req("GET /v1/campaigns/{id}/doubts", p, None, 200));
    }
    v
}

/// splitmix64: a seeded, replayable sequence.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Counts of the attack.
#[derive(Debug, Default)]
struct Tally {
    requests: usize,
    foreign: usize,
    controls: usize,
    leaks: Vec<String>,
    routes: std::collections::BTreeSet<String>,
}

async fn attack(toks: &[Api<'_>; 2], data: &[Data; 2], seed: u64) -> Tally {
    let sets = [
        [attacks(&data[1]), controls(&data[0])],
        [attacks(&data[0]), controls(&data[1])],
    ];
    let (mut state, mut t) = (seed, Tally::default());
    for _ in 0..1200 {
        let me = (next(&mut state) % 2) as usize;
        let control = next(&mut state).is_multiple_of(8);
        let set = &sets[me][usize::from(control)];
        let r = &set[(next(&mut state) % set.len() as u64) as usize];
        let (status, text) = toks[me].call(r.method, &r.path, r.body.as_ref()).await;
        t.requests += 1;
        t.routes.insert(format!("{} {}", r.method, r.route));
        if control {
            t.controls += 1
        } else {
            t.foreign += 1
        }
        let sent = format!(
            "{} {}",
            r.path,
            r.body.as_ref().map(Value::to_string).unwrap_or_default()
        );
        let shown: Vec<&String> = data[1 - me]
            .markers
            .iter()
            .filter(|m| text.contains(m.as_str()) && !sent.contains(m.as_str()))
            .collect();
        if status != r.want || !shown.is_empty() {
            t.leaks
                .push(format!("{} {} as {me}: {status} {text}", r.method, r.path));
        }
    }
    t
}

#[test]
fn no_request_with_one_accounts_token_reads_or_changes_another_accounts_data() {
    let env = Env::new();
    let s = setup(&env);
    let toks = [
        api(&env, &s, "acme", "admin"),
        api(&env, &s, "other", "admin"),
    ];
    let seed = std::env::var("API_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    println!("cross-account seed {seed} (replay: API_SEED={seed})");
    rt().block_on(async {
        let a = populate(&toks[0], "alpha", 1).await;
        let b = populate(&toks[1], "beta", 2).await;
        let mut data = [a, b];
        run_once(&env);
        for (d, tok) in data.iter_mut().zip(&toks) {
            let p = format!("/v1/campaigns/{}/report", d.campaigns[0]);
            d.sends = tok.all_pages(&p, "lines").await;
            assert_eq!(d.sends.len(), 3);
            in_doubt(&env, d.sends[0]);
        }
        let before = snapshot(&env);
        let t = attack(&toks, &data, seed).await;
        println!(
            "{} requests: {} with the other account's ids, {} controls, {} routes, {} leaks",
            t.requests,
            t.foreign,
            t.controls,
            t.routes.len(),
            t.leaks.len()
        );
        assert!(t.leaks.is_empty(), "seed {seed}: {:#?}", t.leaks);
        assert!(
            t.requests >= 1000 && t.foreign >= 900 && t.controls >= 50,
            "{t:?}"
        );
        assert_eq!(t.routes.len(), 22, "every resource route: {:?}", t.routes);
        assert_eq!(
            snapshot(&env),
            before,
            "seed {seed}: a foreign request changed data"
        );
    });
}

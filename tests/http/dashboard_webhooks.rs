//! The dashboard's webhook endpoints (`/admin/webhooks`, events out) over HTTP, fast tier: an
//! endpoint added through the form with its `whsec_` secret shown once, disabled and enabled
//! (a broken one flagged), a range replayed, its secret rotated, deleted through its
//! confirmation; forged posts refused and another account's admin answered 404. The state is
//! checked through the CLI after each step.

use crate::common::dashboard::{create_admin, Admin, Answer, PASSWORD};
use crate::common::{refused_port, Env, Server};
use serde_json::Value;

fn cli(env: &Env, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&env.ok(&all)).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// acme's endpoints as `endpoint list` shows them.
fn endpoints(env: &Env) -> Vec<Value> {
    let v = cli(env, &["endpoint", "list", "--account", "acme"]);
    v.as_array().expect("a JSON array").clone()
}

/// Endpoint `id` of acme and its deliveries, as `endpoint show` shows them.
fn endpoint(env: &Env, id: &str) -> Value {
    cli(env, &["endpoint", "show", "--account", "acme", id])
}

/// `s` as minijinja's HTML escaping writes it.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#x27;")
        .replace('/', "&#x2f;")
}

/// The `whsec_…` secret a page shows (its text, unescaped), and how many times it shows it.
fn secret_in(body: &str) -> (String, usize) {
    let start = body.find("whsec_").expect("a whsec_ secret on the page");
    let shown = &body[start..start + body[start..].find('<').expect("the end of the secret")];
    let secret = shown.replace("&#x2f;", "/");
    assert!(
        secret.len() > "whsec_".len() + 20
            && secret[6..]
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+/=".contains(c)),
        "{secret:?}"
    );
    (secret, body.matches(shown).count())
}

fn assert_redirect(r: &Answer, to: &str) {
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(r.location(), Some(to));
}

/// acme's `subscriber.*` event ids in the feed (what a replay of every id queues for an
/// endpoint that listens to `subscriber.*`), and whether the feed has other events too.
fn subscriber_events(env: &Env) -> (Vec<String>, bool) {
    let feed = cli(env, &["events", "list", "--account", "acme"]);
    let all = feed["events"].as_array().expect("events").clone();
    let ids: Vec<String> = all
        .iter()
        .filter(|e| e["type"].as_str().unwrap_or("").starts_with("subscriber."))
        .map(|e| e["id"].as_str().expect("an id").to_string())
        .collect();
    let others = all.len() > ids.len();
    (ids, others)
}

fn setup() -> (Env, Server) {
    let env = Env::new();
    env.ok(&["init"]);
    env.ok(&["account", "add", "acme"]);
    env.ok(&["account", "add", "other"]);
    create_admin(&env, "acme", "ana");
    create_admin(&env, "other", "bo");
    for who in ["a@acme-hooks.example", "b@acme-hooks.example"] {
        env.ok(&["subscriber", "add", "--account", "acme", "--email", who]);
    }
    let blocked = "blocked@acme-hooks.example";
    env.ok(&[
        "suppress",
        "add",
        "--account",
        "acme",
        "--channel",
        "email",
        blocked,
    ]);
    let server = Server::start_with_env(
        &env,
        &["--listen", "127.0.0.1:0"],
        &[("SENDONCE_EVENTS_ALLOW", "127.0.0.1")],
    );
    (env, server)
}

/// Add an endpoint through the form: the secret page, then the list without the secret.
/// Returns (id, url, secret).
fn add_endpoint(env: &Env, ana: &Admin) -> (String, String, String) {
    let empty = ana.get("/admin/webhooks");
    assert_eq!(empty.status, 200, "{}", empty.body);
    assert!(
        empty.body.contains("No webhook endpoint yet"),
        "{}",
        empty.body
    );
    let url = format!("http://127.0.0.1:{}/h", refused_port());
    let fields = [
        ("url", url.as_str()),
        ("types", "subscriber.*, campaign.finished"),
        ("ordered", "on"),
    ];
    // Forged (no CSRF token): refused, nothing made.
    assert_eq!(ana.post_raw("/admin/webhooks", &fields).status, 403);
    assert!(endpoints(env).is_empty());
    // A URL that is not http(s): the form again with the problem, nothing made.
    let bad = ana.post(
        "/admin/webhooks",
        &[("url", "ftp://127.0.0.1/h"), ("types", "")],
    );
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body.contains("URLs take webhooks"), "{}", bad.body);
    assert!(
        bad.body.contains(&esc("ftp://127.0.0.1/h")),
        "the typed URL is kept"
    );
    assert!(endpoints(env).is_empty());

    let made = ana.post("/admin/webhooks", &fields);
    assert_eq!(made.status, 200, "{}", made.body);
    assert!(
        made.body.contains("only time the secret is shown"),
        "{}",
        made.body
    );
    let (secret, shown) = secret_in(&made.body);
    assert_eq!(shown, 1, "the secret once on its page: {}", made.body);
    let list = endpoints(env);
    assert_eq!(list.len(), 1, "{list:?}");
    let e = &list[0];
    assert_eq!(e["url"], url.as_str());
    assert_eq!(
        e["types"],
        serde_json::json!(["subscriber.*", "campaign.finished"])
    );
    assert_eq!(
        (&e["ordered"], &e["status"]),
        (&Value::Bool(true), &Value::from("enabled"))
    );
    let id = e["id"].as_i64().expect("an id").to_string();
    assert!(
        made.body
            .contains(&format!("href=\"/admin/webhooks/{id}\"")),
        "{}",
        made.body
    );

    for path in [
        "/admin/webhooks".to_string(),
        format!("/admin/webhooks/{id}"),
    ] {
        let page = ana.get(&path);
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        assert!(page.body.contains(&esc(&url)), "{path}: {}", page.body);
        assert!(
            page.body.contains("subscriber.*, campaign.finished"),
            "{path}"
        );
        assert!(!page.body.contains("whsec_"), "{path} shows a secret");
        assert!(
            !page.body.contains(&esc(&secret)),
            "{path} shows the secret"
        );
    }
    (id, url, secret)
}

/// Disable, enable, and a broken endpoint flagged and restarted by "Enable".
fn disable_and_enable(env: &Env, ana: &Admin, id: &str) {
    let page = format!("/admin/webhooks/{id}");
    let disable = format!("{page}/disable");
    assert_eq!(ana.post_raw(&disable, &[]).status, 403);
    assert_eq!(endpoint(env, id)["endpoint"]["status"], "enabled");
    assert_redirect(&ana.post(&disable, &[]), &format!("{page}?done=disabled"));
    assert_eq!(endpoint(env, id)["endpoint"]["status"], "disabled");
    let shown = ana.get(&format!("{page}?done=disabled"));
    assert!(shown.body.contains("Endpoint disabled"), "{}", shown.body);
    assert!(shown.body.contains(&format!("action=\"{page}/enable\"")));
    assert!(!shown.body.contains(&format!("action=\"{page}/disable\"")));
    assert_redirect(
        &ana.post(&format!("{page}/enable"), &[]),
        &format!("{page}?done=enabled"),
    );
    assert_eq!(endpoint(env, id)["endpoint"]["status"], "enabled");

    // The circuit breaker's mark, as the worker writes it after five days of failures.
    let db = rusqlite::Connection::open(&env.db).expect("open the database");
    let n = db
        .execute(
            "UPDATE hook_endpoints SET status = 'broken', failing_since = 1 WHERE id = ?1",
            [id.parse::<i64>().expect("a number")],
        )
        .expect("mark broken");
    assert_eq!(n, 1);
    drop(db);
    for path in ["/admin/webhooks", page.as_str()] {
        let shown = ana.get(path);
        assert!(shown.body.contains("broken"), "{path}: {}", shown.body);
        assert!(
            shown.body.contains("circuit breaker turned")
                && shown.body.contains("five days of failed deliveries"),
            "{path}: {}",
            shown.body
        );
    }
    assert_redirect(
        &ana.post(&format!("{page}/enable"), &[]),
        &format!("{page}?done=enabled"),
    );
    let after = endpoint(env, id);
    assert_eq!(after["endpoint"]["status"], "enabled");
    assert!(after["endpoint"]["failing_since"].is_null(), "{after}");
    assert!(!ana.get(&page).body.contains("circuit breaker turned"));
}

/// Replay every id of the feed: the endpoint's events queued, the others not.
fn replay_a_range(env: &Env, ana: &Admin, id: &str) {
    let (ids, others) = subscriber_events(env);
    assert!(ids.len() >= 2 && others, "{ids:?} {others}");
    let feed = cli(env, &["events", "list", "--account", "acme"]);
    let all = feed["events"].as_array().expect("events");
    let (first, last) = (&all[0]["id"], &all[all.len() - 1]["id"]);
    let (first, last) = (first.as_str().expect("id"), last.as_str().expect("id"));
    let page = format!("/admin/webhooks/{id}");
    let replay = format!("{page}/replay");
    let range = [("event", ""), ("from", first), ("to", last)];
    assert_eq!(ana.post_raw(&replay, &range).status, 403);
    assert!(endpoint(env, id)["deliveries"]
        .as_array()
        .expect("a list")
        .is_empty());
    // Neither one event nor a whole range, and a range backwards: refused, nothing queued.
    let half = ana.post(&replay, &[("from", first)]);
    assert_eq!(half.status, 400, "{}", half.body);
    assert!(half.body.contains("one event id"), "{}", half.body);
    let back = ana.post(&replay, &[("from", last), ("to", first)]);
    assert_eq!(back.status, 400, "{}", back.body);
    assert!(back.body.contains("is empty"), "{}", back.body);
    assert!(endpoint(env, id)["deliveries"]
        .as_array()
        .expect("a list")
        .is_empty());

    let to = format!("{page}?done=replayed&queued={}", ids.len());
    assert_redirect(&ana.post(&replay, &range), &to);
    let shown = ana.get(&to);
    assert!(
        shown
            .body
            .contains(&format!("{} deliveries queued", ids.len())),
        "{}",
        shown.body
    );
    let d = endpoint(env, id);
    let mut queued: Vec<String> = d["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .map(|x| x["event"].as_str().expect("an event").to_string())
        .collect();
    queued.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(queued, want);
    assert_eq!(d["endpoint"]["pending"], ids.len());
    for e in &ids {
        assert!(
            shown.body.contains(&format!(">{e}<")),
            "{e} not listed: {}",
            shown.body
        );
    }
    assert!(shown.body.contains("pending"));
    // The same events by their times: the same deliveries queued again (none added).
    let times = [
        ("since", "2000-01-01T00:00:00Z"),
        ("until", "2100-01-01T00:00:00Z"),
    ];
    let again = format!("{page}?done=replayed&queued={}", ids.len());
    assert_redirect(&ana.post(&replay, &times), &again);
    assert_eq!(
        endpoint(env, id)["deliveries"].as_array().map(Vec::len),
        Some(ids.len())
    );
    let bad = ana.post(&replay, &[("since", "yesterday"), ("until", "today")]);
    assert_eq!(bad.status, 400, "{}", bad.body);
}

fn rotate(env: &Env, ana: &Admin, id: &str, first: &str) {
    let rotate = format!("/admin/webhooks/{id}/rotate");
    assert_eq!(ana.post_raw(&rotate, &[]).status, 403);
    assert!(endpoint(env, id)["endpoint"]["old_secret_until"].is_null());
    let r = ana.post(&rotate, &[]);
    assert_eq!(r.status, 200, "{}", r.body);
    let (secret, shown) = secret_in(&r.body);
    assert_eq!(shown, 1);
    assert_ne!(secret, first, "a new secret");
    assert!(
        !r.body.contains(&esc(first)),
        "the old secret is not shown again"
    );
    assert!(r.body.contains("for the next 24 hours"), "{}", r.body);
    let until = endpoint(env, id)["endpoint"]["old_secret_until"].clone();
    assert!(until.is_string(), "{until}");
    let page = ana.get(&format!("/admin/webhooks/{id}"));
    assert!(!page.body.contains("whsec_"), "{}", page.body);
}

/// bo, another account's admin: acme's endpoint answers as one that does not exist.
fn another_account(env: &Env, bo: &Admin, id: &str, url: &str) {
    let page = format!("/admin/webhooks/{id}");
    let theirs = bo.get(&page);
    let none = bo.get("/admin/webhooks/987654321");
    assert_eq!((theirs.status, none.status), (404, 404), "{}", theirs.body);
    assert!(!theirs.body.contains(&esc(url)));
    assert_eq!(bo.get("/admin/webhooks/x").status, 404);
    for action in ["disable", "rotate", "delete"] {
        let r = bo.post(&format!("{page}/{action}"), &[]);
        assert_eq!(r.status, 404, "{action}: {}", r.body);
    }
    let r = bo.post(&format!("{page}/replay"), &[("event", "evt_1")]);
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(bo.get(&format!("{page}/delete")).status, 404);
    let list = bo.get("/admin/webhooks");
    assert_eq!(list.status, 200);
    assert!(!list.body.contains(&esc(url)) && list.body.contains("No webhook endpoint yet"));
    let e = endpoint(env, id)["endpoint"].clone();
    assert_eq!(e["status"], "enabled", "{e}");
}

fn delete(env: &Env, ana: &Admin, id: &str, url: &str) {
    let confirm = format!("/admin/webhooks/{id}/delete");
    let c = ana.get(&confirm);
    assert_eq!(c.status, 200, "{}", c.body);
    assert!(
        c.body.contains("Yes, delete it") && c.body.contains(&esc(url)),
        "{}",
        c.body
    );
    assert_eq!(
        endpoints(env).len(),
        1,
        "the confirmation page deletes nothing"
    );
    assert_eq!(ana.post_raw(&confirm, &[]).status, 403);
    assert_eq!(endpoints(env).len(), 1);
    let to = format!("/admin/webhooks?done=deleted&id={id}");
    assert_redirect(&ana.post(&confirm, &[]), &to);
    assert!(endpoints(env).is_empty());
    let list = ana.get(&to);
    assert!(
        list.body
            .contains(&format!("Webhook endpoint {id} is deleted")),
        "{}",
        list.body
    );
    assert!(!list.body.contains(&esc(url)));
    assert_eq!(ana.get(&format!("/admin/webhooks/{id}")).status, 404);
}

#[test]
fn an_endpoint_is_added_shown_once_replayed_rotated_and_deleted() {
    let (env, server) = setup();
    let ana = Admin::login(&server.base, "ana", PASSWORD);
    let bo = Admin::login(&server.base, "bo", PASSWORD);
    let nav = ana.get("/admin/campaigns");
    assert!(
        nav.body.contains("href=\"/admin/webhooks\""),
        "no nav entry"
    );
    let (id, url, secret) = add_endpoint(&env, &ana);
    disable_and_enable(&env, &ana, &id);
    replay_a_range(&env, &ana, &id);
    rotate(&env, &ana, &id, &secret);
    another_account(&env, &bo, &id, &url);
    delete(&env, &ana, &id, &url);
}

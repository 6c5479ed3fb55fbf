//! Isolation over every dashboard route (`sendonce::http::dashboard::route_list()`): without a
//! session nothing is shown or changed, another account's admin gets 404 for acme's ids exactly
//! as for ids that do not exist, and a post without its CSRF token changes nothing. Routes added
//! later are covered with no edit here; a path parameter this file does not know fails the test.

use crate::common::dashboard::{create_admin, Admin, PASSWORD};
use crate::common::{Env, Server};
use sendonce::domain::address::Channel;
use sendonce::store::sqlite::SqliteStore;
use sendonce::store::{ClaimRequest, Ledger, OpenOptions, Outcome, Record};
use serde_json::Value;

/// Distinctive strings of acme's data: none may show on bo's pages.
const ACME_MARKS: &[&str] = &[
    "Quixotic Acme Campaign",
    "zanzibar-acme-list",
    "zed.acme@acme-only.example",
    "Zorblax Acmeson",
    "blocked.acme@acme-only.example",
    "acme-token-xyzzy",
    "acme-hook-xyzzy",
];

/// An id no row has.
const MISSING: &str = "987654321";

/// acme's ids, by path parameter name.
struct Ids {
    campaign: String,
    list: String,
    subscriber: String,
    send_id: String,
    token: String,
    webhook: String,
}

impl Ids {
    fn missing() -> Ids {
        Ids {
            campaign: MISSING.into(),
            list: MISSING.into(),
            subscriber: MISSING.into(),
            send_id: MISSING.into(),
            token: MISSING.into(),
            webhook: MISSING.into(),
        }
    }

    fn param(&self, name: &str) -> Option<&str> {
        Some(match name {
            "id" => &self.campaign,
            "list" => &self.list,
            "subscriber" => &self.subscriber,
            "send_id" => &self.send_id,
            "token" => &self.token,
            "webhook" => &self.webhook,
            _ => return None,
        })
    }
}

/// `path` with its `{param}` segments replaced by `ids`; panics on a parameter it does not know
/// (add it to `Ids`).
fn substitute(path: &str, ids: &Ids) -> String {
    path.split('/')
        .map(
            |seg| match seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                Some(name) => ids
                    .param(name)
                    .unwrap_or_else(|| {
                        panic!(
                            "route {path}: unknown path parameter {{{name}}}; add a substitution \
                         for it to tests/http/dashboard_isolation.rs (Ids)"
                        )
                    })
                    .to_string(),
                None => seg.to_string(),
            },
        )
        .collect::<Vec<_>>()
        .join("/")
}

fn has_params(path: &str) -> bool {
    path.contains('{')
}

/// Routes anyone may reach without a session.
fn public(method: &str, path: &str) -> bool {
    path == "/admin/login"
        || path.starts_with("/admin/static/")
        || (method == "GET" && path == "/admin")
}

fn json(env: &Env, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&env.ok(&all)).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn id_of(v: &Value) -> String {
    v["id"].as_i64().expect("an id").to_string()
}

/// Two accounts: acme (admin ana) with a list, a subscriber, a campaign sending with one send
/// in doubt, a suppression, a token and a webhook endpoint; other (admin bo) with nothing.
fn setup() -> (Env, Ids) {
    let env = Env::new();
    env.ok(&["init"]);
    env.ok(&["account", "add", "acme"]);
    env.ok(&["account", "add", "other"]);
    create_admin(&env, "acme", "ana");
    create_admin(&env, "other", "bo");
    let list = id_of(&json(
        &env,
        &["list", "create", "--account", "acme", "zanzibar-acme-list"],
    ));
    let subscriber = id_of(&json(
        &env,
        &[
            "subscriber",
            "add",
            "--account",
            "acme",
            "--email",
            "zed.acme@acme-only.example",
            "--name",
            "Zorblax Acmeson",
            "--list",
            &list,
        ],
    ));
    let body = env.write("body.txt", "Hello {{ name }}\n");
    let campaign = id_of(&json(
        &env,
        &[
            "campaign",
            "create",
            "--account",
            "acme",
            "--name",
            "Quixotic Acme Campaign",
            "--channel",
            "email",
            "--from",
            "news@acme-only.example",
            "--subject",
            "Hi",
            "--body-file",
            body.to_str().unwrap(),
            "--list",
            &list,
        ],
    ));
    json(
        &env,
        &[
            "suppress",
            "add",
            "--account",
            "acme",
            "--channel",
            "email",
            "blocked.acme@acme-only.example",
        ],
    );
    let token = id_of(&json(
        &env,
        &[
            "token",
            "create",
            "--account",
            "acme",
            "--name",
            "acme-token-xyzzy",
            "--scope",
            "send",
        ],
    ));
    json(&env, &["campaign", "approve", &campaign]);
    let send_id = park_in_doubt(&env, campaign.parse().unwrap());
    let ids = Ids {
        campaign,
        list,
        subscriber,
        send_id: send_id.to_string(),
        token,
        webhook: webhook(&env),
    };
    (env, ids)
}

/// acme's webhook endpoint (a loopback URL, let in by `SENDONCE_EVENTS_ALLOW`); its id.
fn webhook(env: &Env) -> String {
    let out = env
        .cmd()
        .env("SENDONCE_EVENTS_ALLOW", "127.0.0.1")
        .args(["--json", "endpoint", "add", "--account", "acme"])
        .args(["--url", "http://127.0.0.1:9/acme-hook-xyzzy"])
        .output()
        .expect("run sendonce endpoint add");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let made: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    id_of(&made)
}

/// Start campaign `cid`, build its list, lease its one row and record the call's outcome as
/// unknown: a send in doubt (through the store, as a worker whose call timed out would).
fn park_in_doubt(env: &Env, cid: i64) -> i64 {
    let s = SqliteStore::open(&env.db, &OpenOptions::default()).unwrap();
    let now = sendonce::domain::clock::now_ms();
    assert_eq!(s.start_due_campaigns(now).unwrap(), vec![cid]);
    while !s.build_list_chunk(cid, 100).unwrap() {}
    // The rows are due from the moment they were built.
    let now = sendonce::domain::clock::now_ms() + 1;
    let claimed = s
        .claim(&ClaimRequest {
            campaign_id: cid,
            account_id: 1,
            channel: Channel::Email,
            batch: 10,
            lease_ms: 60_000,
            token: 7,
            owner: "test".into(),
            key_window_ms: None,
            now,
        })
        .unwrap();
    assert_eq!(claimed.rows.len(), 1);
    let id = claimed.rows[0].id;
    let stats = s
        .record(
            &[Record {
                id,
                token: 7,
                outcome: Outcome::InDoubt {
                    error: "timed out".into(),
                },
            }],
            now,
        )
        .unwrap();
    assert_eq!(stats.in_doubt, 1);
    id
}

/// acme's state as the CLI shows it: campaign, list, subscribers, suppressions, tokens, doubts,
/// admins.
fn snapshot(env: &Env, ids: &Ids) -> Value {
    serde_json::json!({
        "campaign": json(env, &["campaign", "status", &ids.campaign]),
        "campaigns": json(env, &["campaign", "list", "--account", "acme"]),
        "list": json(env, &["list", "show", "--account", "acme", &ids.list]),
        "subscribers": json(env, &["subscriber", "list", "--account", "acme"]),
        "suppressions": json(env, &["suppress", "list", "--account", "acme"]),
        "tokens": json(env, &["token", "list", "--account", "acme"]),
        "webhooks": json(env, &["endpoint", "list", "--account", "acme"]),
        "doubts": json(env, &["doubts", "list", "--campaign", &ids.campaign]),
        "admins": json(env, &["admin", "list"]),
    })
}

fn assert_to_login(what: &str, r: &crate::common::dashboard::Answer) {
    assert_eq!(r.status, 303, "{what}: {}", r.body);
    let to = r.location().unwrap_or("");
    assert!(to.starts_with("/admin/login"), "{what} led to {to:?}");
}

fn assert_nothing_of_acme(what: &str, body: &str) {
    for mark in ACME_MARKS {
        assert!(!body.contains(mark), "{what} shows acme's {mark:?}");
    }
}

#[test]
fn every_route_is_scoped_to_the_admins_account() {
    let (env, ids) = setup();
    let server = Server::start(&env, &[]);
    let before = snapshot(&env, &ids);
    let routes = sendonce::http::dashboard::route_list();
    assert!(
        routes.iter().any(|(_, p)| *p == "/admin/campaigns"),
        "{routes:?}"
    );
    let anon = Admin::anonymous(&server.base);
    let ana = Admin::login(&server.base, "ana", PASSWORD);
    let bo = Admin::login(&server.base, "bo", PASSWORD);
    // ana sees her own data (the marks are real), bo does not.
    let own = ana.get("/admin/campaigns");
    assert!(own.body.contains("Quixotic Acme Campaign"), "{}", own.body);
    let mut checked = 0;
    for (method, route) in &routes {
        let what = format!("{method} {route}");
        let path = substitute(route, &ids);
        let missing = substitute(route, &Ids::missing());
        match *method {
            "GET" => get_route(&what, route, &path, &missing, &anon, &ana, &bo),
            "POST" => post_route(&what, route, &path, &missing, &anon, &ana, &bo),
            other => panic!("{what}: method {other} is not covered by this test"),
        }
        assert_eq!(snapshot(&env, &ids), before, "{what} changed acme's data");
        checked += 1;
    }
    assert_eq!(checked, routes.len());
    // Both sessions lived through every forged post (logout included).
    assert_eq!(ana.get("/admin/campaigns").status, 200);
    assert_eq!(bo.get("/admin/campaigns").status, 200);
}

fn get_route(
    what: &str,
    route: &str,
    path: &str,
    missing: &str,
    anon: &Admin,
    ana: &Admin,
    bo: &Admin,
) {
    let r = anon.get(path);
    if public("GET", route) {
        assert!(
            r.status == 200 || r.status == 303,
            "{what} without a session: {}",
            r.status
        );
        assert_nothing_of_acme(what, &r.body);
    } else {
        assert_to_login(&format!("{what} without a session"), &r);
    }
    let mine = ana.get(path);
    assert!(
        mine.status != 404 && mine.status < 500,
        "{what} as ana on her own ids: {} {}",
        mine.status,
        mine.body
    );
    let theirs = bo.get(path);
    assert_nothing_of_acme(&format!("{what} as bo"), &theirs.body);
    if has_params(route) {
        assert_eq!(
            theirs.status, 404,
            "{what} as bo on acme's ids: {}",
            theirs.body
        );
        let none = bo.get(missing);
        assert_eq!(none.status, 404, "{what} as bo on a missing id");
    } else if theirs.status == 303 {
        let to = theirs.location().unwrap_or("");
        assert!(to.starts_with("/admin/"), "{what} as bo led to {to:?}");
    }
}

fn post_route(
    what: &str,
    route: &str,
    path: &str,
    missing: &str,
    anon: &Admin,
    ana: &Admin,
    bo: &Admin,
) {
    if route == "/admin/login" {
        // No nonce cookie or field: refused, no session.
        let r = anon.post_raw(path, &[("name", "ana"), ("password", PASSWORD)]);
        assert_eq!(r.status, 403, "{what} without its nonce");
        assert!(r
            .headers
            .get_all("set-cookie")
            .iter()
            .all(|c| !c.to_str().unwrap_or("").starts_with("sendonce_session=")));
        return;
    }
    let r = anon.post_raw(path, &[]);
    assert_to_login(&format!("{what} without a session"), &r);
    let forged = ana.post_raw(path, &[]);
    if forged.status == 400 || forged.status == 415 {
        // A multipart form (a CSV upload) refuses a urlencoded body before its CSRF check: the
        // same post as multipart, without the token, must be refused as forged.
        let status = post_multipart_without_csrf(ana, path);
        assert_eq!(status, 403, "{what} as ana, multipart without a CSRF token");
        return post_as_bo(what, route, path, missing, bo);
    }
    assert_eq!(
        forged.status, 403,
        "{what} as ana without a CSRF token: {}",
        forged.body
    );
    post_as_bo(what, route, path, missing, bo);
}

/// bo, with a valid CSRF token, on a route with acme's ids: answered as an id that does not
/// exist.
fn post_as_bo(what: &str, route: &str, path: &str, missing: &str, bo: &Admin) {
    if has_params(route) {
        // bo, with a valid CSRF token: acme's id answers as an id that does not exist.
        let theirs = bo.post(path, &[]);
        let none = bo.post(missing, &[]);
        assert_nothing_of_acme(&format!("{what} as bo"), &theirs.body);
        assert_eq!(
            (theirs.status, strip_ids(&theirs.body, path)),
            (none.status, strip_ids(&none.body, missing)),
            "{what} as bo: acme's id answers unlike a missing one"
        );
        // 404, or a 400 for fields the form lacks that a missing id gets alike (the handler
        // refused before reading anything).
        assert!(
            theirs.status == 404 || theirs.status == 400,
            "{what} as bo on acme's ids: {} {}",
            theirs.status,
            theirs.body
        );
    }
}

/// POST an empty multipart form (no `csrf` field) with ana's session cookie; the status.
fn post_multipart_without_csrf(ana: &Admin, path: &str) -> u16 {
    let boundary = "sendonceisolationboundary";
    let body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.csv\"\r\n\
         Content-Type: text/csv\r\n\r\nemail\r\nx@example.org\r\n--{boundary}--\r\n"
    );
    let client = crate::common::client();
    crate::common::rt().block_on(async {
        client
            .post(format!("{}{path}", ana.base))
            .header("cookie", &ana.cookie)
            .header(
                "content-type",
                format!("multipart/form-data; boundary={boundary}"),
            )
            .body(body)
            .send()
            .await
            .expect("request")
            .status()
            .as_u16()
    })
}
/// A page with the ids of `path` blanked (an error page may name the id it was asked for).
fn strip_ids(body: &str, path: &str) -> String {
    // The answer's title and the text of its alert with the path's ids taken out: the same
    // for acme's id and a missing one. (Not the whole page: a short id such as 1 also occurs
    // in the page's markup.)
    let between = |from: &str, to: &str| -> String {
        body.split_once(from)
            .and_then(|(_, rest)| rest.split_once(to))
            .map_or(String::new(), |(inner, _)| inner.to_string())
    };
    let mut b = format!(
        "{} | {}",
        between("<title>", "</title>"),
        between("role=\"alert\">", "<")
    );
    for seg in path
        .split('/')
        .filter(|s| s.chars().all(|c| c.is_ascii_digit()) && !s.is_empty())
    {
        b = b.replace(seg, "N");
    }
    b
}

#[test]
fn substitution_covers_known_params_and_refuses_unknown_ones() {
    let ids = Ids::missing();
    assert_eq!(
        substitute("/admin/lists/{list}/subscribers/{subscriber}", &ids),
        format!("/admin/lists/{MISSING}/subscribers/{MISSING}")
    );
    let unknown = std::panic::catch_unwind(|| substitute("/admin/x/{thing}", &Ids::missing()));
    assert!(unknown.is_err());
}

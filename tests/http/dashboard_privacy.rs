//! The dashboard's subscriber page (`/admin/subscribers/{id}`, crates/http/src/dashboard/
//! subscribers.rs): a subscriber's fields, lists and consent records (one declared with
//! `subscriber add --basis`, one through the API with its client's address and user agent),
//! its export as a JSON download equal to `subscriber export`, and its erasure through the
//! confirmation page; forged posts change nothing, another account's admin gets 404, erasing
//! twice shows the app's conflict. Tier 1 walks it in Chromium at 360 px, from the keyboard.
// Some tests here need tools outside Rust (tier 1); without them their helpers go unused.
#![cfg_attr(not(feature = "tier1"), allow(unused_imports, dead_code))]

use crate::common::dashboard::{create_admin, scenario, Admin, Answer, PASSWORD};
use crate::common::{client, output_dir, rt, token, Env, Server};
use serde_json::{json, Value};

const BASIS: &str = "ticked the box at the spring fair";

fn cli(env: &Env, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&env.ok(&all)).unwrap_or_else(|e| panic!("{args:?}: {e}"))
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

/// Accounts acme (admin ana: list Weekly, subscriber ann added by the CLI with a basis) and
/// other (admin bo); the server, the list's id and ann's id.
fn setup() -> (Env, Server, String, String) {
    let env = Env::new();
    env.ok(&["init"]);
    env.ok(&["account", "add", "acme"]);
    env.ok(&["account", "add", "other"]);
    create_admin(&env, "acme", "ana");
    create_admin(&env, "other", "bo");
    let list = cli(&env, &["list", "create", "--account", "acme", "Weekly"])["id"].to_string();
    let ann = cli(
        &env,
        &[
            "subscriber",
            "add",
            "--account",
            "acme",
            "--email",
            "ann@example.org",
            "--name",
            "Ann Quillfeather",
            "--attr",
            "city=Tromsø",
            "--list",
            "Weekly",
            "--basis",
            BASIS,
        ],
    )["id"]
        .to_string();
    let server = Server::start(&env, &[]);
    (env, server, list, ann)
}

/// `subscriber export` of acme's subscriber `key`, without its `exported_at` (and the
/// `store` every `--json` document of the CLI names).
fn exported(env: &Env, key: &str) -> Value {
    let mut v = cli(env, &["subscriber", "export", "--account", "acme", key]);
    if let Some(o) = v.as_object_mut() {
        o.remove("exported_at");
        o.remove("store");
    }
    v
}

/// An opt-in through the API (`POST /v1/subscribers`) with the consent its client declares;
/// the new subscriber's id.
fn api_opt_in(env: &Env, server: &Server, list: &str) -> String {
    let tok = token(env, "acme", "admin");
    let body = json!({"email": "fay@example.org", "lists": [list],
        "consent": {"basis": "contract", "ip": "198.51.100.23",
                    "user_agent": "App/4 <b>bold</b>", "text": "Terms v2"}});
    rt().block_on(async {
        let res = client()
            .post(server.url("/v1/subscribers"))
            .bearer_auth(&tok)
            .json(&body)
            .send()
            .await
            .expect("POST /v1/subscribers");
        let status = res.status().as_u16();
        let v: Value = res.json().await.expect("JSON");
        assert_eq!(status, 201, "{v}");
        v["id"].to_string()
    })
}

fn assert_page(r: &Answer, wants: &[&str]) {
    assert_eq!(r.status, 200, "{}", r.body);
    for want in wants {
        assert!(
            r.body.contains(want),
            "{want:?} not on the page: {}",
            r.body
        );
    }
    assert!(!r.body.contains("<script"), "a script on the page");
}

#[test]
fn the_subscriber_page_shows_its_lists_and_consents_and_exports_them() {
    let (env, server, list, ann) = setup();
    let ana = Admin::login(&server.base, "ana", PASSWORD);
    let members = ana.get(&format!("/admin/lists/{list}"));
    assert_page(&members, &[&format!("href=\"/admin/subscribers/{ann}\"")]);
    let page = ana.get(&format!("/admin/subscribers/{ann}"));
    assert_page(
        &page,
        &[
            "ann@example.org",
            "Ann Quillfeather",
            "city=Tromsø",
            "confirmed",
            &format!("href=\"/admin/lists/{list}\">Weekly</a>"),
            "<td>cli</td>",
            BASIS,
            &format!("href=\"/admin/subscribers/{ann}/export\""),
            &format!("href=\"/admin/subscribers/{ann}/erase\""),
        ],
    );
    // An API opt-in: its client's address as the consent_ip policy kept it (a /24 by default),
    // its user agent escaped, the text the person saw.
    let fay = api_opt_in(&env, &server, &list);
    let page = ana.get(&format!("/admin/subscribers/{fay}"));
    assert_page(
        &page,
        &[
            "<td>api</td>",
            "contract",
            &esc("198.51.100.0/24"),
            &esc("App/4 <b>bold</b>"),
            "Terms v2",
        ],
    );
    assert!(!page.body.contains("<b>bold</b>"), "{}", page.body);
    assert!(!page.body.contains("198.51.100.23"), "{}", page.body);

    // The export: a JSON download, the CLI's document.
    let x = ana.get(&format!("/admin/subscribers/{ann}/export"));
    assert_eq!(x.status, 200, "{}", x.body);
    let header = |name: &str| x.headers.get(name).and_then(|v| v.to_str().ok());
    assert_eq!(header("content-type"), Some("application/json"));
    assert_eq!(
        header("content-disposition").map(str::to_string),
        Some(format!("attachment; filename=\"subscriber-{ann}.json\""))
    );
    assert_eq!(header("cache-control"), Some("no-store"));
    let mut doc: Value = serde_json::from_str(&x.body).expect("the export is JSON");
    assert!(doc["exported_at"].is_string(), "{doc}");
    if let Some(o) = doc.as_object_mut() {
        o.remove("exported_at");
    }
    assert_eq!(doc, exported(&env, "ann@example.org"));
    assert_eq!(doc["subscriber"]["email"], "ann@example.org");
    assert_eq!(doc["consents"][0]["source"], "cli");
    assert_eq!(doc["consents"][0]["basis"], BASIS);
    assert_eq!(doc["consents"][0]["list"], "Weekly");

    // Not an id: not found, as a missing one.
    for path in ["ann@example.org", "+1", "0", "987654321", "-1"] {
        let r = ana.get(&format!("/admin/subscribers/{path}"));
        assert_eq!(r.status, 404, "{path}: {}", r.body);
        assert_eq!(
            ana.get(&format!("/admin/subscribers/{path}/export")).status,
            404
        );
    }
}

#[test]
fn erasure_through_the_confirmation_leaves_nothing_personal() {
    let (env, server, _list, ann) = setup();
    let ana = Admin::login(&server.base, "ana", PASSWORD);
    let bo = Admin::login(&server.base, "bo", PASSWORD);
    let erase = format!("/admin/subscribers/{ann}/erase");
    let before = exported(&env, &ann);

    // Another account's admin: 404 for every route, as for an id that does not exist.
    for path in [
        format!("/admin/subscribers/{ann}"),
        format!("/admin/subscribers/{ann}/export"),
        erase.clone(),
    ] {
        let r = bo.get(&path);
        assert_eq!(r.status, 404, "{path}: {}", r.body);
        assert!(!r.body.contains("ann@example.org") && !r.body.contains("Quillfeather"));
    }
    assert_eq!(bo.post(&erase, &[]).status, 404);
    // A forged post (no CSRF token): refused, nothing erased.
    assert_eq!(ana.post_raw(&erase, &[]).status, 403);
    assert_eq!(
        ana.post_raw(&erase, &[("csrf", "not-the-token")]).status,
        403
    );
    assert_eq!(exported(&env, &ann), before);

    let confirm = ana.get(&erase);
    assert_page(
        &confirm,
        &[
            "Erase ann@example.org?",
            "cannot be undone",
            "SHA-256",
            "suppressed",
            "consent records",
            &format!("action=\"/admin/subscribers/{ann}/erase\""),
            &format!("name=\"csrf\" value=\"{}\"", ana.csrf),
            "Yes, erase",
        ],
    );
    assert_eq!(
        exported(&env, &ann),
        before,
        "the confirmation changes nothing"
    );

    let done = ana.post(&erase, &[]);
    assert_eq!(done.status, 303, "{}", done.body);
    let to = format!("/admin/subscribers/{ann}?done=erased");
    assert_eq!(done.location(), Some(to.as_str()));
    let page = ana.get(&to);
    assert_page(
        &page,
        &["Subscriber erased", "sha256:", "No consent records"],
    );
    for gone in [
        "ann@example.org",
        "Quillfeather",
        "Tromsø",
        BASIS,
        "Yes, erase",
    ] {
        assert!(
            !page.body.contains(gone),
            "{gone:?} still shown: {}",
            page.body
        );
    }
    let after = exported(&env, &ann);
    assert_eq!(after["subscriber"]["email"], Value::Null, "{after}");
    let norm = after["subscriber"]["email_normalised"]
        .as_str()
        .unwrap_or("");
    assert!(norm.starts_with("sha256:"), "{after}");
    assert_eq!(after["consents"], json!([]), "{after}");

    // Twice: the app's conflict, shown as it says it.
    let again = ana.post(&erase, &[]);
    assert_eq!(again.status, 409, "{}", again.body);
    assert!(again.body.contains("erased already"), "{}", again.body);
    let confirm = ana.get(&erase);
    assert_page(&confirm, &["was erased already"]);
    assert!(!confirm.body.contains("Yes, erase"), "{}", confirm.body);
    assert_eq!(bo.get(&format!("/admin/subscribers/{ann}")).status, 404);
}

#[cfg(feature = "tier1")]
#[test]
fn the_subscriber_page_and_its_erasure_in_the_browser() {
    let (env, server, _list, ann) = setup();
    let out = output_dir("dashboard");
    let fetch_export = format!(
        "(async () => {{ const r = await fetch('/admin/subscribers/{ann}/export'); \
         return [r.status, r.headers.get('content-type'), \
         r.headers.get('content-disposition'), await r.text()]; }})()"
    );
    let v = scenario(
        &server.base,
        &out,
        360,
        json!([
            {"login": ["ana", PASSWORD]},
            {"goto": "/admin/lists"},
            {"follow": "Weekly"},
            {"follow": "ann@example.org"},
            {"expect_text": "Ann Quillfeather"},
            {"expect_text": BASIS},
            {"expect_text": "city=Tromsø"},
            {"screenshot": "subscriber-360"},
            {"no_overflow": true},
            {"eval": fetch_export, "record": "export"},
            {"follow": "Erase"},
            {"expect_text": "cannot be undone"},
            {"expect_text": "SHA-256"},
            {"screenshot": "subscriber-erase-360"},
            {"no_overflow": true},
            {"click": "Yes, erase", "keyboard": true},
            {"expect_text": "Subscriber erased"},
            {"expect_no_text": "ann@example.org"},
            {"expect_no_text": "Ann Quillfeather"},
            {"expect_no_text": BASIS},
            {"screenshot": "subscriber-erased-360"},
            {"no_overflow": true},
            {"follow": "Weekly"},
            {"expect_no_text": "ann@example.org"},
        ]),
    );
    let x = &v["records"]["export"];
    assert_eq!(x[0], 200, "{x}");
    assert_eq!(x[1], "application/json", "{x}");
    assert_eq!(
        x[2],
        format!("attachment; filename=\"subscriber-{ann}.json\"")
    );
    let doc: Value = serde_json::from_str(x[3].as_str().unwrap_or("")).expect("JSON");
    assert_eq!(doc["subscriber"]["name"], "Ann Quillfeather");
    assert_eq!(doc["consents"][0]["basis"], BASIS);
    let after = exported(&env, &ann);
    assert_eq!(after["subscriber"]["name"], Value::Null, "{after}");
    for shot in [
        "subscriber-360",
        "subscriber-erase-360",
        "subscriber-erased-360",
    ] {
        crate::common::assert_png(&out.join(format!("{shot}.png")), 2000, None);
    }
}

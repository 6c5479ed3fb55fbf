//! The dashboard's audience pages in a browser and over HTTP: lists, a list's members (search,
//! add, unsubscribe through a confirmation), CSV import with its preview, suppressions (search,
//! add, remove with a reason); forged posts change nothing; another account's admin sees none
//! of it.
// Some tests here need tools outside Rust (tier 1); without them their helpers go unused.
#![cfg_attr(not(feature = "tier1"), allow(unused_imports, dead_code))]

use crate::common::dashboard::{create_admin, scenario, Admin, PASSWORD};
use crate::common::{output_dir, Env, Server};
use serde_json::{json, Value};

fn setup() -> (Env, Server) {
    let env = Env::new();
    env.ok(&["init"]);
    env.ok(&["account", "add", "acme"]);
    env.ok(&["account", "add", "other"]);
    create_admin(&env, "acme", "ana");
    create_admin(&env, "other", "bo");
    let server = Server::start(&env, &[]);
    (env, server)
}

fn cli(env: &Env, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&env.ok(&all)).expect("JSON")
}

/// The list's memberships by email, as `list show` counts them.
fn counts(env: &Env, list: &str) -> (u64, u64) {
    let l = cli(env, &["list", "show", "--account", "acme", list]);
    (
        l["subscribed"].as_u64().unwrap(),
        l["unsubscribed"].as_u64().unwrap(),
    )
}

fn suppressed(env: &Env) -> Vec<String> {
    cli(env, &["suppress", "list", "--account", "acme"])["suppressions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["address"].as_str().unwrap().to_string())
        .collect()
}

/// Scenario steps given in parts (one `json!` of them all is too deep for the macro).
fn steps(parts: &[Value]) -> Value {
    Value::Array(
        parts
            .iter()
            .flat_map(|p| p.as_array().cloned().unwrap_or_default())
            .collect(),
    )
}

const CSV: &str = "email,name,city\n\
                   carl@example.org,Carl,Oslo\n\
                   not-an-address,Bad,Rome\n\
                   dana@example.org,Dana,\n\
                   CARL@example.org,Again,Bergen\n\
                   eve@example.org,Eve,Lima\n";

#[cfg(feature = "tier1")]
#[test]
fn lists_import_unsubscribe_and_suppressions_in_the_browser() {
    let (env, server) = setup();
    let out = output_dir("dashboard");
    let csv = env.write("people.csv", CSV);
    let v = scenario(
        &server.base,
        &out,
        360,
        steps(&[
            json!([
            {"login": ["ana", PASSWORD]},
            {"goto": "/admin/lists"},
            {"expect_text": "No lists yet."},
            {"screenshot": "lists-empty-360"},
            {"no_overflow": true},
            {"follow": "New list"},
            {"fill": {"Name": "Weekly"}},
            {"screenshot": "lists-new-360"},
            {"no_overflow": true},
            {"click": "Create list", "keyboard": true},
            {"expect_text": "List created."},
            {"fill": {"Email": "Ann@Example.org", "Name (optional)": "Ann"}},
            {"click": "Add subscriber", "keyboard": true},
            {"expect_text": "Subscriber added."},
            {"expect_text": "Ann@Example.org"},
            {"follow": "Import a CSV file"},
            {"screenshot": "import-form-360"},
            {"no_overflow": true},
            {"upload": {"CSV file": csv}},
            {"click": "Preview", "keyboard": true},
            {"expect_text": "3 rows to import"},
            {"expect_text": "2 with errors"},
            {"expect_text": "line 3"},
            {"expect_text": "invalid email address"},
            {"expect_text": "line 5"},
            {"expect_text": "duplicate: carl@example.org already appears on line 2"},
            {"expect_text": "city=Oslo"},
            {"screenshot": "import-preview-360"},
            {"no_overflow": true},
            ]),
            json!([
            {"click": "Import 3 subscribers", "keyboard": true},
            {"expect_text": "Imported 3, skipped 2."},
            {"expect_text": "4 subscribed"},
            {"screenshot": "lists-members-360"},
            {"no_overflow": true},
            {"fill": {"Search": "da"}},
            {"click": "Search", "keyboard": true},
            {"expect_text": "dana@example.org"},
            {"expect_no_text": "eve@example.org"},
            {"screenshot": "lists-search-360"},
            {"no_overflow": true},
            {"follow": "Unsubscribe dana@example.org"},
            {"expect_text": "Unsubscribe from Weekly?"},
            {"screenshot": "lists-unsubscribe-360"},
            {"no_overflow": true},
            {"click": "Unsubscribe", "keyboard": true},
            {"expect_text": "Unsubscribed from this list."},
            {"expect_text": "3 subscribed"},
            {"goto": "/admin/lists"},
            {"expect_text": "Weekly"},
            {"screenshot": "lists-360"},
            {"no_overflow": true},
            ]),
            json!([
            {"goto": "/admin/suppressions"},
            {"expect_text": "No suppressions"},
            {"fill": {"Email or phone (E.164)": "Mallory@Example.net", "Reason": "asked by phone"}},
            {"click": "Suppress", "keyboard": true},
            {"expect_text": "Address suppressed."},
            {"fill": {"Search": "MALL"}},
            {"click": "Search", "keyboard": true},
            {"expect_text": "mallory@example.net"},
            {"expect_text": "asked by phone"},
            {"screenshot": "suppressions-search-360"},
            {"no_overflow": true},
            {"follow": "Remove mallory@example.net"},
            {"expect_text": "Remove a suppression?"},
            {"fill": {"Reason": "added by mistake"}},
            {"screenshot": "suppressions-remove-360"},
            {"no_overflow": true},
            {"click": "Remove suppression", "keyboard": true},
            {"expect_text": "Suppression removed."},
            {"expect_no_text": "mallory@example.net"},
            {"screenshot": "suppressions-360"},
            {"no_overflow": true},
            ]),
        ]),
    );
    assert!(v["console_errors"].as_array().is_none_or(|a| a.is_empty()));
    // The CLI sees what the pages did.
    assert_eq!(counts(&env, "Weekly"), (3, 1));
    let subs = cli(&env, &["subscriber", "list", "--account", "acme"]);
    let emails: Vec<&str> = subs["subscribers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["email"].as_str())
        .collect();
    assert_eq!(
        emails,
        [
            "Ann@Example.org",
            "carl@example.org",
            "dana@example.org",
            "eve@example.org"
        ]
    );
    assert!(suppressed(&env).is_empty());
    for shot in [
        "lists-members-360",
        "import-preview-360",
        "suppressions-360",
    ] {
        crate::common::assert_png(&out.join(format!("{shot}.png")), 2000, None);
    }
    env.assert_counters();
}

/// A multipart body with `fields` and the file `csv` (field `file`).
fn multipart(fields: &[(&str, &str)], csv: &[u8]) -> (String, Vec<u8>) {
    let b = "XBOUNDARYx1234";
    let mut body = Vec::new();
    for (k, v) in fields {
        body.extend_from_slice(
            format!("--{b}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n")
                .as_bytes(),
        );
    }
    body.extend_from_slice(
        format!(
            "--{b}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x.csv\"\r\n\
             Content-Type: text/csv\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(csv);
    body.extend_from_slice(format!("\r\n--{b}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={b}"), body)
}

fn post_multipart(base: &str, a: &Admin, path: &str, ct: &str, body: Vec<u8>) -> u16 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let req = client
        .post(format!("{base}{path}"))
        .header("cookie", &a.cookie)
        .header("content-type", ct)
        .body(body);
    rt.block_on(async { req.send().await.unwrap().status().as_u16() })
}

#[test]
fn forged_posts_change_nothing_and_other_accounts_see_nothing() {
    let (env, server) = setup();
    let ana = Admin::login(&server.base, "ana", PASSWORD);
    assert_eq!(
        ana.post("/admin/lists/new", &[("name", "Weekly")]).status,
        303
    );
    let list = cli(&env, &["list", "show", "--account", "acme", "Weekly"])["id"]
        .as_i64()
        .unwrap()
        .to_string();
    let members = format!("/admin/lists/{list}/subscribers");
    assert_eq!(
        ana.post(&members, &[("email", "ann@example.org")]).status,
        303
    );
    let sub = cli(
        &env,
        &["subscriber", "show", "--account", "acme", "ann@example.org"],
    )["id"]
        .as_i64()
        .unwrap()
        .to_string();
    let unsub = format!("/admin/lists/{list}/subscribers/{sub}/unsubscribe");
    let import = format!("/admin/lists/{list}/import");
    let commit = format!("/admin/lists/{list}/import/commit");
    assert_eq!(
        ana.post(
            "/admin/suppressions",
            &[("address", "kept@example.org"), ("reason", "r")]
        )
        .status,
        303
    );

    // Forged posts (no CSRF token): 403, nothing written.
    let forged: &[(&str, &[(&str, &str)])] = &[
        ("/admin/lists/new", &[("name", "Forged")]),
        (&members, &[("email", "forged@example.org")]),
        (&unsub, &[]),
        (
            "/admin/suppressions",
            &[("address", "forged@example.org"), ("reason", "x")],
        ),
        (
            "/admin/suppressions/remove",
            &[("address", "kept@example.org"), ("reason", "x")],
        ),
    ];
    for (path, fields) in forged {
        assert_eq!(ana.post_raw(path, fields).status, 403, "{path}");
    }
    let csv: &[u8] = b"email\nforged@example.org\n";
    for path in [&import, &commit] {
        let (ct, body) = multipart(&[("csrf", "not-the-token")], csv);
        assert_eq!(
            post_multipart(&server.base, &ana, path, &ct, body),
            403,
            "{path}"
        );
        let (ct, body) = multipart(&[], csv);
        assert_eq!(
            post_multipart(&server.base, &ana, path, &ct, body),
            403,
            "{path}"
        );
    }
    assert_eq!(counts(&env, "Weekly"), (1, 0));
    assert_eq!(
        cli(&env, &["list", "list", "--account", "acme"])["lists"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(suppressed(&env), ["kept@example.org"]);
    let subs = cli(&env, &["subscriber", "list", "--account", "acme"]);
    assert_eq!(subs["subscribers"].as_array().unwrap().len(), 1);

    // The real token through multipart: the preview writes nothing, the commit imports.
    let (ct, body) = multipart(&[("csrf", &ana.csrf)], csv);
    assert_eq!(post_multipart(&server.base, &ana, &import, &ct, body), 200);
    assert_eq!(counts(&env, "Weekly"), (1, 0));
    // A file that is not UTF-8: a clear error, nothing written.
    let (ct, body) = multipart(&[("csrf", &ana.csrf)], b"email\nj\xe9@example.org\n");
    assert_eq!(post_multipart(&server.base, &ana, &commit, &ct, body), 400);
    assert_eq!(counts(&env, "Weekly"), (1, 0));
    let (ct, body) = multipart(&[("csrf", &ana.csrf)], csv);
    assert_eq!(post_multipart(&server.base, &ana, &commit, &ct, body), 303);
    assert_eq!(counts(&env, "Weekly"), (2, 0));

    // Another account's admin: 404 on acme's ids, nothing of acme's on its pages.
    let bo = Admin::login(&server.base, "bo", PASSWORD);
    for path in [
        format!("/admin/lists/{list}"),
        unsub.clone(),
        import.clone(),
    ] {
        assert_eq!(bo.get(&path).status, 404, "{path}");
    }
    assert_eq!(bo.post(&members, &[("email", "x@example.org")]).status, 404);
    assert_eq!(bo.post(&unsub, &[]).status, 404);
    for path in [&import, &commit] {
        let (ct, body) = multipart(&[("csrf", &bo.csrf)], csv);
        assert_eq!(
            post_multipart(&server.base, &bo, path, &ct, body),
            404,
            "{path}"
        );
    }
    assert_eq!(
        bo.get("/admin/suppressions/remove?address=kept%40example.org")
            .status,
        404
    );
    assert_eq!(
        bo.post(
            "/admin/suppressions/remove",
            &[("address", "kept@example.org"), ("reason", "x")]
        )
        .status,
        404
    );
    let lists = bo.get("/admin/lists");
    assert_eq!(lists.status, 200);
    assert!(!lists.body.contains("Weekly"), "{}", lists.body);
    let sup = bo.get("/admin/suppressions?q=kept");
    assert_eq!(sup.status, 200);
    assert!(!sup.body.contains("kept@example.org"));
    assert_eq!(counts(&env, "Weekly"), (2, 0));
    assert_eq!(suppressed(&env), ["kept@example.org"]);

    // Bad input: 400 naming the problem, nothing written.
    let bad = ana.post(
        "/admin/suppressions",
        &[("address", "nope"), ("reason", "r")],
    );
    assert_eq!(bad.status, 400, "{}", bad.body);
    let no_reason = ana.post(
        "/admin/suppressions/remove",
        &[("address", "kept@example.org"), ("reason", " ")],
    );
    assert_eq!(no_reason.status, 400);
    assert!(no_reason.body.contains("give a reason"));
    assert_eq!(suppressed(&env), ["kept@example.org"]);
}

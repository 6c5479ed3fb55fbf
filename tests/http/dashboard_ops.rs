//! The dashboard's operations pages: sends in doubt resolved through confirmations, API tokens
//! made (shown once), used, revoked, and the settings page with the doctor's findings; forged
//! posts, another account's ids, and secrets that must appear nowhere.
// Some tests here need tools outside Rust (tier 1); without them their helpers go unused.
#![cfg_attr(not(feature = "tier1"), allow(unused_imports, dead_code))]

use crate::common::dashboard::{bin, create_admin, create_operator, scenario, Admin, PASSWORD};
use crate::common::{output_dir, Env, Fake, Server};
use serde_json::{json, Value};
use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// A fake secret put in the server's environment: no page or log may show it.
const FAKE_SECRET: &str = "re_H3fakeSecretValue_9f8e7d6c5b4a";

/// `sendonce serve` on a free port with `vars` in its environment and its log (stderr) kept
/// in a file.
fn serve_logged(env: &Env, vars: &[(&str, &str)]) -> (Server, PathBuf) {
    let log = env.path("serve.log");
    let file = std::fs::File::create(&log).unwrap();
    let mut cmd = Command::new(bin());
    cmd.arg("--db")
        .arg(&env.db)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env_remove("SENDONCE_PROVIDER")
        .env_remove("SENDONCE_LISTEN")
        .env("SENDONCE_LOG", "debug")
        .envs(vars.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(file));
    let mut child = cmd.spawn().expect("spawn sendonce serve");
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let base = first
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
        .to_string();
    (Server { child, base }, log)
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Three recipients left in doubt for real: the fake provider stores each message and drops
/// the connection before answering, and the provider has no idempotency keys, so the worker
/// cannot know and parks them. Returns (campaign id, send ids in doubt).
fn three_in_doubt(env: &Env) -> (String, Vec<i64>) {
    let (_acct, cid) = env.setup_campaign(3);
    env.ok(&["campaign", "approve", &cid]);
    let fake = Fake::start(
        &env.path("deliveries.jsonl"),
        &["--no-idempotent", "--drop-after-accept-rate", "1"],
    );
    let spec = format!("webhook:{}/send#timeout=5s", fake.base());
    let r = env.run(&["run", "--once", "--provider", &spec, "--tick", "20ms"]);
    let conn = env.sqlite();
    let mut st = conn
        .prepare("SELECT id FROM sends WHERE status = 'in_doubt' ORDER BY id")
        .unwrap();
    let ids: Vec<i64> = st
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(ids.len(), 3, "run: {} {}", r.stdout, r.stderr);
    (cid, ids)
}

fn report(env: &Env, cid: &str) -> Vec<Value> {
    let out = env.ok(&["campaign", "report", cid, "--format", "json"]);
    serde_json::from_str(&out).unwrap()
}

fn row(rows: &[Value], send: i64) -> &Value {
    rows.iter()
        .find(|r| r["send_id"] == send)
        .unwrap_or_else(|| panic!("send {send} in {rows:?}"))
}

#[cfg(feature = "tier1")]
#[test]
fn doubts_are_resolved_through_confirmations() {
    let env = Env::new();
    let (cid, ids) = three_in_doubt(&env);
    create_admin(&env, "acme", "ana");
    env.ok(&["account", "add", "other"]);
    create_admin(&env, "other", "bo");
    let server = Server::start(&env, &[]);
    let ana = Admin::login(&server.base, "ana", PASSWORD);
    let list = ana.get("/admin/doubts");
    assert_eq!(list.status, 200);
    for i in 0..3 {
        assert!(
            list.body.contains(&format!("user{i}@example.com")),
            "{}",
            list.body
        );
    }
    assert!(
        list.body.contains("no provider configured"),
        "{}",
        list.body
    );
    let (s1, s2, s3) = (ids[0], ids[1], ids[2]);
    let path = |id: i64| format!("/admin/doubts/{id}/resolve");

    // Forged: no CSRF token. Refused, nothing changed.
    assert_eq!(ana.post_raw(&path(s1), &[("as", "sent")]).status, 403);
    assert_eq!(row(&report(&env, &cid), s1)["status"], "in_doubt");
    // Bad input: neither choice.
    let bad = ana.post(&path(s1), &[("as", "maybe")]);
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body.contains("as=sent"), "{}", bad.body);
    assert_eq!(ana.get(&format!("{}?as=maybe", path(s1))).status, 400);

    // Another account: acme's sends do not exist for bo.
    let bo = Admin::login(&server.base, "bo", PASSWORD);
    assert_eq!(bo.get(&format!("{}?as=sent", path(s1))).status, 404);
    assert_eq!(bo.post(&path(s1), &[("as", "sent")]).status, 404);
    assert_eq!(bo.post(&path(s1), &[("as", "requeue")]).status, 404);
    assert_eq!(bo.get("/admin/doubts/nope/resolve?as=sent").status, 404);
    let theirs = bo.get("/admin/doubts");
    assert_eq!(theirs.status, 200);
    assert!(!theirs.body.contains("example.com"), "{}", theirs.body);
    assert!(
        theirs.body.contains("No send is in doubt"),
        "{}",
        theirs.body
    );
    assert_eq!(row(&report(&env, &cid), s1)["status"], "in_doubt");

    let out = output_dir("dashboard");
    scenario(
        &server.base,
        &out,
        360,
        json!([
            {"login": ["ana", PASSWORD]},
            {"goto": "/admin/doubts"},
            {"expect_text": "user0@example.com"},
            {"screenshot": "doubts-list-360"},
            {"no_overflow": true},
            {"goto": format!("{}?as=sent", path(s1))},
            {"expect_text": "was delivered"},
            {"expect_text": "ana (dashboard)"},
            {"screenshot": "doubts-confirm-360"},
            {"no_overflow": true},
            {"click": "Yes, mark as sent", "keyboard": true},
            {"expect_text": format!("Send {s1} resolved: it is now sent")},
            {"screenshot": "doubts-resolved-360"},
            {"no_overflow": true},
            {"goto": format!("{}?as=requeue", path(s2))},
            {"expect_text": "was not delivered"},
            {"click": "Yes, send again"},
            {"expect_text": format!("Send {s2} resolved: it is now queued to be sent again")},
            {"expect_no_text": "user0@example.com"},
            {"expect_no_text": "user1@example.com"},
            {"expect_text": "user2@example.com"},
        ]),
    );
    let rows = report(&env, &cid);
    let (r1, r2, r3) = (row(&rows, s1), row(&rows, s2), row(&rows, s3));
    assert_eq!(r1["status"], "sent", "{r1}");
    assert!(
        r1["reason"].as_str().unwrap().contains("ana (dashboard)"),
        "{r1}"
    );
    assert_eq!(r2["status"], "queued", "{r2}");
    assert!(
        r2["reason"].as_str().unwrap().contains("ana (dashboard)"),
        "{r2}"
    );
    assert_eq!(r3["status"], "in_doubt", "{r3}");
    // Deciding again on a decided send: a conflict that names its state.
    let again = ana.post(&path(s1), &[("as", "requeue")]);
    assert_eq!(again.status, 409, "{}", again.body);
    assert!(again.body.contains("not in_doubt"), "{}", again.body);
    for name in [
        "doubts-list-360",
        "doubts-confirm-360",
        "doubts-resolved-360",
    ] {
        crate::common::assert_png(&out.join(format!("{name}.png")), 2000, None);
    }
}

/// The token text on the "new token" page: `so_` and 43 base64url characters.
fn token_in(text: &str) -> String {
    let at = text
        .find("so_")
        .unwrap_or_else(|| panic!("no token in {text}"));
    let t: String = text[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .collect();
    assert_eq!(t.len(), 46, "{t}");
    t
}

fn tokens(env: &Env, account: &str) -> Vec<Value> {
    let doc = json_of(&env.ok(&["--json", "token", "list", "--account", account]));
    doc["tokens"].as_array().unwrap().clone()
}

fn api_status(base: &str, token: &str) -> u16 {
    let rt = crate::common::rt();
    rt.block_on(async {
        crate::common::client()
            .get(format!("{base}/v1/subscribers"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    })
}

#[cfg(feature = "tier1")]
#[test]
fn a_token_is_made_shown_once_used_and_revoked() {
    let env = Env::new();
    env.setup_account();
    create_admin(&env, "acme", "ana");
    env.ok(&["account", "add", "other"]);
    create_admin(&env, "other", "bo");
    let (mut server, log) = serve_logged(&env, &[]);
    let out = output_dir("dashboard");
    let v = scenario(
        &server.base,
        &out,
        360,
        json!([
            {"login": ["ana", PASSWORD]},
            {"goto": "/admin/tokens"},
            {"expect_text": "No API token yet"},
            {"screenshot": "tokens-list-360"},
            {"no_overflow": true},
            {"fill": {"Name": "acme-ci-reader"}},
            {"select": {"Scope": "read"}},
            {"click": "Create token", "keyboard": true},
            {"expect_text": "Copy it now"},
            {"record": "created"},
            {"screenshot": "tokens-created-360"},
            {"no_overflow": true},
        ]),
    );
    let token = token_in(v["records"]["created"]["text"].as_str().unwrap());
    let list = tokens(&env, "acme");
    assert_eq!(list.len(), 1);
    assert_eq!(
        (&list[0]["name"], &list[0]["scope"]),
        (&json!("acme-ci-reader"), &json!("read"))
    );
    let id = list[0]["id"].as_i64().unwrap();
    assert_eq!(api_status(&server.base, &token), 200);

    let ana = Admin::login(&server.base, "ana", PASSWORD);
    let again = ana.get("/admin/tokens");
    assert!(again.body.contains("acme-ci-reader"), "{}", again.body);
    assert!(!again.body.contains(&token), "the token is shown once only");
    // Bad input: the form again, 400, the problem named, nothing made.
    let bad = ana.post("/admin/tokens", &[("name", " "), ("scope", "read")]);
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("the token name is empty"), "{}", bad.body);
    let bad = ana.post("/admin/tokens", &[("name", "x"), ("scope", "root")]);
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("unknown token scope"), "{}", bad.body);
    // Forged posts: nothing made, nothing revoked.
    let forged = ana.post_raw("/admin/tokens", &[("name", "forged"), ("scope", "admin")]);
    assert_eq!(forged.status, 403);
    let revoke = format!("/admin/tokens/{id}/revoke");
    assert_eq!(ana.post_raw(&revoke, &[]).status, 403);
    let list = tokens(&env, "acme");
    assert_eq!(list.len(), 1, "{list:?}");
    assert!(list[0]["revoked_at"].is_null());
    assert_eq!(api_status(&server.base, &token), 200);
    // Another account: acme's token does not exist for bo.
    let bo = Admin::login(&server.base, "bo", PASSWORD);
    assert_eq!(bo.get(&revoke).status, 404);
    assert_eq!(bo.post(&revoke, &[]).status, 404);
    assert_eq!(bo.get("/admin/tokens/x/revoke").status, 404);
    let theirs = bo.get("/admin/tokens");
    assert!(!theirs.body.contains("acme-ci-reader"), "{}", theirs.body);
    assert!(tokens(&env, "acme")[0]["revoked_at"].is_null());

    scenario(
        &server.base,
        &out,
        360,
        json!([
            {"login": ["ana", PASSWORD]},
            {"goto": revoke},
            {"expect_text": "will authenticate nothing"},
            {"screenshot": "tokens-revoke-360"},
            {"no_overflow": true},
            {"click": "Yes, revoke it", "keyboard": true},
            {"expect_text": format!("Token {id} is revoked")},
            {"screenshot": "tokens-revoked-360"},
            {"no_overflow": true},
        ]),
    );
    assert!(!tokens(&env, "acme")[0]["revoked_at"].is_null());
    assert_eq!(api_status(&server.base, &token), 401);
    server.sigterm();
    // The token's text is in neither the database (its files' bytes) nor the server's log.
    for f in [env.db.clone(), env.path("t.db-wal"), log] {
        if let Ok(bytes) = std::fs::read(&f) {
            let hay = String::from_utf8_lossy(&bytes);
            assert!(!hay.contains(&token), "the token is in {}", f.display());
            assert!(
                !hay.contains(&token[3..]),
                "the token is in {}",
                f.display()
            );
        }
    }
    for name in ["tokens-list-360", "tokens-created-360", "tokens-revoke-360"] {
        crate::common::assert_png(&out.join(format!("{name}.png")), 2000, None);
    }
}

#[cfg(feature = "tier1")]
#[test]
fn settings_show_the_configuration_and_doctor_without_secrets() {
    let env = Env::new();
    env.setup_account();
    create_operator(&env, "acme", "ana");
    let (mut server, log) = serve_logged(
        &env,
        &[
            ("SENDONCE_RESEND_API_KEY", FAKE_SECRET),
            ("SENDONCE_SMTP_PASSWORD", "smtp-H3-fake-password-123"),
        ],
    );
    let out = output_dir("dashboard");
    let v = scenario(
        &server.base,
        &out,
        360,
        json!([
            {"login": ["ana", PASSWORD]},
            {"goto": "/admin/settings"},
            {"expect_status": 200},
            {"expect_text": "Effective settings"},
            {"expect_text": "SENDONCE_RESEND_API_KEY"},
            {"expect_text": format!("set ({} chars)", FAKE_SECRET.len())},
            {"expect_text": "Doctor"},
            // The first visit starts the doctor on its own thread; the page never waits for
            // it and shows its findings once it has them.
            {"wait_text": "quick_check", "timeout": 30000},
            {"record": "settings"},
            {"screenshot": "settings-360"},
            {"no_overflow": true},
            {"expect_text": "s ago in"},
            {"follow": "check again"},
            {"expect_text": "quick_check"},
        ]),
    );
    let text = v["records"]["settings"]["text"].as_str().unwrap();
    assert!(text.contains(&env.db.display().to_string()), "{text}");
    let ana = Admin::login(&server.base, "ana", PASSWORD);
    for path in [
        "/admin/settings",
        "/admin/settings?fresh=1",
        "/admin/doubts",
        "/admin/tokens",
    ] {
        let page = ana.get(path);
        assert_eq!(page.status, 200, "{path}");
        for secret in [FAKE_SECRET, "smtp-H3-fake-password-123"] {
            assert!(!page.body.contains(secret), "{path} shows a secret");
        }
    }
    server.sigterm();
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(!logged.contains(FAKE_SECRET), "the log has the secret");
    crate::common::assert_png(&out.join("settings-360.png"), 2000, None);
}

/// Issue 37: an account's admin sees its own account's settings only (its webhook's secret
/// variable), never the database path, the default provider spec or another account's
/// webhook; an operator (`admin create --operator`) sees the server's; `admin list` shows each
/// one's role.
#[test]
fn settings_show_server_wide_parts_to_operators_only() {
    let env = Env::new();
    env.setup_account();
    env.ok(&["account", "add", "globex"]);
    create_admin(&env, "acme", "ana");
    create_operator(&env, "acme", "ola");
    // The default provider comes from the file (the page shows the file's and the
    // environment's settings; `serve --provider` is the worker's, refused without --worker).
    let outbox = env.path("SPEC-MARKER-outbox.jsonl");
    let config = env.write(
        "sendonce.toml",
        format!(
            "provider = \"outbox:{}\"\n\
             [[webhook]]\naccount = \"acme\"\nsource = \"standard\"\nsecret_env = \"ACME_HOOK_SECRET\"\n\
             [[webhook]]\naccount = \"globex\"\nsource = \"standard\"\nsecret_env = \"GLOBEX_HOOK_SECRET\"\n",
            outbox.display()
        ),
    );
    let mut server = Server::start_with_env(
        &env,
        &[
            "--listen",
            "127.0.0.1:0",
            "--config",
            config.to_str().unwrap(),
        ],
        &[
            (
                "ACME_HOOK_SECRET",
                "whsec_YWNtZS1ob29rLXNlY3JldC0wMTIzNDU2Nzg5",
            ),
            (
                "GLOBEX_HOOK_SECRET",
                "whsec_Z2xvYmV4LWhvb2stc2VjcmV0LTAxMjM0NTY3ODk=",
            ),
        ],
    );
    // The database path as the page writes it (minijinja escapes `/` as `&#x2f;`).
    let db = html_escaped(&env.db.display().to_string());
    let ana = Admin::login(&server.base, "ana", PASSWORD).get("/admin/settings");
    assert_eq!(ana.status, 200, "{}", ana.body);
    assert!(ana.body.contains("ACME_HOOK_SECRET"), "{}", ana.body);
    for server_wide in [
        db.as_str(),
        "SPEC-MARKER",
        "GLOBEX_HOOK_SECRET",
        "SENDONCE_RESEND_API_KEY",
        "Effective settings",
        "Doctor",
    ] {
        assert!(
            !ana.body.contains(server_wide),
            "an account admin sees {server_wide:?}: {}",
            ana.body
        );
    }
    let ola = Admin::login(&server.base, "ola", PASSWORD).get("/admin/settings");
    assert_eq!(ola.status, 200, "{}", ola.body);
    for server_wide in [db.as_str(), "SPEC-MARKER", "GLOBEX_HOOK_SECRET", "Doctor"] {
        assert!(
            ola.body.contains(server_wide),
            "no {server_wide:?}: {}",
            ola.body
        );
    }
    server.sigterm();
    let list = env.ok(&["admin", "list"]);
    let role = |name: &str| {
        list.lines()
            .find(|l| l.split('\t').nth(2) == Some(name))
            .and_then(|l| l.split('\t').nth(3))
            .map(str::to_string)
    };
    assert!(list.starts_with("ID\tACCOUNT\tNAME\tROLE"), "{list}");
    assert_eq!(role("ana").as_deref(), Some("account"), "{list}");
    assert_eq!(role("ola").as_deref(), Some("operator"), "{list}");
    let json: Value = serde_json::from_str(&env.ok(&["--json", "admin", "list"])).unwrap();
    let roles: Vec<&str> = json["admins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["role"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(roles, ["account", "operator"], "{json}");
}

/// `s` as minijinja's HTML escaping writes it.
fn html_escaped(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#x27;")
        .replace('/', "&#x2f;")
}

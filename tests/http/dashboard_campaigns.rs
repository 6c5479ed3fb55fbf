//! The dashboard's campaign pages (`crates/http/src/dashboard/campaigns/`, `overview.rs`): a draft
//! made from the form in headless Chromium at 360 px, its audience, the preview with its HTML
//! sandboxed, approval through the confirmation page, the campaign watched until it is sent by
//! `serve --worker` through the fake provider, the recipients searched and the CSV downloaded;
//! every action over HTTP; forged posts refused; another account's admin sees none of it.
// Some tests here need tools outside Rust (tier 1); without them their helpers go unused.
#![cfg_attr(not(feature = "tier1"), allow(unused_imports, dead_code))]

use crate::common::dashboard::{create_admin, scenario, Admin, PASSWORD};
use crate::common::{output_dir, Env, Fake, Server};
use serde_json::{json, Value};
use std::path::Path;

/// Accounts acme (admin ana; list `news` with five confirmed subscribers) and other (admin bo).
fn accounts() -> Env {
    let env = Env::new();
    env.ok(&["init"]);
    env.ok(&["account", "add", "acme"]);
    env.ok(&["account", "add", "other"]);
    create_admin(&env, "acme", "ana");
    create_admin(&env, "other", "bo");
    env.ok(&["list", "create", "--account", "acme", "news"]);
    let mut csv = String::from("email,name\n");
    for i in 0..5 {
        csv.push_str(&format!("user{i}@example.com,User {i}\n"));
    }
    let f = env.write("subs.csv", csv);
    let args = [
        "subscriber",
        "import",
        "--account",
        "acme",
        "--list",
        "news",
    ];
    env.ok(&[&args[..], &[f.to_str().unwrap()]].concat());
    env
}

/// A draft of acme made with the CLI; its id.
fn cli_draft(env: &Env, name: &str) -> String {
    let body = env.write("body.txt", "Hello {{ name }}\n");
    env.ok(&[
        "campaign",
        "create",
        "--account",
        "acme",
        "--name",
        name,
        "--channel",
        "email",
        "--from",
        "news@example.org",
        "--subject",
        "Hi {{ name }}",
        "--body-file",
        body.to_str().unwrap(),
    ])
}

fn status(env: &Env, id: &str) -> Value {
    serde_json::from_str(&env.ok(&["--json", "campaign", "status", id])).unwrap()
}

fn campaign_count(env: &Env) -> usize {
    let v: Value = serde_json::from_str(&env.ok(&["--json", "campaign", "list"])).unwrap();
    v["campaigns"].as_array().unwrap().len()
}

/// In the browser at 360 px: ana makes a draft, previews, approves and watches it until sent.
fn make_approve_and_watch_in_the_browser(base: &str, out: &Path) -> Value {
    scenario(
        base,
        out,
        360,
        json!([
            {"login": ["ana", PASSWORD]},
            {"goto": "/admin/campaigns/new"},
            {"fill": {"Name": "Spring news", "From": "news@example.org",
                      "Subject": "Hello {{ name }}", "Text": "Hi {{ name }}, spring is here.",
                      "HTML (optional)": "<p>Hi <b>{{ name }}</b>, spring is here.</p>"}},
            {"check": "news"},
            {"screenshot": "campaigns-new-360"},
            {"no_overflow": true},
            {"click": "Create draft", "keyboard": true},
            {"expect_status": 200},
            {"expect_text": "Draft created."},
            {"expect_text": "Status: draft"},
            {"expect_text": "5 would receive it"},
            {"record": "draft"},
            {"screenshot": "campaigns-draft-360"},
            {"no_overflow": true},
            {"follow": "Preview"},
            {"expect_text": "Hello User 0"},
            {"expect_text": "Hi User 0, spring is here."},
            {"eval": "(() => { const f = document.querySelector('iframe.preview'); return [f.getAttribute('sandbox'), f.contentDocument === null, window.frames.length]; })()",
             "record": "frame"},
            {"screenshot": "campaigns-preview-360"},
            {"no_overflow": true},
            {"follow": "Back to the campaign"},
            {"follow": "Approve"},
            {"expect_text": "Approve this campaign?"},
            {"screenshot": "campaigns-confirm-360"},
            {"no_overflow": true},
            {"click": "Yes, approve", "keyboard": true},
            {"expect_text": "Campaign approved"},
            {"wait_text": "Status: sent", "timeout": 60000},
            {"screenshot": "campaigns-sent-360"},
            {"no_overflow": true},
            {"follow": "Recipients"},
            {"expect_text": "user4@example.com"},
            {"fill": {"Address starts with": "USER3"}},
            {"click": "Search", "keyboard": true},
            {"expect_text": "user3@example.com"},
            {"expect_no_text": "user1@example.com"},
            {"screenshot": "campaigns-recipients-360"},
            {"no_overflow": true},
            {"goto": "/admin/campaigns"},
            {"expect_text": "Spring news"},
            {"screenshot": "campaigns-list-360"},
            {"no_overflow": true},
        ]),
    )
}

/// Checks the browser's records (the preview frame, the screenshots); the campaign's id.
fn check_the_browser_run(v: &Value, out: &Path) -> String {
    let url = v["records"]["draft"]["url"].as_str().unwrap();
    let id = url
        .split("/admin/campaigns/")
        .nth(1)
        .and_then(|rest| rest.split('?').next())
        .unwrap()
        .to_string();
    assert_eq!(
        v["records"]["frame"],
        json!(["", true, 1]),
        "{}",
        v["records"]
    );
    for shot in [
        "new",
        "draft",
        "preview",
        "confirm",
        "sent",
        "recipients",
        "list",
    ] {
        crate::common::assert_png(&out.join(format!("campaigns-{shot}-360.png")), 2000, None);
    }
    id
}

/// Checks the campaign's page, the list, the sandboxed HTML part and the CSV report over HTTP.
fn check_the_pages_and_the_report(a: &Admin, fake: &Fake, id: &str) {
    // The route is named by its kind, never by its spec (it holds the fake's URL here).
    let shown = a.get(&format!("/admin/campaigns/{id}"));
    assert!(
        shown
            .body
            .contains("Provider: default (webhook); this server&#x27;s worker sends it"),
        "{}",
        shown.body
    );
    assert!(!shown.body.contains(&fake.url("/send")), "{}", shown.body);
    // The list shows a finished campaign's numbers as its page does, not "—".
    let list = a.get("/admin/campaigns");
    assert!(list.body.contains("5 of 5</progress>"), "{}", list.body);
    let html = a.get(&format!(
        "/admin/campaigns/{id}/preview/html?subscriber=user2@example.com"
    ));
    assert_eq!(html.status, 200);
    assert!(html.body.contains("<b>User 2</b>"), "{}", html.body);
    let csp = html.headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.starts_with("sandbox;") && csp.contains("default-src 'none'"),
        "{csp}"
    );
    let csv = a.get(&format!("/admin/campaigns/{id}/recipients.csv"));
    assert_eq!(csv.status, 200);
    assert!(csv.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/csv"));
    let mut r = csv::Reader::from_reader(csv.body.as_bytes());
    let header: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
    assert_eq!(header[2..4], ["address", "status"]);
    let rows: Vec<csv::StringRecord> = r.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 5);
    assert!(rows
        .iter()
        .all(|row| &row[3] == "sent" && !row[7].is_empty()));
    let mut addrs: Vec<&str> = rows.iter().map(|row| row.get(2).unwrap()).collect();
    addrs.sort();
    assert_eq!(addrs[0], "user0@example.com");
}

/// Checks the live numbers the script reads and the script itself.
fn check_the_progress_and_the_script(a: &Admin, id: &str) {
    // Live numbers for the script, and the script itself.
    let p = a.get(&format!("/admin/campaigns/{id}/progress.json"));
    let p: Value = serde_json::from_str(&p.body).unwrap();
    assert_eq!(
        (p["status"].as_str(), p["done"].as_u64()),
        (Some("sent"), Some(5))
    );
    assert_eq!(p["settled"], true);
    let js = a.get("/admin/static/dashboard.js");
    assert_eq!(js.status, 200);
    assert!(js.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/javascript"));
    assert!(js.body.contains("data-live"));
}

#[cfg(feature = "tier1")]
#[test]
fn a_campaign_is_made_approved_watched_and_reported_in_the_browser() {
    let env = accounts();
    let fake = Fake::start(&env.path("fake.jsonl"), &[]);
    let spec = format!("webhook:{}", fake.url("/send"));
    let server = Server::start(&env, &["--worker", "--provider", spec.as_str()]);
    let out = output_dir("dashboard");
    let v = make_approve_and_watch_in_the_browser(&server.base, &out);
    let id = check_the_browser_run(&v, &out);

    // The CLI sees what the browser did.
    let st = status(&env, &id);
    assert_eq!(st["status"], "sent", "{st}");
    assert_eq!(
        (st["total"].as_u64(), st["sent"].as_u64()),
        (Some(5), Some(5))
    );
    assert_eq!(fake.lines().len(), 5);

    // The HTML part is served under the sandboxing CSP; the CSV is the whole report.
    let a = Admin::login(&server.base, "ana", PASSWORD);
    check_the_pages_and_the_report(&a, &fake, &id);
    check_the_progress_and_the_script(&a, &id);
}

#[test]
fn the_form_names_a_bad_field_and_keeps_the_values() {
    let env = accounts();
    let server = Server::start(&env, &[]);
    let a = Admin::login(&server.base, "ana", PASSWORD);
    let fields = [
        ("name", "Kept name"),
        ("channel", "pigeon"),
        ("subject", "Kept subject"),
        ("text", "hi"),
    ];
    let r = a.post("/admin/campaigns/new", &fields);
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.body
            .contains("channel &quot;pigeon&quot; is neither email nor sms")
            || r.body.contains("neither email nor sms"),
        "{}",
        r.body
    );
    assert!(r.body.contains("value=\"Kept name\"") && r.body.contains("Kept subject"));
    let r = a.post(
        "/admin/campaigns/new",
        &[("name", " "), ("channel", "email"), ("text", "hi")],
    );
    assert_eq!(r.status, 400);
    assert!(r.body.contains("the campaign name is empty"), "{}", r.body);
    let r = a.post(
        "/admin/campaigns/new",
        &[
            ("name", "N"),
            ("channel", "sms"),
            ("text", "hi"),
            ("lists", "nope"),
        ],
    );
    assert_eq!(r.status, 400, "an unknown list: {}", r.body);
    assert!(r.body.contains("nope"), "{}", r.body);
    assert_eq!(campaign_count(&env), 0, "nothing was written");
    // A good one: 303 to its page.
    let r = a.post(
        "/admin/campaigns/new",
        &[
            ("name", "Texts"),
            ("channel", "sms"),
            ("text", "Hi {{ name }}"),
            ("lists", "news"),
        ],
    );
    assert_eq!(r.status, 303, "{}", r.body);
    assert!(r.location().unwrap().ends_with("?done=created"));
    assert_eq!(campaign_count(&env), 1);
}

#[test]
fn every_action_goes_through_a_confirmation_and_forged_posts_change_nothing() {
    let env = accounts();
    // No worker: an approved campaign stays approved for the next action.
    let server = Server::start(&env, &[]);
    let id = cli_draft(&env, "Actions");
    let a = Admin::login(&server.base, "ana", PASSWORD);
    let page = a.get(&format!("/admin/campaigns/{id}"));
    assert!(
        page.body
            .contains("Provider: no provider configured; no worker in this server"),
        "{}",
        page.body
    );
    assert!(page
        .body
        .contains(&format!("/admin/campaigns/{id}/approve")));
    assert!(!page.body.contains(&format!("/admin/campaigns/{id}/resume")));
    for action in ["approve", "pause", "resume", "cancel"] {
        let r = a.post_raw(&format!("/admin/campaigns/{id}/{action}"), &[]);
        assert_eq!(r.status, 403, "{action}: {}", r.body);
        assert_eq!(status(&env, &id)["status"], "draft", "{action}");
    }
    assert_eq!(
        a.post_raw(
            "/admin/campaigns/new",
            &[("name", "F"), ("channel", "sms"), ("text", "x")]
        )
        .status,
        403
    );
    assert_eq!(campaign_count(&env), 1);

    for (action, after) in [
        ("approve", "approved"),
        ("pause", "paused"),
        ("resume", "approved"),
        ("cancel", "cancelled"),
    ] {
        let c = a.get(&format!("/admin/campaigns/{id}/{action}"));
        assert_eq!(c.status, 200);
        assert!(c.body.contains(&format!("Yes, {action}")), "{}", c.body);
        assert_ne!(status(&env, &id)["status"].as_str().unwrap(), after);
        let r = a.post(&format!("/admin/campaigns/{id}/{action}"), &[]);
        assert_eq!(r.status, 303, "{action}: {}", r.body);
        assert_eq!(
            r.location(),
            Some(format!("/admin/campaigns/{id}?done={action}").as_str())
        );
        let st = status(&env, &id)["status"].as_str().unwrap().to_string();
        assert!(
            st == after || (after == "approved" && st == "sending"),
            "{action}: {st}"
        );
    }
    // A cancelled campaign cannot be resumed: the page says so, a post is refused (409).
    let c = a.get(&format!("/admin/campaigns/{id}/resume"));
    assert!(c.body.contains("cannot be resumed now"), "{}", c.body);
    let r = a.post(&format!("/admin/campaigns/{id}/resume"), &[]);
    assert_eq!(r.status, 409, "{}", r.body);
}

#[test]
fn another_accounts_admin_gets_404_for_every_campaign_route() {
    let env = accounts();
    let server = Server::start(&env, &[]);
    let id = cli_draft(&env, "Acme secret plans");
    let ana = Admin::login(&server.base, "ana", PASSWORD);
    let bo = Admin::login(&server.base, "bo", PASSWORD);
    let mut seen = 0;
    for (method, path) in sendonce::http::dashboard::route_list() {
        if !path.starts_with("/admin/campaigns/{id}") {
            continue;
        }
        seen += 1;
        let path = path.replace("{id}", &id);
        let (mine, theirs) = if method == "GET" {
            (ana.get(&path), bo.get(&path))
        } else {
            (ana.get(&path), bo.post(&path, &[]))
        };
        assert_ne!(mine.status, 404, "{method} {path} for ana: {}", mine.body);
        assert_eq!(
            theirs.status, 404,
            "{method} {path} for bo: {}",
            theirs.body
        );
        assert!(!theirs.body.contains("Acme secret plans"), "{path}");
    }
    assert!(seen >= 14, "{seen} routes with an id");
    assert_eq!(status(&env, &id)["status"], "draft");
    let list = bo.get("/admin/campaigns");
    assert_eq!(list.status, 200);
    assert!(!list.body.contains("Acme secret plans") && list.body.contains("No campaigns yet"));
    assert!(ana
        .get("/admin/campaigns")
        .body
        .contains("Acme secret plans"));
    // Not a number: unknown, as for an id that does not exist.
    assert_eq!(ana.get("/admin/campaigns/abc").status, 404);
    assert_eq!(ana.get("/admin/campaigns/999999").status, 404);
}

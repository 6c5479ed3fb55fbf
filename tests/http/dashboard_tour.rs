//! The dashboard's tour, end to end in headless Chromium at 1024 px (the README's screenshots
//! come from here): log in, create a list, import a CSV through its preview, create a campaign
//! on that list, preview it, approve it and watch it finish through `serve --worker` and the
//! fake provider, unsubscribe an address, open a subscriber's page and its erasure's
//! confirmation (left unconfirmed); then a second campaign left in doubt by a provider
//! that drops its answers, and that doubt resolved on the doubts page. The ledger is checked
//! through the CLI after each part.

use crate::common::dashboard::{create_operator, scenario, PASSWORD};
use crate::common::{output_dir, Env, Fake, Server};
use serde_json::{json, Value};

const PEOPLE: &str = "email,name\n\
                      ada@example.org,Ada\n\
                      bob@example.org,Bob\n\
                      not-an-address,Nobody\n\
                      cy@example.org,Cy\n";

fn cli(env: &Env, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&env.ok(&all)).expect("one JSON document")
}

/// Every send of campaign `id`: (address, status), in send order.
fn report(env: &Env, id: &str) -> Vec<(String, String)> {
    let out = env.ok(&["campaign", "report", id, "--format", "json"]);
    let rows: Vec<Value> = serde_json::from_str(&out).expect("report JSON");
    rows.iter()
        .map(|r| {
            (
                r["address"].as_str().unwrap().to_string(),
                r["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn the_tour_from_a_csv_to_a_sent_campaign_and_a_resolved_doubt() {
    let env = Env::new();
    env.ok(&["init"]);
    env.ok(&["account", "add", "acme"]);
    // An operator: the tour ends on the Settings page with the doctor's findings.
    create_operator(&env, "acme", "ana");
    let csv = env.write("people.csv", PEOPLE);
    let out = output_dir("dashboard");

    // Part one: a list from a CSV, a campaign to it sent by this server's worker.
    let fake = Fake::start(&env.path("inbox.jsonl"), &[]);
    let spec = format!("webhook:{}", fake.url("/send"));
    let mut server = Server::start(&env, &["--worker", "--provider", spec.as_str()]);
    scenario(
        &server.base,
        &out,
        1024,
        json!([
            {"login": ["ana", PASSWORD]},
            {"goto": "/admin/lists"},
            {"follow": "New list"},
            {"fill": {"Name": "Tour"}},
            {"click": "Create list", "keyboard": true},
            {"expect_text": "List created."},
            {"follow": "Import a CSV file"},
            {"upload": {"CSV file": csv}},
            {"click": "Preview"},
            {"expect_text": "3 rows to import"},
            {"expect_text": "line 4"},
            {"screenshot": "tour-import-preview"},
            {"click": "Import 3 subscribers"},
            {"expect_text": "Imported 3, skipped 1."},
            {"screenshot": "tour-list"},
            {"goto": "/admin/campaigns/new"},
            {"fill": {"Name": "Tour news", "From": "news@example.org",
                      "Subject": "Hello {{ name }}", "Text": "Hi {{ name }}, this is the tour.",
                      "HTML (optional)": "<p>Hi <b>{{ name }}</b>, this is the tour.</p>"}},
            {"check": "Tour"},
            {"screenshot": "tour-new-campaign"},
            {"click": "Create draft", "keyboard": true},
            {"expect_text": "3 would receive it"},
            {"record": "draft"},
            {"screenshot": "tour-draft"},
            {"follow": "Preview"},
            {"expect_text": "Hello Ada"},
            {"screenshot": "tour-preview"},
            {"follow": "Back to the campaign"},
            {"follow": "Approve"},
            {"click": "Yes, approve", "keyboard": true},
            {"wait_text": "Status: sent", "timeout": 60000},
            {"screenshot": "tour-sent"},
            {"follow": "Recipients"},
            {"expect_text": "cy@example.org"},
            {"screenshot": "tour-recipients"},
            {"goto": "/admin/lists"},
            {"follow": "Tour"},
            {"follow": "Unsubscribe bob@example.org"},
            {"click": "Unsubscribe", "keyboard": true},
            {"expect_text": "Unsubscribed from this list."},
            {"follow": "ada@example.org"},
            {"expect_text": "Consent records"},
            {"screenshot": "tour-subscriber"},
            {"follow": "Erase"},
            {"expect_text": "cannot be undone"},
            {"screenshot": "tour-subscriber-erase"},
            {"follow": "Cancel"},
            {"expect_text": "ada@example.org"},
            {"goto": "/admin/campaigns"},
            {"screenshot": "tour-campaigns"},
        ]),
    );
    let campaigns = cli(&env, &["campaign", "list", "--account", "acme"]);
    let first = campaigns["campaigns"][0]["id"].to_string();
    let mut sent = report(&env, &first);
    sent.sort();
    let want: Vec<(String, String)> = ["ada", "bob", "cy"]
        .iter()
        .map(|n| (format!("{n}@example.org"), "sent".to_string()))
        .collect();
    assert_eq!(sent, want);
    assert_eq!(fake.lines().len(), 3, "the fake got each message once");
    assert!(server.sigterm().success());

    // Part two: a campaign to the same list, its calls answered by nobody: in doubt.
    in_doubt_then_resolved(&env, &out);
    for shot in [
        "import-preview",
        "draft",
        "preview",
        "sent",
        "doubts",
        "subscriber",
    ] {
        crate::common::assert_png(&out.join(format!("tour-{shot}.png")), 5000, None);
    }
}

/// The tour's part two: a second campaign to the tour's list whose calls nobody answers is in
/// doubt; one row resolved as sent on the doubts page, then the settings page.
fn in_doubt_then_resolved(env: &Env, out: &std::path::Path) {
    let body = env.write("body.txt", "Second {{ name }}\n");
    let second = env.ok(&[
        "campaign",
        "create",
        "--account",
        "acme",
        "--name",
        "Second",
        "--channel",
        "email",
        "--from",
        "news@example.org",
        "--subject",
        "Second",
        "--list",
        "Tour",
        "--body-file",
        body.to_str().unwrap(),
    ]);
    env.ok(&["campaign", "approve", &second]);
    let dropping = Fake::start(
        &env.path("dropped.jsonl"),
        &["--no-idempotent", "--drop-after-accept-rate", "1"],
    );
    let spec = format!("webhook:{}/send#timeout=5s", dropping.base());
    env.run(&["run", "--once", "--provider", &spec, "--tick", "20ms"]);
    let parked = report(env, &second);
    assert_eq!(
        parked,
        vec![
            ("ada@example.org".to_string(), "in_doubt".to_string()),
            ("cy@example.org".to_string(), "in_doubt".to_string()),
        ],
        "bob unsubscribed from the list is not in the second campaign"
    );
    let server = Server::start(env, &[]);
    scenario(
        &server.base,
        out,
        1024,
        json!([
            {"login": ["ana", PASSWORD]},
            {"goto": "/admin/doubts"},
            {"expect_text": "ada@example.org"},
            {"screenshot": "tour-doubts"},
            {"follow": "Mark as sent"},
            {"expect_text": "was delivered"},
            {"click": "Yes, mark as sent", "keyboard": true},
            {"expect_text": "resolved: it is now sent"},
            {"goto": "/admin/settings"},
            {"wait_text": "quick_check", "timeout": 30000},
            {"screenshot": "tour-settings"},
        ]),
    );
    let after = report(env, &second);
    assert_eq!(
        after.iter().filter(|(_, s)| s == "sent").count(),
        1,
        "{after:?}"
    );
    assert_eq!(
        after.iter().filter(|(_, s)| s == "in_doubt").count(),
        1,
        "{after:?}"
    );
}

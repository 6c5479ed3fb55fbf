//! The dashboard's message stream (`/admin/messages`): the API's messages newest first, searched
//! by recipient, state and provider id, paged by keyset; another account's admin sees none of
//! them; in a browser at 360 px, by keyboard.
// Some tests here need tools outside Rust (tier 1); without them their helpers go unused.
#![cfg_attr(not(feature = "tier1"), allow(unused_imports, dead_code))]

use super::stream::post;
use crate::common::dashboard::{create_admin, scenario, Admin, PASSWORD};
use crate::common::{client, output_dir, rt, token, Env, Fake, Server};
use serde_json::{json, Value};

/// 55 messages through the API (54 sent to one fake provider, one to a suppressed address),
/// a message with a subject and file; admins ana (acme) and bo (other).
fn setup() -> (Env, Fake, Server) {
    let env = Env::new();
    let (fake, server) = crate::http::serve::setup(&env, &[], &[]);
    create_admin(&env, "acme", "ana");
    create_admin(&env, "other", "bo");
    env.ok(&[
        "suppress",
        "add",
        "--account",
        "acme",
        "--channel",
        "email",
        "gone@example.org",
    ]);
    let tok = token(&env, "acme", "send");
    let messages: Vec<Value> = (0..54)
        .map(|i| {
            json!({"to": format!("user{i:02}@example.org"), "from": "shop@example.org",
                   "subject": format!("Order {i}"), "text": "Paid."})
        })
        .chain(
            [json!({"to": "gone@example.org", "from": "shop@example.org",
                       "subject": "Receipt", "text": "Paid.",
                       "attachments": [{"filename": "r.txt", "content": "cGFpZA=="}]})],
        )
        .collect();
    rt().block_on(async {
        let (status, got) = post(
            &client(),
            &server,
            &tok,
            "/v1/messages/batch",
            Some("batch-1"),
            &json!({ "messages": messages }),
        )
        .await;
        assert_eq!((status, got["accepted"].as_u64()), (200, Some(55)), "{got}");
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while env.count("SELECT count(*) FROM sends WHERE status IN ('queued', 'leased')") > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the worker did not finish"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    (env, fake, server)
}

/// The message ids a page shows, in order.
fn ids(body: &str) -> Vec<i64> {
    body.split("<td class=\"num mono\">")
        .skip(1)
        .filter_map(|s| s.split('<').next()?.trim().parse().ok())
        .collect()
}

#[test]
fn the_message_stream_is_searched_paged_and_scoped_to_the_account() {
    let (env, fake, server) = setup();
    let ana = Admin::login(&server.base, "ana", PASSWORD);
    let first = ana.get("/admin/messages");
    assert_eq!(first.status, 200, "{}", first.body);
    let page = ids(&first.body);
    assert_eq!(page.len(), 50, "a page of 50");
    assert!(
        page.windows(2).all(|w| w[0] > w[1]),
        "newest first: {page:?}"
    );
    assert!(first.body.contains("1 file"), "the file count shows");
    let next = first
        .body
        .split("href=\"/admin/messages?")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .expect("a link to older messages")
        .replace("&amp;", "&");
    let older = ids(&ana.get(&format!("/admin/messages?{next}")).body);
    assert_eq!(older.len(), 5);
    assert!(older[0] < page[49], "keyset continues: {older:?}");
    // By recipient (any case), by state, by the provider's id.
    let found = ana.get("/admin/messages?to=USER1");
    assert_eq!(ids(&found.body).len(), 10, "user10..user19");
    let suppressed = ana.get("/admin/messages?status=suppressed");
    assert_eq!(ids(&suppressed.body).len(), 1);
    assert!(suppressed.body.contains("gone@example.org"));
    let pid = fake
        .lines()
        .into_iter()
        .find(|l| l.to == "user07@example.org")
        .expect("user07 delivered")
        .message_id;
    let by_pid = ana.get(&format!("/admin/messages?provider_id={pid}"));
    assert_eq!(ids(&by_pid.body).len(), 1, "{}", by_pid.body);
    assert!(by_pid.body.contains("user07@example.org"));
    assert_eq!(ana.get("/admin/messages?status=lost").status, 400);
    // Another account's admin sees none of them.
    let bo = Admin::login(&server.base, "bo", PASSWORD);
    let theirs = bo.get("/admin/messages");
    assert_eq!((theirs.status, ids(&theirs.body).len()), (200, 0));
    assert!(theirs.body.contains("No message yet"));
    assert_eq!(
        Admin::anonymous(&server.base).get("/admin/messages").status,
        303
    );
    drop(env);
}

#[cfg(feature = "tier1")]
#[test]
fn the_message_stream_in_a_browser_at_360_px() {
    let (_env, _fake, server) = setup();
    let out = output_dir("dashboard");
    let v = scenario(
        &server.base,
        &out,
        360,
        json!([
            {"login": ["ana", PASSWORD]},
            {"goto": "/admin/messages"},
            {"expect_text": "user53@example.org"},
            {"no_overflow": true},
            {"fill": {"Recipient": "gone"}},
            {"click": "Search", "keyboard": true},
            {"expect_text": "gone@example.org"},
            {"expect_text": "suppressed"},
            {"expect_no_text": "user53@example.org"},
            {"screenshot": "messages-search-360"},
            {"no_overflow": true},
        ]),
    );
    assert!(v["console_errors"].as_array().is_none_or(|a| a.is_empty()));
    crate::common::assert_png(&out.join("messages-search-360.png"), 2000, None);
}

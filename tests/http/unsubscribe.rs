//! Unsubscribe links end to end: a real SMTP server receives a campaign's message from
//! `sendonce run`, a real browser (Debian's chromium driven by Playwright,
//! `tests/support/browser.py`) opens the message's `/u/` link on `sendonce serve` and presses
//! the button, and the next campaigns skip the address. Also: RFC 8058 one-click POSTs, GET
//! never changing anything, refused tokens (every changed character, another purpose, a
//! retired key, another account's list), the approval guard for email that is not
//! transactional, and List-Unsubscribe through the HTTP providers' custom headers.
// Some tests here need tools outside Rust (tier 1); without them their helpers go unused.
#![cfg_attr(not(feature = "tier1"), allow(unused_imports, dead_code))]

use crate::common::{
    self, assert_png, browser, client, rt, Env, Fake, Server, TEST_UNSUBSCRIBE_SECRET,
};
use crate::core::smtp::RealServer;
use sendonce::domain::address::Channel;
use sendonce::domain::links::{Keys, Purpose, Secret, Target};
use serde_json::Value;
use std::path::{Path, PathBuf};

const SECRET_ENV: (&str, &str) = ("SENDONCE_UNSUBSCRIBE_SECRET", TEST_UNSUBSCRIBE_SECRET);
const NOT_VALID: &str = "This link is not valid";

/// Where screenshots are kept: `$CARGO_TARGET_DIR/test-output/unsubscribe/`.
fn output_dir() -> PathBuf {
    common::output_dir("unsubscribe")
}

fn keys() -> Keys {
    Keys::new(Secret::new(TEST_UNSUBSCRIBE_SECRET.as_bytes().to_vec()).unwrap())
}

/// Account `acme` with list `news` holding ana, bob and cy (and `other` with list `theirs`
/// holding ana). Returns (acme id, news id, theirs id).
fn setup(env: &Env) -> (i64, i64, i64) {
    let acct = env.setup_account();
    env.ok(&["list", "create", "--account", "acme", "news"]);
    let csv = env.write(
        "subs.csv",
        "email,name\nana@example.com,Ana\nbob@example.com,Bob\ncy@example.com,Cy\n",
    );
    env.ok(&[
        "subscriber",
        "import",
        "--account",
        "acme",
        "--list",
        "news",
        csv.to_str().unwrap(),
    ]);
    env.ok(&["account", "add", "other"]);
    env.ok(&["list", "create", "--account", "other", "theirs"]);
    let csv2 = env.write("other.csv", "email,name\nana@example.com,Ana\n");
    env.ok(&[
        "subscriber",
        "import",
        "--account",
        "other",
        "--list",
        "theirs",
        csv2.to_str().unwrap(),
    ]);
    let id = |sql: &str| env.count(sql);
    (
        acct.parse().unwrap(),
        id("SELECT id FROM lists WHERE name = 'news'"),
        id("SELECT id FROM lists WHERE name = 'theirs'"),
    )
}

fn target(account: i64, address: &str, lists: Vec<i64>) -> Target {
    Target {
        account_id: account,
        channel: Channel::Email,
        address: address.into(),
        lists,
        campaign_id: 1,
    }
}

/// Every membership and suppression, as text: what "nothing changed" compares.
fn snapshot(env: &Env) -> String {
    let c = env.sqlite();
    let mut out = String::new();
    for sql in [
        "SELECT list_id || ':' || subscriber_id || ':' || status || ':' || updated_at
         FROM list_members ORDER BY 1",
        "SELECT account_id || ':' || channel || ':' || address || ':' || reason || ':' || source
         FROM suppressions ORDER BY 1",
    ] {
        let mut st = c.prepare(sql).unwrap();
        let rows = st.query_map([], |r| r.get::<_, String>(0)).unwrap();
        for r in rows {
            out.push_str(&r.unwrap());
            out.push('\n');
        }
    }
    out
}

fn membership(env: &Env, address: &str, list: &str) -> String {
    env.sqlite()
        .query_row(
            "SELECT m.status FROM list_members m JOIN subscribers s ON s.id = m.subscriber_id
             JOIN lists l ON l.id = m.list_id WHERE s.email_norm = ?1 AND l.name = ?2",
            [address, list],
            |r| r.get(0),
        )
        .unwrap()
}

/// An email campaign of acme (`lists`: names), printing the link; approved with `public_url`.
fn approved_campaign(env: &Env, name: &str, lists: &[&str], public_url: &str) -> String {
    let body = env.write(
        "body.txt",
        "Hello {{ name }},\nthe news.\nUnsubscribe: {{ unsubscribe_url }}\n",
    );
    let mut args = vec![
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
        "News for {{ name }}",
        "--body-file",
        body.to_str().unwrap(),
    ];
    for l in lists {
        args.extend_from_slice(&["--list", l]);
    }
    let cid = env.ok(&args);
    env.ok(&["campaign", "approve", &cid, "--public-url", public_url]);
    cid
}

/// `sendonce run --once` to the SMTP server with `public_url`.
fn run_to(env: &Env, smtp: &RealServer, public_url: &str) {
    let spec = format!("smtp://127.0.0.1:{}?tls=none&timeout=10s", smtp.port);
    env.ok(&[
        "run",
        "--once",
        "--provider",
        &spec,
        "--public-url",
        public_url,
    ]);
}

/// (recipient, raw message) of every message the SMTP server holds.
fn received(smtp: &RealServer) -> Vec<(String, Vec<u8>)> {
    smtp.messages()
        .into_iter()
        .map(|(raw, meta)| (meta["rcpt_tos"][0].as_str().unwrap().to_string(), raw))
        .collect()
}

/// The unsubscribe link `who` received; checks List-Unsubscribe and the body's link agree.
fn link_of(got: &[(String, Vec<u8>)], base: &str, who: &str) -> String {
    let raw = &got.iter().find(|(to, _)| to == who).unwrap().1;
    let msg = mail_parser::MessageParser::default().parse(raw).unwrap();
    let header = msg
        .header_raw("List-Unsubscribe")
        .expect("List-Unsubscribe")
        .trim()
        .to_string();
    let link = header
        .strip_prefix('<')
        .and_then(|h| h.strip_suffix('>'))
        .unwrap_or_else(|| panic!("one <URL>: {header}"))
        .to_string();
    assert!(
        link.starts_with(&format!("{base}/u/2")),
        "{link} points at the server"
    );
    let body = msg.body_text(0).unwrap();
    assert!(
        body.contains(&link),
        "the body prints the same link: {body}"
    );
    // http://, not https://: no one-click promise.
    assert!(msg.header_raw("List-Unsubscribe-Post").is_none());
    assert!(
        !link.contains(who),
        "the address is not readable in the link"
    );
    link
}

/// Ana opens her link at 360 px, then leaves "this list only" with the mouse.
fn ana_leaves_the_list(env: &Env, ana: &str) {
    // Ana: the page at 360 px, then "this list" with the mouse.
    let out = output_dir();
    let (narrow, before, after) = (
        out.join("page-360px.png"),
        out.join("before.png"),
        out.join("after.png"),
    );
    let page = browser(&[
        ana,
        "--width",
        "360",
        "--screenshot",
        narrow.to_str().unwrap(),
    ]);
    assert_eq!(page["status"], 200, "{page}");
    assert_eq!(page["overflow_x"], false, "the page fits 360 px: {page}");
    assert_eq!(page["scripts"], 0, "no JavaScript");
    assert_png(&narrow, 5_000, Some(360));
    assert_eq!(membership(env, "ana@example.com", "news"), "subscribed");

    let page = browser(&[
        ana,
        "--screenshot",
        before.to_str().unwrap(),
        "--check",
        "this list only",
        "--click",
        "Unsubscribe",
        "--screenshot-after",
        after.to_str().unwrap(),
    ]);
    let text = page["text"].as_str().unwrap();
    assert!(text.contains("a**@example.com"), "masked address: {text}");
    assert!(text.contains("news"), "the list's name: {text}");
    assert!(!text.contains("ana@example.com"), "{text}");
    let done = page["after"]["text"].as_str().unwrap();
    assert_eq!(page["after"]["status"], 200, "{page}");
    assert!(done.contains("You are unsubscribed from news"), "{done}");
    assert_png(&before, 5_000, None);
    assert_png(&after, 3_000, None);
    assert_eq!(membership(env, "ana@example.com", "news"), "unsubscribed");
    assert_eq!(
        membership(env, "ana@example.com", "theirs"),
        "subscribed",
        "another account's list is not touched"
    );
    // The same link again: already unsubscribed from the list, "everything" still offered.
    let again = browser(&[ana]);
    let text = again["text"].as_str().unwrap();
    assert!(
        text.contains("already unsubscribed from this list"),
        "{text}"
    );
}

/// Bob leaves "everything from this sender" with the keyboard only: suppressed and unsubscribed.
fn bob_leaves_everything(env: &Env, bob: &str) {
    // Bob: "everything from this sender", with the keyboard only (Tab to the button, Enter).
    let page = browser(&[
        bob,
        "--check",
        "everything from this sender",
        "--click",
        "Unsubscribe",
        "--keyboard",
    ]);
    let done = page["after"]["text"].as_str().unwrap();
    assert!(
        done.contains("You are unsubscribed from everything"),
        "{done}"
    );
    assert_eq!(
        env.count(
            "SELECT count(*) FROM suppressions WHERE address = 'bob@example.com' AND channel = 'email'
             AND reason = 'unsubscribed' AND source = 'unsubscribe-link'"
        ),
        1
    );
    assert_eq!(membership(env, "bob@example.com", "news"), "unsubscribed");
}

/// Sends a list campaign and an account-wide one and checks who they reached.
fn the_next_campaigns_skip_them(env: &Env, smtp: &RealServer, base: &str) {
    // The next campaigns: to the list (cy only) and to the whole account (ana and cy).
    let list_cid = approved_campaign(env, "second", &["news"], base);
    let all_cid = approved_campaign(env, "third", &[], base);
    run_to(env, smtp, base);
    let got = received(smtp);
    let to_list: Vec<String> = env
        .sqlite()
        .prepare(&format!(
            "SELECT address FROM sends WHERE campaign_id = {list_cid} AND status = 'sent' ORDER BY 1"
        ))
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(
        to_list,
        vec!["cy@example.com"],
        "the list campaign skips ana and bob"
    );
    let to_all: Vec<String> = env
        .sqlite()
        .prepare(&format!(
            "SELECT address FROM sends WHERE campaign_id = {all_cid} AND status = 'sent' ORDER BY 1"
        ))
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(
        to_all,
        vec!["ana@example.com", "cy@example.com"],
        "the account-wide campaign skips bob (suppressed); ana left only the list"
    );
    assert_eq!(got.len(), 3 + 3, "exactly those messages arrived");
}

#[cfg(feature = "tier1")]
#[test]
fn a_browser_unsubscribes_from_a_received_message_and_the_next_campaigns_skip_it() {
    let env = Env::new();
    setup(&env);
    let server = Server::start_with_env(&env, &["--listen", "127.0.0.1:0"], &[SECRET_ENV]);
    let smtp = RealServer::start();
    approved_campaign(&env, "first", &["news"], &server.base);
    run_to(&env, &smtp, &server.base);
    let got = received(&smtp);
    assert_eq!(got.len(), 3, "ana, bob, cy");

    // The link of each recipient: List-Unsubscribe and the body's {{ unsubscribe_url }} agree.
    let (ana, bob) = (
        link_of(&got, &server.base, "ana@example.com"),
        link_of(&got, &server.base, "bob@example.com"),
    );
    ana_leaves_the_list(&env, &ana);
    bob_leaves_everything(&env, &bob);
    the_next_campaigns_skip_them(&env, &smtp, &server.base);
    env.assert_counters();
}

async fn post_form(url: &str, content_type: &str, body: String) -> (u16, String) {
    let r = client()
        .post(url)
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

async fn get(url: &str) -> (u16, String) {
    let r = client().get(url).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

const FORM: &str = "application/x-www-form-urlencoded";

#[test]
fn one_click_posts_unsubscribe_once_and_get_changes_nothing() {
    let env = Env::new();
    let (acme, news, _) = setup(&env);
    let server = Server::start_with_env(&env, &["--listen", "127.0.0.1:0"], &[SECRET_ENV]);
    let k = keys();
    let listed = server.url(&format!(
        "/u/{}",
        k.seal(
            Purpose::Unsubscribe,
            &target(acme, "ana@example.com", vec![news])
        )
    ));
    let everyone = server.url(&format!(
        "/u/{}",
        k.seal(
            Purpose::Unsubscribe,
            &target(acme, "bob@example.com", vec![])
        )
    ));
    rt().block_on(async {
        let before = snapshot(&env);
        for _ in 0..2 {
            let (status, page) = get(&listed).await;
            assert_eq!(status, 200, "{page}");
            assert!(page.contains("<form method=\"post\">"), "{page}");
            assert!(!page.contains("<script"), "{page}");
            let (status, _) = get(&everyone).await;
            assert_eq!(status, 200);
        }
        assert_eq!(snapshot(&env), before, "GET changed nothing");

        // RFC 8058, url-encoded: the link's list.
        let one_click = || "List-Unsubscribe=One-Click".to_string();
        let (status, body) = post_form(&listed, FORM, one_click()).await;
        assert_eq!((status, body.as_str()), (200, "Unsubscribed.\n"));
        assert_eq!(membership(&env, "ana@example.com", "news"), "unsubscribed");
        assert_eq!(env.count("SELECT count(*) FROM suppressions"), 0);
        let after_first = snapshot(&env);
        let (status, body) = post_form(&listed, FORM, one_click()).await;
        assert_eq!((status, body.as_str()), (200, "Already unsubscribed.\n"));
        assert_eq!(snapshot(&env), after_first, "idempotent");

        // Multipart, a link without lists: everything (suppression and memberships).
        let b = "sendonce-test-boundary";
        let body = format!(
            "--{b}\r\nContent-Disposition: form-data; name=\"List-Unsubscribe\"\r\n\r\n\
             One-Click\r\n--{b}--\r\n"
        );
        let ct = format!("multipart/form-data; boundary={b}");
        let (status, text) = post_form(&everyone, &ct, body.clone()).await;
        assert_eq!((status, text.as_str()), (200, "Unsubscribed.\n"));
        assert_eq!(
            env.count(
                "SELECT count(*) FROM suppressions WHERE address = 'bob@example.com'
                 AND reason = 'unsubscribed' AND source = 'unsubscribe-link'"
            ),
            1
        );
        assert_eq!(membership(&env, "bob@example.com", "news"), "unsubscribed");
        let (status, text) = post_form(&everyone, &ct, body).await;
        assert_eq!((status, text.as_str()), (200, "Already unsubscribed.\n"));

        // The form: `scope=all` on ana's link after her list unsubscribe, then again.
        let (status, page) = post_form(&listed, FORM, "scope=all".into()).await;
        assert_eq!(status, 200, "{page}");
        assert!(
            page.contains("You are unsubscribed from everything"),
            "{page}"
        );
        let (_, page) = post_form(&listed, FORM, "scope=all".into()).await;
        assert!(page.contains("already unsubscribed"), "{page}");
        // A bad scope, and "list" on a link without lists: a page, nothing changes.
        let now = snapshot(&env);
        let (status, _) = post_form(&listed, FORM, "scope=nonsense".into()).await;
        assert_eq!(status, 400);
        let (status, _) = post_form(&everyone, FORM, "scope=list".into()).await;
        assert_eq!(status, 400);
        assert_eq!(snapshot(&env), now);
        let (_, page) = get(&listed).await;
        assert!(
            page.contains("already unsubscribed from everything"),
            "{page}"
        );
    });
    env.assert_counters();
}

/// A refused link's page: the plain "not valid" page, nothing internal.
fn assert_refused(status: u16, page: &str, what: &str) {
    assert!(
        status == 400 || status == 404,
        "{what}: status {status}: {page}"
    );
    assert!(page.contains(NOT_VALID), "{what}: {page}");
    for internal in [
        "rror",
        "panic",
        "NotValid",
        "Malformed",
        "token",
        "account",
        "list id",
        "sqlite",
        "at src/",
    ] {
        assert!(!page.contains(internal), "{what}: {internal:?} in {page}");
    }
}

#[test]
fn changed_foreign_retired_and_other_purpose_tokens_are_refused() {
    let env = Env::new();
    let (acme, news, theirs) = setup(&env);
    let old_ok = "an-old-secret-still-valid-0123";
    let old_gone = "an-old-secret-past-its-date-012";
    let rotation = format!("2999-12-31:{old_ok},2001-01-01:{old_gone}");
    let server = Server::start_with_env(
        &env,
        &["--listen", "127.0.0.1:0"],
        &[SECRET_ENV, ("SENDONCE_UNSUBSCRIBE_OLD_SECRETS", &rotation)],
    );
    let k = keys();
    let ana = target(acme, "ana@example.com", vec![news]);
    let token = k.seal(Purpose::Unsubscribe, &ana);
    let before = snapshot(&env);
    rt().block_on(async {
        assert_eq!(get(&server.url(&format!("/u/{token}"))).await.0, 200);
        // Every position, several replacement characters each: at least 200 changed tokens.
        let alphabet = b"AZaz09-_Qm";
        let mut tried = 0;
        for i in 0..token.len() {
            for &c in alphabet {
                let mut b = token.clone().into_bytes();
                if b[i] == c {
                    continue;
                }
                b[i] = c;
                let changed = String::from_utf8(b).unwrap();
                let url = server.url(&format!("/u/{changed}"));
                let (status, page) = get(&url).await;
                assert_refused(status, &page, &changed);
                if tried % 8 == 0 {
                    let (status, page) =
                        post_form(&url, FORM, "List-Unsubscribe=One-Click".into()).await;
                    assert_refused(status, &page, &changed);
                }
                tried += 1;
            }
        }
        assert!(tried >= 200, "{tried}");
        // Cut short, lengthened, not base64, empty-ish.
        for bad in [
            &token[..token.len() - 1],
            &format!("{token}A"),
            "2!!!!",
            "x",
            "2",
        ] {
            let (status, page) = get(&server.url(&format!("/u/{bad}"))).await;
            assert_refused(status, &page, bad);
        }
        // Another purpose: a confirm token is no unsubscribe token.
        let confirm = k.seal(Purpose::Confirm, &ana);
        let (status, page) = get(&server.url(&format!("/u/{confirm}"))).await;
        assert_refused(status, &page, "confirm token");
        // Rotation: an old key within its date opens, one past its date does not.
        let sealed_with = |s: &str| {
            Keys::new(Secret::new(s.as_bytes().to_vec()).unwrap()).seal(Purpose::Unsubscribe, &ana)
        };
        let (status, page) = get(&server.url(&format!("/u/{}", sealed_with(old_ok)))).await;
        assert_eq!(status, 200, "old key within its date: {page}");
        let (status, page) = get(&server.url(&format!("/u/{}", sealed_with(old_gone)))).await;
        assert_refused(status, &page, "old key past its date");
        // Sealed by us, but naming another account's list, or an account that does not exist.
        for (what, t) in [
            (
                "another account's list",
                target(acme, "ana@example.com", vec![theirs]),
            ),
            ("no such account", target(9999, "ana@example.com", vec![])),
        ] {
            let url = server.url(&format!("/u/{}", k.seal(Purpose::Unsubscribe, &t)));
            let (status, page) = get(&url).await;
            assert_refused(status, &page, what);
            let (status, page) = post_form(&url, FORM, "List-Unsubscribe=One-Click".into()).await;
            assert_refused(status, &page, what);
            let (status, page) = post_form(&url, FORM, "scope=all".into()).await;
            assert_refused(status, &page, what);
        }
    });
    assert_eq!(snapshot(&env), before, "no refused link changed anything");

    // A server without a secret cannot open links: a plain 503 page.
    let bare = Server::start_with_env(
        &env,
        &["--listen", "127.0.0.1:0"],
        &[
            ("SENDONCE_UNSUBSCRIBE_SECRET", ""),
            ("SENDONCE_PUBLIC_URL", ""),
        ],
    );
    rt().block_on(async {
        let (status, page) = get(&bare.url(&format!("/u/{token}"))).await;
        assert_eq!(status, 503, "{page}");
        assert!(page.contains("not set up on this server"), "{page}");
    });
}

/// Creates an email campaign of acme with the receipt `body`, transactional or not; its id.
fn receipt_campaign(env: &Env, body: &Path, name: &str, transactional: bool) -> String {
    let mut args = vec![
        "campaign",
        "create",
        "--account",
        "acme",
        "--name",
        name,
        "--channel",
        "email",
        "--from",
        "shop@example.org",
        "--subject",
        "Receipt",
        "--body-file",
        body.to_str().unwrap(),
    ];
    if transactional {
        args.push("--transactional");
    }
    env.ok(&args)
}

/// Runs the binary with neither a public URL nor the link secret in its environment.
fn run_bare(env: &Env, args: &[&str]) -> common::Run {
    let out = env
        .cmd()
        .env_remove("SENDONCE_PUBLIC_URL")
        .env_remove("SENDONCE_UNSUBSCRIBE_SECRET")
        .current_dir(env.dir.path())
        .args(args)
        .output()
        .unwrap();
    common::Run::from(out)
}

#[cfg(feature = "tier1")]
#[test]
fn approval_needs_a_public_url_unless_transactional_and_transactional_mail_has_no_list_unsubscribe()
{
    let env = Env::new();
    setup(&env);
    let body = env.write("t.txt", "Your receipt, {{ name }}.\n");
    let create =
        |name: &str, transactional: bool| receipt_campaign(&env, &body, name, transactional);
    let bare = |args: &[&str]| run_bare(&env, args);
    let news = create("news", false);
    let r = bare(&["campaign", "approve", &news]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    for named in [
        "--public-url",
        "SENDONCE_PUBLIC_URL",
        "public_url",
        "SENDONCE_UNSUBSCRIBE_SECRET",
        "--transactional",
    ] {
        assert!(r.stderr.contains(named), "{named} in {}", r.stderr);
    }
    // A URL without the secret: refused, naming the secret.
    let r = bare(&[
        "campaign",
        "approve",
        &news,
        "--public-url",
        "https://x.example",
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("SENDONCE_UNSUBSCRIBE_SECRET"),
        "{}",
        r.stderr
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) FROM campaigns WHERE id = {news} AND status = 'draft'"
        )),
        1
    );

    // Transactional: approved and sent without a public URL, no List-Unsubscribe.
    let receipt = create("receipt", true);
    let r = bare(&["campaign", "approve", &receipt]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let smtp = RealServer::start();
    let spec = format!("smtp://127.0.0.1:{}?tls=none&timeout=10s", smtp.port);
    let r = bare(&["run", "--once", "--provider", &spec]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let got = received(&smtp);
    assert_eq!(got.len(), 3);
    for (_, raw) in &got {
        let text = String::from_utf8_lossy(raw).to_ascii_lowercase();
        assert!(!text.contains("list-unsubscribe"), "{text}");
    }

    // A worker without a public URL refuses the non-transactional campaign: nothing sent.
    env.ok(&["campaign", "approve", &news]);
    let r = bare(&["run", "--once", "--provider", &spec]);
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(
        r.stderr.contains("not transactional") && r.stderr.contains("--public-url"),
        "{}",
        r.stderr
    );
    assert_eq!(received(&smtp).len(), 3, "nothing more was sent");
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) FROM sends WHERE campaign_id = {news} AND status = 'sent'"
        )),
        0
    );
}

#[test]
fn the_api_approves_email_only_with_the_servers_public_url_or_transactional() {
    let env = Env::new();
    setup(&env);
    let tok = common::token(&env, "acme", "admin");
    let server = Server::start_with_env(
        &env,
        &["--listen", "127.0.0.1:0"],
        &[("SENDONCE_PUBLIC_URL", "")],
    );
    rt().block_on(async {
        let create = |transactional: bool| {
            let tok = tok.clone();
            let url = server.url("/v1/campaigns");
            async move {
                let r = client()
                    .post(url)
                    .bearer_auth(tok)
                    .json(&serde_json::json!({
                        "name": "api", "channel": "email", "from": "news@example.org",
                        "subject": "Hi", "text": "Hello", "transactional": transactional}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status().as_u16(), 201);
                r.json::<Value>().await.unwrap()["id"].as_i64().unwrap()
            }
        };
        let approve = |id: i64| {
            let tok = tok.clone();
            let url = server.url(&format!("/v1/campaigns/{id}/approve"));
            async move {
                let r = client().post(url).bearer_auth(tok).send().await.unwrap();
                (r.status().as_u16(), r.text().await.unwrap())
            }
        };
        let news = create(false).await;
        let (status, body) = approve(news).await;
        assert_eq!(status, 400, "{body}");
        assert!(body.contains("SENDONCE_PUBLIC_URL"), "{body}");
        let receipt = create(true).await;
        let (status, body) = approve(receipt).await;
        assert_eq!(status, 200, "{body}");
    });
    drop(server);
    let with_url = Server::start_with_env(
        &env,
        &[
            "--listen",
            "127.0.0.1:0",
            "--public-url",
            "https://news.example.org",
        ],
        &[SECRET_ENV],
    );
    rt().block_on(async {
        let id = env.count("SELECT max(id) FROM campaigns WHERE transactional = 0");
        let r = client()
            .post(with_url.url(&format!("/v1/campaigns/{id}/approve")))
            .bearer_auth(&tok)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200, "{}", r.text().await.unwrap());
    });
}

#[tokio::test(flavor = "multi_thread")]
async fn resend_and_postmark_carry_list_unsubscribe_in_their_custom_headers() {
    use sendonce::provider::{from_spec, CallResult, Message};
    let dir = tempfile::tempdir().unwrap();
    let tf = dir.path().join("token");
    std::fs::write(&tf, "test-token-0123456789\n").unwrap();
    let fake = Fake::start(&dir.path().join("log.jsonl"), &[]);
    let specs = [
        format!(
            "resend:?from=news@example.com&base_url={}&api_key_file={}&timeout=2s",
            fake.base(),
            tf.display()
        ),
        format!(
            "postmark:?from=news@example.com&base_url={}&token_file={}&timeout=2s",
            fake.base(),
            tf.display()
        ),
    ];
    let link = "https://news.example.org/u/2AbC-d_e";
    for (i, spec) in specs.iter().enumerate() {
        let p = from_spec(spec).unwrap();
        for (n, unsubscribe) in [Some(link.to_string()), None].into_iter().enumerate() {
            let job = format!("campaign:{i}:sub:{n}");
            let m = Message {
                reply_to: None,
                idempotency_key: sendonce::domain::model::idempotency_key(&job),
                job_id: job,
                channel: Channel::Email,
                from: None,
                to: "ana@example.com".into(),
                subject: Some("Hello".into()),
                body: "Hi".into(),
                html: None,
                unsubscribe,
                attachments: Vec::new(),
                status_callback: None,
            };
            let res = p.send(&m).await;
            assert!(
                matches!(res, CallResult::Accepted { .. }),
                "{spec}: {res:?}"
            );
        }
    }
    let lines = fake.lines();
    assert_eq!(lines.len(), 4);
    for l in &lines {
        let h = l.headers.clone().unwrap_or_default();
        assert_eq!(h.get("X-Sendonce-Job"), Some(&l.job_id), "{l:?}");
        if l.job_id.ends_with(":sub:0") {
            assert_eq!(
                h.get("List-Unsubscribe").map(String::as_str),
                Some(format!("<{link}>").as_str()),
                "{l:?}"
            );
            assert_eq!(
                h.get("List-Unsubscribe-Post").map(String::as_str),
                Some("List-Unsubscribe=One-Click"),
                "{l:?}"
            );
        } else {
            assert!(!h.contains_key("List-Unsubscribe"), "{l:?}");
            assert!(!h.contains_key("List-Unsubscribe-Post"), "{l:?}");
        }
    }
}

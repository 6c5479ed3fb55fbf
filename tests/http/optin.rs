//! Double opt-in and public signup forms end to end, through the real binary and a real
//! `sendonce serve`: one confirmation email per (list, subscriber) however often it is added
//! or the worker runs, the confirm page that changes nothing on GET and confirms on POST, an
//! unsubscribed member's old link that does not subscribe again, refused links, pending
//! members left out of list and account-wide campaigns, and the signup form (honeypot, the
//! same answer for a known address, 404 for a private or unknown list, the per-address limit).
// Some tests here need tools outside Rust (tier 1); without them their helpers go unused.
#![cfg_attr(not(feature = "tier1"), allow(unused_imports, dead_code))]

use crate::common::{assert_png, browser, client, output_dir, rt, Env, Server};
use sendonce::provider::deliverylog::{read_lines, DeliveryLine};
use std::path::Path;

const SECRET: &str = "optin-test-secret-0123456789abcdef";
const PUBLIC: &str = "https://news.example.org";

/// The binary with the link secret set and no public URL from the environment.
fn run(env: &Env, args: &[&str]) -> crate::common::Run {
    env.cmd()
        .env("SENDONCE_UNSUBSCRIBE_SECRET", SECRET)
        .env_remove("SENDONCE_PUBLIC_URL")
        .args(args)
        .output()
        .expect("run sendonce")
        .into()
}

fn ok(env: &Env, args: &[&str]) -> String {
    let r = run(env, args);
    assert_eq!(r.code, 0, "sendonce {args:?}: {}\n{}", r.stderr, r.stdout);
    r.stdout.trim().to_string()
}

/// acme with lists `news` (double opt-in, public), `open` (single, public) and `staff`
/// (double, not public); returns their ids.
fn setup(env: &Env) -> (String, String, String) {
    env.setup_account();
    let body = env.write(
        "confirm.txt",
        "Hi {{ name }}, confirm {{ list.name }}: {{ confirm_url }}\n",
    );
    let news = ok(
        env,
        &[
            "list",
            "create",
            "--account",
            "acme",
            "news",
            "--double-opt-in",
            "--public",
            "--confirm-from",
            "News <news@example.org>",
            "--confirm-body-file",
            body.to_str().unwrap(),
        ],
    );
    let open = ok(
        env,
        &["list", "create", "--account", "acme", "open", "--public"],
    );
    let staff = ok(
        env,
        &[
            "list",
            "create",
            "--account",
            "acme",
            "staff",
            "--optin",
            "double",
            "--confirm-from",
            "hr@example.org",
        ],
    );
    (news, open, staff)
}

fn add(env: &Env, email: &str, list: &str) -> crate::common::Run {
    run(
        env,
        &[
            "subscriber",
            "add",
            "--account",
            "acme",
            "--email",
            email,
            "--list",
            list,
            "--public-url",
            PUBLIC,
        ],
    )
}

fn send(env: &Env, outbox: &Path) -> Vec<DeliveryLine> {
    let spec = format!("outbox:{}?idempotent=false", outbox.display());
    ok(
        env,
        &[
            "run",
            "--once",
            "--tick",
            "20ms",
            "--provider",
            &spec,
            "--public-url",
            PUBLIC,
        ],
    );
    read_lines(outbox).unwrap_or_default()
}

/// The confirm link in a delivered confirmation, as a path (`/c/TOKEN`).
fn confirm_path(lines: &[DeliveryLine], to: &str) -> String {
    let l = lines
        .iter()
        .find(|l| l.to == to && l.job_id.starts_with("confirm:"))
        .unwrap_or_else(|| panic!("no confirmation to {to}: {lines:?}"));
    let start = l.body.find(PUBLIC).expect("a link") + PUBLIC.len();
    let path: String = l.body[start..]
        .chars()
        .take_while(|c| !c.is_whitespace())
        .collect();
    assert!(path.starts_with("/c/"), "{path}");
    path
}

fn membership(env: &Env, email: &str, list: &str) -> String {
    env.sqlite()
        .query_row(
            "SELECT m.status FROM list_members m JOIN subscribers s ON s.id = m.subscriber_id
             JOIN lists l ON l.id = m.list_id WHERE s.email_norm = ?1 AND l.name = ?2",
            [email, list],
            |r| r.get(0),
        )
        .unwrap()
}

fn server(env: &Env) -> Server {
    Server::start_with_env(
        env,
        &["--listen", "127.0.0.1:0", "--public-url", PUBLIC],
        &[("SENDONCE_UNSUBSCRIBE_SECRET", SECRET)],
    )
}

/// (status, body) of a GET or a form POST.
fn http(url: &str, form: Option<&str>) -> (u16, String) {
    rt().block_on(async {
        let c = client();
        let req = match form {
            None => c.get(url),
            Some(body) => c
                .post(url)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body.to_string()),
        };
        let res = req.send().await.unwrap();
        let status = res.status().as_u16();
        (status, res.text().await.unwrap())
    })
}

fn email_campaign(env: &Env, lists: &[&str]) -> String {
    let body = env.write("body.txt", "Hello\n");
    let mut args = vec![
        "campaign",
        "create",
        "--account",
        "acme",
        "--name",
        "c",
        "--channel",
        "email",
        "--from",
        "news@example.org",
        "--subject",
        "Hi",
        "--body-file",
        body.to_str().unwrap(),
    ];
    for l in lists {
        args.extend_from_slice(&["--list", l]);
    }
    let id = env.ok(&args);
    env.ok(&["campaign", "approve", &id]);
    id
}

/// Checks that adding to a double opt-in list without a public URL is refused and writes nothing.
fn refused_without_a_public_url(env: &Env) {
    // Without a public URL: refused, nothing written.
    let r = env
        .cmd()
        .env_remove("SENDONCE_PUBLIC_URL")
        .env_remove("SENDONCE_UNSUBSCRIBE_SECRET")
        .args([
            "subscriber",
            "add",
            "--account",
            "acme",
            "--email",
            "ana@example.org",
            "--list",
            "news",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && err.contains("public URL"), "{err}");
    assert_eq!(env.count("SELECT count(*) FROM subscribers"), 0);
    assert_eq!(env.count("SELECT count(*) FROM sends"), 0);
}

/// Adds ana (twice), imports ana and bo to `news` and adds carl to no list: two confirmations.
fn add_ana_bo_and_carl(env: &Env) {
    assert_eq!(add(env, "ana@example.org", "news").code, 0);
    assert_eq!(
        add(env, "Ana@Example.org", "news").code,
        0,
        "re-adding is fine"
    );
    let csv = env.write(
        "s.csv",
        "email,name\nana@example.org,Ana\nbo@example.org,Bo\n",
    );
    ok(
        env,
        &[
            "subscriber",
            "import",
            "--account",
            "acme",
            csv.to_str().unwrap(),
            "--list",
            "news",
            "--public-url",
            PUBLIC,
        ],
    );
    env.ok(&[
        "subscriber",
        "add",
        "--account",
        "acme",
        "--email",
        "carl@example.org",
    ]);
    assert_eq!(membership(env, "ana@example.org", "news"), "pending");
    assert_eq!(env.count("SELECT count(*) FROM list_confirmations"), 2);
}

/// Runs the worker three times (ana re-added before the third): two confirmations; their links.
fn send_the_confirmations_once(env: &Env) -> (String, String) {
    let outbox = env.path("o.jsonl");
    let first = send(env, &outbox);
    let second = send(env, &outbox);
    assert_eq!(first.len(), 2, "{first:?}");
    assert_eq!(second.len(), 2, "a second run sends nothing more");
    assert_eq!(add(env, "ana@example.org", "news").code, 0);
    let third = send(env, &outbox);
    assert_eq!(
        third.len(),
        2,
        "re-adding a pending subscriber sends nothing"
    );
    let ana = third.iter().find(|l| l.to == "ana@example.org").unwrap();
    assert_eq!(ana.from.as_deref(), Some("News <news@example.org>"));
    assert_eq!(
        ana.subject.as_deref(),
        Some("Confirm your subscription to news")
    );
    assert!(
        ana.body.starts_with("Hi , confirm news: https://"),
        "{}",
        ana.body
    );
    let ana_path = confirm_path(&third, "ana@example.org");
    let bo_path = confirm_path(&third, "bo@example.org");
    (ana_path, bo_path)
}

/// Checks that GET on ana's link shows a masked page and changes nothing, and POST confirms once.
fn ana_confirms(env: &Env, srv: &Server, ana_path: &str) {
    let (status, page) = http(&srv.url(ana_path), None);
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("news") && page.contains("a**@example.org"),
        "{page}"
    );
    assert!(page.contains("Confirm subscription") && page.contains("<form method=\"post\">"));
    assert!(!page.contains("ana@example.org"), "the address is masked");
    assert_eq!(
        membership(env, "ana@example.org", "news"),
        "pending",
        "GET changes nothing"
    );

    let (status, page) = http(&srv.url(ana_path), Some(""));
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("Subscription confirmed"), "{page}");
    assert_eq!(membership(env, "ana@example.org", "news"), "subscribed");
    assert_eq!(
        env.count("SELECT count(*) FROM list_confirmations WHERE confirmed_at IS NOT NULL"),
        1
    );
    let (_, page) = http(&srv.url(ana_path), Some(""));
    assert!(page.contains("Already confirmed"), "{page}");
}

/// Unsubscribes bo from the list, then checks his old link does not subscribe him again.
fn bo_unsubscribed_is_not_resubscribed(env: &Env, srv: &Server, bo_path: &str) {
    // Bo unsubscribed from the list before clicking: the old link does not resubscribe.
    env.sqlite()
        .execute(
            "UPDATE list_members SET status = 'unsubscribed' WHERE subscriber_id =
             (SELECT id FROM subscribers WHERE email_norm = 'bo@example.org')",
            [],
        )
        .unwrap();
    let (status, page) = http(&srv.url(bo_path), Some(""));
    assert_eq!(status, 200);
    assert!(page.contains("does not subscribe"), "{page}");
    assert_eq!(membership(env, "bo@example.org", "news"), "unsubscribed");
}

/// Checks that changed, garbage and unsubscribe tokens get a plain 404 page.
fn refused_links(srv: &Server, news: &str, ana_path: &str, bo_path: &str) {
    // Refused links: a plain page, nothing internal.
    let mut changed = ana_path.to_string().into_bytes();
    let i = changed.len() - 3;
    changed[i] = if changed[i] == b'A' { b'B' } else { b'A' };
    let changed = String::from_utf8(changed).unwrap();
    for bad in [changed.as_str(), "/c/garbage", "/c/2AAAA"] {
        for form in [None, Some("")] {
            let (status, page) = http(&srv.url(bad), form);
            assert_eq!(status, 404, "{bad}: {page}");
            assert!(page.contains("not valid"), "{page}");
            for word in ["malformed", "key", "panic", "error", "Error"] {
                assert!(!page.contains(word), "{bad}: {word} in {page}");
            }
        }
    }
    // An unsubscribe token for the same member is no confirm token.
    use sendonce::domain::links::{Keys, Purpose, Secret, Target};
    let keys = Keys::new(Secret::new(SECRET.as_bytes().to_vec()).unwrap());
    let target = Target {
        account_id: 1,
        channel: sendonce::domain::address::Channel::Email,
        address: "bo@example.org".into(),
        lists: vec![news.parse().unwrap()],
        campaign_id: 0,
    };
    assert_eq!(
        format!("/c/{}", keys.seal(Purpose::Confirm, &target)),
        bo_path,
        "the test builds tokens as the sender does"
    );
    let unsub = format!("/c/{}", keys.seal(Purpose::Unsubscribe, &target));
    let (status, _) = http(&srv.url(&unsub), Some(""));
    assert_eq!(status, 404);
}

/// Checks that a bad address on the signup form gets a 400 with the reason and writes nothing.
fn signup_refuses_a_bad_address(env: &Env, srv: &Server, news: &str) {
    // A bad address on the signup form: 400 with the reason, nothing written.
    let (status, page) = http(
        &srv.url("/subscribe"),
        Some(&format!("list={news}&email=not-an-address")),
    );
    assert_eq!(status, 400, "{page}");
    assert!(
        page.contains("does not look like an email address"),
        "{page}"
    );
    assert_eq!(env.count("SELECT count(*) FROM subscribers"), 3);
}

/// Makes bo pending again and checks the list's and the account's campaigns leave him out.
fn campaigns_leave_pending_members_out(env: &Env) {
    // Bo is pending again (re-added after a removal of the membership), Ana subscribed, Carl
    // in no list: the list's campaign reaches Ana only; the account's reaches Ana and Carl,
    // never a subscriber whose only membership is pending.
    env.sqlite()
        .execute(
            "UPDATE list_members SET status = 'pending' WHERE subscriber_id =
             (SELECT id FROM subscribers WHERE email_norm = 'bo@example.org')",
            [],
        )
        .unwrap();
    let list_c = email_campaign(env, &["news"]);
    let whole = email_campaign(env, &[]);
    let out = env.path("c.jsonl");
    let got = send(env, &out);
    let to = |cid: &str| -> Vec<String> {
        let mut v: Vec<String> = got
            .iter()
            .filter(|l| l.job_id.starts_with(&format!("campaign:{cid}:")))
            .map(|l| l.to.clone())
            .collect();
        v.sort();
        v
    };
    assert_eq!(to(&list_c), ["ana@example.org"]);
    assert_eq!(to(&whole), ["ana@example.org", "carl@example.org"]);
    let audience: serde_json::Value =
        serde_json::from_str(&env.ok(&["--json", "campaign", "audience", &whole])).unwrap();
    assert_eq!(audience["would_receive"], 2, "{audience}");
    assert_eq!(audience["unconfirmed"], 1, "{audience}");
}

#[test]
fn one_confirmation_then_get_changes_nothing_and_post_confirms() {
    let env = Env::new();
    let (news, _, _) = setup(&env);
    refused_without_a_public_url(&env);
    add_ana_bo_and_carl(&env);
    let (ana_path, bo_path) = send_the_confirmations_once(&env);

    let srv = server(&env);
    ana_confirms(&env, &srv, &ana_path);
    bo_unsubscribed_is_not_resubscribed(&env, &srv, &bo_path);
    refused_links(&srv, &news, &ana_path, &bo_path);
    signup_refuses_a_bad_address(&env, &srv, &news);
    drop(srv);

    campaigns_leave_pending_members_out(&env);
    env.assert_counters();
}

/// Confirmations are rows of the account's email stream, not campaigns: `campaign list` shows
/// none. Removing a list cancels its confirmations not yet sent (they would ask to confirm a
/// list that is gone); the worker then sends nothing for it, and the other list's goes.
#[test]
fn removing_a_list_cancels_its_queued_confirmations() {
    let env = Env::new();
    let (news, _, staff) = setup(&env);
    assert_eq!(add(&env, "ana@example.org", &news).code, 0);
    assert_eq!(add(&env, "bo@example.org", &staff).code, 0);
    let listed: serde_json::Value =
        serde_json::from_str(&env.ok(&["--json", "campaign", "list", "--account", "acme"]))
            .unwrap();
    assert_eq!(listed["campaigns"], serde_json::json!([]), "{listed}");
    ok(&env, &["list", "remove", "--account", "acme", &news]);
    let cancelled = env.count(
        "SELECT count(*) FROM sends WHERE status = 'cancelled'
         AND job_id LIKE 'confirm:%' AND address = 'ana@example.org'",
    );
    assert_eq!(
        cancelled, 1,
        "ana's confirmation is cancelled with its list"
    );
    let sent = send(&env, &env.path("o.jsonl"));
    let to: Vec<&str> = sent.iter().map(|l| l.to.as_str()).collect();
    assert_eq!(
        to,
        ["bo@example.org"],
        "only the other list's confirmation goes"
    );
    env.assert_counters();
}

#[test]
fn double_opt_in_needs_a_sender_and_an_email() {
    let env = Env::new();
    setup(&env);
    let r = env.run(&[
        "list",
        "create",
        "--account",
        "acme",
        "x",
        "--optin",
        "double",
    ]);
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("--confirm-from"), "{}", r.stderr);
    let r = env.run(&[
        "list",
        "create",
        "--account",
        "acme",
        "x",
        "--confirm-from",
        "a@example.org",
    ]);
    assert!(r.stderr.contains("double opt-in"), "{}", r.stderr);
    let body = env.write("b.txt", "Welcome to {{ list.name }}\n");
    let r = env.run(&[
        "list",
        "create",
        "--account",
        "acme",
        "x",
        "--optin",
        "double",
        "--confirm-from",
        "a@example.org",
        "--confirm-body-file",
        body.to_str().unwrap(),
    ]);
    assert!(r.stderr.contains("confirm_url"), "{}", r.stderr);
    let r = run(
        &env,
        &[
            "subscriber",
            "add",
            "--account",
            "acme",
            "--phone",
            "+14155550100",
            "--list",
            "news",
            "--public-url",
            PUBLIC,
        ],
    );
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("by email"), "{}", r.stderr);
    assert_eq!(env.count("SELECT count(*) FROM subscribers"), 0);
    assert_eq!(env.count("SELECT count(*) FROM lists WHERE name = 'x'"), 0);
}

#[test]
fn signup_form_honeypot_same_answer_and_unknown_lists() {
    let env = Env::new();
    let (news, open, staff) = setup(&env);
    let srv = server(&env);
    let (status, page) = http(&srv.url(&format!("/subscribe/{news}")), None);
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("name=\"website\"") && page.contains("class=\"hp\""),
        "{page}"
    );
    assert!(
        page.contains(&format!("name=\"list\" value=\"{news}\"")),
        "{page}"
    );
    for other in [staff.as_str(), "999", "news", "-1"] {
        let (status, page) = http(&srv.url(&format!("/subscribe/{other}")), None);
        assert_eq!(status, 404, "{other}: {page}");
    }

    // The honeypot filled: the same answer, nothing written.
    let robot = format!("list={news}&email=robot%40example.org&website=http%3A%2F%2Fspam");
    let (status, robot_page) = http(&srv.url("/subscribe"), Some(&robot));
    assert_eq!(status, 200, "{robot_page}");
    assert!(robot_page.contains("Check your inbox"), "{robot_page}");
    assert_eq!(env.count("SELECT count(*) FROM subscribers"), 0);

    let person = format!("list={news}&email=Dee%40Example.org&name=Dee&website=");
    let (status, first) = http(&srv.url("/subscribe"), Some(&person));
    assert_eq!(status, 200, "{first}");
    assert_eq!(first, robot_page, "the same page either way");
    assert_eq!(membership(&env, "dee@example.org", "news"), "pending");
    assert_eq!(env.count("SELECT count(*) FROM list_confirmations"), 1);
    let (_, again) = http(&srv.url("/subscribe"), Some(&person));
    assert_eq!(again, first, "a known address gets the same answer");
    assert_eq!(env.count("SELECT count(*) FROM list_confirmations"), 1);
    assert_eq!(env.count("SELECT count(*) FROM sends"), 1);

    // A single opt-in public list subscribes at once; a private list is the same 404.
    let (status, page) = http(
        &srv.url("/subscribe"),
        Some(&format!("list={open}&email=eve%40example.org")),
    );
    assert_eq!(status, 200, "{page}");
    assert_eq!(membership(&env, "eve@example.org", "open"), "subscribed");
    let (status, _) = http(
        &srv.url("/subscribe"),
        Some(&format!("list={staff}&email=eve%40example.org")),
    );
    assert_eq!(status, 404);
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) FROM list_members WHERE list_id = {staff}"
        )),
        0
    );
}

#[test]
fn signup_rate_limit_answers_429_after_the_burst() {
    let env = Env::new();
    let (news, _, _) = setup(&env);
    let srv = server(&env);
    for i in 0..5 {
        let form = format!("list={news}&email=p{i}%40example.org");
        let (status, page) = http(&srv.url("/subscribe"), Some(&form));
        assert_eq!(status, 200, "{i}: {page}");
    }
    let (status, page) = http(
        &srv.url("/subscribe"),
        Some(&format!("list={news}&email=late%40example.org")),
    );
    assert_eq!(status, 429, "{page}");
    assert!(page.contains("Too many"), "{page}");
    assert_eq!(env.count("SELECT count(*) FROM subscribers"), 5);
}

#[test]
fn api_subscriber_create_queues_one_confirmation() {
    let env = Env::new();
    setup(&env);
    let admin = crate::common::token(&env, "acme", "admin");
    let post = |srv: &Server| -> (u16, String) {
        rt().block_on(async {
            let res = client()
                .post(srv.url("/v1/subscribers"))
                .bearer_auth(&admin)
                .json(&serde_json::json!({"email": "fay@example.org", "lists": ["news"]}))
                .send()
                .await
                .unwrap();
            let status = res.status().as_u16();
            (status, res.text().await.unwrap())
        })
    };
    // A server without a public URL refuses, and writes nothing.
    let bare = Server::start_with_env(
        &env,
        &["--listen", "127.0.0.1:0"],
        &[
            ("SENDONCE_UNSUBSCRIBE_SECRET", SECRET),
            ("SENDONCE_PUBLIC_URL", ""),
        ],
    );
    let (status, body) = post(&bare);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("public URL"), "{body}");
    assert_eq!(env.count("SELECT count(*) FROM subscribers"), 0);
    // Its signup form: a robot (honeypot filled, even with a bad address) gets the usual
    // answer; a person gets "not available", nothing written.
    let news = env.ok(&["list", "show", "--account", "acme", "news", "--json"]);
    let news: serde_json::Value = serde_json::from_str(&news).unwrap();
    let id = news["id"].as_i64().unwrap();
    let (status, page) = http(
        &bare.url("/subscribe"),
        Some(&format!("list={id}&email=nonsense&website=x")),
    );
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("Check your inbox"), "{page}");
    let (status, page) = http(
        &bare.url("/subscribe"),
        Some(&format!("list={id}&email=gil%40example.org")),
    );
    assert_eq!(status, 503, "{page}");
    assert!(page.contains("cannot take signups"), "{page}");
    assert_eq!(env.count("SELECT count(*) FROM subscribers"), 0);
    drop(bare);
    let srv = server(&env);
    for _ in 0..2 {
        let (status, body) = post(&srv);
        assert_eq!(status, 201, "{body}");
    }
    assert_eq!(membership(&env, "fay@example.org", "news"), "pending");
    assert_eq!(env.count("SELECT count(*) FROM list_confirmations"), 1);
    assert_eq!(
        env.count("SELECT count(*) FROM sends WHERE job_id LIKE 'confirm:%' AND status = 'queued'"),
        1
    );
}

/// A person in a real browser (Debian's chromium, driven by Playwright): the signup form of a
/// public double opt-in list at phone width, the address typed in and the button pressed with
/// the keyboard; the confirmation arrives once; its link's page, its button; then the member is
/// subscribed and the next campaign on the list reaches it. Screenshots of each page are kept
/// under `test-output/optin/`.
#[cfg(feature = "tier1")]
#[test]
fn a_browser_signs_up_and_confirms() {
    let env = Env::new();
    let (news, _, _) = setup(&env);
    let srv = server(&env);
    let dir = output_dir("optin");
    let shot = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let (form, thanks) = (shot("signup-form.png"), shot("signup-done.png"));
    let signup = browser(&[
        &srv.url(&format!("/subscribe/{news}")),
        "--width",
        "360",
        "--screenshot",
        &form,
        "--fill",
        "Email address=Kim@Example.org",
        "--fill",
        "Name (optional)=Kim",
        "--click",
        "Subscribe",
        "--keyboard",
        "--screenshot-after",
        &thanks,
    ]);
    assert_eq!(signup["status"], 200, "{signup}");
    assert_eq!(signup["scripts"], 0, "{signup}");
    assert_eq!(signup["overflow_x"], false, "wider than a phone: {signup}");
    let after = signup["after"]["text"].as_str().unwrap_or_default();
    assert_eq!(signup["after"]["status"], 200, "{signup}");
    assert!(after.to_lowercase().contains("inbox"), "{after}");
    assert_png(Path::new(&form), 2_000, Some(360));
    assert_png(Path::new(&thanks), 2_000, Some(360));
    assert_eq!(membership(&env, "kim@example.org", "news"), "pending");

    let outbox = env.path("outbox.jsonl");
    let lines = send(&env, &outbox);
    let sent: Vec<_> = lines.iter().filter(|l| l.to == "kim@example.org").collect();
    assert_eq!(sent.len(), 1, "one confirmation: {lines:?}");
    let path = confirm_path(&lines, "kim@example.org");
    let (page, done) = (shot("confirm-page.png"), shot("confirm-done.png"));
    let confirm = browser(&[
        &srv.url(&path),
        "--width",
        "360",
        "--screenshot",
        &page,
        "--click",
        "Confirm subscription",
        "--screenshot-after",
        &done,
    ]);
    assert_eq!(confirm["status"], 200, "{confirm}");
    assert_eq!(confirm["scripts"], 0, "{confirm}");
    assert!(
        confirm["text"]
            .as_str()
            .unwrap_or_default()
            .contains("k**@example.org"),
        "the masked address: {confirm}"
    );
    assert_eq!(confirm["after"]["status"], 200, "{confirm}");
    assert_png(Path::new(&page), 2_000, Some(360));
    assert_png(Path::new(&done), 2_000, Some(360));
    assert_eq!(membership(&env, "kim@example.org", "news"), "subscribed");

    // The next campaign on the list reaches Kim, once.
    let id = email_campaign(&env, &["news"]);
    assert!(!id.is_empty());
    let lines = send(&env, &outbox);
    let to_kim = lines
        .iter()
        .filter(|l| l.to == "kim@example.org" && !l.job_id.starts_with("confirm:"))
        .count();
    assert_eq!(to_kim, 1, "{lines:?}");
}

/// An anonymous signup never brings back an address the operator removed or that opted out
/// of everything: same answer, nothing written, the old memberships stay dead.
#[test]
fn a_signup_does_not_revive_a_removed_or_suppressed_address() {
    let env = Env::new();
    let (_, open, _) = setup(&env);
    let srv = server(&env);
    ok(
        &env,
        &[
            "subscriber",
            "add",
            "--account",
            "acme",
            "--email",
            "ana@example.org",
            "--list",
            "open",
        ],
    );
    assert_eq!(membership(&env, "ana@example.org", "open"), "subscribed");
    ok(
        &env,
        &[
            "subscriber",
            "remove",
            "--account",
            "acme",
            "ana@example.org",
        ],
    );
    let before = env.count("SELECT count(*) FROM subscribers WHERE removed_at IS NULL");
    let form = format!("list={open}&email=ana%40example.org");
    let (status, page) = http(&srv.url("/subscribe"), Some(&form));
    assert_eq!(status, 200, "{page}");
    assert_eq!(
        env.count("SELECT count(*) FROM subscribers WHERE removed_at IS NULL"),
        before,
        "the removed subscriber stays removed"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM suppressions WHERE address = 'ana@example.org'"),
        1,
        "the removal's suppression stays"
    );
    // Someone new on the same form is subscribed.
    let (status, _) = http(
        &srv.url("/subscribe"),
        Some(&format!("list={open}&email=bo%40example.org")),
    );
    assert_eq!(status, 200);
    assert_eq!(membership(&env, "bo@example.org", "open"), "subscribed");
    env.assert_counters();
}

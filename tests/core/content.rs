//! Campaign content end to end through the real binary: HTML and text bodies, the text part
//! generated from HTML, auto-escaping, Reply-To, `campaign.*` and `unsubscribe_url`, the SMS
//! footer, `campaign preview` (the same bytes the worker sends) and `campaign test-send`
//! (a marked copy outside the ledger).

use crate::common::Env;
use sendonce::provider::deliverylog::{read_lines, DeliveryLine};
use serde_json::Value;

const SECRET: &str = "content-test-secret-0123456789";
const PUBLIC: &str = "https://news.example.org";

fn json(env: &Env, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&env.ok(&all)).unwrap()
}

/// The binary with the unsubscribe secret set.
fn run_signed(env: &Env, args: &[&str]) -> crate::common::Run {
    let out = env
        .cmd()
        .env("SENDONCE_UNSUBSCRIBE_SECRET", SECRET)
        .env_remove("SENDONCE_PUBLIC_URL")
        .args(args)
        .output()
        .expect("run sendonce");
    out.into()
}

fn ok_signed(env: &Env, args: &[&str]) -> String {
    let r = run_signed(env, args);
    assert_eq!(r.code, 0, "sendonce {args:?}: {}\n{}", r.stderr, r.stdout);
    r.stdout.trim().to_string()
}

/// acme with Ana (a hostile-looking city) and Bo, both in list `news`.
fn setup(env: &Env) {
    env.setup_account();
    env.ok(&["list", "create", "--account", "acme", "news"]);
    for (email, name, city) in [
        (
            "Ana@Example.org",
            "Ana",
            "<script>alert(1)</script> & \"Lisboa\"",
        ),
        ("bo@example.org", "Bo", "Porto"),
    ] {
        let attr = format!("city={city}");
        env.ok(&[
            "subscriber",
            "add",
            "--account",
            "acme",
            "--email",
            email,
            "--name",
            name,
            "--attr",
            &attr,
            "--list",
            "news",
        ]);
    }
}

const HTML: &str = "<html><body><h1>Hello {{ name }}</h1>\
    <p>From {{ city }}, in {{ campaign.name }} ({{ campaign.lists | join(', ') }}).</p>\
    <p><a href=\"{{ unsubscribe_url }}\">Unsubscribe</a></p></body></html>";

/// An email campaign on `news` with the given bodies; its id.
fn email_campaign(env: &Env, text: Option<&str>, html: Option<&str>) -> String {
    let mut args: Vec<String> = [
        "campaign",
        "create",
        "--account",
        "acme",
        "--name",
        "Café news",
        "--channel",
        "email",
        "--from",
        "Café Ünïcode <news@example.org>",
        "--reply-to",
        "Desk <desk@example.org>",
        "--subject",
        "Olá {{ name }}",
        "--list",
        "news",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(t) = text {
        let p = env.write("body.txt", t);
        args.extend(["--body-file".into(), p.to_str().unwrap().into()]);
    }
    if let Some(h) = html {
        let p = env.write("body.html", h);
        args.extend(["--html-file".into(), p.to_str().unwrap().into()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    env.ok(&args)
}

fn lines(env: &Env, name: &str) -> Vec<DeliveryLine> {
    let p = env.path(name);
    if !p.exists() {
        return Vec::new();
    }
    read_lines(&p).unwrap()
}

fn outbox(env: &Env, name: &str) -> String {
    format!("outbox:{}", env.path(name).display())
}

#[test]
fn preview_renders_exactly_what_the_worker_sends() {
    let env = Env::new();
    setup(&env);
    let id = email_campaign(
        &env,
        Some("Hi {{ name }} from {{ city }}\n{{ unsubscribe_url }}\n"),
        Some(HTML),
    );
    let preview = |who: &str| -> Value {
        let out = ok_signed(
            &env,
            &[
                "--json",
                "campaign",
                "preview",
                &id,
                "--subscriber",
                who,
                "--public-url",
                PUBLIC,
            ],
        );
        serde_json::from_str(&out).unwrap()
    };
    let before = preview("ana@example.org");
    env.ok(&["campaign", "approve", &id]);
    let ob = outbox(&env, "o.jsonl");
    ok_signed(
        &env,
        &["run", "--once", "--provider", &ob, "--public-url", PUBLIC],
    );
    let sent = lines(&env, "o.jsonl");
    assert_eq!(sent.len(), 2, "{sent:?}");
    for who in ["ana@example.org", "bo@example.org"] {
        let p = if who.starts_with("ana") {
            before.clone()
        } else {
            preview(who)
        };
        let line = sent.iter().find(|l| l.to == who).expect("delivered");
        assert_eq!(p["job_id"], line.job_id.as_str());
        assert_eq!(p["subject"], line.subject.as_deref().unwrap());
        assert_eq!(p["body"], line.body.as_str());
        assert_eq!(p["html"].as_str(), line.html.as_deref());
        assert_eq!(line.reply_to.as_deref(), Some("Desk <desk@example.org>"));
    }
    // After sending, the preview still reads the send's own captured variables and says why
    // nobody would get it again.
    let after = preview("ana@example.org");
    assert_eq!(after["body"], before["body"]);
    assert_eq!(after["would_receive"], false);
    assert!(
        after["why_not"].as_str().unwrap().contains("sent"),
        "{after}"
    );
}

#[test]
fn html_escapes_variables_and_the_text_keeps_them_raw() {
    let env = Env::new();
    setup(&env);
    let id = email_campaign(&env, None, Some(HTML));
    let p: Value = serde_json::from_str(&ok_signed(
        &env,
        &[
            "--json",
            "campaign",
            "preview",
            &id,
            "--subscriber",
            "ana@example.org",
            "--public-url",
            PUBLIC,
        ],
    ))
    .unwrap();
    let html = p["html"].as_str().unwrap();
    let text = p["body"].as_str().unwrap();
    assert!(
        html.contains("&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;Lisboa&quot;"),
        "{html}"
    );
    assert!(!html.contains("<script>"), "{html}");
    assert!(html.contains("in Café news (news)"), "{html}");
    // Escaped for what HTML needs, not more: a link reads as a link in the source.
    assert!(
        html.contains(&format!("<a href=\"{}/u/", PUBLIC.trim_end_matches('/'))),
        "{html}"
    );
    assert!(!html.contains("&#x2f;"), "{html}");
    // The text part was generated from the rendered HTML: the heading, the raw value (decoded
    // once, as a reader sees it in the HTML), and the link target on one line.
    assert!(text.contains("Hello Ana"), "{text}");
    assert!(
        text.contains("<script>alert(1)</script> & \"Lisboa\""),
        "{text}"
    );
    let link = text
        .lines()
        .find(|l| l.contains("/u/"))
        .expect("the unsubscribe link is in the text part");
    assert!(link.contains(&format!("{PUBLIC}/u/")), "{text}");
    let token = link.rsplit("/u/").next().unwrap();
    let u = open_link(token).expect("a valid token");
    assert_eq!(u.address, "ana@example.org");
    assert!(
        !token.contains("ana"),
        "the address is not readable in {token}"
    );
    // eml: multipart/alternative with both parts, Reply-To and the display name.
    let eml = ok_signed(
        &env,
        &[
            "campaign",
            "preview",
            &id,
            "--subscriber",
            "1",
            "--public-url",
            PUBLIC,
        ],
    );
    assert!(eml.contains("multipart/alternative"), "{eml}");
    assert!(eml.contains("Reply-To: Desk <desk@example.org>"), "{eml}");
    assert!(
        eml.contains("text/plain") && eml.contains("text/html"),
        "{eml}"
    );
}

#[test]
fn a_link_without_a_public_url_stops_the_worker_before_any_send() {
    let env = Env::new();
    setup(&env);
    let id = email_campaign(&env, Some("Bye: {{ unsubscribe_url }}\n"), None);
    // Creating and approving need no URL: only sending does.
    env.ok(&["campaign", "approve", &id]);
    let ob = outbox(&env, "o.jsonl");
    let r = run_signed(&env, &["run", "--once", "--provider", &ob]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("--public-url"), "{}", r.stderr);
    assert!(lines(&env, "o.jsonl").is_empty());
    assert_eq!(
        env.count("SELECT count(*) FROM sends WHERE status = 'queued'"),
        2
    );
    // A URL without the secret is refused by name, without sending either.
    let out = env
        .cmd()
        .env_remove("SENDONCE_UNSUBSCRIBE_SECRET")
        .args(["run", "--once", "--provider", &ob, "--public-url", PUBLIC])
        .output()
        .expect("run sendonce");
    let r = crate::common::Run::from(out);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("SENDONCE_UNSUBSCRIBE_SECRET"),
        "{}",
        r.stderr
    );
    ok_signed(
        &env,
        &["run", "--once", "--provider", &ob, "--public-url", PUBLIC],
    );
    assert_eq!(lines(&env, "o.jsonl").len(), 2);
}

#[test]
fn bad_content_is_refused_at_create_and_nothing_is_written() {
    let env = Env::new();
    setup(&env);
    let html = env.write("b.html", "<p>{{ nmae }}</p>");
    let text = env.write("b.txt", "hi");
    let base = [
        "campaign",
        "create",
        "--account",
        "acme",
        "--name",
        "x",
        "--channel",
        "email",
        "--from",
        "news@example.org",
        "--subject",
        "s",
    ];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--html-file", html.to_str().unwrap()], "HTML body"),
        (
            vec![
                "--body-file",
                text.to_str().unwrap(),
                "--reply-to",
                "a@b.org\r\nBcc: c@d.org",
            ],
            "--reply-to",
        ),
        (
            vec![
                "--body-file",
                text.to_str().unwrap(),
                "--reply-to",
                "=?utf-8?q?x=0ABcc:e?= <a@b.org>",
            ],
            "--reply-to",
        ),
        (vec![], "--body-file"),
    ];
    for (extra, needle) in cases {
        let mut args = base.to_vec();
        args.extend(extra);
        let r = env.run(&args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(needle), "{args:?}: {}", r.stderr);
    }
    assert_eq!(env.count("SELECT count(*) FROM campaigns"), 0);
    // An SMS campaign takes no HTML.
    let r = env.run(&[
        "campaign",
        "create",
        "--account",
        "acme",
        "--name",
        "x",
        "--channel",
        "sms",
        "--html-file",
        html.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
}

#[test]
fn new_content_is_frozen_after_approval() {
    let env = Env::new();
    setup(&env);
    let id = email_campaign(&env, Some("hi\n"), Some("<p>hi</p>"));
    env.ok(&["campaign", "approve", &id]);
    for col in ["html", "reply_to", "filter", "sms_footer", "body_format"] {
        let sql = format!("UPDATE campaigns SET {col} = 'html' WHERE id = {id}");
        let e = env.sqlite().execute(&sql, []).unwrap_err().to_string();
        assert!(e.contains("frozen"), "{col}: {e}");
    }
}

#[test]
fn the_sms_footer_is_taken_at_create_counted_and_sent() {
    let env = Env::new();
    env.setup_account();
    env.ok(&[
        "subscriber",
        "add",
        "--account",
        "acme",
        "--phone",
        "+14155550100",
        "--name",
        "Bo",
    ]);
    let r = env.run(&["account", "update", "acme", "--sms-footer", "a\nb"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    env.ok(&[
        "account",
        "update",
        "acme",
        "--sms-footer",
        "Reply STOP to opt out",
    ]);
    let accounts = json(&env, &["account", "list"]);
    assert_eq!(
        accounts["accounts"][0]["sms_footer"],
        "Reply STOP to opt out"
    );
    // 150 GSM characters + newline + 21 of footer = 172: two segments, not one.
    let body = env.write("s.txt", format!("{}{{{{ name }}}}", "x".repeat(150)));
    let created = json(
        &env,
        &[
            "campaign",
            "create",
            "--account",
            "acme",
            "--name",
            "s",
            "--channel",
            "sms",
            "--body-file",
            body.to_str().unwrap(),
        ],
    );
    assert_eq!(created["sms"]["segments"], 2, "{created}");
    let id = created["id"].to_string();
    // Changing the account's footer later does not change this campaign.
    env.ok(&[
        "account",
        "update",
        "acme",
        "--sms-footer",
        "Text END to stop",
    ]);
    env.ok(&["campaign", "approve", &id]);
    let ob = outbox(&env, "o.jsonl");
    env.ok(&["run", "--once", "--provider", &ob]);
    let sent = lines(&env, "o.jsonl");
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].body,
        format!("{}Bo\nReply STOP to opt out", "x".repeat(150))
    );
    // A body that fits alone but not with the footer is refused at create.
    let long = env.write("l.txt", "y".repeat(1590));
    let r = env.run(&[
        "campaign",
        "create",
        "--account",
        "acme",
        "--name",
        "l",
        "--channel",
        "sms",
        "--body-file",
        long.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("footer"), "{}", r.stderr);
}

#[test]
fn a_test_send_is_marked_repeatable_and_outside_the_ledger() {
    let env = Env::new();
    setup(&env);
    let id = email_campaign(&env, Some("Hi {{ name }} {{ unsubscribe_url }}\n"), None);
    let ob = outbox(&env, "t.jsonl");
    let send = |to: &str| {
        run_signed(
            &env,
            &[
                "--json",
                "campaign",
                "test-send",
                &id,
                "--to",
                to,
                "--provider",
                &ob,
                "--public-url",
                PUBLIC,
            ],
        )
    };
    let r = send("Me@Example.net");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(doc["outcome"], "sent");
    assert_eq!(
        doc["subscriber_id"], 1,
        "the first subscriber it would reach"
    );
    assert_eq!(send("me@example.net").code, 0);
    let sent = lines(&env, "t.jsonl");
    assert_eq!(
        sent.len(),
        2,
        "a test send is not deduplicated: each call sends a copy"
    );
    for l in &sent {
        assert_eq!(l.to, "me@example.net");
        assert_eq!(l.subject.as_deref(), Some("[TEST] Olá Ana"));
        assert!(l.job_id.starts_with(&format!("test:{id}:")), "{}", l.job_id);
        // The link unsubscribes the test address, never Ana.
        let token = l.body.rsplit("/u/").next().unwrap().trim();
        let u = open_link(token).unwrap();
        assert_eq!(u.address, "me@example.net");
    }
    assert_ne!(sent[0].job_id, sent[1].job_id);
    // Nothing in the ledger, and the draft is still a draft.
    assert_eq!(env.count("SELECT count(*) FROM sends"), 0);
    assert_eq!(env.count("SELECT count(*) FROM campaigns"), 1);
    let s = json(&env, &["campaign", "status", &id]);
    assert_eq!(s["status"], "draft");
    // Rendered for another subscriber on request; a bad address is refused by name.
    let r = run_signed(
        &env,
        &[
            "--json",
            "campaign",
            "test-send",
            &id,
            "--to",
            "me@example.net",
            "--subscriber",
            "bo@example.org",
            "--provider",
            &ob,
            "--public-url",
            PUBLIC,
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        lines(&env, "t.jsonl")[2].subject.as_deref(),
        Some("[TEST] Olá Bo")
    );
    let r = send("not an address");
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("--to"), "{}", r.stderr);
}

#[test]
fn templates_are_checked_against_the_audience_and_preview_names_the_filter() {
    let env = Env::new();
    setup(&env);
    // Cy is outside the list and has no city: a campaign on `news` may print {{ city }}
    // unguarded, one on the whole account may not.
    env.ok(&[
        "subscriber",
        "add",
        "--account",
        "acme",
        "--email",
        "cy@example.org",
    ]);
    let body = env.write("c.txt", "From {{ city }}\n");
    let create = |extra: &[&str]| {
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
            "s",
            "--body-file",
            body.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        env.run(&args)
    };
    let r = create(&[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("`city`"), "{}", r.stderr);
    let r = create(&["--list", "news"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let id = r.stdout.trim().to_string();
    env.ok(&["campaign", "approve", &id]);
    // A filter narrows the audience the check counts too, and preview says who it leaves out.
    let r = create(&["--filter", "city = \"Porto\""]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let filtered = r.stdout.trim().to_string();
    let p = json(
        &env,
        &[
            "campaign",
            "preview",
            &filtered,
            "--subscriber",
            "ana@example.org",
        ],
    );
    assert_eq!(p["would_receive"], false);
    assert!(p["why_not"].as_str().unwrap().contains("filter"), "{p}");
    let p = json(
        &env,
        &[
            "campaign",
            "preview",
            &filtered,
            "--subscriber",
            "bo@example.org",
        ],
    );
    assert_eq!(p["would_receive"], true, "{p}");
}

/// Open an unsubscribe token sealed with the tests' `SECRET`.
fn open_link(
    token: &str,
) -> Result<sendonce::domain::links::Target, sendonce::domain::links::TokenError> {
    use sendonce::domain::links::{Keys, Purpose, Secret};
    let keys = Keys::new(Secret::new(SECRET.as_bytes().to_vec()).unwrap());
    keys.open(Purpose::Unsubscribe, token, 0)
}

//! Issue 37 F4: control characters and encoded words from subscriber data never reach a
//! provider's headers. Old rows with hostile names (written straight into the SQLite file, as
//! data from before the input checks) rendered into `Subject: Evil {{ name }}` fail with a
//! reason naming the header and the character, and the fake provider's Resend, Postmark and
//! webhook endpoints never see them; the public form, the API, the CLI and CSV import refuse
//! such names and attribute values, and attributes named like a template variable, writing
//! nothing.

use crate::common::{self, Env, Fake, Server};
use serde_json::{json, Value};

/// The credential the HTTP providers are given (the fake accepts any).
const KEY: &str = "key-header-injection-0123456789";

/// (address, name written by SQL, the character the reason must name).
const HOSTILE: [(&str, &str, &str); 5] = [
    (
        "crlf@example.com",
        "Evil Eve\r\nBcc: victim@x.example\r\nX-Injected: yes",
        "U+000D (carriage return)",
    ),
    ("nul@example.com", "Eve\0Bcc", "U+0000 (NUL)"),
    (
        "ls@example.com",
        "Eve\u{2028}Bcc: victim@x.example",
        "U+2028 (line separator)",
    ),
    (
        "bidi@example.com",
        "Eve\u{202E}gpj.exe",
        "U+202E (bidirectional override)",
    ),
    (
        "ew@example.com",
        "=?utf-8?b?RXZlDQpCY2M6IHZpY3RpbUB4LmV4YW1wbGU=?=",
        "RFC 2047 encoded word",
    ),
];

/// An account, two clean subscribers and the hostile ones (their names set by SQL after a
/// clean import), and an approved campaign whose subject prints the name. Returns its id.
fn hostile_campaign(env: &Env) -> String {
    let acct = env.setup_account();
    let mut csv = String::from("email,name\nann@example.com,Ann\nbob@example.com,Bob\n");
    for (addr, _, _) in HOSTILE {
        csv.push_str(&format!("{addr},placeholder\n"));
    }
    let f = env.write("subs.csv", csv);
    env.import_csv(&acct, &f);
    let db = env.sqlite();
    for (addr, name, _) in HOSTILE {
        let n = db
            .execute(
                "UPDATE subscribers SET name = ?1 WHERE email_norm = ?2",
                [name, addr],
            )
            .unwrap();
        assert_eq!(n, 1, "{addr}");
    }
    drop(db);
    let body = env.write("body.txt", "Hello {{ name }}\n");
    let cid = env.ok(&[
        "campaign",
        "create",
        "--account",
        &acct,
        "--name",
        "c",
        "--channel",
        "email",
        "--from",
        "news@example.org",
        "--subject",
        "Evil {{ name }}",
        "--body-file",
        body.to_str().unwrap(),
    ]);
    env.ok(&["campaign", "approve", &cid]);
    cid
}

/// `run --once` with `spec`; the HTTP providers' keys in the environment.
fn run_once(env: &Env, spec: &str) {
    let out = env
        .cmd()
        .args(["run", "--once", "--tick", "20ms", "--provider", spec])
        .env("SENDONCE_RESEND_API_KEY", KEY)
        .env("SENDONCE_POSTMARK_TOKEN", KEY)
        .output()
        .unwrap();
    let r = common::Run::from(out);
    assert_eq!(r.code, 0, "{}\n{}", r.stderr, r.stdout);
}

/// The row of `addr`: (status, last_error).
fn row(env: &Env, addr: &str) -> (String, Option<String>) {
    env.sqlite()
        .query_row(
            "SELECT status, last_error FROM sends WHERE address = ?1",
            [addr],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap_or_else(|e| panic!("{addr}: {e}"))
}

/// Which recipients each provider endpoint received (all three are run before any assertion,
/// so a failure shows every endpoint that let a hostile subject through), then the rows.
#[test]
fn hostile_names_fail_their_rows_and_never_reach_an_http_provider() {
    let mut received = Vec::new();
    let mut envs = Vec::new();
    for api in ["resend", "postmark", "webhook"] {
        let env = Env::new();
        let cid = hostile_campaign(&env);
        let log = env.path("fake.jsonl");
        let fake = Fake::start(&log, &[]);
        let spec = match api {
            "webhook" => format!("webhook:{}/send", fake.base()),
            _ => format!(
                "{api}:?base_url={}&from=news@example.com&timeout=2s",
                fake.base()
            ),
        };
        run_once(&env, &spec);
        let lines = fake.lines();
        let mut to: Vec<String> = lines.iter().map(|l| l.to.clone()).collect();
        to.sort();
        for l in lines
            .iter()
            .filter(|l| l.to != "ann@example.com" && l.to != "bob@example.com")
        {
            eprintln!("{api} received the subject {:?}", l.subject);
        }
        received.push((api, to));
        envs.push((api, env, cid));
    }
    for (api, to) in &received {
        assert_eq!(
            to,
            &["ann@example.com", "bob@example.com"],
            "{api}: {received:?}"
        );
    }
    for (api, env, cid) in &envs {
        check_rows(api, env, cid);
    }
}

/// Every hostile row failed with a reason naming the Subject header and the character only.
fn check_rows(api: &str, env: &Env, cid: &str) {
    for (addr, _, what) in HOSTILE {
        let (status, reason) = row(env, addr);
        let reason = reason.unwrap_or_default();
        assert_eq!(status, "failed", "{api} {addr}: {reason}");
        assert!(
            reason.contains("Subject header") && reason.contains(what),
            "{api} {addr}: {reason}"
        );
        // The reason names the character, never the content.
        for word in ["Bcc", "victim", "gpj", "RXZl"] {
            assert!(!reason.contains(word), "{api} {addr}: {reason}");
        }
    }
    let st: Value = serde_json::from_str(&env.ok(&["--json", "campaign", "status", cid])).unwrap();
    assert_eq!(st["sent"], 2, "{api}: {st}");
    assert_eq!(st["failed"], HOSTILE.len() as i64, "{api}: {st}");
    assert_eq!(st["in_doubt"], 0, "{api}: {st}");
}

/// A CSV import (all or nothing) refused, naming the line, the column and the character, and
/// nothing written; with `--skip-invalid` the other rows are imported and the bad one reported.
#[test]
fn csv_import_refuses_control_characters_naming_line_and_column() {
    let env = Env::new();
    let acct = env.setup_account();
    let cases = [
        (
            "Ann\u{2028}Bcc: x@y.example",
            "ok",
            "column 2 (name)",
            "U+2028",
        ),
        ("Ann", "a\rb", "column 3 (city)", "U+000D"),
        ("Ann\u{85}x", "ok", "column 2 (name)", "U+0085"),
        ("Ann\u{7f}", "ok", "column 2 (name)", "U+007F"),
        ("Ann", "x\u{9b}y", "column 3 (city)", "U+009B"),
        ("Ann", "\u{2066}x", "column 3 (city)", "U+2066"),
        (
            "=?utf-8?q?A=0D=0A?=",
            "ok",
            "column 2 (name)",
            "encoded word",
        ),
    ];
    for (name, city, column, what) in cases {
        let csv = format!(
            "email,name,city\nfirst@example.com,First,Oslo\n\"bad@example.com\",\"{name}\",\"{city}\"\n"
        );
        let f = env.write("bad.csv", csv);
        let r = env.run(&[
            "subscriber",
            "import",
            "--account",
            &acct,
            f.to_str().unwrap(),
        ]);
        assert_ne!(r.code, 0, "{name:?} {city:?}: {}", r.stdout);
        assert!(
            r.stderr.contains("line 3") && r.stderr.contains(column) && r.stderr.contains(what),
            "{name:?} {city:?}: {}",
            r.stderr
        );
        assert!(r.stderr.contains("nothing was imported"), "{}", r.stderr);
        assert!(!r.stderr.contains("Bcc"), "{}", r.stderr);
        assert_eq!(env.count("SELECT count(*) FROM subscribers"), 0);
    }
    let f = env.write(
        "some.csv",
        "email,name\nfirst@example.com,First\nbad@example.com,\"Eve\nBcc: x@y.example\"\n",
    );
    let r = env.run(&[
        "--json",
        "subscriber",
        "import",
        "--account",
        &acct,
        "--skip-invalid",
        f.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(doc["imported"], 1, "{doc}");
    assert_eq!(doc["skipped"][0]["line"], 3, "{doc}");
    let reason = doc["skipped"][0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("column 2 (name) contains U+000A"),
        "{reason}"
    );
    assert_eq!(env.count("SELECT count(*) FROM subscribers"), 1);
}

/// `subscriber add` and `subscriber update` refuse them too (exit non-zero, nothing written).
#[test]
fn cli_add_and_update_refuse_control_characters() {
    let env = Env::new();
    let acct = env.setup_account();
    let r = env.run(&[
        "subscriber",
        "add",
        "--account",
        &acct,
        "--email",
        "a@example.com",
        "--name",
        "Eve\r\nBcc: x@y.example",
    ]);
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("the name contains U+000D"),
        "{}",
        r.stderr
    );
    assert_eq!(env.count("SELECT count(*) FROM subscribers"), 0);
    env.ok(&[
        "subscriber",
        "add",
        "--account",
        &acct,
        "--email",
        "a@example.com",
    ]);
    let r = env.run(&[
        "subscriber",
        "update",
        "--account",
        &acct,
        "a@example.com",
        "--attr",
        "city=Oslo\nX",
    ]);
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("attribute \"city\" contains U+000A"),
        "{}",
        r.stderr
    );
    assert_eq!(
        env.count("SELECT count(*) FROM subscribers WHERE attrs LIKE '%Oslo%'"),
        0
    );
}

/// POST and PATCH /v1/subscribers: 400 naming the field and the character; nothing written.
#[test]
fn api_refuses_control_characters_and_reserved_attribute_names() {
    let env = Env::new();
    env.setup_account();
    let tok = common::token(&env, "acme", "admin");
    let srv = Server::start(&env, &[]);
    let call = |method: &str, path: &str, body: Value| -> (u16, String) {
        common::rt().block_on(async {
            let c = common::client();
            let req = match method {
                "POST" => c.post(srv.url(path)),
                _ => c.patch(srv.url(path)),
            };
            let res = req.bearer_auth(&tok).json(&body).send().await.unwrap();
            (res.status().as_u16(), res.text().await.unwrap())
        })
    };
    let bad = [
        (
            json!({"email": "a@example.com", "name": "Evil\r\nBcc: x@y.example"}),
            "U+000D",
        ),
        (
            json!({"email": "a@example.com", "name": "Eve\u{2029}"}),
            "U+2029",
        ),
        (
            json!({"email": "a@example.com", "name": "Eve\u{0}"}),
            "U+0000",
        ),
        (
            json!({"email": "a@example.com", "attrs": {"city": "Oslo\u{2028}"}}),
            "U+2028",
        ),
        (
            json!({"email": "a@example.com", "attrs": {"city": "=?utf-8?b?QQ==?="}}),
            "encoded word",
        ),
        (
            json!({"email": "a@example.com", "attrs": {"campaign": "x"}}),
            "reserved",
        ),
        (
            json!({"email": "a@example.com", "attrs": {"unsubscribe_url": "x"}}),
            "reserved",
        ),
        (
            json!({"email": "a@example.com", "attrs": {"range": "x"}}),
            "reserved",
        ),
    ];
    for (body, what) in &bad {
        let (status, text) = call("POST", "/v1/subscribers", body.clone());
        assert_eq!(status, 400, "{body}: {text}");
        assert!(text.contains(what), "{body}: {text}");
        assert!(!text.contains("Bcc"), "{text}");
    }
    let (status, text) = call(
        "POST",
        "/v1/subscribers",
        json!({"email": "a@example.com", "attrs": {"campaign": "x"}}),
    );
    assert_eq!(status, 400);
    for name in [
        "campaign",
        "email",
        "name",
        "phone",
        "range",
        "unsubscribe_url",
    ] {
        assert!(text.contains(name), "the reserved names are listed: {text}");
    }
    assert_eq!(env.count("SELECT count(*) FROM subscribers"), 0);
    let (status, text) = call("POST", "/v1/subscribers", json!({"email": "a@example.com"}));
    assert_eq!(status, 201, "{text}");
    for (body, what) in [
        (json!({"name": "Eve\nX"}), "U+000A"),
        (json!({"attrs": {"city": "\u{202D}x"}}), "U+202D"),
        (json!({"attrs": {"campaign": "x"}}), "reserved"),
    ] {
        let (status, text) = call("PATCH", "/v1/subscribers/a@example.com", body.clone());
        assert_eq!(status, 400, "{body}: {text}");
        assert!(text.contains(what), "{body}: {text}");
    }
    assert_eq!(
        env.count("SELECT count(*) FROM subscribers WHERE name IS NULL AND attrs = '{}'"),
        1
    );
}

/// The public signup form: 400 naming the problem, nothing written.
#[test]
fn signup_form_refuses_control_characters_in_the_name() {
    let env = Env::new();
    env.setup_account();
    let list = env.ok(&["list", "create", "--account", "acme", "open", "--public"]);
    let srv = Server::start(&env, &[]);
    let post = |form: String| -> (u16, String) {
        common::rt().block_on(async {
            let res = common::client()
                .post(srv.url("/subscribe"))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(form)
                .send()
                .await
                .unwrap();
            (res.status().as_u16(), res.text().await.unwrap())
        })
    };
    for (name, what) in [
        ("Eve%0D%0ABcc%3A+x%40y.example", "U+000D"),
        ("Eve%E2%80%A8", "U+2028"),
        ("Eve%00", "U+0000"),
        ("%3D%3Futf-8%3Fb%3FQQ%3D%3D%3F%3D", "encoded word"),
    ] {
        let (status, page) = post(format!("list={list}&email=eve%40example.org&name={name}"));
        assert_eq!(status, 400, "{name}: {page}");
        assert!(page.contains(what), "{name}: {page}");
        assert_eq!(env.count("SELECT count(*) FROM subscribers"), 0);
    }
    let (status, page) = post(format!("list={list}&email=eve%40example.org&name=Eve"));
    assert_eq!(status, 200, "{page}");
    assert_eq!(env.count("SELECT count(*) FROM subscribers"), 1);
}

/// A CSV column named like a template variable is refused before any row is read.
#[test]
fn csv_import_refuses_reserved_attribute_names() {
    let env = Env::new();
    let acct = env.setup_account();
    for col in ["campaign", "unsubscribe_url", "range", "namespace"] {
        let f = env.write("r.csv", format!("email,{col}\na@example.com,x\n"));
        for skip in [false, true] {
            let mut args = vec!["subscriber", "import", "--account", &acct];
            if skip {
                args.push("--skip-invalid");
            }
            args.push(f.to_str().unwrap());
            let r = env.run(&args);
            assert_ne!(r.code, 0, "{col}: {}", r.stdout);
            assert!(
                r.stderr.contains("line 1")
                    && r.stderr.contains("column 2")
                    && r.stderr.contains(&format!("{col:?} is a reserved name"))
                    && r.stderr.contains("campaign, debug, dict, email"),
                "{col}: {}",
                r.stderr
            );
            assert_eq!(env.count("SELECT count(*) FROM subscribers"), 0);
        }
    }
}

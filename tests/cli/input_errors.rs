//! Input that people get wrong, end to end on the real binary: CSV files from spreadsheets
//! (CRLF line ends, byte order marks, `;` or tab separators, Latin-1, empty files) and
//! templates with filters, defaults and variables that some subscribers lack.

use crate::common::{Env, Run};
use std::path::Path;

fn import(env: &Env, acct: &str, f: &Path, extra: &[&str]) -> Run {
    let mut args = vec![
        "subscriber",
        "import",
        "--account",
        acct,
        f.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    env.run(&args)
}

fn subscribers(env: &Env) -> i64 {
    env.count("SELECT count(*) FROM subscribers")
}

/// Exit 2, every needle in stderr, nothing imported.
fn assert_refused(env: &Env, r: &Run, needles: &[&str]) {
    assert_eq!(r.code, 2, "expected exit 2, got {}: {}", r.code, r.stderr);
    for n in needles {
        assert!(r.stderr.contains(n), "no {n:?} in: {}", r.stderr);
    }
    assert_eq!(subscribers(env), 0, "something was imported");
}

/// The same rows with LF, CRLF, CR, and a byte order mark: the bad rows are line 3 (a quoted
/// name over two lines, refused since names hold no line break) and line 6 (a blank line
/// comes before it) in each, and `--skip-invalid` reports the same line numbers.
#[test]
fn line_numbers_do_not_depend_on_line_ends_or_a_bom() {
    let env = Env::new();
    let acct = env.setup_account();
    let lf = "email,name\na@x.com,A\n\"b@x.com\",\"two\nlines\"\n\nbroken,C\nd@x.com,D\n";
    let variants: Vec<(&str, Vec<u8>)> = vec![
        ("lf", lf.as_bytes().to_vec()),
        ("crlf", lf.replace('\n', "\r\n").into_bytes()),
        ("cr", lf.replace('\n', "\r").into_bytes()),
        ("bom-lf", [&b"\xef\xbb\xbf"[..], lf.as_bytes()].concat()),
        (
            "bom-crlf",
            [&b"\xef\xbb\xbf"[..], lf.replace('\n', "\r\n").as_bytes()].concat(),
        ),
    ];
    let mut got = Vec::new();
    for (what, content) in variants {
        let f = env.write(&format!("{what}.csv"), content);
        let r = import(&env, &acct, &f, &[]);
        assert_eq!(r.code, 2, "{what}: {}", r.stderr);
        assert_eq!(subscribers(&env), 0, "{what}");
        let r2 = import(&env, &acct, &f, &["--json", "--skip-invalid"]);
        assert_eq!(r2.code, 0, "{what}: {}", r2.stderr);
        let doc: serde_json::Value = serde_json::from_str(&r2.stdout).unwrap();
        assert_eq!(doc["imported"], 2, "{what}: {doc}");
        assert_eq!(doc["skipped"][0]["line"], 3, "{what}: {doc}");
        got.push((
            what,
            r.stderr.trim().to_string(),
            doc["skipped"][1]["line"].clone(),
        ));
        env.sqlite().execute("DELETE FROM subscribers", []).unwrap();
    }
    let want = "line 3: column 2 (name) contains U+000";
    assert!(
        got.iter().all(|(_, e, l)| e.contains(want) && *l == 6),
        "every variant should report line 6: {got:#?}"
    );
}

#[test]
fn semicolon_and_tab_files_need_and_accept_delimiter() {
    let env = Env::new();
    let acct = env.setup_account();
    let f = env.write("semi.csv", "email;name\na@x.com;Ann\nb@x.com;Bob\n");
    let r = import(&env, &acct, &f, &[]);
    assert_refused(&env, &r, &["semi.csv", "`;`", "--delimiter ';'"]);
    let r = import(&env, &acct, &f, &["--delimiter", ";"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        env.count("SELECT count(*) FROM subscribers WHERE name IN ('Ann', 'Bob')"),
        2
    );
    env.sqlite().execute("DELETE FROM subscribers", []).unwrap();

    let f = env.write("tab.tsv", "email\tname\na@x.com\tAnn\n");
    let r = import(&env, &acct, &f, &[]);
    assert_refused(&env, &r, &["tab", "--delimiter tab"]);
    for d in ["tab", "\\t"] {
        let r = import(&env, &acct, &f, &["--delimiter", d]);
        assert_eq!(r.code, 0, "--delimiter {d}: {}", r.stderr);
        assert_eq!(
            env.count("SELECT count(*) FROM subscribers WHERE name = 'Ann'"),
            1
        );
        env.sqlite().execute("DELETE FROM subscribers", []).unwrap();
    }
    let r = import(&env, &acct, &f, &["--delimiter", "ab"]);
    assert_refused(&env, &r, &["--delimiter"]);
}

#[test]
fn latin1_file_needs_and_accepts_encoding_latin1() {
    let env = Env::new();
    let acct = env.setup_account();
    // "José" and "Müller" in ISO-8859-1, as an older spreadsheet saves them.
    let f = env.write(
        "latin1.csv",
        b"email,name,city\na@x.com,Jos\xe9,Lisboa\nb@x.com,M\xfcller,K\xf6ln\n",
    );
    let r = import(&env, &acct, &f, &[]);
    assert_refused(
        &env,
        &r,
        &[
            "latin1.csv: line 2: not valid UTF-8",
            "--encoding latin1",
            "UTF-8",
        ],
    );
    let r = import(&env, &acct, &f, &["--encoding", "latin1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let c = env.sqlite();
    let name: String = c
        .query_row(
            "SELECT name FROM subscribers WHERE email = 'a@x.com'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(name, "José");
    let city: String = c
        .query_row(
            "SELECT attrs ->> '$.city' FROM subscribers WHERE email = 'b@x.com'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(city, "Köln");
}

#[test]
fn empty_files_say_what_a_header_looks_like() {
    let env = Env::new();
    let acct = env.setup_account();
    let cases: [(&str, &[u8]); 4] = [
        ("zero.csv", b""),
        ("bom.csv", b"\xef\xbb\xbf"),
        ("blank.csv", b"\n\r\n\n"),
        ("bom-blank.csv", b"\xef\xbb\xbf\r\n"),
    ];
    for (name, content) in cases {
        let f = env.write(name, content);
        let r = import(&env, &acct, &f, &[]);
        assert_refused(
            &env,
            &r,
            &[
                &format!("{name} is empty"),
                "expected a header row such as `email,name`",
            ],
        );
    }
}

/// Two subscribers: Ann has a nickname and a city, Bob has neither.
fn two_subscribers(env: &Env) -> String {
    let acct = env.setup_account();
    env.ok(&[
        "subscriber",
        "add",
        "--account",
        &acct,
        "--email",
        "a@x.com",
        "--name",
        "Ann",
        "--attr",
        "nickname=Annie",
        "--attr",
        "city=porto",
    ]);
    env.ok(&[
        "subscriber",
        "add",
        "--account",
        &acct,
        "--email",
        "b@x.com",
        "--name",
        "Bob",
    ]);
    acct
}

fn create(env: &Env, acct: &str, subject: &str, body: &str) -> Run {
    let f = env.write("body.txt", body);
    env.run(&[
        "campaign",
        "create",
        "--account",
        acct,
        "--name",
        "n",
        "--channel",
        "email",
        "--from",
        "news@example.org",
        "--subject",
        subject,
        "--body-file",
        f.to_str().unwrap(),
    ])
}

/// Approve and send with the outbox; returns (to, subject, body) per delivery, by address.
fn send(env: &Env, cid: &str) -> Vec<(String, String, String)> {
    env.ok(&["campaign", "approve", cid]);
    let outbox = env.path(&format!("out-{cid}.jsonl"));
    let spec = format!("outbox:{}", outbox.display());
    env.ok(&["run", "--once", "--tick", "20ms", "--provider", &spec]);
    let mut out: Vec<(String, String, String)> =
        sendonce::provider::deliverylog::read_lines(&outbox)
            .unwrap_or_default()
            .into_iter()
            .map(|l| (l.to, l.subject.unwrap_or_default(), l.body))
            .collect();
    out.sort();
    out
}

#[test]
fn default_filter_is_accepted_and_renders_the_default_only_where_missing() {
    let env = Env::new();
    let acct = two_subscribers(&env);
    // `greeting` no subscriber has, `nickname` only Ann has: both have a default.
    let r = create(
        &env,
        &acct,
        "{{ greeting | default(\"Hello\") }} {{ name }}",
        "Hi {{ nickname | default(\"friend\") }}, {{ city | d(\"somewhere\") | title }}\n\
         {% if nickname %}aka {{ nickname }}{% else %}no nickname{% endif %}\n",
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let cid = r.stdout.trim().to_string();
    let sent = send(&env, &cid);
    assert_eq!(
        sent,
        vec![
            (
                "a@x.com".to_string(),
                "Hello Ann".to_string(),
                "Hi Annie, Porto\naka Annie\n".to_string()
            ),
            (
                "b@x.com".to_string(),
                "Hello Bob".to_string(),
                "Hi friend, Somewhere\nno nickname\n".to_string()
            ),
        ]
    );
}

#[test]
fn common_filters_render() {
    let env = Env::new();
    let acct = env.setup_account();
    env.ok(&[
        "subscriber",
        "add",
        "--account",
        &acct,
        "--email",
        "a@x.com",
        "--name",
        "ann lee",
        "--attr",
        "note=  spaced  ",
        "--attr",
        "long=The quick brown fox jumps over the lazy dog",
        "--attr",
        "html=<b>&",
    ]);
    let r = create(
        &env,
        &acct,
        "{{ name | title }}",
        "{{ name | upper }}|{{ name | lower }}|{{ name | capitalize }}|[{{ note | trim }}]|\
         {{ long | truncate(20) }}|{{ name | replace(\"ann\", \"Anne\") }}|{{ name | length }}|\
         {{ html | escape }}|{{ html | e }}\n",
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let sent = send(&env, r.stdout.trim());
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].1, "Ann Lee");
    assert_eq!(
        sent[0].2,
        "ANN LEE|ann lee|Ann lee|[spaced]|The quick brown...|Anne lee|7|\
         &lt;b&gt;&amp;|&lt;b&gt;&amp;\n"
    );
}

#[test]
fn a_variable_some_subscribers_lack_is_refused_without_a_default() {
    let env = Env::new();
    let acct = two_subscribers(&env);
    let r = create(&env, &acct, "News", "From {{ city }}\n");
    assert_eq!(r.code, 2, "{}", r.stderr);
    for n in [
        "city",
        "1 of the 2",
        "lack it",
        "{{ city | default(\"...\") }}",
    ] {
        assert!(r.stderr.contains(n), "no {n:?} in: {}", r.stderr);
    }
    // In the subject too, and for a subscriber without a name.
    env.ok(&[
        "subscriber",
        "add",
        "--account",
        &acct,
        "--email",
        "c@x.com",
    ]);
    let r = create(&env, &acct, "Hi {{ name }}", "Body\n");
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("subject")
            && r.stderr.contains("name")
            && r.stderr.contains("1 of the 3"),
        "{}",
        r.stderr
    );
    assert_eq!(env.count("SELECT count(*) FROM campaigns"), 0);
    // Guarded, it is accepted.
    let r = create(
        &env,
        &acct,
        "Hi {{ name | default(\"there\") }}",
        "{% if city is defined %}From {{ city }}{% endif %}\n",
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// A subscriber added after the campaign was created, without the attribute the template
/// prints: their message fails (permanently, with the reason) instead of going out with a
/// hole in the text.
#[test]
fn a_variable_missing_at_send_time_fails_the_row_instead_of_printing_nothing() {
    let env = Env::new();
    let acct = env.setup_account();
    env.ok(&[
        "subscriber",
        "add",
        "--account",
        &acct,
        "--email",
        "a@x.com",
        "--name",
        "Ann",
        "--attr",
        "city=Porto",
    ]);
    let r = create(&env, &acct, "News", "From {{ city }}\n");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let cid = r.stdout.trim().to_string();
    env.ok(&[
        "subscriber",
        "add",
        "--account",
        &acct,
        "--email",
        "b@x.com",
        "--name",
        "Bob",
    ]);
    // Added after create: approve checks again and refuses.
    let r = env.run(&["campaign", "approve", &cid]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("cannot be approved") && r.stderr.contains("city"),
        "{}",
        r.stderr
    );
    // Bob gets a city, the campaign is approved, and his city is lost before the list is
    // built (a change no check can see): his row fails instead of printing nothing.
    env.ok(&[
        "subscriber",
        "update",
        "--account",
        &acct,
        "b@x.com",
        "--attr",
        "city=Faro",
    ]);
    env.ok(&["campaign", "approve", &cid]);
    env.sqlite()
        .execute(
            "UPDATE subscribers SET attrs = '{}' WHERE email = 'b@x.com'",
            [],
        )
        .unwrap();
    let outbox = env.path("late.jsonl");
    let spec = format!("outbox:{}", outbox.display());
    env.run(&["run", "--once", "--tick", "20ms", "--provider", &spec]);
    let sent: Vec<(String, String, String)> = sendonce::provider::deliverylog::read_lines(&outbox)
        .unwrap_or_default()
        .into_iter()
        .map(|l| (l.to, l.subject.unwrap_or_default(), l.body))
        .collect();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].0, "a@x.com");
    assert_eq!(sent[0].2, "From Porto\n");
    let err: String = env
        .sqlite()
        .query_row(
            "SELECT status || ': ' || last_error FROM sends WHERE address = 'b@x.com'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        err.starts_with("failed: ") && err.contains("cannot render") && err.contains("undefined"),
        "{err}"
    );
}

/// An empty CSV cell is a missing value: a template that prints it without a default is
/// refused, and `default(...)` fills it.
#[test]
fn empty_csv_cells_are_missing_values() {
    let env = Env::new();
    let acct = env.setup_account();
    let f = env.write("s.csv", "email,nickname\na@x.com,Al\nb@x.com,\n");
    env.import_csv(&acct, &f);
    let r = create(&env, &acct, "Hi", "Hi {{ nickname }}!\n");
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("nickname"), "{}", r.stderr);
    let r = create(
        &env,
        &acct,
        "Hi",
        "Hi {{ nickname | default(\"friend\") }}!\n",
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let sent = send(&env, r.stdout.trim());
    let bodies: Vec<&str> = sent.iter().map(|s| s.2.as_str()).collect();
    assert_eq!(bodies, ["Hi Al!\n", "Hi friend!\n"], "{sent:?}");
}

/// A PostgreSQL URL for `--db` that cannot be reached fails without echoing the URL's password
/// and without creating anything beside it. (The server is a closed port on the loopback
/// address: a test never reaches outside this machine.)
#[test]
fn a_postgres_url_is_refused_without_echoing_it() {
    let env = Env::new();
    for cmd in [&["init"][..], &["account", "list"][..]] {
        let out = std::process::Command::new(crate::common::BIN)
            .current_dir(env.dir.path())
            .env_remove("SENDONCE_DB")
            .args(["--db", "postgres://app:s3cr3t-pw@127.0.0.1:1/news"])
            .args(cmd)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{cmd:?}: {stderr}");
        assert!(stderr.contains("PostgreSQL"), "{stderr}");
        assert!(
            !stderr.contains("s3cr3t"),
            "the URL's password was echoed: {stderr}"
        );
        let left: Vec<_> = std::fs::read_dir(env.dir.path()).unwrap().collect();
        assert!(left.is_empty(), "{cmd:?} created {left:?}");
    }
}

//! The CLI contract: bad input gets a clear error, the documented exit code, and no partial
//! write; the commands of the README work end to end.

use crate::common;
use crate::common::Env;

#[test]
fn demo_runs_end_to_end() {
    let env = Env::new();
    let dir = env.path("demo");
    let r = env.run(&[
        "--json",
        "demo",
        "--recipients",
        "200",
        "--dir",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    // 200 rows, every 50th a case-variant duplicate (4), one suppressed address.
    assert_eq!(doc["imported"], 196);
    assert_eq!(doc["skipped_duplicates"].as_array().unwrap().len(), 4);
    assert_eq!(doc["counts"]["sent"], 195);
    assert_eq!(doc["outbox_deliveries"], 195);
    assert_eq!(doc["campaign_status"], "sent");
    let per_job = common::deliveries(&dir.join("outbox.jsonl"));
    assert!(per_job.values().all(|&n| n == 1));
    assert!(!per_job.keys().any(|k| k.is_empty()));
}

/// A long list is built one chunk per turn: sending starts after the first chunk, not after
/// the whole list, and everyone still gets exactly one message.
#[test]
fn sending_starts_before_a_long_list_is_built() {
    let env = Env::new();
    let (_acct, cid) = env.setup_campaign(1000);
    env.ok(&["campaign", "approve", &cid]);
    let outbox = env.path("out.jsonl");
    let spec = format!("outbox:{}", outbox.display());
    let r = env.run(&[
        "-v",
        "--log-format",
        "json",
        "run",
        "--once",
        "--provider",
        &spec,
        "--tick",
        "50ms",
        "--list-chunk",
        "100",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let pos = |what: &str| {
        r.stderr
            .lines()
            .position(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no {what:?} in the log:\n{}", r.stderr))
    };
    assert!(
        pos("\"first claim\"") < pos("\"recipient list built\""),
        "the first claim waited for the whole list:\n{}",
        r.stderr
    );
    let per_job = common::deliveries(&outbox);
    assert_eq!(per_job.len(), 1000);
    assert!(per_job.values().all(|&n| n == 1));
    let st: serde_json::Value =
        serde_json::from_str(&env.ok(&["--json", "campaign", "status", &cid])).unwrap();
    assert_eq!(st["status"], "sent");
}

#[test]
fn campaign_lifecycle_and_status_json() {
    let env = Env::new();
    let (_acct, cid) = env.setup_campaign(30);
    let outbox = env.path("out.jsonl");
    env.ok(&["campaign", "approve", &cid]);
    let spec = format!("outbox:{}", outbox.display());
    let r = env.run(&[
        "--json",
        "run",
        "--once",
        "--provider",
        &spec,
        "--tick",
        "50ms",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let st: serde_json::Value =
        serde_json::from_str(&env.ok(&["--json", "campaign", "status", &cid])).unwrap();
    assert_eq!(st["status"], "sent");
    assert_eq!(st["sent"], 30);
    for k in [
        "queued",
        "leased",
        "failed",
        "suppressed",
        "in_doubt",
        "cancelled",
    ] {
        assert_eq!(st[k], 0, "{k}");
    }
    // Report: every recipient with its provider id.
    let csv = env.ok(&["campaign", "report", &cid]);
    assert_eq!(csv.lines().count(), 31);
    assert!(
        csv.lines().skip(1).all(|l| l.contains(",sent,1,obx-")),
        "{csv}"
    );
    let json = env.ok(&["campaign", "report", &cid, "--format", "json"]);
    let rows: Vec<serde_json::Value> = serde_json::from_str(&json).unwrap();
    assert_eq!(rows.len(), 30);
    // Resume a sent campaign: refused, exit 1, names the state.
    let r = env.run(&["campaign", "resume", &cid]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("it is sent"), "{}", r.stderr);
}

#[test]
fn a_report_of_an_unknown_campaign_writes_nothing_to_stdout() {
    let env = Env::new();
    let (_a, cid) = env.setup_campaign(1);
    for format in ["csv", "json"] {
        let r = env.run(&["--json", "campaign", "report", "999", "--format", format]);
        assert_eq!(r.code, 2, "{format}: {}", r.stderr);
        let doc: serde_json::Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| {
            panic!(
                "{format}: stdout is one JSON document ({e}): {:?}",
                r.stdout
            )
        });
        assert_eq!(doc["exit_code"], 2, "{format}: {doc}");
        let r = env.run(&["campaign", "report", "999", "--format", format]);
        assert_eq!(r.code, 2, "{format}");
        assert_eq!(
            r.stdout, "",
            "{format}: no header or bracket before the error"
        );
    }
    // A campaign without recipients yet: an empty array, a header alone.
    let json = env.ok(&["campaign", "report", &cid, "--format", "json"]);
    assert_eq!(json.trim(), "[]");
    assert_eq!(env.ok(&["campaign", "report", &cid]).lines().count(), 1);
}

#[test]
fn approve_twice_is_refused() {
    let env = Env::new();
    let (_a, cid) = env.setup_campaign(1);
    env.ok(&["campaign", "approve", &cid]);
    let r = env.run(&["campaign", "approve", &cid]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("cannot approve campaign") && r.stderr.contains("approved"),
        "{}",
        r.stderr
    );
}

#[test]
fn approve_race_between_processes_has_one_winner() {
    for _ in 0..5 {
        let env = Env::new();
        let (_a, cid) = env.setup_campaign(1);
        let kids: Vec<_> = (0..2)
            .map(|_| {
                env.cmd()
                    .args(["campaign", "approve", &cid])
                    .spawn()
                    .unwrap()
            })
            .collect();
        let codes: Vec<i32> = kids
            .into_iter()
            .map(|k| k.wait_with_output().unwrap().status.code().unwrap())
            .collect();
        let mut sorted = codes.clone();
        sorted.sort();
        assert_eq!(sorted, vec![0, 1], "{codes:?}");
    }
}

#[test]
fn invalid_addresses_are_refused_without_write() {
    let env = Env::new();
    let acct = env.setup_account();
    for (flag, v, needle) in [
        ("--email", "not-an-email", "invalid email address"),
        ("--email", "a@b", "domain needs a dot"),
        ("--phone", "5550100", "E.164"),
        ("--phone", "+1-555-CALL-NOW", "only digits"),
    ] {
        let r = env.run(&["subscriber", "add", "--account", &acct, flag, v]);
        assert_eq!(r.code, 2, "{v}: {}", r.stderr);
        assert!(r.stderr.contains(needle), "{v}: {}", r.stderr);
    }
    assert_eq!(env.count("SELECT count(*) FROM subscribers"), 0);
    let r = env.run(&[
        "subscriber",
        "add",
        "--account",
        "999",
        "--email",
        "a@b.com",
    ]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("unknown account id 999"), "{}", r.stderr);
    env.ok(&[
        "subscriber",
        "add",
        "--account",
        &acct,
        "--email",
        "Ann@Example.com",
        "--attr",
        "city=Porto",
    ]);
    let r = env.run(&[
        "subscriber",
        "add",
        "--account",
        &acct,
        "--email",
        "ann@example.COM",
    ]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("duplicate"), "{}", r.stderr);
}

#[test]
fn csv_errors_name_the_line_and_import_nothing() {
    let env = Env::new();
    let acct = env.setup_account();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "missing column",
            b"name,city\nAnn,Porto\n".to_vec(),
            "missing column",
        ),
        (
            "bad email",
            b"email,name\na@x.com,A\nbroken,B\n".to_vec(),
            "line 3",
        ),
        (
            "duplicate",
            b"email\na@x.com\nb@x.com\nA@X.com\n".to_vec(),
            "line 4: duplicate: a@x.com already appears on line 2",
        ),
        (
            "bad encoding",
            b"email,name\na@x.com,\xff\xfe\n".to_vec(),
            "line 2: not valid UTF-8",
        ),
        (
            "ragged",
            b"email,name\na@x.com,A,extra\n".to_vec(),
            "line 2",
        ),
    ];
    for (what, content, needle) in cases {
        let f = env.write("in.csv", content);
        let r = env.run(&[
            "subscriber",
            "import",
            "--account",
            &acct,
            f.to_str().unwrap(),
        ]);
        assert_eq!(r.code, 2, "{what}: {}", r.stderr);
        assert!(r.stderr.contains(needle), "{what}: {}", r.stderr);
        assert_eq!(
            env.count("SELECT count(*) FROM subscribers"),
            0,
            "{what}: partial write"
        );
    }
    // --skip-invalid imports the valid rows and reports each skipped one.
    let f = env.write(
        "in.csv",
        "email,name,plan\na@x.com,A,pro\nbroken,B,free\nA@x.com,C,free\nc@x.com,,\n",
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
    let doc: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(doc["imported"], 2);
    let lines: Vec<i64> = doc["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["line"].as_i64().unwrap())
        .collect();
    assert_eq!(lines, vec![3, 4]);
    assert_eq!(env.count("SELECT count(*) FROM subscribers"), 2);
}

#[test]
fn campaign_creation_checks_templates_and_body() {
    let env = Env::new();
    let acct = env.setup_account();
    env.ok(&[
        "subscriber",
        "add",
        "--account",
        &acct,
        "--email",
        "a@x.com",
        "--attr",
        "city=Porto",
    ]);
    let create = |body: &str, subject: &str| {
        let f = env.write("b.txt", body);
        env.run(&[
            "campaign",
            "create",
            "--account",
            &acct,
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
    };
    let r = create("", "s");
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("body is empty"), "{}", r.stderr);
    let r = create("Hi {{ frist_name }}", "s");
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("unknown variable(s) frist_name"),
        "{}",
        r.stderr
    );
    let r = create("Hi {{ name }", "s");
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("does not parse"), "{}", r.stderr);
    let r = create("Hi", "Line\r\nBcc: x@y.com");
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("control character"), "{}", r.stderr);
    // The subscriber has no name: `{{ name }}` would fail for them, a default does not.
    let r = create("Hi {{ city }}", "For {{ name }}");
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("`name` without a default"),
        "{}",
        r.stderr
    );
    let r = create("Hi {{ city }}", "For {{ name | default(\"you\") }}");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(env.count("SELECT count(*) FROM campaigns"), 1);
    let r = env.run(&["campaign", "approve", "4242"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("unknown campaign id 4242"),
        "{}",
        r.stderr
    );
}

#[test]
fn content_is_frozen_after_approval() {
    let env = Env::new();
    let (_a, cid) = env.setup_campaign(1);
    env.ok(&["campaign", "approve", &cid]);
    let err = env
        .sqlite()
        .execute(
            "UPDATE campaigns SET body = 'changed' WHERE id = ?1",
            [cid.parse::<i64>().unwrap()],
        )
        .unwrap_err();
    assert!(err.to_string().contains("frozen"), "{err}");
}

#[test]
fn not_a_database_is_refused_and_untouched() {
    let env = Env::new();
    let junk = b"this is my thesis, not a database\n".repeat(100);
    std::fs::write(&env.db, &junk).unwrap();
    let r = env.run(&["account", "add", "x"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("not a sendonce database"), "{}", r.stderr);
    assert_eq!(std::fs::read(&env.db).unwrap(), junk);
    let r = env.run(&["init"]);
    assert_eq!(r.code, 1);
    assert_eq!(std::fs::read(&env.db).unwrap(), junk);
}

#[test]
fn missing_database_is_not_created_implicitly() {
    let env = Env::new();
    let r = env.run(&["account", "add", "x"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("sendonce init"), "{}", r.stderr);
    assert!(!env.db.exists());
}

#[test]
fn newer_schema_is_refused() {
    let env = Env::new();
    env.ok(&["init"]);
    env.sqlite()
        .pragma_update(None, "user_version", 99)
        .unwrap();
    let before = std::fs::read(&env.db).unwrap();
    let r = env.run(&["account", "add", "x"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("newer than this binary"), "{}", r.stderr);
    assert_eq!(std::fs::read(&env.db).unwrap(), before);
}

#[test]
fn init_uses_wal_and_is_idempotent() {
    let env = Env::new();
    let out = env.ok(&["--json", "init"]);
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["journal_mode"], "wal");
    env.ok(&["init"]);
    let mode: String = env
        .sqlite()
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

#[test]
fn locked_database_gives_a_clear_error_and_writes_nothing() {
    let env = Env::new();
    env.setup_account();
    let holder = env.sqlite();
    holder
        .execute_batch(
            "BEGIN IMMEDIATE; INSERT INTO accounts(name, created_at) VALUES ('held', 0);",
        )
        .unwrap();
    let r = env.run(&["--busy-timeout", "300ms", "account", "add", "other"]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("locked longer than the busy timeout"),
        "{}",
        r.stderr
    );
    holder.execute_batch("ROLLBACK").unwrap();
    assert_eq!(
        env.count("SELECT count(*) FROM accounts WHERE name = 'other'"),
        0
    );
}

#[test]
fn usage_errors_exit_2() {
    let env = Env::new();
    let r = env.run(&["campaign", "frobnicate"]);
    assert_eq!(r.code, 2);
    env.setup_account();
    let r = env.run(&["run", "--once", "--lease", "soon"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("invalid duration"), "{}", r.stderr);
    let r = env.run(&["run", "--once", "--provider", "carrier-pigeon"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("unknown provider"), "{}", r.stderr);
    let r = env.run(&[
        "--json",
        "suppress",
        "add",
        "--account",
        "1",
        "--channel",
        "sms",
        "12",
    ]);
    assert_eq!(r.code, 2);
    let doc: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(doc["exit_code"], 2);
}

#[test]
fn suppression_commands() {
    let env = Env::new();
    let acct = env.setup_account();
    let out = env.ok(&[
        "suppress",
        "add",
        "--account",
        &acct,
        "--channel",
        "email",
        "Bob@Example.com",
        "--reason",
        "asked",
    ]);
    assert!(out.contains("bob@example.com"), "{out}");
    let again = env.ok(&[
        "suppress",
        "add",
        "--account",
        &acct,
        "--channel",
        "email",
        "bob@example.com",
    ]);
    assert!(again.contains("already"), "{again}");
    let list: serde_json::Value =
        serde_json::from_str(&env.ok(&["--json", "suppress", "list", "--account", &acct])).unwrap();
    assert_eq!(list["suppressions"].as_array().unwrap().len(), 1);
    env.ok(&[
        "suppress",
        "remove",
        "--account",
        &acct,
        "--channel",
        "email",
        "BOB@example.com",
    ]);
    let r = env.run(&[
        "suppress",
        "remove",
        "--account",
        &acct,
        "--channel",
        "email",
        "bob@example.com",
    ]);
    assert_eq!(r.code, 2);
}

#[test]
fn scheduled_campaign_waits_for_its_time() {
    let env = Env::new();
    let (_a, cid) = env.setup_campaign(3);
    env.ok(&["campaign", "approve", &cid, "--at", "2099-01-01T00:00:00Z"]);
    let spec = format!("outbox:{}", env.path("o.jsonl").display());
    env.ok(&["run", "--once", "--provider", &spec, "--tick", "50ms"]);
    let st: serde_json::Value =
        serde_json::from_str(&env.ok(&["--json", "campaign", "status", &cid])).unwrap();
    assert_eq!(st["status"], "approved");
    assert_eq!(st["total"], 0);
}

#[test]
fn sms_campaign_creation_reports_encoding_and_segments() {
    let env = Env::new();
    let acct = env.setup_account();
    env.ok(&[
        "subscriber",
        "add",
        "--account",
        &acct,
        "--phone",
        "+14155550100",
    ]);
    let long = "x".repeat(165);
    let f = env.write("sms.txt", &long);
    let r = env.run(&[
        "--json",
        "campaign",
        "create",
        "--account",
        &acct,
        "--name",
        "s",
        "--channel",
        "sms",
        "--body-file",
        f.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(doc["sms"]["encoding"], "GSM-7");
    assert_eq!(doc["sms"]["segments"], 2);
    let f = env.write("sms2.txt", "Olá 👋");
    let r = env.run(&[
        "campaign",
        "create",
        "--account",
        &acct,
        "--name",
        "s2",
        "--channel",
        "sms",
        "--body-file",
        f.to_str().unwrap(),
    ]);
    assert!(r.stderr.contains("UCS-2"), "{}", r.stderr);
}

/// What a newcomer reads (issue 38, items 4, 6 and 12): no internal references in the help,
/// the man page command visible, the second opt-in spelling named as an alias, no dangling
/// "skipped 0 …:" in the demo, "1 recipient", and `subscriber show` as text unless `--json`.
#[test]
fn the_words_a_newcomer_reads_are_right() {
    let env = Env::new();
    let help = env.ok(&["--help"]);
    assert!(!help.contains("(issue"), "{help}");
    assert!(help.contains("manpage"), "{help}");
    let list_help = env.ok(&["list", "create", "--help"]);
    assert!(
        list_help.contains("Alias of `--optin double`"),
        "{list_help}"
    );

    let dir = env.path("demo");
    let demo = env.run(&["demo", "--recipients", "10", "--dir", dir.to_str().unwrap()]);
    assert_eq!(demo.code, 0, "{}", demo.stderr);
    assert!(
        demo.stdout.contains("imported 10 of 10 CSV rows\n"),
        "{}",
        demo.stdout
    );
    assert!(!demo.stdout.contains("skipped 0"), "{}", demo.stdout);

    let (acct, cid) = env.setup_campaign(1);
    env.ok(&["campaign", "approve", &cid]);
    let outbox = env.path("outbox.jsonl");
    env.ok(&[
        "run",
        "--once",
        "--provider",
        &format!("outbox:{}", outbox.display()),
    ]);
    let status = env.ok(&["campaign", "status", &cid]);
    assert!(status.contains("(1 recipient)"), "{status}");

    let show = env.ok(&[
        "subscriber",
        "show",
        "--account",
        &acct,
        "user0@example.com",
    ]);
    assert!(!show.trim_start().starts_with('{'), "{show}");
    assert!(show.contains("status   confirmed"), "{show}");
    let json = env.ok(&[
        "--json",
        "subscriber",
        "show",
        "--account",
        &acct,
        "user0@example.com",
    ]);
    let doc: serde_json::Value = serde_json::from_str(&json).expect("JSON with --json");
    assert_eq!(doc["email"], "user0@example.com");
}

/// A campaign that reaches nobody is approved with a warning, or refused with `--strict`
/// (issue 38, item 10), which leaves it a draft.
#[test]
fn approving_a_campaign_that_reaches_nobody_warns_or_is_refused_with_strict() {
    let env = Env::new();
    let acct = env.setup_account();
    let body = env.write("body.txt", "Hello\n");
    let create = |name: &str| {
        env.ok(&[
            "campaign",
            "create",
            "--account",
            &acct,
            "--name",
            name,
            "--channel",
            "email",
            "--from",
            "news@example.org",
            "--subject",
            "Hi",
            "--body-file",
            body.to_str().unwrap(),
        ])
    };
    let strict = create("strict");
    let r = env.run(&["campaign", "approve", &strict, "--strict"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("reaches nobody"), "{r:?}");
    let status = env.ok(&["--json", "campaign", "status", &strict]);
    assert!(status.contains("\"draft\""), "{status}");

    let lenient = create("lenient");
    let r = env.run(&["campaign", "approve", &lenient]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("warning: campaign"), "{r:?}");
    assert!(r.stdout.contains("reaches nobody"), "{r:?}");
}

/// `doctor` on a mistyped path says "no such file" (not damage and restore), and on a file moved
/// to PostgreSQL points at the new database instead of `adopt` (which refuses a moved file); the
/// moved-file refusal reads as one sentence (issue 38, items 3 and 4).
#[test]
fn doctor_names_a_missing_file_and_a_moved_one_for_what_they_are() {
    let env = Env::new();
    let missing: common::Run = std::process::Command::new(common::BIN)
        .args(["--db", "/nonexistent/dir/typo.db", "doctor"])
        .env_remove("SENDONCE_DB")
        .output()
        .expect("run doctor")
        .into();
    assert_eq!(missing.code, 1, "{missing:?}");
    assert!(missing.stdout.contains("no such file"), "{missing:?}");
    assert!(!missing.stdout.contains("restore"), "{missing:?}");

    env.ok(&["init"]);
    env.sqlite()
        .execute(
            "UPDATE guard SET moved_to = 'postgres://u@db.example.org/news', moved_at = 1",
            [],
        )
        .expect("mark as moved");
    let doctor = env.run(&["doctor"]);
    assert!(doctor.stdout.contains("moved to postgres://"), "{doctor:?}");
    assert!(!doctor.stdout.contains("adopt"), "{doctor:?}");
    let outbox = env.path("o.jsonl");
    let run = env.run(&[
        "run",
        "--once",
        "--provider",
        &format!("outbox:{}", outbox.display()),
    ]);
    assert_eq!(run.code, 5, "{run:?}");
    assert!(run.stderr.contains("goes there too"), "{run:?}");
    assert!(!run.stderr.contains("   "), "a run of spaces in: {run:?}");
}

/// The numbers a user sees count what the user made (issue 38, item 9): an opt-in confirmation
/// is kept as a one-row campaign inside, but `backup` counts the campaigns `campaign list` shows.
#[test]
fn backup_counts_the_campaigns_the_list_shows() {
    let env = Env::new();
    let (acct, _cid) = env.setup_campaign(1);
    env.ok(&[
        "list",
        "create",
        "--account",
        &acct,
        "beta",
        "--optin",
        "double",
        "--confirm-from",
        "news@example.org",
    ]);
    env.ok(&[
        "subscriber",
        "add",
        "--account",
        &acct,
        "--email",
        "new@example.org",
        "--list",
        "beta",
    ]);
    assert!(
        env.count("SELECT count(*) FROM campaigns") >= 2,
        "a confirmation was queued"
    );
    let list = env.ok(&["--json", "campaign", "list"]);
    let shown: serde_json::Value = serde_json::from_str(&list).expect("JSON");
    assert_eq!(
        shown["campaigns"].as_array().map(Vec::len),
        Some(1),
        "{list}"
    );
    let backup = env.path("copy.db");
    let out = env.ok(&["backup", backup.to_str().unwrap()]);
    assert!(out.contains("1 campaigns,"), "{out}");
}

//! Subscriber lists end to end through the real binary: three overlapping lists with
//! case-different spellings of the same addresses, an unsubscribed membership, a suppressed
//! address, a pending member of a double opt-in list and subscribers outside the lists; one
//! delivery per targeted address, the audience counts equal to what the builder produced, the
//! list commands' errors, and a kill -9 during list building.

use crate::common::{deliveries, Env};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

/// Subscribers `u0..u6000` in lists a (0..4000), b (2000..5000), c (3000..6000): 10,000
/// memberships, 6,000 distinct addresses (and a phone-only member of a).
const N: usize = 6000;

fn json(env: &Env, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&env.ok(&all)).unwrap()
}

/// A CSV of `u{i}@...` for `range`, the address spelled by `spell`.
fn csv(env: &Env, name: &str, range: std::ops::Range<usize>, spell: fn(usize) -> String) -> String {
    let mut text = String::from("email,name\n");
    for i in range {
        text.push_str(&format!("{},User {i}\n", spell(i)));
    }
    env.write(name, text).to_str().unwrap().to_string()
}

/// Import `file` into the account and `lists`.
fn import(env: &Env, file: &str, lists: &[&str]) -> String {
    let mut args = vec!["subscriber", "import", "--account", "acme"];
    for l in lists {
        args.extend_from_slice(&["--list", l]);
    }
    args.push(file);
    env.ok(&args)
}

/// A draft email campaign of acme targeting `lists` (none: the whole account); its id.
fn campaign(env: &Env, lists: &[&str]) -> String {
    let body = env.write("body.txt", "Hello\n");
    let mut args = vec![
        "campaign",
        "create",
        "--account",
        "acme",
        "--name",
        "news",
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
    env.ok(&args)
}

/// Set up the account, the lists and their members (see the module comment); returns nothing,
/// everything is named: lists a, b, c (single opt-in), d (double opt-in).
fn setup(env: &Env) {
    env.setup_account();
    for l in ["a", "b", "c"] {
        env.ok(&[
            "list",
            "create",
            "--account",
            "acme",
            l,
            "--description",
            "x",
        ]);
    }
    env.ok(&[
        "list",
        "create",
        "--account",
        "acme",
        "d",
        "--optin",
        "double",
        "--confirm-from",
        "news@example.org",
    ]);
    let a = csv(env, "a.csv", 0..4000, |i| format!("u{i}@Example.com"));
    let b = csv(env, "b.csv", 2000..5000, |i| format!("U{i}@example.COM"));
    let c = csv(env, "c.csv", 3000..N, |i| format!("u{i}@EXAMPLE.com"));
    assert_eq!(import(env, &a, &["a"]), "imported 4000 subscribers");
    assert!(import(env, &b, &["b"]).starts_with("imported 1000 subscribers, 2000 already"));
    assert!(import(env, &c, &["c"]).starts_with("imported 1000 subscribers, 2000 already"));
    // Outside every list.
    let out = csv(env, "out.csv", 0..100, |i| {
        format!("outsider{i}@example.com")
    });
    import(env, &out, &[]);
    // Only in the double opt-in list: pending there (its confirmation queued, in a campaign of
    // its own).
    let out = env
        .cmd()
        .env(
            "SENDONCE_UNSUBSCRIBE_SECRET",
            "lists-test-secret-0123456789",
        )
        .args([
            "subscriber",
            "add",
            "--account",
            "acme",
            "--email",
            "p0@example.com",
            "--list",
            "d",
            "--public-url",
            "https://news.example.org",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // In list a with no email address.
    env.ok(&[
        "subscriber",
        "add",
        "--account",
        "acme",
        "--phone",
        "+14155550100",
        "--list",
        "a",
    ]);
    // u10 (only in a) unsubscribed from a; u2500 (a and b) unsubscribed from a only.
    let n = env
        .sqlite()
        .execute(
            "UPDATE list_members SET status = 'unsubscribed' WHERE list_id =
                (SELECT id FROM lists WHERE name = 'a')
             AND subscriber_id IN (SELECT id FROM subscribers
                                   WHERE email_norm IN ('u10@example.com', 'u2500@example.com'))",
            [],
        )
        .unwrap();
    assert_eq!(n, 2);
    env.ok(&[
        "suppress",
        "add",
        "--account",
        "acme",
        "--channel",
        "email",
        "u20@example.com",
    ]);
    env.ok(&[
        "subscriber",
        "update",
        "--account",
        "acme",
        "u30@example.com",
        "--status",
        "pending",
    ]);
}

/// `run --once` on an outbox; returns its deliveries per lower-cased address.
fn send_all(env: &Env, outbox: &Path) -> HashMap<String, usize> {
    env.ok(&[
        "run",
        "--once",
        "--tick",
        "20ms",
        "--provider",
        &format!("outbox:{}?idempotent=false", outbox.display()),
    ]);
    per_address(outbox)
}

/// Non-replay campaign deliveries of an outbox per lower-cased address, checked against the
/// job ids (p0's double opt-in confirmation, which the first run sends too, is not counted).
fn per_address(outbox: &Path) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for l in sendonce::provider::deliverylog::read_lines(outbox).unwrap() {
        if !l.replay && !l.job_id.starts_with("confirm:") {
            *m.entry(l.to.to_lowercase()).or_insert(0) += 1;
        }
    }
    let by_job: usize = deliveries(outbox)
        .iter()
        .filter(|(job, _)| !job.starts_with("confirm:"))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(by_job, m.values().sum::<usize>());
    m
}

fn ledger(env: &Env, cid: &str, status: &str) -> u64 {
    env.count(&format!(
        "SELECT count(*) FROM sends WHERE campaign_id = {cid} AND status = '{status}'"
    )) as u64
}

#[test]
fn three_overlapping_lists_send_once_per_address_and_count_what_they_drop() {
    let env = Env::new();
    setup(&env);
    let a = json(&env, &["list", "show", "--account", "acme", "a"]);
    assert_eq!(
        (a["subscribed"].as_u64(), a["unsubscribed"].as_u64()),
        (Some(3999), Some(2))
    );
    assert_eq!(
        env.count("SELECT count(*) FROM list_members WHERE list_id IN (SELECT id FROM lists WHERE name IN ('a','b','c'))"),
        10_001
    );
    // Re-importing a list's file subscribes nobody again who unsubscribed from it.
    let again = csv(&env, "a2.csv", 0..4000, |i| format!("U{i}@example.com"));
    assert!(import(&env, &again, &["a"]).starts_with("imported 0 subscribers, 4000 already"));
    let a = json(&env, &["list", "show", "--account", "acme", "a"]);
    assert_eq!(a["unsubscribed"], 2);

    let targeted = campaign(&env, &["a", "b", "c", "d"]);
    let whole = campaign(&env, &[]);
    let before_t = json(&env, &["campaign", "audience", &targeted]);
    let before_w = json(&env, &["campaign", "audience", &whole]);
    let expect_t = [
        ("would_receive", N as u64 - 3),
        ("duplicates", 0),
        ("suppressed", 1),
        ("unsubscribed", 1),
        ("unconfirmed", 2),
        ("no_address", 1),
    ];
    for (k, v) in expect_t {
        assert_eq!(before_t[k], v, "{k}: {before_t}");
    }
    // The whole account: lists do not matter, but for p0, whose only membership is pending;
    // u30 is pending, u20 suppressed.
    assert_eq!(before_w["would_receive"], N as u64 + 100 - 2, "{before_w}");
    assert_eq!(before_w["unconfirmed"], 2, "{before_w}");
    assert_eq!(before_w["unsubscribed"], 0, "{before_w}");
    assert_eq!(before_w["no_address"], 1, "{before_w}");
    assert_eq!(before_w["lists"], serde_json::json!([]));
    let text = env.ok(&["campaign", "audience", &targeted]);
    assert!(
        text.contains(&format!("would_receive\t{}", N - 3)),
        "{text}"
    );

    env.ok(&["campaign", "approve", &targeted]);
    let got = send_all(&env, &env.path("t.jsonl"));
    for i in 0..N {
        let addr = format!("u{i}@example.com");
        let want = usize::from(![10, 20, 30].contains(&i));
        assert_eq!(got.get(&addr).copied().unwrap_or(0), want, "{addr}");
    }
    assert_eq!(
        got.len(),
        N - 3,
        "nobody else: no outsider, no pending member"
    );
    assert_eq!(got.values().sum::<usize>(), N - 3);
    // The counts, taken again now it is sent, equal what the builder put in the ledger.
    let after = json(&env, &["campaign", "audience", &targeted]);
    assert_eq!(after, before_t);
    assert_ledger_holds(&env, &targeted, &after);
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) FROM sends WHERE campaign_id = {targeted}"
        )),
        N as i64 - 3 + 1
    );

    // `check` counts the campaign's audience, not the whole account: everyone it sent to and
    // u20 (suppressed), nobody lost. The log also holds p0's opt-in confirmation: a message of
    // the account's stream, which `check` explains as one (nothing unexpected).
    let t_log = env.path("t.jsonl");
    let r = env.run(&[
        "--json",
        "check",
        "--campaign",
        &targeted,
        "--log",
        t_log.to_str().unwrap(),
    ]);
    let checked: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(checked["eligible"], N as u64 - 2, "{checked:#}");
    assert_eq!(checked["lost"], 0, "{checked:#}");
    assert_eq!(checked["duplicated"], 0, "{checked:#}");
    assert_eq!(checked["unexpected"], 0, "{checked:#}");
    assert_eq!(checked["messages"], 1, "p0's confirmation: {checked:#}");

    env.ok(&["campaign", "approve", &whole]);
    let got = send_all(&env, &env.path("w.jsonl"));
    assert_eq!(
        got.len() as u64,
        before_w["would_receive"].as_u64().unwrap()
    );
    assert!(got.contains_key("outsider7@example.com") && got.contains_key("u10@example.com"));
    assert_ledger_holds(&env, &whole, &before_w);
    env.assert_counters();
}

/// A sent campaign's ledger holds what its audience counts said: `would_receive` rows sent,
/// `suppressed` rows suppressed.
fn assert_ledger_holds(env: &Env, cid: &str, audience: &Value) {
    for (status, key) in [("sent", "would_receive"), ("suppressed", "suppressed")] {
        let want = audience[key].as_u64().unwrap();
        assert_eq!(ledger(env, cid, status), want, "campaign {cid}: {key}");
    }
}

#[test]
fn list_errors_are_clear_and_write_nothing() {
    let env = Env::new();
    env.setup_account();
    env.ok(&["list", "create", "--account", "acme", "news"]);
    let r = env.run(&["list", "create", "--account", "acme", "news"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("a list named \"news\" already exists"),
        "{}",
        r.stderr
    );
    // A name of digits only would read as a list id: refused, nothing created.
    let r = env.run(&["list", "create", "--account", "acme", "2026"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("all digits"), "{}", r.stderr);
    assert_eq!(env.count("SELECT count(*) FROM lists"), 1);

    let f = env.write("s.csv", "email\nx@example.com\ny@example.com\n");
    let r = env.run(&[
        "subscriber",
        "import",
        "--account",
        "acme",
        "--list",
        "news",
        "--list",
        "nope",
        f.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("unknown list \"nope\""), "{}", r.stderr);
    assert_eq!(env.count("SELECT count(*) FROM subscribers"), 0);
    assert_eq!(env.count("SELECT count(*) FROM list_members"), 0);
    let r = env.run(&[
        "subscriber",
        "add",
        "--account",
        "acme",
        "--email",
        "z@example.com",
        "--list",
        "7",
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_eq!(env.count("SELECT count(*) FROM subscribers"), 0);
    let body = env.write("b.txt", "hi");
    let r = env.run(&[
        "campaign",
        "create",
        "--account",
        "acme",
        "--name",
        "c",
        "--channel",
        "email",
        "--from",
        "n@example.org",
        "--subject",
        "s",
        "--body-file",
        body.to_str().unwrap(),
        "--list",
        "nope",
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_eq!(env.count("SELECT count(*) FROM campaigns"), 0);
    let r = env.run(&["list", "show", "--account", "acme", "nope"]);
    assert_eq!(r.code, 2, "{}", r.stderr);

    // A list an approved campaign targets stays; one a draft targets goes, and the draft then
    // targets nobody (never the whole account).
    import(&env, f.to_str().unwrap(), &["news"]);
    env.ok(&["list", "create", "--account", "acme", "other"]);
    let approved = campaign(&env, &["news"]);
    env.ok(&["campaign", "approve", &approved]);
    let r = env.run(&["list", "remove", "--account", "acme", "news"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains(&format!("campaign(s) [{approved}]")),
        "{}",
        r.stderr
    );
    let draft = campaign(&env, &["other"]);
    env.ok(&[
        "subscriber",
        "add",
        "--account",
        "acme",
        "--email",
        "o@example.com",
        "--list",
        "other",
    ]);
    assert_eq!(
        json(&env, &["campaign", "audience", &draft])["would_receive"],
        1
    );
    let removed = json(&env, &["list", "remove", "--account", "acme", "other"]);
    assert_eq!(removed["memberships_removed"], 1);
    assert_eq!(
        json(&env, &["campaign", "audience", &draft])["would_receive"],
        0
    );
    env.ok(&["list", "create", "--account", "acme", "later"]);
    env.ok(&[
        "subscriber",
        "add",
        "--account",
        "acme",
        "--email",
        "l@example.com",
        "--list",
        "later",
    ]);
    assert_eq!(
        json(&env, &["campaign", "audience", &draft])["would_receive"],
        0
    );
    let listed = json(&env, &["list", "list", "--account", "acme"]);
    let names: Vec<&str> = listed["lists"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["later", "news"]);
    // The targets are frozen with the content once the campaign left draft.
    let err = env
        .sqlite()
        .execute(
            &format!("DELETE FROM campaign_lists WHERE campaign_id = {approved}"),
            [],
        )
        .unwrap_err();
    assert!(err.to_string().contains("frozen"), "{err}");
    env.assert_counters();
}

/// Killed after the second committed chunk of a list-targeted campaign's build, then run
/// again: one delivery per targeted address, nobody outside the lists.
#[cfg(feature = "crash-points")]
#[test]
fn a_kill_during_list_building_then_a_rerun_sends_once_per_address() {
    use std::os::unix::process::ExitStatusExt;
    let env = Env::new();
    setup(&env);
    let cid = campaign(&env, &["a", "b", "c"]);
    env.ok(&["campaign", "approve", &cid]);
    let outbox = env.path("k.jsonl");
    // Idempotent (the outbox's default): a call the kill interrupted is retried with its key
    // (a replay, not a second delivery) instead of waiting in doubt.
    let spec = format!("outbox:{}", outbox.display());
    let args = [
        "run",
        "--once",
        "--tick",
        "20ms",
        "--lease",
        "1s",
        "--list-chunk",
        "700",
        "--provider",
        &spec,
    ];
    let st = env
        .cmd()
        .args(args)
        .env("SENDONCE_CRASH_AT", "list_build_committed:2")
        .status()
        .unwrap();
    assert_eq!(st.signal(), Some(libc::SIGKILL), "{st:?}");
    let partial = env.count(&format!(
        "SELECT count(*) FROM sends WHERE campaign_id = {cid}"
    ));
    assert!(
        partial > 0 && partial < N as i64 - 3,
        "killed mid-build: {partial} rows"
    );
    env.ok(&args);
    let got = per_address(&outbox);
    assert_eq!(got.len(), N - 3);
    assert!(got.values().all(|&n| n == 1), "an address delivered twice");
    assert!(!got.contains_key("u10@example.com") && !got.contains_key("outsider1@example.com"));
    assert_eq!(ledger(&env, &cid, "sent"), N as u64 - 3);
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) FROM sends WHERE campaign_id = {cid}"
        )),
        N as i64 - 3 + 1,
        "one row per address, the suppressed one included"
    );
}

//! Audience filters (segments) end to end through the real binary: filters on attributes,
//! built-ins and creation time, the missing-attribute rule, `--dry-run` numbers equal to
//! `campaign audience` after create and to the real sends, `filtered_out`, lists with a
//! filter, an unknown attribute refused with nothing written, SQL-looking values taken as text,
//! and a stored filter damaged behind our back stopping list building.

use crate::common::{Env, Run};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The subscribers of account acme (email campaigns): `s0..s5` and `s8` reachable (`s8`
/// suppressed), `s6` pending (unconfirmed), `s7` phone only (no address). `s4` has no city;
/// `s5`'s city looks like SQL. `s0` and `s2` were created on 2025-01-01.
const CSV: &str = "email,phone,name,status,city,plan
s0@example.org,,Name 0,confirmed,Lisboa,pro
s1@example.org,,Name 1,confirmed,Lisboa,free
s2@example.org,,Name 2,confirmed,Porto,team
s3@example.org,,Name 3,confirmed,Porto,free
s4@example.org,,Name 4,confirmed,,pro
s5@example.org,,Name 5,confirmed,x' OR 1=1 --,team
s6@example.org,,Name 6,pending,Lisboa,team
,+14155550107,Name 7,confirmed,Lisboa,pro
s8@example.org,,Name 8,confirmed,Lisboa,pro
";

/// Every subscriber of the account: what the buckets of a whole-account campaign add up to.
const SUBSCRIBERS: u64 = 9;

fn setup(env: &Env) {
    env.setup_account();
    let f = env.write("subs.csv", CSV);
    assert_eq!(env.import_csv("acme", &f), "imported 9 subscribers");
    env.ok(&[
        "suppress",
        "add",
        "--account",
        "acme",
        "--channel",
        "email",
        "s8@example.org",
    ]);
    let n = env
        .sqlite()
        .execute(
            "UPDATE subscribers SET created_at = 1735689600000
             WHERE email_norm IN ('s0@example.org', 's2@example.org')",
            [],
        )
        .unwrap();
    assert_eq!(n, 2);
}

/// `campaign create` arguments for an email campaign of acme with `extra` flags.
fn create_args(env: &Env, extra: &[&str]) -> Vec<String> {
    let body = env.write("body.txt", "Hello {{ name }}\n");
    let mut args: Vec<String> = [
        "campaign",
        "create",
        "--account",
        "acme",
        "--name",
        "seg",
        "--channel",
        "email",
        "--from",
        "news@example.org",
        "--subject",
        "Hi",
        "--body-file",
        body.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn run(env: &Env, args: &[String]) -> Run {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    env.run(&args)
}

fn json(env: &Env, args: &[String]) -> Value {
    let mut all = vec!["--json".to_string()];
    all.extend_from_slice(args);
    let r = run(env, &all);
    assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    serde_json::from_str(&r.stdout).unwrap()
}

/// `--dry-run` with `extra`, then the real create and `campaign audience`: the same numbers.
/// Returns (campaign id, audience JSON).
fn dry_run_then_create(env: &Env, extra: &[&str]) -> (String, Value) {
    let campaigns = env.count("SELECT count(*) FROM campaigns");
    let mut dry_args = create_args(env, extra);
    dry_args.push("--dry-run".into());
    let mut dry = json(env, &dry_args);
    assert_eq!(dry["campaign_id"], Value::Null, "{dry}");
    assert_eq!(env.count("SELECT count(*) FROM campaigns"), campaigns);
    let created = run(env, &create_args(env, extra));
    assert_eq!(created.code, 0, "{extra:?}: {}", created.stderr);
    let cid = created.stdout.trim().to_string();
    let audience = json(env, &["campaign".into(), "audience".into(), cid.clone()]);
    dry["campaign_id"] = audience["campaign_id"].clone();
    assert_eq!(dry, audience, "--dry-run and campaign audience differ");
    (cid, audience)
}

/// The buckets of an audience, added up.
fn total(a: &Value) -> u64 {
    [
        "would_receive",
        "duplicates",
        "suppressed",
        "unsubscribed",
        "unconfirmed",
        "no_address",
        "filtered_out",
    ]
    .iter()
    .map(|k| a[k].as_u64().unwrap_or_else(|| panic!("{k} in {a}")))
    .sum()
}

/// `run --once` on an outbox: the non-replay deliveries per campaign id, as sets of addresses
/// (each address asserted once).
fn send_all(env: &Env, outbox: &Path) -> BTreeMap<String, BTreeSet<String>> {
    env.ok(&[
        "run",
        "--once",
        "--tick",
        "20ms",
        "--provider",
        &format!("outbox:{}?idempotent=false", outbox.display()),
    ]);
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for l in sendonce::provider::deliverylog::read_lines(outbox).unwrap() {
        if l.replay {
            continue;
        }
        let cid = l.job_id["campaign:".len()..]
            .split(':')
            .next()
            .unwrap()
            .to_string();
        let new = out.entry(cid).or_default().insert(l.to.to_lowercase());
        assert!(new, "{} delivered twice", l.to);
    }
    out
}

fn addrs(ids: &[u32]) -> BTreeSet<String> {
    ids.iter().map(|i| format!("s{i}@example.org")).collect()
}

/// (filter, who receives it, suppressed, filtered out) over the whole account.
const CASES: &[(&str, &[u32], u64, u64)] = &[
    (r#"city = "Lisboa""#, &[0, 1], 1, 4),
    (r#"plan in ("pro","team")"#, &[0, 2, 4, 5], 1, 2),
    // A missing attribute never equals: s4 (no city) is "not Lisboa".
    (r#"not city = "Lisboa""#, &[2, 3, 4, 5], 0, 3),
    (r#"city != "Lisboa""#, &[2, 3, 4, 5], 0, 3),
    (r#"city NOT IN ("Lisboa", "Porto")"#, &[4, 5], 0, 5),
    (r#"city = "Porto" or plan = "pro""#, &[0, 2, 3, 4], 1, 2),
    (
        r#"has city and (plan = "free" or not plan != "team")"#,
        &[1, 2, 3, 5],
        0,
        3,
    ),
    (r#"created_after "2025-06-01""#, &[1, 3, 4, 5], 1, 2),
    (r#"created_before "2025-01-01T00:00:01Z""#, &[0, 2], 0, 5),
    (
        r#"email = "S1@EXAMPLE.org" or name = "Name 3""#,
        &[1, 3],
        0,
        5,
    ),
    // SQL in a value is text: matched only by that exact value.
    (r#"city = "x' OR 1=1 --""#, &[5], 0, 6),
    (r#"city = "x' OR '1'='1""#, &[], 0, 7),
    (
        r#"city in ("Lisboa'; DROP TABLE subscribers; --")"#,
        &[],
        0,
        7,
    ),
];

#[test]
fn filters_pick_their_subscribers_and_dry_run_counts_what_is_sent() {
    let env = Env::new();
    setup(&env);
    let mut want = BTreeMap::new();
    for (filter, who, suppressed, filtered_out) in CASES {
        let (cid, a) = dry_run_then_create(&env, &["--filter", filter]);
        assert_eq!(a["filter"], *filter, "{a}");
        assert_eq!(a["would_receive"], who.len() as u64, "{filter}: {a}");
        assert_eq!(a["suppressed"], *suppressed, "{filter}: {a}");
        assert_eq!(a["filtered_out"], *filtered_out, "{filter}: {a}");
        assert_eq!(
            (a["unconfirmed"].as_u64(), a["no_address"].as_u64()),
            (Some(1), Some(1))
        );
        assert_eq!(total(&a), SUBSCRIBERS, "{filter}: {a}");
        want.insert(cid.clone(), (filter, addrs(who), a));
        env.ok(&["campaign", "approve", &cid]);
    }
    // Without a filter: nothing filtered out; the dry run is the same as well.
    let (plain, a) = dry_run_then_create(&env, &[]);
    assert_eq!(
        (a["filtered_out"].as_u64(), a["filter"].clone()),
        (Some(0), Value::Null)
    );
    assert_eq!(a["would_receive"], 6);
    env.ok(&["campaign", "approve", &plain]);

    let sent = send_all(&env, &env.path("out.jsonl"));
    for (cid, (filter, who, a)) in &want {
        let got = sent.get(cid).cloned().unwrap_or_default();
        assert_eq!(&got, who, "campaign {cid} ({filter})");
        assert_eq!(got.len() as u64, a["would_receive"].as_u64().unwrap());
        // The ledger holds the suppressed row too, and nobody filtered out.
        assert_eq!(
            env.count(&format!(
                "SELECT count(*) FROM sends WHERE campaign_id = {cid} AND status = 'suppressed'"
            )) as u64,
            a["suppressed"].as_u64().unwrap(),
            "{filter}"
        );
    }
    assert_eq!(sent[&plain], addrs(&[0, 1, 2, 3, 4, 5]));
    // Counted again once sent: the same numbers.
    for (cid, (_, _, a)) in &want {
        let again = json(&env, &["campaign".into(), "audience".into(), cid.clone()]);
        assert_eq!(&again, a);
    }
}

#[test]
fn a_filter_narrows_targeted_lists_and_is_shown() {
    let env = Env::new();
    setup(&env);
    env.ok(&["list", "create", "--account", "acme", "news"]);
    let members = env.write(
        "news.csv",
        "email,phone\ns0@example.org,\ns1@example.org,\ns2@example.org,\ns4@example.org,\n\
         s6@example.org,\n,+14155550107\n",
    );
    env.ok(&[
        "subscriber",
        "import",
        "--account",
        "acme",
        "--list",
        "news",
        members.to_str().unwrap(),
    ]);
    let filter = r#"city = "Lisboa""#;
    let (cid, a) = dry_run_then_create(&env, &["--list", "news", "--filter", filter]);
    // Six targeted: s6 unconfirmed, s7 no address, s2 and s4 filtered out, s0 and s1 reached.
    assert_eq!(a["would_receive"], 2, "{a}");
    assert_eq!(a["filtered_out"], 2, "{a}");
    assert_eq!(total(&a), 6, "{a}");
    let text = env.ok(&["campaign", "audience", &cid]);
    assert!(text.contains("filter: city = \"Lisboa\"\n"), "{text}");
    assert!(text.contains("filtered_out\t2"), "{text}");
    let dry = run(
        &env,
        &create_args(&env, &["--list", "news", "--filter", filter, "--dry-run"]),
    );
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    assert!(
        dry.stdout
            .starts_with("dry run, nothing written (email): lists "),
        "{}",
        dry.stdout
    );
    assert!(dry.stdout.contains("would_receive\t2\n"), "{}", dry.stdout);
    env.ok(&["campaign", "approve", &cid]);
    let sent = send_all(&env, &env.path("out.jsonl"));
    assert_eq!(sent[&cid], addrs(&[0, 1]));
    // `check` holds the campaign to the same audience: the two the filter keeps, both sent.
    let log = env.path("out.jsonl");
    let checked: serde_json::Value = serde_json::from_str(&env.ok(&[
        "--json",
        "check",
        "--campaign",
        &cid,
        "--log",
        log.to_str().unwrap(),
    ]))
    .unwrap();
    assert_eq!(checked["eligible"], 2, "{checked:#}");
    assert_eq!(checked["pass"], true, "{checked:#}");
}

#[test]
fn unknown_fields_and_bad_syntax_are_refused_with_nothing_written() {
    let env = Env::new();
    setup(&env);
    let before = std::fs::read(&env.db).unwrap();
    for dry in [false, true] {
        let mut extra = vec!["--filter", r#"cty = "Lisboa" or zone in ("a")"#];
        if dry {
            extra.push("--dry-run");
        }
        let r = run(&env, &create_args(&env, &extra));
        assert_eq!(r.code, 2, "{}", r.stderr);
        assert!(
            r.stderr.contains("unknown field(s) cty, zone")
                && r.stderr
                    .contains("the account's subscribers have city, plan"),
            "{}",
            r.stderr
        );
        let r = run(
            &env,
            &create_args(&env, &["--filter", r#"city = 'Lisboa'"#]),
        );
        assert_eq!(r.code, 2, "{}", r.stderr);
        assert!(
            r.stderr.contains("invalid filter at column 8"),
            "{}",
            r.stderr
        );
    }
    assert_eq!(env.count("SELECT count(*) FROM campaigns"), 0);
    // --dry-run and the refusals opened the file read-only: not one byte changed.
    assert_eq!(std::fs::read(&env.db).unwrap(), before);
}

#[test]
fn a_damaged_stored_filter_stops_list_building() {
    let env = Env::new();
    setup(&env);
    let (cid, _) = dry_run_then_create(&env, &["--filter", r#"city = "Lisboa""#]);
    env.ok(&["campaign", "approve", &cid]);
    // Damage behind sendonce's back: the filter is frozen by a trigger after approval.
    env.sqlite()
        .execute_batch(&format!(
            "DROP TRIGGER campaigns_content_frozen_0005;
             UPDATE campaigns SET filter = 'city = ' WHERE id = {cid};"
        ))
        .unwrap();
    let outbox = env.path("out.jsonl");
    let r = env.run(&[
        "run",
        "--once",
        "--tick",
        "20ms",
        "--provider",
        &format!("outbox:{}?idempotent=false", outbox.display()),
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("damaged")
            && r.stderr.contains(&format!(
                "campaigns.filter of campaign {cid} no longer parses"
            )),
        "{}",
        r.stderr
    );
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) FROM sends WHERE campaign_id = {cid}"
        )),
        0,
        "no list was built without the filter"
    );
    assert!(!outbox.exists() || std::fs::read_to_string(&outbox).unwrap().is_empty());
    let r = env.run(&["campaign", "audience", &cid]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("damaged"), "{}", r.stderr);
}

/// The builder's statement with a filter reads the chunk's subscribers by rowid (the targeted
/// members of the chunk's id range, one rowid each), as without a filter, and no whole table.
#[test]
fn the_filtered_list_insert_uses_the_rowid_range() {
    use sendonce::store::sqlite::SqliteStore;
    use sendonce::store::OpenOptions;
    let env = Env::new();
    env.setup_account();
    let s = SqliteStore::open(&env.db, &OpenOptions::default()).unwrap();
    let plans = s.hot_query_plans().unwrap();
    let p = plans
        .iter()
        .find(|p| p.name == "list: insert chunk (email, lists, filter)")
        .expect("the filtered insert is among the hot statements");
    let text = p.plan.join(" | ");
    assert!(
        text.contains("SEARCH s USING INTEGER PRIMARY KEY (rowid=?)")
            && text.contains("subscriber_id>? AND subscriber_id<?"),
        "{text}"
    );
    assert!(p.full_scans().is_empty(), "{text}");
}

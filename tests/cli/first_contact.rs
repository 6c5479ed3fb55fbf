//! What a new user meets first: choosing a provider, pausing, listing things by name, reports
//! that account for everyone, `--json` everywhere, `--help`, config mistakes, and logs that
//! read well in a file.

use crate::common;
use crate::common::Env;
use std::process::Stdio;
use std::time::{Duration, Instant};

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

#[test]
fn run_without_a_provider_refuses_and_names_the_ways_to_choose_one() {
    let env = Env::new();
    let (_a, cid) = env.setup_campaign(2);
    env.ok(&["campaign", "approve", &cid]);
    let r = env.run(&["run", "--once"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    for needle in ["--provider", "SENDONCE_PROVIDER", "sendonce.toml"] {
        assert!(r.stderr.contains(needle), "{needle}: {}", r.stderr);
    }
    assert!(!env.path("outbox.jsonl").exists());
    assert!(!std::path::Path::new("outbox.jsonl").exists());
    let st = json(&env.ok(&["--json", "campaign", "status", &cid]));
    assert_eq!(st["status"], "approved", "nothing started");
}

/// `run --once` leaves a paused campaign alone and says so; a long-running `run` picks the
/// campaign up when it is resumed.
#[test]
fn paused_campaigns_wait_and_a_running_worker_takes_them_up_on_resume() {
    let env = Env::new();
    let (_a, cid) = env.setup_campaign(20);
    env.ok(&["campaign", "approve", &cid]);
    env.ok(&["campaign", "pause", &cid]);
    let outbox = env.path("out.jsonl");
    let spec = format!("outbox:{}", outbox.display());
    let r = env.run(&["run", "--once", "--tick", "20ms", "--provider", &spec]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .contains(&format!("campaign {cid} is paused and waiting")),
        "{}",
        r.stdout
    );
    let doc = json(&env.ok(&["--json", "run", "--once", "--provider", &spec]));
    assert_eq!(
        doc["paused"],
        serde_json::json!([cid.parse::<i64>().unwrap()])
    );
    assert!(common::deliveries(&outbox).is_empty());

    let mut worker = env
        .cmd()
        .args(["run", "--tick", "50ms", "--provider", &spec])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    assert!(
        common::deliveries(&outbox).is_empty(),
        "paused: nothing sent"
    );
    env.ok(&["campaign", "resume", &cid]);
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        let st = json(&env.ok(&["--json", "campaign", "status", &cid]));
        if st["status"] == "sent" || Instant::now() > deadline {
            break st;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // SAFETY: kill(2) on our own child, not yet reaped.
    unsafe {
        libc::kill(worker.id() as i32, libc::SIGTERM);
    }
    let st = worker.wait().unwrap();
    assert_eq!(st.code(), Some(0));
    assert_eq!(status["status"], "sent", "{status}");
    let per_job = common::deliveries(&outbox);
    assert_eq!(per_job.len(), 20);
    assert!(per_job.values().all(|&n| n == 1));
}

#[test]
fn things_can_be_listed_and_accounts_named() {
    let env = Env::new();
    let (acct, cid) = env.setup_campaign(3);
    assert_eq!(acct, "1");
    let accounts = json(&env.ok(&["--json", "account", "list"]));
    assert_eq!(accounts["accounts"][0]["name"], "acme");
    assert_eq!(accounts["accounts"][0]["subscribers"], 3);
    // By name, wherever an account is taken.
    env.ok(&[
        "subscriber",
        "add",
        "--account",
        "acme",
        "--email",
        "new@x.org",
        "--name",
        "N",
    ]);
    let subs = json(&env.ok(&["--json", "subscriber", "list", "--account", "acme"]));
    assert_eq!(subs["subscribers"].as_array().unwrap().len(), 4);
    let r = env.run(&["subscriber", "list", "--account", "nope"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("unknown account \"nope\"") && r.stderr.contains("acme (1)"),
        "{}",
        r.stderr
    );
    let one = json(&env.ok(&[
        "--json",
        "subscriber",
        "show",
        "--account",
        "acme",
        "NEW@x.org",
    ]));
    assert_eq!(one["name"], "N");
    let id = one["id"].to_string();
    let up = json(&env.ok(&[
        "--json",
        "subscriber",
        "update",
        "--account",
        "acme",
        &id,
        "--name",
        "Nova",
        "--attr",
        "city=Porto",
    ]));
    assert_eq!(up["name"], "Nova");
    assert_eq!(up["attrs"]["city"], "Porto");
    // An empty value removes an attribute (a missing value, never empty text).
    let up = json(&env.ok(&[
        "--json",
        "subscriber",
        "update",
        "--account",
        "acme",
        &id,
        "--attr",
        "city=",
    ]));
    assert!(up["attrs"].get("city").is_none(), "{up}");
    let campaigns = json(&env.ok(&[
        "--json",
        "campaign",
        "list",
        "--account",
        "acme",
        "--status",
        "draft",
    ]));
    assert_eq!(campaigns["campaigns"][0]["id"].to_string(), cid);
    let none = json(&env.ok(&["--json", "campaign", "list", "--status", "sent"]));
    assert!(none["campaigns"].as_array().unwrap().is_empty());

    // Remove keeps the ledger rows of past sends.
    env.ok(&["campaign", "approve", &cid]);
    env.ok(&["run", "--once", "--tick", "20ms", "--provider", "null"]);
    env.ok(&[
        "subscriber",
        "remove",
        "--account",
        "acme",
        "user0@example.com",
    ]);
    let subs = json(&env.ok(&["--json", "subscriber", "list", "--account", "1"]));
    assert_eq!(subs["subscribers"].as_array().unwrap().len(), 3);
    let report = env.ok(&["campaign", "report", &cid]);
    assert!(report.contains("user0@example.com"), "{report}");
    let r = env.run(&[
        "subscriber",
        "show",
        "--account",
        "acme",
        "user0@example.com",
    ]);
    assert_eq!(r.code, 2);
    // Its address is suppressed, so a row already queued for it is not sent either.
    let sup = json(&env.ok(&["--json", "suppress", "list", "--account", "acme"]));
    assert_eq!(sup["suppressions"][0]["address"], "user0@example.com");
    // Times read the same in every JSON output.
    let rfc3339 = |v: &serde_json::Value| {
        let t = v.as_str().unwrap_or_default();
        t.ends_with('Z') && t.contains('T')
    };
    assert!(rfc3339(&sup["suppressions"][0]["created_at"]), "{sup}");
    let accounts = json(&env.ok(&["--json", "account", "list"]));
    assert!(
        rfc3339(&accounts["accounts"][0]["created_at"]),
        "{accounts}"
    );
    let campaigns = json(&env.ok(&["--json", "campaign", "list"]));
    assert!(
        rfc3339(&campaigns["campaigns"][0]["scheduled_for"]),
        "{campaigns}"
    );
    assert_eq!(sup["suppressions"][0]["reason"], "subscriber removed");
    // Adding the address again brings the subscriber back under its old id.
    let again = env.ok(&[
        "subscriber",
        "add",
        "--account",
        "acme",
        "--email",
        "user0@example.com",
    ]);
    assert_eq!(again, "1");
    let sup = json(&env.ok(&["--json", "suppress", "list", "--account", "acme"]));
    assert!(sup["suppressions"].as_array().unwrap().is_empty(), "{sup}");
}

/// Someone suppressed before the list was built is in status and report, with the reason.
#[test]
fn the_report_accounts_for_addresses_suppressed_before_the_list() {
    let env = Env::new();
    let (acct, cid) = env.setup_campaign(3);
    env.ok(&[
        "suppress",
        "add",
        "--account",
        &acct,
        "--channel",
        "email",
        "user1@example.com",
    ]);
    env.ok(&["campaign", "approve", &cid]);
    env.ok(&["run", "--once", "--tick", "20ms", "--provider", "null"]);
    let st = json(&env.ok(&["--json", "campaign", "status", &cid]));
    assert_eq!(st["sent"], 2);
    assert_eq!(st["suppressed"], 1);
    assert_eq!(st["total"], 3);
    let rows = json(&env.ok(&["--json", "campaign", "report", &cid]));
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 3);
    let sup = rows
        .iter()
        .find(|r| r["address"] == "user1@example.com")
        .unwrap();
    assert_eq!(sup["status"], "suppressed");
    assert!(sup["reason"]
        .as_str()
        .unwrap()
        .contains("suppressed before the list"));
    // --json wins over the CSV default, and times read the same in both formats.
    let sent = rows.iter().find(|r| r["status"] == "sent").unwrap();
    let t = sent["sent_at"].as_str().unwrap();
    assert!(t.ends_with('Z') && t.contains('T'), "{t}");
    let csv = env.ok(&["campaign", "report", &cid, "--format", "csv"]);
    assert!(csv.contains(t), "{csv}");
}

#[test]
fn json_errors_cover_parse_errors_too() {
    let env = Env::new();
    let r = env.run(&["--json", "--bogus"]);
    assert_eq!(r.code, 2);
    let doc = json(r.stdout.trim());
    assert_eq!(doc["exit_code"], 2);
    assert!(doc["error"].as_str().unwrap().contains("--bogus"), "{doc}");
}

/// Every argument of every command says what it is for; `--from` says it is needed for email.
#[test]
fn every_argument_has_a_description() {
    use clap::CommandFactory;
    let cmd = sendonce::cli::args::Cli::command();
    // clap's own consistency checks (they run only in debug builds otherwise).
    cmd.clone().debug_assert();
    let mut missing = Vec::new();
    fn walk(c: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for a in c.get_arguments() {
            if a.is_hide_set() || a.get_id() == "help" || a.get_id() == "version" {
                continue;
            }
            if a.get_help().is_none() && a.get_long_help().is_none() {
                missing.push(format!("{path} {}", a.get_id()));
            }
        }
        for s in c.get_subcommands() {
            walk(s, &format!("{path} {}", s.get_name()), missing);
        }
    }
    walk(&cmd, "sendonce", &mut missing);
    assert!(missing.is_empty(), "arguments without help: {missing:?}");
    let env = Env::new();
    let help = env.ok(&["campaign", "create", "--help"]);
    assert!(help.contains("required for email"), "{help}");
    for cmd in ["fake-provider", "notify", "demo"] {
        let help = env.ok(&[cmd, "--help"]);
        // No `--db` option of its own (its text may still name the global one).
        let option = help.lines().any(|l| l.trim_start().starts_with("--db"));
        assert!(!option, "{cmd}: {help}");
    }
    // The bench's --db is for PostgreSQL only, and says so.
    let help = env.ok(&["bench", "--help"]);
    assert!(
        help.contains("--db <URL>") && help.contains("postgres://"),
        "{help}"
    );
    let r = env.run(&["doubts", "resolve", "1"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("--as-sent") && r.stderr.contains("--requeue"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_route_for_an_unknown_account_stops_the_start() {
    let env = Env::new();
    let (_a, cid) = env.setup_campaign(1);
    env.ok(&["campaign", "approve", &cid]);
    let cfg = env.write(
        "sendonce.toml",
        "provider = \"null\"\n[[route]]\naccount = \"acmee\"\nprovider = \"null\"\n",
    );
    let r = env.run(&["run", "--once", "--config", cfg.to_str().unwrap()]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("route 1") && r.stderr.contains("acmee"),
        "{}",
        r.stderr
    );
    let st = json(&env.ok(&["--json", "campaign", "status", &cid]));
    assert_eq!(st["status"], "approved");
}

/// A default `run` says what it did, and its log has no colour codes in a file.
#[test]
fn run_logs_are_plain_text_off_a_terminal_and_say_what_happened() {
    let env = Env::new();
    let (_a, cid) = env.setup_campaign(2);
    env.ok(&["campaign", "approve", &cid]);
    let r = env.run(&["run", "--once", "--tick", "20ms", "--provider", "null"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains('\u{1b}'), "ANSI codes in {:?}", r.stderr);
    assert!(
        r.stderr.contains("campaign started sending"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("campaign sent"), "{}", r.stderr);
}

/// `campaign status --watch` piped prints a line per change, and ends with the campaign.
#[test]
fn watch_prints_lines_when_piped() {
    let env = Env::new();
    let (_a, cid) = env.setup_campaign(300);
    env.ok(&["campaign", "approve", &cid]);
    let mut watch = env
        .cmd()
        .args(["campaign", "status", "--watch", &cid])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The first line (approved, nothing sent) is printed before anything runs.
    use std::io::{BufRead, Read};
    let mut reader = std::io::BufReader::new(watch.stdout.take().unwrap());
    let mut first = String::new();
    reader.read_line(&mut first).unwrap();
    assert!(first.contains("0/0 approved"), "{first}");
    env.ok(&[
        "run",
        "--once",
        "--tick",
        "20ms",
        "--provider",
        "null?latency=2ms",
        "--concurrency",
        "4",
    ]);
    let mut rest = String::new();
    reader.read_to_string(&mut rest).unwrap();
    let status = watch.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let stdout = format!("{first}{rest}");
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains(&format!("campaign {cid}:")))
        .collect();
    assert!(lines.len() >= 2, "{stdout}");
    assert!(lines.iter().any(|l| l.contains("300/300 sent")), "{stdout}");
}

//! DSN bounces (issue 45): a campaign sent through the SMTP provider with `return_path` into the
//! fake's SMTP listener (each envelope sender a VERP address), then delivery status
//! notifications shaped as Postfix writes them piped into `sendonce bounce`: a hard bounce
//! suppresses its recipient and settles the row left in doubt, a delay suppresses nothing, a
//! replay changes nothing, and hundreds of forged or altered DSNs are refused (exit 2) with the
//! tables unchanged. In tier 1, the parser reads the real DSNs of flufl.bounce's corpus (a
//! bounce detector we did not write, GNU Mailman's) as flufl.bounce itself reads them.
// Some tests here need tools outside Rust (tier 1); without them their helpers go unused.
#![cfg_attr(not(feature = "tier1"), allow(unused_imports, dead_code))]

use crate::common::{Env, Fake, Run, TEST_UNSUBSCRIBE_SECRET};
use crate::http::hooks::{dump, status, suppressions};
use serde_json::Value;
use std::io::Write;
use std::process::Stdio;

const RETURN_PATH: &str = "bounces@bounce.example.com";

/// One message as the fake's SMTP listener got it: (job id, recipient, envelope sender).
struct Sent {
    job: String,
    to: String,
    envelope_from: String,
}

/// A campaign of `n` sent through the SMTP provider with `return_path` into the fake.
fn sent_with_verp(env: &Env, n: usize) -> Vec<Sent> {
    let (_acct, cid) = env.setup_campaign(n);
    env.ok(&["campaign", "approve", &cid]);
    let fake = Fake::start(&env.path("fake.jsonl"), &["--smtp", "127.0.0.1:0"]);
    let spec = format!(
        "smtp://{}?tls=none&timeout=10s&return_path={RETURN_PATH}",
        fake.smtp.expect("smtp")
    );
    env.ok(&["run", "--once", "--provider", &spec, "--tick", "50ms"]);
    let mut sent: Vec<Sent> = fake
        .lines()
        .into_iter()
        .map(|l| Sent {
            job: l.job_id,
            to: l.to,
            envelope_from: l.envelope.expect("an SMTP line has its envelope").from,
        })
        .collect();
    sent.sort_by(|a, b| a.to.cmp(&b.to));
    assert_eq!(sent.len(), n);
    sent
}

/// A DSN as Postfix writes one, delivered to `delivered_to`, reporting `action`/`status` for
/// `rcpt`, returning the headers of the message of `job` (None: no headers returned).
fn dsn(delivered_to: &str, rcpt: &str, action: &str, status: &str, job: Option<&str>) -> String {
    let returned = match job {
        Some(j) => format!(
            "--B1\r\nContent-Type: text/rfc822-headers\r\n\r\nFrom: news@example.org\r\n\
             To: {rcpt}\r\nSubject: Hi\r\nX-Sendonce-Job: {j}\r\n\r\n"
        ),
        None => String::new(),
    };
    format!(
        "Return-Path: <>\r\nDelivered-To: {delivered_to}\r\n\
         From: MAILER-DAEMON@mx.example.com (Mail Delivery System)\r\n\
         Subject: Undelivered Mail Returned to Sender\r\nTo: {delivered_to}\r\n\
         Message-Id: <{}.{action}@mx.example.com>\r\nMIME-Version: 1.0\r\n\
         Content-Type: multipart/report; report-type=delivery-status; boundary=\"B1\"\r\n\r\n\
         --B1\r\nContent-Type: text/plain\r\n\r\nThis is the mail system at mx.example.com.\r\n\
         \r\n--B1\r\nContent-Type: message/delivery-status\r\n\r\n\
         Reporting-MTA: dns; mx.example.com\r\nX-Postfix-Queue-ID: 4ABC\r\n\r\n\
         Final-Recipient: rfc822; {rcpt}\r\nOriginal-Recipient: rfc822;{rcpt}\r\n\
         Action: {action}\r\nStatus: {status}\r\nRemote-MTA: dns; mx.example.org\r\n\
         Diagnostic-Code: smtp; 550 5.1.1 <{rcpt}>: Recipient address rejected\r\n\r\n\
         {returned}--B1--\r\n",
        rcpt.replace('@', "=")
    )
}

/// `sendonce bounce --account acme` with `input` on standard input and `vars` set.
fn bounce(env: &Env, input: &str, vars: &[(&str, &str)]) -> Run {
    bounce_with(env, &[], input, vars)
}

/// [`bounce`] with global flags before the command.
fn bounce_with(env: &Env, global: &[&str], input: &str, vars: &[(&str, &str)]) -> Run {
    let mut child = env
        .cmd()
        .args(global)
        .args(["--json", "bounce", "--account", "acme"])
        .env_remove("ORIGINAL_RECIPIENT")
        .envs(vars.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sendonce bounce");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(input.as_bytes()).expect("write the DSN");
    drop(stdin);
    Run::from(child.wait_with_output().expect("wait"))
}

fn park_in_doubt(env: &Env, job: &str) -> i64 {
    let c = env.sqlite();
    let id: i64 = c
        .query_row("SELECT id FROM sends WHERE job_id = ?1", [job], |r| {
            r.get(0)
        })
        .unwrap();
    let n = c
        .execute(
            "UPDATE sends SET status = 'in_doubt', doubt_since = sent_at, sent_at = NULL,
             provider_message_id = NULL WHERE id = ?1",
            [id],
        )
        .unwrap();
    assert_eq!(n, 1);
    id
}

fn actions(r: &Run) -> Vec<(String, bool)> {
    let v: Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {r:?}"));
    v["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| {
            let a = e["action"].as_str().expect("action").to_string();
            (a, e["replay"].as_bool().expect("replay"))
        })
        .collect()
}

#[test]
fn a_hard_bounce_suppresses_and_settles_and_a_replay_changes_nothing() {
    let env = Env::new();
    let sent = sent_with_verp(&env, 3);
    for s in &sent {
        let tag = sendonce::domain::verp::tag_in(&s.envelope_from);
        assert!(
            s.envelope_from.ends_with("@bounce.example.com") && tag.is_some(),
            "VERP envelope sender: {}",
            s.envelope_from
        );
    }
    assert_eq!(
        sent.iter()
            .map(|s| &s.envelope_from)
            .collect::<std::collections::HashSet<_>>()
            .len(),
        3,
        "one return path per message"
    );
    let s0 = &sent[0];
    let id = park_in_doubt(&env, &s0.job);
    let hard = dsn(&s0.envelope_from, &s0.to, "failed", "5.1.1", Some(&s0.job));
    let r = bounce(&env, &hard, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    let a = actions(&r);
    assert_eq!(
        a,
        vec![
            ("suppressed".to_string(), false),
            ("settled_sent".to_string(), false)
        ]
    );
    assert_eq!(status(&env, id), "sent");
    let sup = suppressions(&env);
    assert_eq!(
        sup,
        vec![("email".to_string(), s0.to.clone(), "dsn".to_string())]
    );
    let before = dump(&env);
    let r = bounce(&env, &hard, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(actions(&r).iter().all(|(_, replay)| *replay), "{r:?}");
    assert_eq!(dump(&env), before, "a replay changes nothing");

    // A delay (4.4.1) from the MTA's queue: recorded, nothing suppressed. The address may come
    // from --to / ORIGINAL_RECIPIENT when the MTA drops Delivered-To.
    let s1 = &sent[1];
    let delayed = dsn(
        "other@bounce.example.com",
        &s1.to,
        "delayed",
        "4.4.1",
        Some(&s1.job),
    );
    let r = bounce(&env, &delayed, &[("ORIGINAL_RECIPIENT", &s1.envelope_from)]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(actions(&r)[0].0, "ignored");
    assert_eq!(suppressions(&env).len(), 1);

    // A database another process holds locked past the busy timeout: exit 75, so the MTA keeps
    // the DSN and delivers it again; nothing written.
    let s2 = &sent[2];
    let hard2 = dsn(&s2.envelope_from, &s2.to, "failed", "5.1.1", Some(&s2.job));
    let lock = env.sqlite();
    lock.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let r = bounce_with(&env, &["--busy-timeout", "200ms"], &hard2, &[]);
    lock.execute_batch("ROLLBACK").unwrap();
    assert_eq!(r.code, 75, "{r:?}");
    assert_eq!(suppressions(&env).len(), 1);
    assert_eq!(
        bounce(&env, &hard2, &[]).code,
        0,
        "delivered again, applied"
    );
    assert_eq!(suppressions(&env).len(), 2);

    // What only the operator can fix also exits 75 (the MTA keeps the DSN): no secret, an
    // unknown account.
    let file = env.write("dsn.eml", &hard2);
    let mut no_secret = env.cmd();
    no_secret.env_remove("SENDONCE_UNSUBSCRIBE_SECRET");
    let r = Run::from(
        no_secret
            .args(["bounce", "--account", "acme", "--file"])
            .arg(&file)
            .output()
            .unwrap(),
    );
    assert_eq!(r.code, 75, "{r:?}");
    assert!(r.stderr.contains("SENDONCE_UNSUBSCRIBE_SECRET"), "{r:?}");
    let r = Run::from(
        env.cmd()
            .args(["bounce", "--account", "nobody", "--file"])
            .arg(&file)
            .output()
            .unwrap(),
    );
    assert_eq!(r.code, 75, "{r:?}");
}

/// A policy refusal (5.7.26 DMARC) suppresses nobody; a DSN piped with another account's name
/// is refused; a DSN forged for one's own message with the Message-ID a genuine DSN will have
/// takes nothing from it.
#[test]
fn policy_failures_suppress_nobody_and_a_taken_message_id_blocks_no_one() {
    let env = Env::new();
    let sent = sent_with_verp(&env, 2);
    let (s0, s1) = (&sent[0], &sent[1]);
    let dmarc = dsn(&s0.envelope_from, &s0.to, "failed", "5.7.26", Some(&s0.job));
    let r = bounce(&env, &dmarc, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(actions(&r)[0].0, "ignored");
    assert!(suppressions(&env).is_empty());
    // s1's holder forges a DSN for their own message, with the Message-ID of s0's next one.
    let genuine = dsn(&s0.envelope_from, &s0.to, "failed", "5.1.1", Some(&s0.job));
    let set_id = |t: &str| {
        let start = t.find("Message-Id: ").expect("a Message-Id");
        let end = start + t[start..].find("\r\n").expect("its end");
        format!(
            "{}Message-Id: <next@mx.example.com>{}",
            &t[..start],
            &t[end..]
        )
    };
    // Piped with another account's name: refused, nothing written.
    env.ok(&["account", "add", "other"]);
    let before = dump(&env);
    let r = Run::from(
        env.cmd()
            .args(["bounce", "--account", "other", "--file"])
            .arg(env.write("g.eml", set_id(&genuine)))
            .output()
            .unwrap(),
    );
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("not of --account other"), "{r:?}");
    assert_eq!(dump(&env), before);
    let forged = set_id(&dsn(
        &s1.envelope_from,
        &s1.to,
        "delayed",
        "4.4.1",
        Some(&s1.job),
    ));
    assert_eq!(bounce(&env, &forged, &[]).code, 0);
    let r = bounce(&env, &set_id(&genuine), &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(actions(&r)[0], ("suppressed".to_string(), false));
    assert_eq!(suppressions(&env).len(), 1);
}

/// One forged DSN: why it must be refused, its text, the environment `bounce` runs with.
type Case = (String, String, Vec<(&'static str, String)>);

/// Every way to forge or alter a DSN, each refused with exit 2 and the tables unchanged.
#[test]
fn forged_and_altered_dsns_are_refused_and_change_nothing() {
    let env = Env::new();
    let sent = sent_with_verp(&env, 3);
    let (s0, s1) = (&sent[0], &sent[1]);
    let before = dump(&env);
    let mut cases: Vec<Case> = Vec::new();
    let case = |why: &str, text: String| (why.to_string(), text, Vec::new());
    cases.push(case(
        "another recipient's tag",
        dsn(&s1.envelope_from, &s0.to, "failed", "5.1.1", Some(&s0.job)),
    ));
    cases.push(case(
        "another job's tag",
        dsn(&s0.envelope_from, &s0.to, "failed", "5.1.1", Some(&s1.job)),
    ));
    cases.push(case(
        "a victim's address with a tag of one's own",
        dsn(
            &s1.envelope_from,
            "victim@example.com",
            "failed",
            "5.1.1",
            Some(&s1.job),
        ),
    ));
    cases.push(case(
        "no headers returned",
        dsn(&s0.envelope_from, &s0.to, "failed", "5.1.1", None),
    ));
    cases.push(case(
        "no VERP address",
        dsn(RETURN_PATH, &s0.to, "failed", "5.1.1", Some(&s0.job)),
    ));
    cases.push(case(
        "a read receipt, not a DSN",
        dsn(&s0.envelope_from, &s0.to, "failed", "5.1.1", Some(&s0.job))
            .replace("delivery-status", "disposition-notification"),
    ));
    let good = dsn(&s0.envelope_from, &s0.to, "failed", "5.1.1", Some(&s0.job));
    cases.push((
        "signed with another secret".into(),
        good.clone(),
        vec![(
            "SENDONCE_UNSUBSCRIBE_SECRET",
            format!("{TEST_UNSUBSCRIBE_SECRET}-rotated"),
        )],
    ));
    // Every single-character change of the tag, and random tags.
    let tag = sendonce::domain::verp::tag_in(&s0.envelope_from).expect("tag");
    for i in 0..tag.len() {
        for c in ['a', 'q', '7'] {
            let mut t: Vec<char> = tag.chars().collect();
            if t[i] == c {
                continue;
            }
            t[i] = c;
            let t: String = t.into_iter().collect();
            let to = format!("bounces+{t}@bounce.example.com");
            cases.push(case(
                "a changed tag",
                dsn(&to, &s0.to, "failed", "5.1.1", Some(&s0.job)),
            ));
        }
    }
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    while cases.len() < 250 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let t: String = (0..16)
            .map(|k| b"abcdefghijklmnopqrstuvwxyz234567"[((rng >> (k * 4)) % 32) as usize] as char)
            .collect();
        let to = format!("bounces+{t}@bounce.example.com");
        cases.push(case(
            "a random tag",
            dsn(&to, &s0.to, "failed", "5.1.1", Some(&s0.job)),
        ));
    }
    for (why, text, vars) in &cases {
        let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = bounce(&env, text, &vars);
        assert_eq!(r.code, 2, "{why}: {r:?}");
        assert!(r.stdout.contains("\"error\""), "{why}: {r:?}");
    }
    assert_eq!(dump(&env), before, "no forged DSN wrote anything");
    assert!(suppressions(&env).is_empty());
    // The genuine one still works after all that.
    assert_eq!(bounce(&env, &good, &[]).code, 0);
    // A victim named as Original-Recipient beside one's own (verified) Final-Recipient: only
    // the address the tag was checked against is suppressed.
    let victim = dsn(&s1.envelope_from, &s1.to, "failed", "5.1.1", Some(&s1.job)).replace(
        &format!("Original-Recipient: rfc822;{}", s1.to),
        "Original-Recipient: rfc822;victim@example.com",
    );
    assert_eq!(bounce(&env, &victim, &[]).code, 0);
    let sup: Vec<String> = suppressions(&env).into_iter().map(|(_, a, _)| a).collect();
    assert_eq!(sup, [s0.to.clone(), s1.to.clone()]);
    eprintln!("{} forged DSNs refused", cases.len());
}

/// The real bounces of flufl.bounce's corpus (117 messages from many MTAs, 19 of them with a
/// `message/delivery-status` part: Postfix, Exim, X.400 gateways, Exchange, reports without a
/// report type, wrapped in `multipart/mixed`, forwarded), read by flufl.bounce's RFC 3464
/// detector and by ours: the same failed and delayed recipients in every DSN both read. One DSN
/// names only an address that is not one (`david...@gmail.com`): flufl.bounce reports it, ours
/// refuses the DSN (there is nobody to suppress); it is counted and listed.
#[cfg(feature = "tier1")]
#[test]
fn real_dsns_read_as_flufl_bounce_reads_them() {
    use sendonce::domain::dsn::{self, Action};
    let dir = std::env::var("SENDONCE_DSN_CORPUS")
        .expect("SENDONCE_DSN_CORPUS: tests/run.sh fetches flufl.bounce's corpus and sets it");
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/dsn_corpus.py");
    let out = std::process::Command::new("python3")
        .arg(&script)
        .arg(&dir)
        .output()
        .expect("run python3 (tests/run.sh puts the venv's first on PATH)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs: Value = serde_json::from_slice(&out.stdout).expect("JSON from dsn_corpus.py");
    let theirs = theirs.as_object().expect("an object");
    assert!(theirs.len() >= 100, "the corpus has {} files", theirs.len());
    let (mut agreed, mut theirs_only, mut refused_plain) = (0, Vec::new(), 0);
    for (name, t) in theirs {
        let raw = std::fs::read(std::path::Path::new(&dir).join(name)).expect("read");
        let list = |v: &Value| -> Vec<String> {
            let mut l: Vec<String> = v
                .as_array()
                .expect("array")
                .iter()
                .map(|a| a.as_str().expect("str").to_string())
                .collect();
            l.sort();
            l
        };
        let (t_failed, t_delayed) = (list(&t["failed"]), list(&t["delayed"]));
        let found = !(t_failed.is_empty() && t_delayed.is_empty());
        match dsn::parse(&raw) {
            Ok(d) => {
                let ours = |a: Action| {
                    let mut l: Vec<String> = d
                        .recipients
                        .iter()
                        .filter(|r| r.action == a)
                        .filter_map(|r| r.addresses().next().map(str::to_string))
                        .collect();
                    l.sort();
                    l.dedup();
                    l
                };
                assert_eq!(
                    (ours(Action::Failed), ours(Action::Delayed)),
                    (t_failed, t_delayed),
                    "{name}: failed and delayed recipients (ours, flufl.bounce's)"
                );
                agreed += 1;
            }
            Err(_) if found => theirs_only.push(name.clone()),
            Err(_) => refused_plain += 1,
        }
    }
    eprintln!(
        "{agreed} DSNs read alike; {refused_plain} other bounces refused by both; \
         read by flufl.bounce only: {theirs_only:?}"
    );
    assert!(agreed >= 18, "only {agreed} DSNs of the corpus read alike");
    assert!(theirs_only.len() <= 1, "{theirs_only:?}");
}

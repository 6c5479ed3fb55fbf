//! The audience of issue 13 end to end, through the real binary and a real SMTP server we did
//! not write (aiosmtpd): three overlapping lists holding 10,000 distinct addresses, spelled with
//! different case in each list's file, with unsubscribed memberships, account suppressions and
//! unconfirmed subscribers. An HTML + text campaign to the three lists arrives exactly once per
//! expected address (counted per RCPT at the server), the `campaign audience` counts and
//! `campaign report` agree with what the test computed, and a sample of the received messages
//! parses (mail-parser) into the intended parts and headers. Also an HTML-only campaign's
//! generated text part and, with `crash-points`, kill -9 during list building over such an
//! audience.
// Some tests here need tools outside Rust (tier 1); without them their helpers go unused.
#![cfg_attr(not(feature = "tier1"), allow(unused_imports, dead_code))]

use crate::common::Env;
use crate::core::smtp::RealServer;
use mail_parser::{MessageParser, MimeHeaders};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

/// The targeted lists; a person's memberships are a bit set over them.
const LISTS: [&str; 3] = ["alpha", "beta", "gamma"];
/// Every combination of one, two or three lists, in turn.
const COMBOS: [u8; 7] = [0b001, 0b010, 0b100, 0b011, 0b101, 0b110, 0b111];

const FROM: &str = "Café Ünïcode <news@example.org>";
const REPLY_TO: &str = "Équipe Réponses <replies@example.org>";
const CAMPAIGN: &str = "Été digest";
const SUBJECT: &str = "Olá {{ name }} — {{ campaign.name }} ✉";
const TEXT: &str = "Olá {{ name }},\nNote: {{ note }}\nThis is {{ campaign.name }}.\n";
const HTML: &str = "<!DOCTYPE html>\n<html><body>\n<p>Olá {{ name }},</p>\n\
                    <p class=\"note\">Note: {{ note }}</p>\n<p>This is {{ campaign.name }}.</p>\n\
                    <p><a href=\"https://example.org/read?c=1\">Read it online</a></p>\n\
                    </body></html>\n";
/// An attribute value the HTML part must escape and the text part must carry as it is.
const HOSTILE_NOTE: &str = "Tom <b>&\" Jerry";
const HOSTILE_NOTE_HTML: &str = "Tom &lt;b&gt;&amp;&quot; Jerry";
/// Subscribers outside every list (never sent to).
const OUTSIDERS: usize = 50;

/// Where a person of the lists ends up, in the order `campaign audience` decides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bucket {
    Unsubscribed,
    Unconfirmed,
    Suppressed,
    Receives,
}

/// One of the people of the three lists.
#[derive(Clone, Copy, Debug)]
struct Person {
    i: usize,
    /// The lists they are in (bit k: `LISTS[k]`).
    lists: u8,
    /// The memberships set to `unsubscribed` after the imports.
    unsub: u8,
    confirmed: bool,
    suppressed: bool,
}

impl Person {
    fn new(i: usize) -> Person {
        let lists = COMBOS[i % COMBOS.len()];
        let multi = lists.count_ones() > 1;
        let first = 1 << lists.trailing_zeros();
        let unsub = match i % 97 {
            // One list of several (still included), or the only one (excluded).
            3 => first,
            // Every list they are in.
            5 if multi => lists,
            _ => 0,
        };
        Person {
            i,
            lists,
            unsub,
            confirmed: i % 89 != 7,
            suppressed: i % 1500 == 42 || i % 1500 == 45,
        }
    }

    /// The normalised address.
    fn email(&self) -> String {
        format!("ana{}@x{}.org", self.i, self.i % 10)
    }

    /// The address as list `k`'s file spells it: another case in each file.
    fn spelled(&self, k: usize) -> String {
        let (i, d) = (self.i, self.i % 10);
        match (k + i) % 3 {
            0 => self.email(),
            1 => format!("Ana{i}@X{d}.org"),
            _ => format!("ANA{i}@x{d}.ORG"),
        }
    }

    fn name(&self) -> String {
        format!("Zoë Ñandú {}", self.i)
    }

    fn hostile(&self) -> bool {
        self.i % 1000 == 11
    }

    fn note(&self) -> String {
        match self.hostile() {
            true => format!("{HOSTILE_NOTE} {}", self.i),
            false => format!("note {}", self.i),
        }
    }

    fn bucket(&self) -> Bucket {
        if self.lists & !self.unsub == 0 {
            Bucket::Unsubscribed
        } else if !self.confirmed {
            Bucket::Unconfirmed
        } else if self.suppressed {
            Bucket::Suppressed
        } else {
            Bucket::Receives
        }
    }
}

/// The audience of `n` people and what the test expects of it.
struct Audience {
    people: Vec<Person>,
}

impl Audience {
    fn new(n: usize) -> Audience {
        Audience {
            people: (0..n).map(Person::new).collect(),
        }
    }

    fn in_bucket(&self, b: Bucket) -> BTreeSet<String> {
        self.people
            .iter()
            .filter(|p| p.bucket() == b)
            .map(Person::email)
            .collect()
    }

    fn count(&self, b: Bucket) -> u64 {
        self.people.iter().filter(|p| p.bucket() == b).count() as u64
    }

    fn by_email(&self) -> HashMap<String, Person> {
        self.people.iter().map(|p| (p.email(), *p)).collect()
    }
}

fn json(env: &Env, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&env.ok(&all)).unwrap()
}

/// A CSV field, quoted when it needs to be.
fn field(s: &str) -> String {
    match s.contains(['"', ',']) {
        true => format!("\"{}\"", s.replace('"', "\"\"")),
        false => s.to_string(),
    }
}

/// `email,phone,name,status,note` lines for `people` as list `k`'s file spells them.
fn csv_of<'a>(people: impl Iterator<Item = &'a Person>, k: usize) -> String {
    let mut text = String::from("email,phone,name,status,note\n");
    for p in people {
        let status = if p.confirmed { "confirmed" } else { "pending" };
        let line = [
            p.spelled(k),
            String::new(),
            p.name(),
            status.into(),
            p.note(),
        ];
        let line: Vec<String> = line.iter().map(|f| field(f)).collect();
        text.push_str(&line.join(","));
        text.push('\n');
    }
    text
}

/// Build the account: the three lists from three files (each imported with `--list`), a
/// phone-only member of gamma, outsiders in no list, the unsubscribed memberships, the
/// suppressions. Checks each import's counts.
fn setup(env: &Env, a: &Audience) {
    env.setup_account();
    for l in LISTS {
        env.ok(&["list", "create", "--account", "acme", l]);
    }
    let mut seen = BTreeSet::new();
    for (k, list) in LISTS.iter().enumerate() {
        let members: Vec<&Person> = a
            .people
            .iter()
            .filter(|p| p.lists & (1 << k) != 0)
            .collect();
        let mut text = csv_of(members.iter().copied(), k);
        let mut new = members.iter().filter(|p| !seen.contains(&p.i)).count();
        let already = members.len() - new;
        if k == 2 {
            text.push_str(",+14155550123,Phone Only,confirmed,note phone\n");
            new += 1;
        }
        seen.extend(members.iter().map(|p| p.i));
        let file = env.write(&format!("{list}.csv"), text);
        let args = ["subscriber", "import", "--account", "acme", "--list", list];
        let out = env.ok(&[&args[..], &[file.to_str().unwrap()]].concat());
        match already {
            0 => assert_eq!(out, format!("imported {new} subscribers")),
            m => assert!(
                out.starts_with(&format!("imported {new} subscribers, {m} already")),
                "{list}: {out}"
            ),
        }
    }
    let mut outsiders = String::from("email,phone,name,status,note\n");
    for i in 0..OUTSIDERS {
        outsiders.push_str(&format!(
            "outsider{i}@example.com,,Out {i},confirmed,none\n"
        ));
    }
    env.import_csv("acme", &env.write("outsiders.csv", outsiders));
    unsubscribe_memberships(env, a);
    for p in a.people.iter().filter(|p| p.suppressed) {
        // Spelled in upper case: the suppression list normalises too.
        let addr = p.email().to_uppercase();
        env.ok(&[
            "suppress",
            "add",
            "--account",
            "acme",
            "--channel",
            "email",
            &addr,
        ]);
    }
}

/// Set the memberships of `Person::unsub` to `unsubscribed` (no command does that yet: an
/// unsubscribe from one list arrives with the HTTP side).
fn unsubscribe_memberships(env: &Env, a: &Audience) {
    let db = env.sqlite();
    for (k, list) in LISTS.iter().enumerate() {
        let emails: Vec<String> = a
            .people
            .iter()
            .filter(|p| p.unsub & (1 << k) != 0)
            .map(Person::email)
            .collect();
        let n = db
            .execute(
                "UPDATE list_members SET status = 'unsubscribed'
                 WHERE list_id = (SELECT id FROM lists WHERE name = ?1)
                   AND subscriber_id IN (SELECT id FROM subscribers
                                         WHERE email_norm IN (SELECT value FROM json_each(?2)))",
                rusqlite::params![list, serde_json::to_string(&emails).unwrap()],
            )
            .unwrap();
        assert_eq!(n, emails.len(), "list {list}");
    }
}

/// `campaign create` of an email campaign named `CAMPAIGN` from `FROM` with the `extra` flags
/// (subject, bodies...); its id.
fn create(env: &Env, extra: &[&str]) -> String {
    let mut args = vec![
        "campaign",
        "create",
        "--account",
        "acme",
        "--name",
        CAMPAIGN,
        "--channel",
        "email",
        "--from",
        FROM,
    ];
    args.extend_from_slice(extra);
    env.ok(&args)
}

/// The HTML + text campaign to the three lists; its id.
fn create_campaign(env: &Env) -> String {
    let text = env.write("body.txt", TEXT);
    let html = env.write("body.html", HTML);
    let mut args = vec![
        "--reply-to",
        REPLY_TO,
        "--subject",
        SUBJECT,
        "--body-file",
        text.to_str().unwrap(),
        "--html-file",
        html.to_str().unwrap(),
    ];
    for l in LISTS {
        args.extend_from_slice(&["--list", l]);
    }
    create(env, &args)
}

/// `campaign audience` equals the counts the test computed.
fn assert_audience(env: &Env, cid: &str, a: &Audience) -> Value {
    let got = json(env, &["campaign", "audience", cid]);
    let want = [
        ("would_receive", a.count(Bucket::Receives)),
        ("duplicates", 0),
        ("suppressed", a.count(Bucket::Suppressed)),
        ("unsubscribed", a.count(Bucket::Unsubscribed)),
        ("unconfirmed", a.count(Bucket::Unconfirmed)),
        ("no_address", 1),
    ];
    for (k, v) in want {
        assert_eq!(got[k].as_u64(), Some(v), "{k}: {got}");
    }
    got
}

/// What the server received, by RCPT address.
struct Received {
    /// Messages per address.
    count: HashMap<String, usize>,
    /// The (last) raw message of each address.
    raw_of: HashMap<String, Vec<u8>>,
    /// Addresses in arrival order.
    order: Vec<String>,
}

fn received(server: &RealServer) -> Received {
    let mut r = Received {
        count: HashMap::new(),
        raw_of: HashMap::new(),
        order: Vec::new(),
    };
    for (raw, meta) in server.messages() {
        let rcpts = meta["rcpt_tos"].as_array().expect("rcpt_tos");
        assert_eq!(rcpts.len(), 1, "{meta}");
        // As sent: the normalised (lower-case) address, whatever the files spelled.
        let rcpt = rcpts[0].as_str().unwrap().to_string();
        *r.count.entry(rcpt.clone()).or_insert(0) += 1;
        r.raw_of.insert(rcpt.clone(), raw);
        r.order.push(rcpt);
    }
    r
}

/// Text the way a reader compares it: CRLF as LF, without the trailing line ends.
fn text(s: &str) -> String {
    s.replace("\r\n", "\n").trim_end().to_string()
}

/// The text and HTML bodies of `parsed`, checking it is one multipart/alternative of exactly a
/// text/plain and a text/html part.
fn alternative_parts(parsed: &mail_parser::Message<'_>, ctx: &str) -> (String, String) {
    let root = parsed.root_part().content_type().expect("content type");
    assert_eq!(
        (root.ctype(), root.subtype()),
        ("multipart", Some("alternative")),
        "{ctx}"
    );
    let leaves: Vec<_> = parsed.parts.iter().filter(|p| !p.is_multipart()).collect();
    assert_eq!(leaves.len(), 2, "{ctx}");
    let part = |sub: &str| {
        let found: Vec<_> = leaves
            .iter()
            .filter(|p| {
                let ct = p.content_type().expect("part content type");
                ct.ctype() == "text" && ct.subtype() == Some(sub)
            })
            .collect();
        assert_eq!(found.len(), 1, "text/{sub}: {ctx}");
        text(found[0].text_contents().expect("text contents"))
    };
    assert_eq!(parsed.attachment_count(), 0, "{ctx}");
    (part("plain"), part("html"))
}

/// One received message of the big campaign, in detail.
fn check_message(raw: &[u8], p: &Person, cid: &str) {
    let ctx = format!("message to {}", p.email());
    assert!(raw.is_ascii(), "{ctx}");
    let parsed = MessageParser::default().parse(raw).expect("parses");
    let mut names: Vec<String> = parsed
        .headers()
        .iter()
        .map(|h| h.name().to_ascii_lowercase())
        .collect();
    names.sort();
    let mut want = [
        "content-type",
        "date",
        "from",
        "list-unsubscribe",
        "message-id",
        "mime-version",
        "reply-to",
        "subject",
        "to",
        "x-sendonce-job",
    ];
    want.sort();
    assert_eq!(names, want, "{ctx}");
    // Not transactional: the recipient's link on the public URL the test commands get.
    let unsub = parsed.header_raw("List-Unsubscribe").unwrap_or("").trim();
    assert!(
        unsub.starts_with("<http://127.0.0.1:9/u/2"),
        "{ctx}: {unsub}"
    );
    let from = parsed.from().and_then(|a| a.first()).expect("From");
    assert_eq!(from.name(), Some("Café Ünïcode"), "{ctx}");
    assert_eq!(from.address(), Some("news@example.org"), "{ctx}");
    let reply = parsed.reply_to().expect("Reply-To");
    assert_eq!(reply.iter().count(), 1, "{ctx}");
    let reply = reply.first().unwrap();
    assert_eq!(reply.name(), Some("Équipe Réponses"), "{ctx}");
    assert_eq!(reply.address(), Some("replies@example.org"), "{ctx}");
    let to: Vec<_> = parsed.to().map(|a| a.iter().collect()).unwrap_or_default();
    assert_eq!(to.len(), 1, "{ctx}");
    assert_eq!(to[0].address(), Some(p.email().as_str()), "{ctx}");
    assert!(parsed.cc().is_none() && parsed.bcc().is_none(), "{ctx}");
    let subject = format!("Olá {} — {CAMPAIGN} ✉", p.name());
    assert_eq!(parsed.subject(), Some(subject.as_str()), "{ctx}");
    let job = parsed.header_raw("X-Sendonce-Job").unwrap().trim();
    assert!(
        job.starts_with(&format!("campaign:{cid}:sub:")),
        "{ctx}: {job}"
    );

    let (plain, html) = alternative_parts(&parsed, &ctx);
    let note = p.note();
    let want_text = TEXT
        .replace("{{ name }}", &p.name())
        .replace("{{ note }}", &note)
        .replace("{{ campaign.name }}", CAMPAIGN);
    assert_eq!(plain, text(&want_text), "{ctx}");
    let note_html = note.replace(HOSTILE_NOTE, HOSTILE_NOTE_HTML);
    let want_html = HTML
        .replace("{{ name }}", &p.name())
        .replace("{{ note }}", &note_html)
        .replace("{{ campaign.name }}", CAMPAIGN);
    assert_eq!(html, text(&want_html), "{ctx}");
    if p.hostile() {
        assert!(plain.contains(HOSTILE_NOTE), "raw in text: {ctx}");
        assert!(html.contains(HOSTILE_NOTE_HTML), "escaped in HTML: {ctx}");
        assert!(!html.contains("<b>"), "{ctx}");
    }
}

/// Messages in the report and at the server agree: every `sent` row's provider id is the
/// Message-ID the server got for that address; `suppressed` rows are the suppressed people;
/// there is no other row.
fn assert_report(env: &Env, cid: &str, a: &Audience, raw_of: &HashMap<String, Vec<u8>>) {
    let report: Value =
        serde_json::from_str(&env.ok(&["campaign", "report", cid, "--format", "json"]))
            .expect("report JSON");
    let rows = report.as_array().expect("an array");
    let mut by_status: HashMap<String, BTreeSet<String>> = HashMap::new();
    let parser = MessageParser::default();
    for r in rows {
        let addr = r["address"].as_str().unwrap().to_string();
        let status = r["status"].as_str().unwrap().to_string();
        if status == "sent" {
            let raw = raw_of
                .get(&addr)
                .unwrap_or_else(|| panic!("{addr} sent, not received"));
            let id = parser
                .parse(raw)
                .and_then(|m| m.message_id().map(str::to_string));
            assert_eq!(
                r["provider_message_id"].as_str().map(str::to_string),
                id.map(|i| format!("<{i}>")),
                "{addr}"
            );
        }
        assert!(by_status.entry(status).or_default().insert(addr));
    }
    assert_eq!(
        by_status.len(),
        2,
        "only sent and suppressed rows: {:?}",
        by_status.keys()
    );
    assert_eq!(by_status["sent"], a.in_bucket(Bucket::Receives));
    assert_eq!(by_status["suppressed"], a.in_bucket(Bucket::Suppressed));
}

#[cfg(feature = "tier1")]
#[test]
fn three_lists_of_10000_addresses_arrive_once_each_at_a_real_smtp_server() {
    let started = Instant::now();
    let a = Audience::new(10_000);
    // Every case the test is about occurs.
    for b in [
        Bucket::Unsubscribed,
        Bucket::Unconfirmed,
        Bucket::Suppressed,
    ] {
        assert!(a.count(b) > 0, "{b:?}");
    }
    let rescued = a
        .people
        .iter()
        .filter(|p| p.unsub != 0 && p.bucket() == Bucket::Receives);
    assert!(
        rescued.count() > 20,
        "unsubscribed from one list, subscribed in another"
    );
    let hostile: Vec<&Person> = a
        .people
        .iter()
        .filter(|p| p.hostile() && p.bucket() == Bucket::Receives)
        .collect();
    assert!(hostile.len() >= 5);

    let env = Env::new();
    setup(&env, &a);
    let cid = create_campaign(&env);
    let before = assert_audience(&env, &cid, &a);
    let setup_s = started.elapsed().as_secs_f64();

    let server = RealServer::start_with(&["--no-fsync"], &[]);
    env.ok(&["campaign", "approve", &cid]);
    // 32 connections: each message costs about 45 ms of waiting here, not CPU (lettre writes
    // the final "." apart from the body without TCP_NODELAY, and the server's delayed ACK holds
    // it ~40 ms), so the wall time is set by the calls in flight.
    let spec = format!("smtp://127.0.0.1:{}?tls=none&pool=32", server.port);
    let t = Instant::now();
    let st = json(
        &env,
        &[
            "run",
            "--once",
            "--provider",
            &spec,
            "--tick",
            "20ms",
            "--concurrency",
            "32",
        ],
    );
    let run_s = t.elapsed().as_secs_f64();
    let receives = a.in_bucket(Bucket::Receives);
    assert_eq!(st["sent"].as_u64(), Some(receives.len() as u64), "{st}");

    let got = received(&server);
    let twice: Vec<_> = got.count.iter().filter(|(_, &n)| n != 1).collect();
    assert!(twice.is_empty(), "received more than once: {twice:?}");
    let addrs: BTreeSet<String> = got.count.keys().cloned().collect();
    let missing: Vec<_> = receives.difference(&addrs).collect();
    let extra: Vec<_> = addrs.difference(&receives).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing {missing:?}, extra {extra:?}"
    );

    let status = json(&env, &["campaign", "status", &cid]);
    assert_eq!(status["status"], "sent", "{status}");
    assert_eq!(status["sent"].as_u64(), Some(receives.len() as u64));
    assert_eq!(
        status["suppressed"].as_u64(),
        Some(a.count(Bucket::Suppressed))
    );
    for k in ["failed", "in_doubt", "queued", "leased"] {
        assert_eq!(status[k], 0, "{k}: {status}");
    }
    assert_eq!(
        assert_audience(&env, &cid, &a),
        before,
        "the counts did not move"
    );
    assert_report(&env, &cid, &a, &got.raw_of);

    // In detail: the first 50 messages that arrived, and every one with the hostile note.
    let people = a.by_email();
    let hostile_emails: Vec<String> = hostile.iter().map(|p| p.email()).collect();
    for addr in got.order.iter().take(50).chain(&hostile_emails) {
        check_message(&got.raw_of[addr], &people[addr], &cid);
    }
    eprintln!(
        "audience: setup {setup_s:.1} s, run --once {run_s:.1} s for {} messages, total {:.1} s",
        receives.len(),
        started.elapsed().as_secs_f64()
    );
}

/// The HTML-only campaign: each message's text part is generated from its HTML (the paragraph
/// text and the link target are there, the escaped value unescaped), and the HTML part is the
/// rendered template, byte for byte.
#[cfg(feature = "tier1")]
#[test]
fn an_html_only_campaign_gets_a_text_part_made_from_its_html() {
    let env = Env::new();
    env.setup_account();
    let people = [
        ("ana@example.com", "Ana Zoë", "plain"),
        ("bo@example.com", "Bo", HOSTILE_NOTE),
    ];
    let mut csv = String::from("email,name,note\n");
    for (email, name, note) in people {
        csv.push_str(&format!("{email},{name},{}\n", field(note)));
    }
    env.import_csv("acme", &env.write("s.csv", csv));
    let html = "<h1>Hello {{ name }}</h1>\n\
                <p>Paragraph text for {{ note }}, from {{ campaign.name }}.</p>\n\
                <p><a href=\"https://example.org/articles/42?from=mail\">Read the article</a></p>\n";
    let file = env.write("body.html", html);
    let cid = create(
        &env,
        &[
            "--subject",
            "Only HTML",
            "--html-file",
            file.to_str().unwrap(),
        ],
    );
    env.ok(&["campaign", "approve", &cid]);
    let server = RealServer::start();
    let spec = format!("smtp://127.0.0.1:{}?tls=none", server.port);
    env.ok(&["run", "--once", "--provider", &spec, "--tick", "20ms"]);
    let got = received(&server);
    assert_eq!(got.order.len(), people.len());
    for (email, name, note) in people {
        let raw = &got.raw_of[email];
        let parsed = MessageParser::default().parse(raw).expect("parses");
        let (plain, html_part) = alternative_parts(&parsed, email);
        let escaped = note.replace(HOSTILE_NOTE, HOSTILE_NOTE_HTML);
        let want_html = html
            .replace("{{ name }}", name)
            .replace("{{ note }}", &escaped)
            .replace("{{ campaign.name }}", CAMPAIGN);
        assert_eq!(html_part, text(&want_html), "{email}");
        let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        let flat = words(&plain);
        for want in [
            format!("Hello {name}"),
            format!("Paragraph text for {note}, from {CAMPAIGN}."),
            "Read the article".to_string(),
            "https://example.org/articles/42?from=mail".to_string(),
        ] {
            assert!(
                flat.contains(&want),
                "{email}: {want:?} not in the text part:\n{plain}"
            );
        }
        assert!(
            !plain.contains("<p>") && !plain.contains("&lt;"),
            "{email}: {plain}"
        );
    }
}

/// Killed at `point` (the 3rd hit) while a three-list campaign's recipient list is built in
/// chunks of 400 subscribers, then run again: the rows after the kill are exactly those of the
/// committed chunks, and in the end every expected address got one delivery, nobody else.
#[cfg(feature = "crash-points")]
fn killed_during_list_building(point: &str, committed: usize) {
    use std::os::unix::process::ExitStatusExt;
    const CHUNK: usize = 400;
    let a = Audience::new(3000);
    let env = Env::new();
    setup(&env, &a);
    let cid = create_campaign(&env);
    assert_audience(&env, &cid, &a);
    env.ok(&["campaign", "approve", &cid]);
    let outbox = env.path("outbox.jsonl");
    // Idempotent (the outbox's default): a call the kill cut short is retried with its key, a
    // replay rather than a second delivery, instead of waiting in doubt.
    let spec = format!("outbox:{}", outbox.display());
    let chunk = CHUNK.to_string();
    let args = [
        "run",
        "--once",
        "--tick",
        "20ms",
        "--lease",
        "1s",
        "--list-chunk",
        &chunk,
        "--provider",
        &spec,
    ];
    let st = env
        .cmd()
        .args(args)
        .env("SENDONCE_CRASH_AT", format!("{point}:3"))
        .status()
        .unwrap();
    assert_eq!(st.signal(), Some(libc::SIGKILL), "{point}: {st:?}");

    // The chunks go by subscriber id over the whole account: what the committed ones hold.
    let db = env.sqlite();
    let mut ids: Vec<(i64, Option<String>)> = db
        .prepare("SELECT id, email_norm FROM subscribers ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    ids.truncate(CHUNK * committed);
    let people = a.by_email();
    let want = ids
        .iter()
        .filter_map(|(_, e)| people.get(e.as_deref()?))
        .filter(|p| matches!(p.bucket(), Bucket::Receives | Bucket::Suppressed))
        .count();
    let rows = env.count(&format!(
        "SELECT count(*) FROM sends WHERE campaign_id = {cid}"
    ));
    assert!(want > 0);
    assert_eq!(
        rows as usize, want,
        "{point}: rows of {committed} committed chunks"
    );

    env.ok(&args);
    let mut per_address: HashMap<String, usize> = HashMap::new();
    for l in sendonce::provider::deliverylog::read_lines(&outbox).unwrap() {
        if !l.replay {
            *per_address.entry(l.to.clone()).or_insert(0) += 1;
        }
    }
    let twice: Vec<_> = per_address.iter().filter(|(_, &n)| n != 1).collect();
    assert!(
        twice.is_empty(),
        "{point}: delivered more than once: {twice:?}"
    );
    let got: BTreeSet<String> = per_address.into_keys().collect();
    assert_eq!(got, a.in_bucket(Bucket::Receives), "{point}");
    let count = |status: &str| {
        env.count(&format!(
            "SELECT count(*) FROM sends WHERE campaign_id = {cid} AND status = '{status}'"
        )) as u64
    };
    assert_eq!(count("sent"), a.count(Bucket::Receives), "{point}");
    assert_eq!(count("suppressed"), a.count(Bucket::Suppressed), "{point}");
    let all = env.count(&format!(
        "SELECT count(*) FROM sends WHERE campaign_id = {cid}"
    ));
    assert_eq!(
        all as u64,
        a.count(Bucket::Receives) + a.count(Bucket::Suppressed)
    );
}

/// Inside the third chunk's transaction, before its commit: that chunk is rolled back.
#[cfg(feature = "crash-points")]
#[test]
fn kill_9_before_a_list_chunk_commits_then_a_rerun_sends_once_per_address() {
    killed_during_list_building("list_build", 2);
}

/// Right after the third chunk committed.
#[cfg(feature = "crash-points")]
#[test]
fn kill_9_after_a_list_chunk_commits_then_a_rerun_sends_once_per_address() {
    killed_during_list_building("list_build_committed", 3);
}

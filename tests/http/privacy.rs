//! A subscriber's data on request and consent records, end to end on SQLite and (tier 1)
//! PostgreSQL (`crates/store/src/privacy.rs`, docs/privacy.md): a person subscribed with a
//! declared basis, sent a campaign and an API message with metadata, reported delivered by a
//! provider webhook and suppressed is exported whole; after `subscriber erase` a scan of every
//! column of every table finds neither an address nor a name nor an attribute value, the
//! address stays suppressed (by its SHA-256), adding it again is refused with the reason, and
//! a new API message to it is recorded suppressed and never reaches the provider.

use crate::common::{client, rt, token, Env, Server};
use base64::{engine::general_purpose::STANDARD, Engine as _};
use serde_json::{json, Value};

/// What must not be left anywhere after the erasure (lower case): the addresses, the name,
/// an attribute value, the API message's metadata value.
const NEEDLES: &[&str] = &[
    "alice",
    "liddell",
    "cheshire-7731",
    "+14155550123",
    "4155550123",
    "tea-party-42",
];

/// Another person, whose address ends with Alice's.
const MAL: &str = "malice@example.com";

const POSTMARK_AUTH: &str = "hooker:pm-pa55word";
const LINK_SECRET: &str = "0123456789abcdef0123456789abcdef";

/// The stores the test runs on: a SQLite file, and a fresh PostgreSQL database in tier 1.
fn backends() -> Vec<(&'static str, Env)> {
    #[allow(unused_mut)]
    let mut all = vec![("sqlite", Env::new())];
    #[cfg(feature = "tier1")]
    {
        let mut env = Env::new();
        env.db = crate::common::pg::shared().fresh_url().into();
        all.push(("postgresql", env));
    }
    all
}

/// Every row of every table of the store, one text per column value, lower-cased.
fn every_value(env: &Env) -> Vec<(String, String)> {
    let db = env.db.to_string_lossy().to_string();
    if db.starts_with("postgres") {
        return pg_values(&db);
    }
    let c = env.sqlite();
    let tables: Vec<String> = c
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut out = Vec::new();
    for t in tables {
        let mut st = c.prepare(&format!("SELECT * FROM \"{t}\"")).unwrap();
        let n = st.column_count();
        let mut rows = st.query([]).unwrap();
        while let Some(r) = rows.next().unwrap() {
            for i in 0..n {
                let text = match r.get_ref(i).unwrap() {
                    rusqlite::types::ValueRef::Null => continue,
                    rusqlite::types::ValueRef::Integer(v) => v.to_string(),
                    rusqlite::types::ValueRef::Real(v) => v.to_string(),
                    rusqlite::types::ValueRef::Text(b) | rusqlite::types::ValueRef::Blob(b) => {
                        String::from_utf8_lossy(b).to_string()
                    }
                };
                out.push((t.clone(), text.to_lowercase()));
            }
        }
    }
    out
}

#[cfg(feature = "tier1")]
fn pg_values(url: &str) -> Vec<(String, String)> {
    let pg = crate::common::pg::shared();
    let db = crate::common::pg::db_name(url);
    let tables = pg.psql(
        &db,
        "SELECT table_name FROM information_schema.tables
         WHERE table_schema = 'public' AND table_type = 'BASE TABLE'",
    );
    let mut out = Vec::new();
    for t in tables.lines().filter(|l| !l.trim().is_empty()) {
        let rows = pg.psql(&db, &format!("SELECT x::text FROM \"{t}\" x"));
        for line in rows.lines() {
            out.push((t.to_string(), line.to_lowercase()));
        }
    }
    assert!(out.len() > 20, "the scan read too little: {out:?}");
    out
}

#[cfg(not(feature = "tier1"))]
fn pg_values(_url: &str) -> Vec<(String, String)> {
    unreachable!("PostgreSQL runs in tier 1 only")
}

/// The (table, value) pairs holding any of the needles.
fn leftovers(env: &Env) -> Vec<(String, String)> {
    let all = every_value(env);
    assert!(
        all.iter().any(|(_, v)| v.contains("bob@example.com")),
        "the scan does not see the other subscriber: it reads nothing"
    );
    assert!(
        all.iter().any(|(t, v)| t == "events" && v.contains(MAL)),
        "Mal's suppression event went with Alice's"
    );
    all.into_iter()
        .filter(|(_, v)| {
            let v = v.replace(MAL, "");
            NEEDLES.iter().any(|n| v.contains(n))
        })
        .collect()
}

/// The SQLite file's bytes (its WAL's too), free pages and free space in pages included, hold
/// no needle: the erasure zeroed what it deleted (`secure_delete`) and emptied the WAL. Read
/// by `grep` in its own process: this one never opens the file with anything but SQLite.
fn raw_bytes_hold_no_needle(env: &Env) {
    let files: Vec<std::path::PathBuf> = ["", "-wal"]
        .iter()
        .map(|s| std::path::PathBuf::from(format!("{}{s}", env.db.display())))
        .filter(|p| p.exists())
        .collect();
    // "alice" after anything but an "m": Mal's address stays.
    let pattern = NEEDLES
        .join("|")
        .replace('+', "\\+")
        .replace("alice", "(?<!m)alice");
    let out = std::process::Command::new("grep")
        .args(["-a", "-i", "-o", "-P", &pattern])
        .args(&files)
        .output()
        .expect("run grep");
    assert_eq!(
        out.status.code(),
        Some(1),
        "left in the file's bytes: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A server with Postmark's webhook for acme (basic auth) and the public URL.
fn serve(env: &Env) -> Server {
    let secret = env.write("postmark.secret", POSTMARK_AUTH);
    let cfg = env.write(
        "sendonce.toml",
        format!(
            "public_url = \"http://127.0.0.1:9/\"\n[[webhook]]\naccount = \"acme\"\n\
             source = \"postmark\"\nsecret_file = \"{}\"\n",
            secret.display()
        ),
    );
    Server::start_with_env(
        env,
        &["--listen", "127.0.0.1:0", "--config", cfg.to_str().unwrap()],
        &[
            ("SENDONCE_UNSUBSCRIBE_SECRET", LINK_SECRET),
            ("SENDONCE_PUBLIC_URL", ""),
        ],
    )
}

/// Send what is due through the outbox provider (`out.jsonl`).
fn run_once(env: &Env) {
    let spec = format!("outbox:{}", env.path("out.jsonl").display());
    env.ok(&["run", "--once", "--provider", &spec, "--tick", "50ms"]);
}

/// The account, its list, Alice (both channels, a name, an attribute, a declared basis) and Bob;
/// a campaign to the list, sent.
fn people(env: &Env) {
    env.ok(&["init"]);
    env.ok(&["account", "add", "acme"]);
    env.ok(&["list", "create", "--account", "acme", "news"]);
    env.ok(&[
        "subscriber",
        "add",
        "--account",
        "acme",
        "--email",
        "Alice@Example.com",
        "--phone",
        "+1 415 555 0123",
        "--name",
        "Alice Liddell",
        "--attr",
        "favourite=Cheshire-7731",
        "--list",
        "news",
        "--basis",
        "ticked the box at the fair",
    ]);
    env.ok(&[
        "subscriber",
        "add",
        "--account",
        "acme",
        "--email",
        "bob@example.com",
        "--name",
        "Bob",
        "--attr",
        "favourite=croquet",
        "--list",
        "news",
    ]);
    // Mal's address holds Alice's whole: erasing Alice must leave Mal alone.
    env.ok(&[
        "suppress",
        "add",
        "--account",
        "acme",
        "--channel",
        "email",
        MAL,
        "--reason",
        "asked",
    ]);
    let body = env.write("body.txt", "Hello {{ name }}, about {{ favourite }}.\n");
    let cid = env.ok(&[
        "campaign",
        "create",
        "--account",
        "acme",
        "--name",
        "spring",
        "--channel",
        "email",
        "--from",
        "news@example.org",
        "--subject",
        "Spring",
        "--body-file",
        body.to_str().unwrap(),
        "--list",
        "news",
    ]);
    env.ok(&["campaign", "approve", &cid]);
    run_once(env);
}

async fn post(c: &reqwest::Client, s: &Server, tok: &str, key: &str, body: &Value) -> Value {
    let res = c
        .post(s.url("/v1/messages"))
        .bearer_auth(tok)
        .header("idempotency-key", key)
        .json(body)
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success(), "{:?}", res.text().await);
    res.json().await.unwrap()
}

/// A Postmark webhook for acme.
async fn postmark(s: &Server, body: &Value) {
    let res = client()
        .post(s.url("/hooks/postmark/acme"))
        .header(
            "authorization",
            format!("Basic {}", STANDARD.encode(POSTMARK_AUTH)),
        )
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200, "{:?}", res.text().await);
}

fn message_to_alice() -> Value {
    json!({"to": "alice@example.com", "from": "shop@example.org", "subject": "Receipt",
           "text": "Thank you.", "metadata": {"order": "tea-party-42"}})
}

fn export(env: &Env) -> Value {
    let out = env.ok(&[
        "subscriber",
        "export",
        "--account",
        "acme",
        "alice@example.com",
    ]);
    serde_json::from_str(&out).unwrap()
}

/// The export holds everything about Alice and nothing about Bob.
fn check_export(name: &str, x: &Value) {
    let s = &x["subscriber"];
    assert_eq!(s["name"], "Alice Liddell", "{name}: {x}");
    assert_eq!(s["phone"], "+14155550123", "{name}");
    assert_eq!(s["attrs"]["favourite"], "Cheshire-7731", "{name}");
    let consent = &x["consents"][0];
    assert_eq!(consent["source"], "cli", "{name}: {x}");
    assert_eq!(consent["basis"], "ticked the box at the fair", "{name}");
    assert_eq!(consent["list"], "news", "{name}");
    assert_eq!(x["memberships"][0]["status"], "subscribed", "{name}");
    let sends = x["sends"].as_array().unwrap();
    assert_eq!(
        sends.len(),
        2,
        "{name}: a campaign row and a stream row: {x}"
    );
    assert!(sends.iter().all(|s| s["status"] == "sent"), "{name}: {x}");
    assert_eq!(sends[0]["vars"]["favourite"], "Cheshire-7731", "{name}");
    assert_eq!(
        sends[0]["content_sha256"].as_str().map(str::len),
        Some(64),
        "{name}"
    );
    assert_eq!(
        x["api_messages"][0]["metadata"]["order"], "tea-party-42",
        "{name}"
    );
    assert_eq!(
        x["suppressions"].as_array().map(Vec::len),
        Some(1),
        "{name}: {x}"
    );
    let types: Vec<&str> = x["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    for t in [
        "subscriber.subscribed",
        "send.sent",
        "send.delivered",
        "suppression.added",
    ] {
        assert!(types.contains(&t), "{name}: no {t} in {types:?}");
    }
    assert!(
        !x.to_string().contains("bob@"),
        "{name}: Bob in Alice's export"
    );
}

/// Alice's data in the store before the erasure: export, a refused erasure without --yes.
fn before_erasure(name: &str, env: &Env) {
    let x = export(env);
    check_export(name, &x);
    let r = env.run(&[
        "subscriber",
        "erase",
        "--account",
        "acme",
        "alice@example.com",
    ]);
    assert_ne!(r.code, 0, "{name}: erase without --yes");
    assert!(r.stderr.contains("--yes"), "{name}: {}", r.stderr);
    assert_eq!(export(env)["subscriber"]["name"], "Alice Liddell", "{name}");
    assert!(
        !leftovers(env).is_empty(),
        "{name}: the needles are not found before"
    );
}

/// After the erasure: nothing left, still suppressed, re-adding refused, a new message to
/// the address recorded suppressed and never sent.
fn after_erasure(name: &str, env: &Env, s: &Server, tok: &str) {
    let left = leftovers(env);
    assert!(left.is_empty(), "{name}: personal data left: {left:?}");
    // What is left, exported: the erased form, the events' types and times without their
    // data, and the event that tells applications to erase their copy.
    let x = export(env);
    assert!(x["subscriber"]["email"].is_null(), "{name}: {x}");
    let events = x["events"].as_array().unwrap();
    let (erased, others): (Vec<&Value>, Vec<&Value>) = events
        .iter()
        .partition(|e| e["type"] == "subscriber.erased");
    assert_eq!(erased.len(), 1, "{name}: {x}");
    // Every event but the erasure's own (its `erasure` suppressions, by the erased form).
    assert!(
        others
            .iter()
            .all(|e| e["data"] == json!({"erased": true}) || e["data"]["source"] == "erasure"),
        "{name}: {x}"
    );
    let list = env.ok(&["suppress", "list", "--account", "acme"]);
    assert!(list.contains(MAL), "{name}: Mal's suppression: {list}");
    assert!(list.contains("sha256:"), "{name}: {list}");
    let r = env.run(&[
        "subscriber",
        "add",
        "--account",
        "acme",
        "--email",
        "alice@example.com",
    ]);
    assert_ne!(r.code, 0, "{name}: re-adding an erased address");
    assert!(
        r.stderr.contains("erased on request"),
        "{name}: {}",
        r.stderr
    );
    let csv = env.write("again.csv", "email\ncarol@example.com\nALICE@example.com\n");
    let out = env.ok(&[
        "subscriber",
        "import",
        "--account",
        "acme",
        "--skip-invalid",
        csv.to_str().unwrap(),
    ]);
    assert!(out.contains("imported 1"), "{name}: {out}");
    assert!(
        out.contains("line 3: alice@example.com was erased"),
        "{name}: {out}"
    );
    // The public form takes the address as any other, and writes nothing.
    env.ok(&["list", "update", "--account", "acme", "news", "--public"]);
    rt().block_on(async {
        let body = "list=1&email=alice%40example.com&name=Alice+Liddell&website=";
        assert_eq!(
            form(&client(), &s.url("/subscribe"), body, "B/1").await,
            200
        );
    });
    let sent_before = std::fs::read_to_string(env.path("out.jsonl")).unwrap();
    rt().block_on(async {
        let m = post(&client(), s, tok, "receipt-2", &message_to_alice()).await;
        assert!(
            m["to"].as_str().unwrap().starts_with("sha256:"),
            "{name}: {m}"
        );
    });
    run_once(env);
    let sent_after = std::fs::read_to_string(env.path("out.jsonl")).unwrap();
    assert_eq!(
        sent_before.matches("alice@").count(),
        sent_after.matches("alice@").count(),
        "{name}: a message went to the erased address"
    );
    let left = leftovers(env);
    assert!(left.is_empty(), "{name}: after a new message: {left:?}");
}

#[test]
fn an_erased_subscriber_leaves_no_trace_and_is_never_sent_to_again() {
    for (name, env) in backends() {
        people(&env);
        let server = serve(&env);
        let tok = token(&env, "acme", "admin");
        rt().block_on(async {
            let c = client();
            post(&c, &server, &tok, "receipt-1", &message_to_alice()).await;
        });
        run_once(&env);
        let job = export(&env)["sends"][0]["job_id"]
            .as_str()
            .unwrap()
            .to_string();
        rt().block_on(async {
            let body = json!({"RecordType": "Delivery", "MessageID": "pm-1",
                              "Recipient": "alice@example.com",
                              "DeliveredAt": "2026-01-01T00:00:00Z",
                              "Metadata": {"sendonce_job": job}});
            postmark(&server, &body).await;
        });
        // A complaint: the address suppressed by the provider's report.
        rt().block_on(async {
            let body = json!({"RecordType": "SpamComplaint", "MessageID": "pm-2",
                              "Email": "alice@example.com", "BouncedAt": "2026-01-01T00:00:00Z"});
            postmark(&server, &body).await;
        });
        before_erasure(name, &env);
        let out = env.ok(&[
            "--json",
            "subscriber",
            "erase",
            "--account",
            "acme",
            "alice@example.com",
            "--yes",
        ]);
        let erased: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(erased["sends"], 2, "{name}: {erased}");
        assert_eq!(erased["api_messages"], 1, "{name}: {erased}");
        assert_eq!(erased["consents"], 1, "{name}: {erased}");
        if name == "sqlite" {
            raw_bytes_hold_no_needle(&env);
        }
        let again = env.run(&["subscriber", "erase", "--account", "acme", "1", "--yes"]);
        assert_ne!(again.code, 0, "{name}: erased twice");
        assert!(
            again.stderr.contains("erased already"),
            "{name}: {}",
            again.stderr
        );
        after_erasure(name, &env, &server, &tok);
    }
}

/// acme with a public double opt-in list `news` (its description shown on the form); a
/// server with the public URL, `vars` in its environment. Returns the list id.
fn form_setup(env: &Env) -> String {
    env.ok(&["init"]);
    env.ok(&["account", "add", "acme"]);
    env.ok(&[
        "list",
        "create",
        "--account",
        "acme",
        "news",
        "--description",
        "Monthly news about the garden.",
        "--double-opt-in",
        "--public",
        "--confirm-from",
        "news@example.org",
    ])
}

fn form_server(env: &Env, vars: &[(&str, &str)]) -> Server {
    let mut all = vec![("SENDONCE_UNSUBSCRIBE_SECRET", LINK_SECRET)];
    all.extend_from_slice(vars);
    Server::start_with_env(
        env,
        &[
            "--listen",
            "127.0.0.1:0",
            "--public-url",
            "https://news.example.org",
        ],
        &all,
    )
}

/// POST a form with this user agent; the status.
async fn form(c: &reqwest::Client, url: &str, body: &str, agent: &str) -> u16 {
    let res = c
        .post(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("user-agent", agent)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    res.status().as_u16()
}

/// The confirm link's path in the confirmation sent to `to` (through the outbox).
fn confirm_path(env: &Env, to: &str) -> String {
    let spec = format!("outbox:{}", env.path("out.jsonl").display());
    env.cmd()
        .env("SENDONCE_UNSUBSCRIBE_SECRET", LINK_SECRET)
        .env("SENDONCE_PUBLIC_URL", "https://news.example.org")
        .args(["run", "--once", "--tick", "20ms", "--provider", &spec])
        .output()
        .unwrap();
    let lines = sendonce::provider::deliverylog::read_lines(&env.path("out.jsonl")).unwrap();
    let line = lines.iter().find(|l| l.to == to).expect("a confirmation");
    let start = line.body.find("/c/").expect("a confirm link");
    line.body[start..]
        .chars()
        .take_while(|c| !c.is_whitespace())
        .collect()
}

/// A signup through the public form and its confirmation each leave their client on the
/// consent record (the address truncated to its /24 by default, the user agent, the form's
/// text); with `consent_ip = omit` no address is kept; an application's declared consent
/// through the API is kept with its basis, and a declared address that is not one is refused.
#[test]
fn form_signups_confirmations_and_api_opt_ins_are_recorded_as_consent() {
    let env = Env::new();
    let news = form_setup(&env);
    let srv = form_server(&env, &[]);
    let c = client();
    rt().block_on(async {
        let body = format!("list={news}&email=dee%40example.org&name=Dee&website=");
        let status = form(&c, &srv.url("/subscribe"), &body, "SignupBrowser/1.0").await;
        assert_eq!(status, 200);
    });
    let path = confirm_path(&env, "dee@example.org");
    rt().block_on(async {
        assert_eq!(
            form(&c, &srv.url(&path), "", "ConfirmBrowser/2.0").await,
            200
        );
    });
    let x: Value = serde_json::from_str(&env.ok(&[
        "subscriber",
        "export",
        "--account",
        "acme",
        "dee@example.org",
    ]))
    .unwrap();
    let consent = &x["consents"][0];
    assert_eq!(consent["source"], "form", "{x}");
    assert_eq!(consent["ip"], "127.0.0.0/24", "{x}");
    assert_eq!(consent["user_agent"], "SignupBrowser/1.0", "{x}");
    let shown = consent["text_shown"].as_str().unwrap();
    assert!(
        shown.contains("Subscribe to news")
            && shown.contains("Monthly news about the garden.")
            && shown.contains("a link to confirm"),
        "{shown}"
    );
    assert!(consent["confirmed_at"].is_string(), "{x}");
    assert_eq!(consent["confirm_ip"], "127.0.0.0/24", "{x}");
    assert_eq!(consent["confirm_user_agent"], "ConfirmBrowser/2.0", "{x}");
    drop(srv);

    let srv = form_server(&env, &[("SENDONCE_PRIVACY_CONSENT_IP", "omit")]);
    let tok = token(&env, "acme", "admin");
    rt().block_on(async {
        let body = format!("list={news}&email=eve%40example.org&website=");
        assert_eq!(form(&c, &srv.url("/subscribe"), &body, "B/3").await, 200);
        let ok = json!({"email": "fay@example.org", "consent": {"basis": "contract",
                        "ip": "198.51.100.23", "user_agent": "App/4", "text": "Terms v2"}});
        let res = c
            .post(srv.url("/v1/subscribers"))
            .bearer_auth(&tok)
            .json(&ok)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), 201, "{:?}", res.text().await);
        let bad = json!({"email": "gus@example.org", "consent": {"ip": "not-an-ip"}});
        let res = c
            .post(srv.url("/v1/subscribers"))
            .bearer_auth(&tok)
            .json(&bad)
            .send()
            .await
            .unwrap();
        let status = res.status().as_u16();
        let text = res.text().await.unwrap();
        assert!(status == 400 || status == 422, "{status} {text}");
        assert!(text.contains("consent.ip"), "{text}");
        let res = c
            .get(srv.url("/v1/subscribers/fay@example.org/export"))
            .bearer_auth(&tok)
            .send()
            .await
            .unwrap();
        let x: Value = res.json().await.unwrap();
        let consent = &x["consents"][0];
        assert_eq!(consent["source"], "api", "{x}");
        assert_eq!(consent["basis"], "contract", "{x}");
        assert_eq!(consent["ip"], Value::Null, "omit keeps no address: {x}");
        assert_eq!(consent["text_shown"], "Terms v2", "{x}");
    });
    let x: Value = serde_json::from_str(&env.ok(&[
        "subscriber",
        "export",
        "--account",
        "acme",
        "eve@example.org",
    ]))
    .unwrap();
    assert_eq!(x["consents"][0]["ip"], Value::Null, "{x}");
    assert_eq!(x["consents"][0]["user_agent"], "B/3", "{x}");
    let r = env.run(&["subscriber", "show", "--account", "acme", "gus@example.org"]);
    assert_ne!(r.code, 0, "a refused consent writes nothing");
    // An import records its declared basis on every row, and nothing without one.
    let csv = env.write("in.csv", "email\nhal@example.org\nivy@example.org\n");
    let file = csv.to_str().unwrap();
    env.ok(&[
        "subscriber",
        "import",
        "--account",
        "acme",
        file,
        "--basis",
        "trade fair",
    ]);
    let csv = env.write("in2.csv", "email\njoe@example.org\n");
    env.ok(&[
        "subscriber",
        "import",
        "--account",
        "acme",
        csv.to_str().unwrap(),
    ]);
    for (who, want) in [
        ("hal", json!(["import"])),
        ("ivy", json!(["import"])),
        ("joe", json!([])),
    ] {
        let x: Value = serde_json::from_str(&env.ok(&[
            "subscriber",
            "export",
            "--account",
            "acme",
            &format!("{who}@example.org"),
        ]))
        .unwrap();
        let sources: Vec<&Value> = x["consents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| &c["source"])
            .collect();
        assert_eq!(json!(sources), want, "{who}: {x}");
        if who != "joe" {
            assert_eq!(x["consents"][0]["basis"], "trade fair", "{who}: {x}");
        }
    }
}

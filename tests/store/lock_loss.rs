//! Issue 37 F1: nothing `serve --worker` does in-process may drop SQLite's POSIX locks on the
//! database. After every route of the server (API, pages, dashboard with doctor on its
//! Settings page, ops), and after `doctor` and `backup` run beside it, a separate process
//! (Python's `sqlite3`) opens and closes the file as an operator would: if the server had lost
//! its locks, that close would checkpoint and delete `-wal` and `-shm` under it, and from then
//! on the server would see a database of its own. The test asserts the server holds no deleted
//! `-wal`/`-shm`, that both are still on disk, and at the end that an opt-out written by
//! another process is honoured by the server's next claim. Routes added later are walked with
//! no edit here.

use crate::common::dashboard::{create_operator, Admin, PASSWORD};
use crate::common::{client, rt, token, Env, Fake, Server};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const LATE: &str = "late.optout@acme-locks.example";

/// The database opened and closed by an SQLite we did not write, as `sqlite3 FILE 'PRAGMA
/// integrity_check'` would.
fn python_open_close(db: &Path) {
    let out = Command::new("python3")
        .args([
            "-c",
            "import sqlite3, sys\n\
             c = sqlite3.connect(sys.argv[1])\n\
             r = c.execute('PRAGMA integrity_check').fetchone()[0]\n\
             c.close()\n\
             assert r == 'ok', r",
        ])
        .arg(db)
        .output()
        .expect("run python3 (tests/run.sh puts its venv first on PATH)");
    assert!(
        out.status.success(),
        "python3 sqlite3: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What the server process has open of `db`'s side files that is no longer at its path.
fn deleted_sides(pid: u32, db: &Path) -> Vec<String> {
    let name = db.display().to_string();
    let mut bad = Vec::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd")).expect("read /proc/PID/fd") {
        let Ok(target) = std::fs::read_link(fd.expect("fd entry").path()) else {
            continue;
        };
        let t = target.display().to_string();
        if t.starts_with(&name) && t.ends_with("(deleted)") {
            bad.push(t);
        }
    }
    bad
}

/// After `what`: another process opens and closes the file; the server must still hold it.
fn assert_locks_kept(server: &Server, db: &Path, what: &str) {
    python_open_close(db);
    let deleted = deleted_sides(server.child.id(), db);
    assert!(
        deleted.is_empty(),
        "after {what}, another process's close deleted files the server still uses: {deleted:?} \
         (the server lost its SQLite locks)"
    );
    for side in ["-wal", "-shm"] {
        let p = format!("{}{side}", db.display());
        assert!(
            Path::new(&p).exists(),
            "after {what}: {p} is gone while the server has the database open"
        );
    }
}

fn json(env: &Env, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&env.ok(&all)).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn id_of(v: &Value) -> String {
    v["id"].as_i64().expect("an id").to_string()
}

/// Account acme with a list of two subscribers (one of them [`LATE`]), a draft campaign to
/// that list, a suppression, an admin and a token. Returns (campaign id, list id, subscriber id).
fn setup(env: &Env) -> (String, String, String) {
    env.ok(&["init"]);
    env.ok(&["account", "add", "acme"]);
    // An operator: the Settings page runs doctor only for one.
    create_operator(env, "acme", "ana");
    let list = id_of(&json(
        env,
        &["list", "create", "--account", "acme", "locks"],
    ));
    let mut subscriber = String::new();
    for email in ["first@acme-locks.example", LATE] {
        subscriber = id_of(&json(
            env,
            &[
                "subscriber",
                "add",
                "--account",
                "acme",
                "--email",
                email,
                "--list",
                &list,
            ],
        ));
    }
    let body = env.write("body.txt", "Hello\n");
    let campaign = id_of(&json(
        env,
        &[
            "campaign",
            "create",
            "--account",
            "acme",
            "--name",
            "Locks",
            "--channel",
            "email",
            "--from",
            "news@acme-locks.example",
            "--subject",
            "Hi",
            "--body-file",
            body.to_str().expect("utf-8 path"),
            "--list",
            &list,
        ],
    ));
    env.ok(&[
        "suppress",
        "add",
        "--account",
        "acme",
        "--channel",
        "email",
        "blocked@acme-locks.example",
    ]);
    (campaign, list, subscriber)
}

/// `path` with every `{param}` replaced: known ids where there are some, else a value that
/// reaches the handler (which then answers 404 or 400 after looking at the store).
fn substitute(path: &str, campaign: &str, list: &str, subscriber: &str) -> String {
    path.split('/')
        .map(
            |seg| match seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                Some("id") => campaign.to_string(),
                Some("list") => list.to_string(),
                Some("subscriber") => subscriber.to_string(),
                Some("account") => "acme".to_string(),
                Some("channel") => "email".to_string(),
                Some("address") => "blocked@acme-locks.example".to_string(),
                Some(_) => "1".to_string(),
                None => seg.to_string(),
            },
        )
        .collect::<Vec<_>>()
        .join("/")
}

/// Every GET route of the server, with the admin's session cookie and an admin token (each
/// route takes the one it understands), each followed by the lock check.
fn walk_every_get(server: &Server, env: &Env, admin: &Admin, ids: (&str, &str, &str)) -> usize {
    let bearer = token(env, "acme", "admin");
    let http = client();
    let rt = rt();
    let mut routes = sendonce::http::route_list();
    routes.extend(sendonce::http::dashboard::route_list());
    let mut walked = 0;
    for (method, path) in routes {
        if method != "GET" {
            continue;
        }
        let url = substitute(path, ids.0, ids.1, ids.2);
        let status = rt.block_on(async {
            http.get(server.url(&url))
                .header("cookie", &admin.cookie)
                .bearer_auth(&bearer)
                .send()
                .await
                .map(|r| r.status().as_u16())
                .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        });
        assert!(status < 500, "GET {url} answered {status}");
        assert_locks_kept(server, &env.db, &format!("GET {url} ({status})"));
        walked += 1;
    }
    walked
}

/// Writes through the server: an API message, a suppression and a subscriber, and a dashboard
/// form; each followed by the lock check.
fn writes_through_the_server(server: &Server, env: &Env, admin: &Admin) {
    let bearer = token(env, "acme", "admin");
    let http = client();
    let rt = rt();
    let posts: [(&str, Value); 3] = [
        (
            "/v1/messages",
            serde_json::json!({"to": "api@acme-locks.example",
                "from": "app@acme-locks.example", "subject": "Hi", "text": "Hello"}),
        ),
        (
            "/v1/suppressions",
            serde_json::json!({"channel": "email", "address": "api-blocked@acme-locks.example"}),
        ),
        (
            "/v1/subscribers",
            serde_json::json!({"email": "api-sub@acme-locks.example"}),
        ),
    ];
    for (path, body) in posts {
        let status = rt.block_on(async {
            http.post(server.url(path))
                .bearer_auth(&bearer)
                .header("idempotency-key", format!("locks-{path}"))
                .json(&body)
                .send()
                .await
                .map(|r| r.status().as_u16())
                .unwrap_or_else(|e| panic!("POST {path}: {e}"))
        });
        assert!(status < 300, "POST {path} answered {status}");
        assert_locks_kept(server, &env.db, &format!("POST {path}"));
    }
    let r = admin.post(
        "/admin/suppressions",
        &[
            ("address", "dash@acme-locks.example"),
            ("reason", "lock test"),
        ],
    );
    assert!(
        r.status < 400,
        "dashboard suppression: {} {}",
        r.status,
        r.body
    );
    assert_locks_kept(server, &env.db, "POST /admin/suppressions");
}

/// The campaign's rows by address, as the ledger has them.
fn send_states(env: &Env, campaign: &str) -> Vec<(String, String)> {
    let conn = env.sqlite();
    let mut st = conn
        .prepare(
            "SELECT coalesce(s.email_norm, ''), sends.status FROM sends
             JOIN subscribers s ON s.id = sends.subscriber_id WHERE sends.campaign_id = ?1
             ORDER BY 1",
        )
        .expect("prepare");
    let rows = st
        .query_map([campaign.parse::<i64>().expect("id")], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .expect("query")
        .collect::<Result<Vec<_>, _>>()
        .expect("rows");
    rows
}

#[test]
fn no_route_doctor_or_backup_drops_the_servers_sqlite_locks() {
    let env = Env::new();
    let (campaign, list, subscriber) = setup(&env);
    let fake = Fake::start(&env.path("fake.jsonl"), &[]);
    let spec = format!("webhook:{}", fake.url("/send"));
    let server = Server::start(&env, &["--worker", "--provider", spec.as_str()]);
    assert_locks_kept(&server, &env.db, "start");
    let admin = Admin::login(&server.base, "ana", PASSWORD);
    assert_locks_kept(&server, &env.db, "login");
    let settings = admin.get("/admin/settings");
    assert_eq!(settings.status, 200, "{}", settings.body);
    assert_locks_kept(
        &server,
        &env.db,
        "GET /admin/settings (doctor in the server)",
    );
    let walked = walk_every_get(&server, &env, &admin, (&campaign, &list, &subscriber));
    assert!(walked >= 20, "only {walked} GET routes walked");
    writes_through_the_server(&server, &env, &admin);
    env.ok(&["doctor"]);
    assert_locks_kept(&server, &env.db, "sendonce doctor beside the server");
    env.ok(&["backup", env.path("copy.db").to_str().expect("utf-8 path")]);
    assert_locks_kept(&server, &env.db, "sendonce backup beside the server");

    // An opt-out written by another process, then the campaign approved through the server:
    // its next claim must see the opt-out.
    env.ok(&[
        "suppress",
        "add",
        "--account",
        "acme",
        "--channel",
        "email",
        LATE,
    ]);
    let bearer = token(&env, "acme", "admin");
    let status = rt().block_on(async {
        client()
            .post(server.url(&format!("/v1/campaigns/{campaign}/approve")))
            .bearer_auth(&bearer)
            .send()
            .await
            .map(|r| r.status().as_u16())
            .expect("approve")
    });
    assert!(status < 300, "approve answered {status}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let states = loop {
        let s = send_states(&env, &campaign);
        if s.len() == 2 && s.iter().all(|(_, st)| st != "queued" && st != "leased") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "campaign not done in 30 s: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        states.contains(&(LATE.to_string(), "suppressed".to_string())),
        "the server did not honour an opt-out written by another process: {states:?}"
    );
    let sent_to_late = fake.lines().iter().filter(|l| l.to == LATE).count();
    assert_eq!(
        sent_to_late, 0,
        "the fake provider received mail for {LATE}"
    );
    assert_locks_kept(&server, &env.db, "the campaign");
}

//! The dashboard's sessions: admins made by `sendonce admin`, login through the form in a real
//! browser and over HTTP, cookies, CSRF, logout, rate limits. (Each group of pages has its own
//! file: dashboard_*.rs.)
// Some tests here need tools outside Rust (tier 1); without them their helpers go unused.
#![cfg_attr(not(feature = "tier1"), allow(unused_imports, dead_code))]

use crate::common::dashboard::{create_admin, scenario, Admin, PASSWORD};
use crate::common::{output_dir, Env, Server};
use serde_json::json;

fn setup() -> (Env, Server) {
    let env = Env::new();
    env.ok(&["init"]);
    env.ok(&["account", "add", "acme"]);
    create_admin(&env, "acme", "ana");
    let server = Server::start(&env, &[]);
    (env, server)
}

#[cfg(feature = "tier1")]
#[test]
fn an_admin_logs_in_with_the_keyboard_and_out_again() {
    let (_env, server) = setup();
    let out = output_dir("dashboard");
    let v = scenario(
        &server.base,
        &out,
        360,
        json!([
            {"goto": "/admin/campaigns"},
            {"expect_text": "sendonce dashboard"},
            {"screenshot": "login-360"},
            {"no_overflow": true},
            {"login": ["ana", PASSWORD]},
            {"expect_text": "Campaigns"},
            {"expect_text": "ana"},
            {"no_overflow": true},
            {"click": "Log out", "keyboard": true},
            {"expect_text": "sendonce dashboard"},
            {"goto": "/admin/campaigns"},
            {"expect_text": "Log in"},
        ]),
    );
    assert_eq!(v["statuses"][0], 200);
    crate::common::assert_png(&out.join("login-360.png"), 2000, None);
}

#[test]
fn sessions_cookies_and_refusals() {
    let (_env, server) = setup();
    let anon = Admin::anonymous(&server.base);
    let r = anon.get("/admin/campaigns?status=sent");
    assert_eq!(r.status, 303);
    assert_eq!(
        r.location(),
        Some("/admin/login?next=%2Fadmin%2Fcampaigns%3Fstatus%3Dsent")
    );
    let wrong = anon.try_login("ana", "not the password at all");
    assert_eq!(wrong.status, 401, "{}", wrong.body);
    assert!(wrong.body.contains("Wrong name or password"));
    let nobody = anon.try_login("bo", PASSWORD);
    assert_eq!(nobody.status, 401);
    let ok = anon.try_login("ana", PASSWORD);
    assert_eq!(ok.status, 303);
    let cookie = ok
        .headers
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .find(|c| c.starts_with("sendonce_session="))
        .unwrap();
    for part in ["HttpOnly", "SameSite=Strict", "Path=/admin"] {
        assert!(cookie.contains(part), "{cookie}");
    }
    assert!(!cookie.contains("Secure"), "plain HTTP: {cookie}");
    let a = Admin::login(&server.base, "ana", PASSWORD);
    // The logout form without its CSRF token: refused, the session lives on.
    assert_eq!(a.post_raw("/admin/logout", &[]).status, 403);
    assert_eq!(a.get("/admin/campaigns").status, 200);
    assert_eq!(a.post("/admin/logout", &[]).status, 303);
    assert_eq!(a.get("/admin/campaigns").status, 303);
}

// ---- Admins and sessions: the password's storage, the CLI, limits, cookies, next= ----------

use crate::common::dashboard::{bin, Answer};
use std::io::Write;
use std::process::{Command, Stdio};

/// `sendonce serve` with its stderr (the log, at debug level) kept in `log`.
fn serve_logged(env: &Env, log: &std::path::Path) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = Command::new(bin())
        .arg("--db")
        .arg(&env.db)
        .args(["-vv", "serve", "--listen", "127.0.0.1:0"])
        .env_remove("SENDONCE_PROVIDER")
        .env_remove("SENDONCE_ADMIN_PASSWORD")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let base = first
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_string();
    (child, base)
}

/// Every file of the database (main, -wal, -shm) as bytes.
fn database_bytes(env: &Env) -> Vec<u8> {
    let mut all = Vec::new();
    for suffix in ["", "-wal", "-shm"] {
        let p = format!("{}{suffix}", env.db.display());
        if let Ok(b) = std::fs::read(&p) {
            all.extend(b);
        }
    }
    all
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[cfg(feature = "tier1")]
#[test]
fn the_password_is_kept_as_argon2id_and_shown_nowhere() {
    let (env, _server) = setup();
    // --password-stdin: while the command waits for its line, `ps` (its command line) holds no
    // password; the admin made that way logs in.
    let mut child = env
        .cmd()
        .args([
            "admin",
            "create",
            "--account",
            "acme",
            "--name",
            "al",
            "--password-stdin",
        ])
        .env_remove("SENDONCE_ADMIN_PASSWORD")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", child.id())).unwrap();
    let stdin_password = "stdin password of al 42";
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{stdin_password}\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!contains(&cmdline, stdin_password) && !contains(&cmdline, PASSWORD));
    for printed in [&out.stdout, &out.stderr] {
        assert!(!contains(printed, stdin_password));
    }

    let log = env.path("serve.log");
    let (mut serve, base) = serve_logged(&env, &log);
    Admin::login(&base, "al", stdin_password);
    let a = Admin::login(&base, "ana", PASSWORD);
    assert_eq!(
        Admin::anonymous(&base)
            .try_login("ana", "wrong password here")
            .status,
        401
    );
    assert_eq!(a.post("/admin/logout", &[]).status, 303);
    let _ = serve.kill();
    let _ = serve.wait();
    let logged = std::fs::read(&log).unwrap();
    assert!(
        contains(&logged, "dashboard login"),
        "the log is read: {}",
        logged.len()
    );
    for secret in [PASSWORD, stdin_password, "wrong password here"] {
        assert!(
            !contains(&logged, secret),
            "the server log holds a password"
        );
        assert!(
            !contains(&database_bytes(&env), secret),
            "the database holds a password"
        );
    }

    // The stored hashes verify with an independent implementation (argon2-cffi).
    let script = r#"
import argon2, sqlite3, sys
db, name, good = sys.argv[1], sys.argv[2], sys.argv[3]
(h,) = sqlite3.connect(db).execute("SELECT password_hash FROM admins WHERE name = ?", (name,)).fetchone()
assert h.startswith("$argon2id$"), h
ph = argon2.PasswordHasher()
assert ph.verify(h, good)
try:
    ph.verify(h, good + "x")
    sys.exit("a wrong password verified")
except argon2.exceptions.VerifyMismatchError:
    pass
print("verified")
"#;
    for (name, good) in [("ana", PASSWORD), ("al", stdin_password)] {
        let out = Command::new("python3")
            .args(["-c", script])
            .arg(&env.db)
            .args([name, good])
            .output()
            .expect("python3 (run the tests with tests/run.sh)");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "verified",
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn admins_json(env: &Env) -> serde_json::Value {
    serde_json::from_str(&env.ok(&["--json", "admin", "list"])).unwrap()
}

#[test]
fn admin_create_refuses_bad_input_and_writes_nothing() {
    let env = Env::new();
    env.ok(&["init"]);
    env.ok(&["account", "add", "acme"]);
    create_admin(&env, "acme", "ana");
    let before = admins_json(&env);
    let create = |account: &str, name: &str, password: &str| {
        let out = env
            .cmd()
            .args(["admin", "create", "--account", account, "--name", name])
            .env("SENDONCE_ADMIN_PASSWORD", password)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for (account, name, password, code, says) in [
        ("acme", "al", "short pass", 2, "shorter than 12 characters"),
        ("nope", "al", PASSWORD, 2, "nope"),
        ("acme", "ana", PASSWORD, 1, "an admin named \"ana\" exists"),
        ("acme", "a l", PASSWORD, 2, "contains a space"),
    ] {
        let (got, stderr) = create(account, name, password);
        assert_eq!(got, Some(code), "{account} {name}: {stderr}");
        assert!(stderr.contains(says), "{account} {name}: {stderr}");
        assert!(
            !stderr.contains(password),
            "the password was printed: {stderr}"
        );
    }
    // No password at all (no env, no terminal): refused.
    let out = env
        .cmd()
        .args(["admin", "create", "--account", "acme", "--name", "al"])
        .env_remove("SENDONCE_ADMIN_PASSWORD")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no password"));
    assert_eq!(admins_json(&env), before);
    assert_eq!(before["admins"].as_array().unwrap().len(), 1);
    assert_eq!(before["admins"][0]["name"], "ana");
    assert!(before["admins"][0].get("password_hash").is_none());
}

#[test]
fn a_new_password_or_a_removal_ends_live_sessions() {
    let (env, server) = setup();
    create_admin(&env, "acme", "al");
    let ana = Admin::login(&server.base, "ana", PASSWORD);
    let al = Admin::login(&server.base, "al", PASSWORD);
    let new_password = "a brand new password 2026";
    let out = env
        .cmd()
        .args(["admin", "password", "ana"])
        .env("SENDONCE_ADMIN_PASSWORD", new_password)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = ana.get("/admin/campaigns");
    assert_eq!(r.status, 303);
    assert!(r.location().unwrap().starts_with("/admin/login"));
    assert_eq!(
        al.get("/admin/campaigns").status,
        200,
        "al's session is not ana's"
    );
    let anon = Admin::anonymous(&server.base);
    assert_eq!(anon.try_login("ana", PASSWORD).status, 401);
    Admin::login(&server.base, "ana", new_password);

    assert_eq!(env.run(&["admin", "remove", "al"]).code, 0);
    let r = al.get("/admin/campaigns");
    assert_eq!(r.status, 303);
    assert!(r.location().unwrap().starts_with("/admin/login"));
    assert_eq!(anon.try_login("al", PASSWORD).status, 401);
    let list = admins_json(&env);
    let al_row = list["admins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "al")
        .unwrap();
    assert!(al_row["removed_at"].is_string(), "{list}");
    assert_eq!(env.run(&["admin", "remove", "al"]).code, 2, "removed twice");
    let again = env
        .cmd()
        .args(["admin", "create", "--account", "acme", "--name", "al"])
        .env("SENDONCE_ADMIN_PASSWORD", PASSWORD)
        .output()
        .unwrap();
    assert_eq!(
        again.status.code(),
        Some(1),
        "a removed admin's name is not reused"
    );
}

#[test]
fn logins_are_limited_per_admin_and_per_client_address() {
    use sendonce::app::admins::LOGIN_BURST;
    use sendonce::http::dashboard::login::{LOGIN_BURST_PER_CLIENT, LOGIN_PER_MINUTE_PER_CLIENT};
    let (_env, server) = setup();
    let anon = Admin::anonymous(&server.base);
    for i in 0..LOGIN_BURST {
        assert_eq!(
            anon.try_login("ana", "not her password").status,
            401,
            "attempt {i}"
        );
    }
    let r = anon.try_login("ana", PASSWORD);
    assert_eq!(
        r.status, 429,
        "the right password after the burst: {}",
        r.body
    );
    assert!(r.body.contains("Too many login attempts"), "{}", r.body);
    assert!(r
        .headers
        .get_all("set-cookie")
        .iter()
        .all(|c| !c.to_str().unwrap().starts_with("sendonce_session=")));
    // Per client address: names nobody has (no per-admin bucket) from one address. The
    // limiter refills LOGIN_PER_MINUTE_PER_CLIENT a minute: a slow machine gets a few more.
    let started = std::time::Instant::now();
    let mut attempts = LOGIN_BURST + 1;
    let refused = loop {
        let r = anon.try_login(&format!("nobody{attempts}"), PASSWORD);
        attempts += 1;
        if r.status != 401 {
            break r;
        }
        assert!(attempts < 10 * LOGIN_BURST_PER_CLIENT, "never limited");
    };
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert!(
        refused.body.contains("Too many attempts from here"),
        "{}",
        refused.body
    );
    let refills = started.elapsed().as_secs() as u32 * LOGIN_PER_MINUTE_PER_CLIENT / 60 + 1;
    assert!(
        attempts > LOGIN_BURST_PER_CLIENT && attempts <= LOGIN_BURST_PER_CLIENT + 1 + refills,
        "limited at attempt {attempts}"
    );
}

/// A login through the form with extra request headers and fields; `nonce`: send the form's
/// nonce cookie and field.
fn raw_login(base: &str, headers: &[(&str, &str)], fields: &[(&str, &str)], nonce: bool) -> Answer {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    crate::common::rt().block_on(async {
        let mut get = client.get(format!("{base}/admin/login"));
        for (k, v) in headers {
            get = get.header(*k, *v);
        }
        let form = get.send().await.unwrap();
        let set: Vec<String> = form
            .headers()
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect();
        let body = form.text().await.unwrap();
        let mut all: Vec<(&str, String)> =
            fields.iter().map(|(k, v)| (*k, v.to_string())).collect();
        let mut post = client.post(format!("{base}/admin/login"));
        if nonce {
            let marker = "name=\"nonce\" value=\"";
            let start = body.find(marker).unwrap() + marker.len();
            let end = start + body[start..].find('"').unwrap();
            all.push(("nonce", body[start..end].to_string()));
            let c = set
                .iter()
                .find(|c| c.starts_with("sendonce_login="))
                .unwrap();
            post = post.header("cookie", c.split(';').next().unwrap());
        }
        for (k, v) in headers {
            post = post.header(*k, *v);
        }
        let body: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(&all)
            .finish();
        let res = post
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .unwrap();
        let mut headers = res.headers().clone();
        for c in &set {
            headers.append("x-form-set-cookie", c.parse().unwrap());
        }
        Answer {
            status: res.status().as_u16(),
            headers,
            body: res.text().await.unwrap_or_default(),
        }
    })
}

fn session_cookie(a: &Answer) -> Option<String> {
    a.headers
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .find(|c| c.starts_with("sendonce_session=") && !c.starts_with("sendonce_session=;"))
}

/// Issue 37: `next=/admin/../../u/x` led out of the dashboard after login. Dot segments (and
/// `%2e` dots) are resolved as a browser resolves them before `next` must be inside /admin/.
#[test]
fn next_with_dot_segments_stays_in_the_dashboard() {
    let (env, server) = setup();
    for (i, (next, to)) in [
        ("/admin/../../u/x", "/admin/campaigns"),
        ("/admin/%2e%2e/u/x", "/admin/campaigns"),
        ("/admin/.%2E/%2e./u/x", "/admin/campaigns"),
        ("/admin/..\\u/x", "/admin/campaigns"),
        ("/admin/..%2Fu/x", "/admin/campaigns"),
        ("/admin//evil.example/", "/admin/campaigns"),
        ("http://127.0.0.1/admin/", "/admin/campaigns"),
        ("/admin/lists/../campaigns?q=a", "/admin/campaigns?q=a"),
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("d{i}");
        create_admin(&env, "acme", &name);
        let fields = [
            ("name", name.as_str()),
            ("password", PASSWORD),
            ("next", next),
        ];
        let r = raw_login(&server.base, &[], &fields, true);
        assert_eq!(r.status, 303, "{next}: {}", r.body);
        assert_eq!(r.location(), Some(to), "next={next}");
    }
}

#[test]
fn cookies_csrf_of_the_login_form_and_next() {
    let (env, server) = setup();
    let creds = [("name", "ana"), ("password", PASSWORD)];
    // Behind a proxy that speaks HTTPS: Secure on both cookies.
    let https = raw_login(
        &server.base,
        &[("x-forwarded-proto", "https")],
        &creds,
        true,
    );
    assert_eq!(https.status, 303, "{}", https.body);
    let c = session_cookie(&https).expect("a session cookie");
    assert!(c.contains("; Secure") && c.contains("HttpOnly"), "{c}");
    let nonce = https
        .headers
        .get("x-form-set-cookie")
        .unwrap()
        .to_str()
        .unwrap();
    assert!(nonce.contains("; Secure"), "{nonce}");
    let plain = raw_login(&server.base, &[], &creds, true);
    assert!(!session_cookie(&plain).unwrap().contains("Secure"));
    // Without the nonce (cookie and field), or from another site: 403, no session.
    for (headers, with_nonce) in [
        (&[][..], false),
        (&[("origin", "http://evil.example")][..], true),
        (&[("sec-fetch-site", "cross-site")][..], true),
    ] {
        let r = raw_login(&server.base, headers, &creds, with_nonce);
        assert_eq!(r.status, 403, "{headers:?}: {}", r.body);
        assert!(session_cookie(&r).is_none(), "{headers:?}");
    }
    // next= leads to a dashboard page, never off it.
    for (i, (next, to)) in [
        (
            "/admin/campaigns?status=sent",
            "/admin/campaigns?status=sent",
        ),
        ("https://evil.example/admin/", "/admin/campaigns"),
        ("//evil.example/admin/", "/admin/campaigns"),
        ("/\\evil.example", "/admin/campaigns"),
        ("/admin/\\evil.example", "/admin/campaigns"),
        ("javascript:alert(1)", "/admin/campaigns"),
        ("/u/unsubscribe", "/admin/campaigns"),
    ]
    .into_iter()
    .enumerate()
    {
        // One admin per login: the per-admin limit allows LOGIN_BURST at once.
        let name = format!("n{i}");
        create_admin(&env, "acme", &name);
        let fields = [
            ("name", name.as_str()),
            ("password", PASSWORD),
            ("next", next),
        ];
        let r = raw_login(&server.base, &[], &fields, true);
        assert_eq!(r.status, 303, "{next}");
        assert_eq!(r.location(), Some(to), "next={next}");
    }
    // The next of the login form itself is checked the same way.
    let anon = Admin::anonymous(&server.base);
    let form = anon.get("/admin/login?next=https%3A%2F%2Fevil.example%2F");
    assert!(!form.body.contains("evil.example"), "{}", form.body);
}

//! Dashboard test helpers: make an admin, log in over HTTP and post forms with or without the
//! CSRF token (`Admin`), and run a browser scenario through tests/support/dashboard.py.

use super::{Env, BIN};
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Stdio};

/// A password every test admin gets (at least 12 characters).
pub const PASSWORD: &str = "correct horse battery staple";

/// `sendonce admin create --account ACCOUNT --name NAME` with [`PASSWORD`].
pub fn create_admin(env: &Env, account: &str, name: &str) {
    create_admin_with(env, account, name, &[]);
}

/// [`create_admin`] with `--operator`: it also sees the server-wide settings.
pub fn create_operator(env: &Env, account: &str, name: &str) {
    create_admin_with(env, account, name, &["--operator"]);
}

fn create_admin_with(env: &Env, account: &str, name: &str, extra: &[&str]) {
    let out = env
        .cmd()
        .args(["admin", "create", "--account", account, "--name", name])
        .args(extra)
        .env("SENDONCE_ADMIN_PASSWORD", PASSWORD)
        .output()
        .expect("run sendonce admin create");
    assert!(
        out.status.success(),
        "admin create: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One HTTP answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Answer {
    /// The `Location` header (redirects are not followed).
    pub fn location(&self) -> Option<&str> {
        self.headers.get("location").and_then(|v| v.to_str().ok())
    }
}

/// A logged-in admin talking HTTP to `sendonce serve` (no redirect followed, cookies by hand).
pub struct Admin {
    rt: tokio::runtime::Runtime,
    client: reqwest::Client,
    pub base: String,
    /// `sendonce_session=...`.
    pub cookie: String,
    pub csrf: String,
}

fn value_after(body: &str, marker: &str) -> Option<String> {
    let start = body.find(marker)? + marker.len();
    let end = body[start..].find('"')?;
    Some(body[start..start + end].to_string())
}

fn set_cookie(h: &reqwest::header::HeaderMap, name: &str) -> Option<String> {
    h.get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .map(|v| v.split(';').next().unwrap_or("").to_string())
}

impl Admin {
    /// Log in as `name` with `password` through the login form; panics when refused.
    pub fn login(base: &str, name: &str, password: &str) -> Admin {
        let mut a = Admin::anonymous(base);
        let ans = a.try_login(name, password);
        assert_eq!(ans.status, 303, "login as {name}: {}", ans.body);
        a.cookie = set_cookie(&ans.headers, "sendonce_session").expect("a session cookie");
        let page = a.get("/admin/campaigns");
        assert_eq!(page.status, 200, "{}", page.body);
        a.csrf = value_after(&page.body, "name=\"csrf\" value=\"").expect("a csrf field");
        a
    }

    /// A client with no session.
    pub fn anonymous(base: &str) -> Admin {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Admin {
            rt: super::rt(),
            client: reqwest::Client::builder()
                .no_proxy()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            base: base.trim_end_matches('/').to_string(),
            cookie: String::new(),
            csrf: String::new(),
        }
    }

    /// One login attempt through the form (nonce cookie and field included); the answer.
    pub fn try_login(&self, name: &str, password: &str) -> Answer {
        let form = self.get("/admin/login");
        let nonce_cookie = set_cookie(&form.headers, "sendonce_login").expect("a nonce cookie");
        let nonce = value_after(&form.body, "name=\"nonce\" value=\"").expect("a nonce field");
        self.send(
            reqwest::Method::POST,
            "/admin/login",
            Some(&nonce_cookie),
            &[("name", name), ("password", password), ("nonce", &nonce)],
        )
    }

    pub fn get(&self, path: &str) -> Answer {
        self.send(reqwest::Method::GET, path, None, &[])
    }

    /// POST `fields` with this session's CSRF token added.
    pub fn post(&self, path: &str, fields: &[(&str, &str)]) -> Answer {
        let mut all = fields.to_vec();
        all.push(("csrf", &self.csrf));
        self.send(reqwest::Method::POST, path, None, &all)
    }

    /// POST `fields` as they are (a forged form: no CSRF token unless the fields have one).
    pub fn post_raw(&self, path: &str, fields: &[(&str, &str)]) -> Answer {
        self.send(reqwest::Method::POST, path, None, fields)
    }

    fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        cookie: Option<&str>,
        fields: &[(&str, &str)],
    ) -> Answer {
        let mut req = self
            .client
            .request(method.clone(), format!("{}{path}", self.base));
        let cookie = cookie
            .map(str::to_string)
            .unwrap_or_else(|| self.cookie.clone());
        if !cookie.is_empty() {
            req = req.header("cookie", cookie);
        }
        if method == reqwest::Method::POST {
            let body: String = form_urlencoded::Serializer::new(String::new())
                .extend_pairs(fields)
                .finish();
            req = req
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body);
        }
        self.rt.block_on(async {
            let res = req.send().await.expect("request");
            let status = res.status().as_u16();
            let headers = res.headers().clone();
            let body = res.text().await.unwrap_or_default();
            Answer {
                status,
                headers,
                body,
            }
        })
    }
}

/// Run a browser scenario (see tests/support/dashboard.py) against `base`, screenshots into
/// `out`; its JSON output. Panics with the driver's message when a step fails.
pub fn scenario(base: &str, out: &Path, width: u32, steps: Value) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/dashboard.py");
    let doc = json!({"base": base, "out": out, "width": width, "steps": steps});
    let mut child = Command::new("python3")
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run python3 tests/support/dashboard.py (run the tests with tests/run.sh)");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(doc.to_string().as_bytes())
            .expect("write the scenario");
    }
    let out = child.wait_with_output().expect("wait for dashboard.py");
    assert!(
        out.status.success(),
        "dashboard.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("dashboard.py prints JSON");
    assert!(
        v["console_errors"].as_array().is_none_or(|a| a.is_empty()),
        "the browser's console had errors: {}",
        v["console_errors"]
    );
    v
}

/// The binary's path (for tests that start their own commands).
pub fn bin() -> &'static str {
    BIN
}

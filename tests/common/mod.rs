//! Shared test helpers: a temp dir with a database, and running the real binary.
#![allow(dead_code)]

pub mod dashboard;
pub mod pg;

use serde_json::Value;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub const BIN: &str = env!("CARGO_BIN_EXE_sendonce");
/// The public URL `Env::cmd` gives every command (nothing listens there).
pub const TEST_PUBLIC_URL: &str = "http://127.0.0.1:9/";
/// The unsubscribe-link secret `Env::cmd` gives every command.
pub const TEST_UNSUBSCRIBE_SECRET: &str = "sendonce-tests-fixed-unsubscribe-secret";

/// A temporary directory with a database path inside it.
pub struct Env {
    pub dir: tempfile::TempDir,
    pub db: PathBuf,
}

impl Env {
    pub fn new() -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("t.db");
        Env { dir, db }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn cmd(&self) -> Command {
        let mut c = Command::new(BIN);
        c.arg("--db").arg(&self.db).env_remove("SENDONCE_DB");
        c.env_remove("SENDONCE_CRASH_AT");
        // An email campaign that is not transactional is approved (and sent) only with a
        // public unsubscribe URL: a fixed one (nothing listens on port 9) and a fixed secret.
        // A test of the refusal removes them (`env_remove`).
        c.env("SENDONCE_PUBLIC_URL", TEST_PUBLIC_URL)
            .env("SENDONCE_UNSUBSCRIBE_SECRET", TEST_UNSUBSCRIBE_SECRET)
            .env_remove("SENDONCE_UNSUBSCRIBE_OLD_SECRETS");
        c
    }

    /// Run the binary with these arguments.
    pub fn run(&self, args: &[&str]) -> Run {
        let out = self.cmd().args(args).output().expect("run sendonce");
        Run::from(out)
    }

    /// Run and require exit 0; returns trimmed stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let r = self.run(args);
        assert_eq!(
            r.code, 0,
            "sendonce {args:?} failed: {}\n{}",
            r.stderr, r.stdout
        );
        r.stdout.trim().to_string()
    }

    pub fn write(&self, name: &str, content: impl AsRef<[u8]>) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, content).expect("write file");
        p
    }

    /// `subscriber import --account ACCT FILE`, required to succeed; returns trimmed stdout.
    pub fn import_csv(&self, acct: &str, csv: &Path) -> String {
        self.ok(&[
            "subscriber",
            "import",
            "--account",
            acct,
            csv.to_str().unwrap(),
        ])
    }

    /// init + an account; returns the account id. Its SMS quiet hours are off: the tests run
    /// at any hour, and a test SMS campaign would otherwise wait for its recipients' morning
    /// (`core::windows` tests the quiet hours, giving them explicitly).
    pub fn setup_account(&self) -> String {
        self.ok(&["init"]);
        let id = self.ok(&["account", "add", "acme"]);
        self.ok(&["account", "update", &id, "--sms-hours", "off"]);
        id
    }

    /// An account with `n` confirmed email subscribers imported from CSV, and an approved-ready
    /// draft campaign. Returns (account, campaign).
    pub fn setup_campaign(&self, n: usize) -> (String, String) {
        let acct = self.setup_account();
        let mut csv = String::from("email,name\n");
        for i in 0..n {
            csv.push_str(&format!("user{i}@example.com,User {i}\n"));
        }
        let f = self.write("subs.csv", csv);
        self.import_csv(&acct, &f);
        let body = self.write("body.txt", "Hello {{ name }}\n");
        let cid = self.ok(&[
            "campaign",
            "create",
            "--account",
            &acct,
            "--name",
            "c",
            "--channel",
            "email",
            "--from",
            "news@example.org",
            "--subject",
            "Hi {{ name }}",
            "--body-file",
            body.to_str().unwrap(),
        ]);
        (acct, cid)
    }

    pub fn sqlite(&self) -> rusqlite::Connection {
        let c = rusqlite::Connection::open(&self.db).expect("open db");
        c.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
        c
    }

    pub fn count(&self, sql: &str) -> i64 {
        self.sqlite().query_row(sql, [], |r| r.get(0)).expect(sql)
    }

    /// The counters the dashboard reads instead of counting (`campaign_counts` of 0014,
    /// `list_counts` of 0015, both kept by triggers) equal a full count of the rows.
    pub fn assert_counters(&self) {
        assert_counters(&self.db);
    }
}

/// See [`Env::assert_counters`]; for a database file that is not an `Env`'s.
pub fn assert_counters(db: &Path) {
    let c = rusqlite::Connection::open(db).expect("open db");
    c.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    let rows = |sql: &str| -> Vec<(i64, String, i64)> {
        let mut st = c.prepare(sql).expect(sql);
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    };
    assert_eq!(
        rows("SELECT campaign_id, status, n FROM campaign_counts WHERE n <> 0 ORDER BY 1, 2"),
        rows("SELECT campaign_id, status, count(*) FROM sends GROUP BY 1, 2 ORDER BY 1, 2"),
        "campaign_counts disagrees with the sends"
    );
    assert_eq!(
        rows("SELECT list_id, status, n FROM list_counts WHERE n <> 0 ORDER BY 1, 2"),
        rows("SELECT list_id, status, count(*) FROM list_members GROUP BY 1, 2 ORDER BY 1, 2"),
        "list_counts disagrees with the memberships"
    );
    let negative: i64 = c
        .query_row(
            "SELECT (SELECT count(*) FROM campaign_counts WHERE n < 0)
                  + (SELECT count(*) FROM list_counts WHERE n < 0)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(negative, 0, "a counter went below zero");
}

/// Through the store's API only: an account with `n` email subscribers (`u0@x.com`, …) and a
/// campaign approved and started (`sending`), its list not built yet. Returns (account,
/// campaign).
pub fn started_campaign(
    s: &(impl sendonce::store::Audience + sendonce::store::Campaigns + sendonce::store::Ledger),
    n: usize,
) -> (i64, i64) {
    let acct = s.add_account("t").unwrap();
    let rows = (0..n)
        .map(|i| {
            let email = format!("u{i}@x.com");
            let sub = sendonce::app::import::subscriber(Some(&email), None, None, None, &[]);
            (i as u64 + 2, sub)
        })
        .collect();
    s.import_subscribers(acct, rows, false, &[]).unwrap();
    let cid = s
        .create_campaign(&sendonce::store::NewCampaign {
            account_id: acct,
            name: "c",
            channel: sendonce::domain::address::Channel::Email,
            sender: None,
            subject: Some("s"),
            body: "b",
            html: None,
            reply_to: None,
            filter: None,
            sms_footer: None,
            lists: &[],
            transactional: false,
            windows: &Default::default(),
        })
        .unwrap();
    s.approve_campaign(cid, 0).unwrap();
    let started = s.start_due_campaigns(sendonce::domain::clock::now_ms());
    assert_eq!(started.unwrap(), vec![cid]);
    (acct, cid)
}

/// `Ledger::cycle` with at most one claim (its batch the whole budget) and that claim's result:
/// how the store tests that predate the turn's many claims call it.
pub trait CycleOne {
    fn cycle_one(
        &self,
        records: &[sendonce::store::Record],
        claim: Option<&sendonce::store::ClaimRequest>,
        now: i64,
    ) -> sendonce::domain::error::Result<(sendonce::store::RecordStats, sendonce::store::Claimed)>;
}

impl<L: sendonce::store::Ledger + ?Sized> CycleOne for L {
    fn cycle_one(
        &self,
        records: &[sendonce::store::Record],
        claim: Option<&sendonce::store::ClaimRequest>,
        now: i64,
    ) -> sendonce::domain::error::Result<(sendonce::store::RecordStats, sendonce::store::Claimed)>
    {
        let claims: Vec<_> = claim.into_iter().cloned().collect();
        let budget = claim.map_or(0, |r| r.batch);
        let (stats, got) = self.cycle(records, &claims, &[0], budget, now)?;
        Ok((stats, got.into_iter().next().unwrap_or_default()))
    }
}

/// The provider accepted the call for row `id` (held with `token`); provider id `p<id>`.
pub fn accepted(id: i64, token: i64) -> sendonce::store::Record {
    sendonce::store::Record {
        id,
        token,
        outcome: sendonce::store::Outcome::Accepted {
            provider_id: Some(format!("p{id}")),
            note: None,
        },
    }
}

#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Run {
        Run {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

/// Non-replay lines of a delivery log, per job id.
pub fn deliveries(path: &Path) -> std::collections::HashMap<String, usize> {
    let mut m = std::collections::HashMap::new();
    if !path.exists() {
        return m;
    }
    for l in sendonce::provider::deliverylog::read_lines(path).unwrap() {
        if !l.replay {
            *m.entry(l.job_id).or_insert(0) += 1;
        }
    }
    m
}

/// A `sendonce fake-provider` process on 127.0.0.1 (any free port); stopped on drop with
/// SIGTERM (it finishes in-flight requests; every accepted request is already fsynced), killed
/// if it has not exited 10 s later.
pub struct Fake {
    pub child: std::process::Child,
    pub addr: std::net::SocketAddr,
    /// The delivery log.
    pub log: PathBuf,
    /// The SMTP listener's address, when started with `--smtp`.
    pub smtp: Option<std::net::SocketAddr>,
}

impl Fake {
    /// Start it with the delivery log `log` and extra flags (`--no-idempotent`, `--latency`...).
    pub fn start(log: &Path, extra: &[&str]) -> Fake {
        Fake::start_with_env(log, extra, &[])
    }

    /// [`Fake::start`] with environment variables (`SENDONCE_FAKE_AWS_KEY`...).
    pub fn start_with_env(log: &Path, extra: &[&str], vars: &[(&str, &str)]) -> Fake {
        use std::io::BufRead;
        let mut child = Command::new(BIN)
            .args(["fake-provider", "--listen", "127.0.0.1:0", "--log"])
            .arg(log)
            .args(extra)
            .envs(vars.iter().copied())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("spawn sendonce fake-provider");
        // `listening on ADDR`, then with --smtp `smtp listening on ADDR`.
        let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = |prefix: &str| -> std::net::SocketAddr {
            let mut l = String::new();
            out.read_line(&mut l).expect("read an address line");
            l.trim()
                .strip_prefix(prefix)
                .unwrap_or_else(|| panic!("expected {prefix:?}..., got {l:?}"))
                .parse()
                .expect("an address")
        };
        let addr = line("listening on ");
        let smtp = extra
            .contains(&"--smtp")
            .then(|| line("smtp listening on "));
        Fake {
            child,
            addr,
            log: log.to_path_buf(),
            smtp,
        }
    }

    /// `http://127.0.0.1:port`.
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base())
    }

    /// The delivery log's lines.
    pub fn lines(&self) -> Vec<sendonce::provider::deliverylog::DeliveryLine> {
        sendonce::provider::deliverylog::read_lines(&self.log).expect("read the delivery log")
    }

    /// SIGTERM, then wait up to 20 s for the exit.
    pub fn sigterm(&mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) on our own child, which has not been reaped yet.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                return s;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no exit 20 s after SIGTERM"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        // SAFETY: kill(2) on our own child, which has not been reaped yet.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port on 127.0.0.1 that nobody listens on (it was free a moment ago): connecting is refused.
pub fn refused_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A raw HTTP server on 127.0.0.1 answering every request with `response` (`None`: never
/// answer; `""`: close without a word). The requests it read (head and body) are kept for
/// inspection.
pub async fn raw_http_server(
    response: Option<String>,
) -> (std::net::SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let response = response.clone();
            let seen = seen2.clone();
            tokio::spawn(async move {
                let Some(request) = read_http_request(&mut s).await else {
                    return;
                };
                seen.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&request).into_owned());
                match response {
                    Some(r) => {
                        let _ = s.write_all(r.as_bytes()).await;
                        let _ = s.shutdown().await;
                    }
                    // Never answer (until the client gives up).
                    None => tokio::time::sleep(std::time::Duration::from_secs(30)).await,
                }
            });
        }
    });
    (addr, seen)
}

/// Read one request: the head and the body (Content-Length) before answering; `None` when the
/// client hangs up first.
async fn read_http_request(s: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let len = text[..end]
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                return Some(buf);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// `sendonce serve` as a real process, and an HTTP client for it (tests/http/serve.rs, api.rs,
// ops_http.rs).

/// A running `sendonce serve`; SIGKILLed on drop unless it was stopped.
pub struct Server {
    pub child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
}

impl Server {
    pub fn start(env: &Env, extra: &[&str]) -> Server {
        let mut args = vec!["--listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        Server::start_with(env, &args)
    }

    /// `sendonce serve ARGS` (no --listen added).
    pub fn start_with(env: &Env, args: &[&str]) -> Server {
        Server::start_with_env(env, args, &[])
    }

    /// `sendonce serve ARGS` with these environment variables set (no --listen added). Like
    /// `Env::cmd`, the server gets the test public URL and unsubscribe secret unless `vars`
    /// names them: a variable given as `""` is removed.
    pub fn start_with_env(env: &Env, args: &[&str], vars: &[(&str, &str)]) -> Server {
        let mut cmd = Command::new(BIN);
        cmd.arg("--db")
            .arg(&env.db)
            .arg("serve")
            .args(args)
            .env_remove("SENDONCE_PROVIDER")
            .env_remove("SENDONCE_LISTEN")
            .env_remove("SENDONCE_UNSUBSCRIBE_OLD_SECRETS")
            .env("SENDONCE_PUBLIC_URL", TEST_PUBLIC_URL)
            .env("SENDONCE_UNSUBSCRIBE_SECRET", TEST_UNSUBSCRIBE_SECRET);
        for (k, v) in vars {
            if v.is_empty() {
                cmd.env_remove(k);
            } else {
                cmd.env(k, v);
            }
        }
        Server::spawn(&mut cmd)
    }

    /// Spawn a prepared `sendonce serve` command and read its address from its first line.
    pub fn spawn(cmd: &mut Command) -> Server {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn sendonce serve");
        let mut first = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut first)
            .expect("read the address line");
        let base = first
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
            .to_string();
        Server { child, base }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// SIGTERM, then the exit status (within 20 s).
    pub fn sigterm(&mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) on our own child, not reaped yet.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                return s;
            }
            assert!(Instant::now() < deadline, "no exit 20 s after SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn client() -> reqwest::Client {
    // reqwest is built without a default crypto backend (see Cargo.toml).
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().no_proxy().build().unwrap()
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A token of `account` with `scope`.
pub fn token(env: &Env, account: &str, scope: &str) -> String {
    let out = env.ok(&[
        "--json",
        "token",
        "create",
        "--account",
        account,
        "--scope",
        scope,
    ]);
    let doc: Value = serde_json::from_str(&out).unwrap();
    doc["token"].as_str().unwrap().to_string()
}

/// The links `Env::cmd`'s commands make (`TEST_PUBLIC_URL`, `TEST_UNSUBSCRIBE_SECRET`), for a
/// worker run in the test's own process.
pub fn test_links() -> sendonce::domain::links::Links {
    use sendonce::domain::links::{Keys, Links, Secret};
    let secret = Secret::new(TEST_UNSUBSCRIBE_SECRET.as_bytes().to_vec()).unwrap();
    Links::new(TEST_PUBLIC_URL, Keys::new(secret)).unwrap()
}

/// Run tests/support/browser.py with `args`; its JSON output.
pub fn browser(args: &[&str]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/browser.py");
    let out = Command::new("python3")
        .arg(&script)
        .args(args)
        .output()
        .expect("run python3 tests/support/browser.py (run the tests with tests/run.sh)");
    assert!(
        out.status.success(),
        "browser.py {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("browser.py prints JSON")
}

/// A PNG of real content: the signature, at least `min_bytes`, and (when given) the width.
pub fn assert_png(path: &Path, min_bytes: usize, width: Option<u32>) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
        "{} is no PNG",
        path.display()
    );
    assert!(
        bytes.len() >= min_bytes,
        "{} is only {} bytes",
        path.display(),
        bytes.len()
    );
    if let Some(w) = width {
        // IHDR follows the signature and the chunk's length and type: width, big-endian.
        let got = u32::from_be_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]);
        assert_eq!(got, w, "{} width", path.display());
    }
}

/// Where a test module keeps what it shows people (screenshots):
/// `$CARGO_TARGET_DIR/test-output/NAME/`, created.
pub fn output_dir(name: &str) -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = tmp.parent().unwrap_or(tmp).join("test-output").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

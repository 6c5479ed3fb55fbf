//! Shared test helpers: a temp dir with a database, and running the real binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const BIN: &str = env!("CARGO_BIN_EXE_sendonce");

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

    /// init + an account; returns the account id.
    pub fn setup_account(&self) -> String {
        self.ok(&["init"]);
        self.ok(&["account", "add", "acme"])
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
        self.ok(&[
            "subscriber",
            "import",
            "--account",
            &acct,
            f.to_str().unwrap(),
        ]);
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
}

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
    for l in sendonce::deliverylog::read_lines(path).unwrap() {
        if !l.replay {
            *m.entry(l.job_id).or_insert(0) += 1;
        }
    }
    m
}

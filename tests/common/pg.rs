//! Throwaway PostgreSQL clusters for the PostgreSQL store's tests: `initdb` in a temporary
//! directory (as the `postgres` user when the tests run as root: the server refuses to run as
//! root), a server listening only on a Unix socket in that directory (no TCP port, so parallel
//! tests never collide), stopped (`pg_ctl stop -m immediate`) and removed on drop.
//!
//! A test never skips itself when PostgreSQL is missing: it fails saying how to install it
//! (`tests/run.sh` installs Debian's `postgresql` when run as root).
//!
//! `shared()` is one cluster for the whole test process (stopped at exit through `atexit`),
//! each caller getting its own database from `fresh_url()`; `PgCluster::start()` is a cluster
//! of one's own, for tests that stop or restart the server; `PgCluster::start_with` one run
//! inside a network namespace, listening on a TCP address there too, with extra pg_hba lines
//! (tests/crash/pg_crash.rs).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The port only names the socket file (`.s.PGSQL.<port>`) in the cluster's own directory.
const PORT: u16 = 5432;
/// The superuser initdb creates (trust authentication on the socket only).
const USER: &str = "sendonce";

pub struct PgCluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    as_postgres: bool,
    next_db: AtomicU64,
    /// The network namespace the server runs in (`ip netns exec`), if any.
    netns: Option<String>,
    /// `listen_addresses` (empty: the Unix socket only).
    listen: String,
    /// The port: names the socket file, and is the TCP port when `listen` is set.
    port: u16,
}

/// Where the server binaries are: `SENDONCE_PG_BIN`, else the newest
/// `/usr/lib/postgresql/<version>/bin` with an `initdb`.
fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SENDONCE_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    match found.pop() {
        Some((_, bin)) => bin,
        None => panic!(
            "the PostgreSQL store's tests need the PostgreSQL server binaries (initdb, pg_ctl) \
             and found none under /usr/lib/postgresql: install them with \
             `apt-get install postgresql` (tests/run.sh does when run as root), or point \
             SENDONCE_PG_BIN at their directory"
        ),
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn run(mut cmd: Command, what: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl PgCluster {
    /// initdb and start a new cluster (about a second).
    pub fn start() -> PgCluster {
        PgCluster::start_with(None, "", "")
    }

    /// `start`, with the server run inside network namespace `netns` (`ip netns exec`, so the
    /// server and its restarts live there), listening on TCP address(es) `listen` besides its
    /// Unix socket, and `extra_hba` appended to pg_hba.conf (e.g. `host all all NET/24
    /// scram-sha-256`).
    pub fn start_with(netns: Option<&str>, listen: &str, extra_hba: &str) -> PgCluster {
        PgCluster::start_on(netns, listen, PORT, extra_hba)
    }

    /// `start_with`, on TCP port `port` (a free one: the cluster is not in a namespace of its
    /// own, so it shares the host's ports).
    pub fn start_on(netns: Option<&str>, listen: &str, port: u16, extra_hba: &str) -> PgCluster {
        let bin = bin_dir();
        let as_postgres = is_root();
        let dir = tempfile::Builder::new()
            .prefix("sendonce-pg-")
            .tempdir()
            .expect("a temporary directory for the cluster");
        if as_postgres {
            let exists = Command::new("id").arg("-u").arg("postgres").output();
            if !exists.map(|o| o.status.success()).unwrap_or(false) {
                let mut add = Command::new("useradd");
                add.args(["-r", "-M", "-s", "/usr/sbin/nologin", "postgres"]);
                run(add, "useradd -r postgres");
            }
            let mut chown = Command::new("chown");
            chown.arg("postgres:").arg(dir.path());
            run(chown, "chown the cluster directory to postgres");
        }
        let c = PgCluster {
            dir,
            bin,
            as_postgres,
            next_db: AtomicU64::new(0),
            netns: netns.map(str::to_string),
            listen: listen.to_string(),
            port,
        };
        let mut initdb = c.server_cmd("initdb");
        initdb.arg("-D").arg(c.data()).args([
            "-A",
            "trust",
            "-U",
            USER,
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
        ]);
        run(initdb, "initdb");
        if !extra_hba.is_empty() {
            use std::io::Write;
            let hba = c.data().join("pg_hba.conf");
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&hba)
                .unwrap_or_else(|e| panic!("cannot open {}: {e}", hba.display()));
            writeln!(f, "{extra_hba}").expect("append to pg_hba.conf");
        }
        c.pg_ctl_start();
        c
    }

    /// A server binary, run as `postgres` when we are root.
    /// Inside the cluster's network namespace when it has one.
    fn server_cmd(&self, name: &str) -> Command {
        let exe = self.bin.join(name);
        let mut argv: Vec<std::ffi::OsString> = Vec::new();
        if let Some(ns) = &self.netns {
            argv.extend(["ip", "netns", "exec", ns.as_str()].map(Into::into));
        }
        if self.as_postgres {
            argv.extend(["runuser", "-u", "postgres", "--"].map(Into::into));
        }
        argv.push(exe.into_os_string());
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]);
        cmd
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The socket directory.
    pub fn socket_dir(&self) -> &Path {
        self.dir.path()
    }

    /// Start the server (again), waiting until it accepts connections.
    pub fn pg_ctl_start(&self) {
        let mut start = self.server_cmd("pg_ctl");
        start
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.dir.path().join("server.log"))
            .args(["-w", "-t", "60", "-o"])
            .arg(format!(
                "-p {} -k {} -c listen_addresses='{}' -c fsync=on",
                self.port,
                self.dir.path().display(),
                self.listen
            ))
            .arg("start");
        run(start, "pg_ctl start");
    }

    /// Stop the server: `mode` is `fast`, `smart` or `immediate` (a crash: no checkpoint).
    pub fn pg_ctl_stop(&self, mode: &str) {
        let mut stop = self.server_cmd("pg_ctl");
        stop.arg("-D")
            .arg(self.data())
            .args(["-w", "-t", "60", "-m", mode, "stop"]);
        run(stop, "pg_ctl stop");
    }

    /// The URL of database `db` on this cluster.
    pub fn url(&self, db: &str) -> String {
        format!(
            "postgres://{USER}@localhost/{db}?host={}&port={}",
            self.dir.path().display(),
            self.port
        )
    }

    /// The URL of database `db` on this cluster's Unix socket, as role `user`.
    pub fn url_as(&self, user: &str, db: &str) -> String {
        format!(
            "postgres://{user}@localhost/{db}?host={}&port={}",
            self.dir.path().display(),
            self.port
        )
    }

    /// The TCP port (inside the cluster's namespace when it listens on an address).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Replace pg_hba.conf with `text` and make the server read it again.
    pub fn set_hba(&self, text: &str) {
        let hba = self.data().join("pg_hba.conf");
        std::fs::write(&hba, text)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", hba.display()));
        let reloaded = self.psql("postgres", "SELECT pg_reload_conf()");
        assert_eq!(reloaded.trim(), "t", "pg_reload_conf");
    }

    /// Run SQL with psql on database `db`; returns its unaligned output.
    pub fn psql(&self, db: &str, sql: &str) -> String {
        let mut psql = Command::new(self.bin.join("psql"));
        psql.arg("-h")
            .arg(self.dir.path())
            .args(["-p", &self.port.to_string(), "-U", USER, "-d", db])
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql]);
        run(psql, "psql")
    }

    /// A psql session on database `db` reading SQL from its stdin (piped), printing unaligned
    /// rows on its stdout (piped): a transaction a test holds open while the store works.
    pub fn psql_session(&self, db: &str) -> std::process::Child {
        Command::new(self.bin.join("psql"))
            .arg("-h")
            .arg(self.dir.path())
            .args(["-p", &self.port.to_string(), "-U", USER, "-d", db])
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn psql")
    }

    /// A new empty database; returns its URL.
    pub fn fresh_url(&self) -> String {
        let n = self.next_db.fetch_add(1, Ordering::Relaxed);
        let db = format!("t{n}");
        self.psql("postgres", &format!("CREATE DATABASE {db}"));
        self.url(&db)
    }

    /// The server's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

impl PgCluster {
    /// Stop the server if it runs, ignoring any failure (drop and exit).
    fn stop_quietly(&self) {
        let mut stop = self.server_cmd("pg_ctl");
        stop.arg("-D")
            .arg(self.data())
            .args(["-w", "-m", "immediate", "stop"]);
        let _ = stop.output();
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        self.stop_quietly();
    }
}

static SHARED: OnceLock<PgCluster> = OnceLock::new();

extern "C" fn stop_shared() {
    if let Some(c) = SHARED.get() {
        c.stop_quietly();
        let _ = std::fs::remove_dir_all(c.dir.path());
    }
}

/// What `schema/postgres/0013_windows.sql` made, undone: how a test takes a database back to
/// schema 12 (put it before the older `UNDO_*`).
pub const UNDO_0013: &str = "ALTER TABLE accounts DROP COLUMN tz, DROP COLUMN send_window,
     DROP COLUMN sms_hours; ALTER TABLE campaigns DROP COLUMN tz, DROP COLUMN send_window,
     DROP COLUMN sms_hours;";

/// What `schema/postgres/0012_privacy.sql` made, undone: how a test takes a database back to
/// schema 11 (put it before the older `UNDO_*`).
pub const UNDO_0012: &str = "DROP TABLE consents;";

/// What `schema/postgres/0011_events.sql` made, undone: how a test takes a database back to
/// schema 10 (put it before the older `UNDO_*`).
pub const UNDO_0011: &str =
    "DROP TRIGGER sends_event ON sends; DROP TRIGGER sends_event_insert ON sends;
     DROP TRIGGER campaigns_event ON campaigns;
     DROP TRIGGER subscribers_event_insert ON subscribers;
     DROP TRIGGER subscribers_event_update ON subscribers;
     DROP TRIGGER list_members_event_insert ON list_members;
     DROP TRIGGER list_members_event_update ON list_members;
     DROP TRIGGER suppressions_event ON suppressions;
     DROP FUNCTION sends_event(); DROP FUNCTION sends_event_insert();
     DROP FUNCTION campaigns_event(); DROP FUNCTION subscribers_event();
     DROP FUNCTION list_members_event(); DROP FUNCTION suppressions_event();
     DROP FUNCTION events_now();
     DROP TABLE hook_attempts; DROP TABLE hook_deliveries; DROP TABLE hook_endpoints;
     DROP TABLE events; ALTER TABLE api_messages DROP COLUMN metadata;";

/// What `schema/postgres/0009_stream_all.sql` made, undone (on a database without stream
/// rows): how a test takes a database back to schema 8.
pub const UNDO_0009: &str = "DROP INDEX message_contents_notify;
     ALTER TABLE message_contents DROP COLUMN templated, DROP COLUMN notify_key;";

/// What `schema/postgres/0009_stream_all.sql`, `0008_templates.sql` and `0007_stream.sql`
/// made, undone (on a database without API messages): how a test takes a database back to
/// schema 6 or older.
pub const UNDO_0007: &str = "DROP INDEX message_contents_notify;
     ALTER TABLE message_contents DROP COLUMN templated, DROP COLUMN notify_key;
     DROP TABLE message_attachments;
     ALTER TABLE message_contents DROP COLUMN template_id; DROP TABLE templates;
     DROP INDEX campaigns_stream; ALTER TABLE campaigns DROP COLUMN stream;
     DROP INDEX sends_campaign_address; DROP INDEX sends_campaign_subscriber;
     ALTER TABLE sends DROP COLUMN message_id; DROP TABLE message_contents;
     ALTER TABLE sends ADD UNIQUE (campaign_id, subscriber_id), ADD UNIQUE (campaign_id, address);";

/// The database name of a cluster URL (`postgres://USER@localhost/DB?host=...`).
pub fn db_name(url: &str) -> String {
    let path = url.split('/').nth(3).unwrap_or_default();
    path.split('?').next().unwrap_or_default().to_string()
}

/// One cluster for the whole test process, stopped when the process exits.
pub fn shared() -> &'static PgCluster {
    SHARED.get_or_init(|| {
        let c = PgCluster::start();
        // SAFETY: registers a plain function with no arguments to run at exit.
        unsafe { libc::atexit(stop_shared) };
        c
    })
}

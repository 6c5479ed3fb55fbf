//! The SQLite store: opening the file (pragmas read back), migrations, and the pool. All SQL of
//! the project lives under this module.

mod admin;
mod audit;
mod bench;
mod campaigns;
mod ledger;
mod notify;
mod ratelimit;

pub use admin::{ImportReport, NewSubscriber, SkippedRow, Suppression};
pub use audit::{AuditRow, AuditSnapshot};
pub use bench::{BareClaim, QueryPlan};
pub use campaigns::{Campaign, DoubtRow, NewCampaign, ReportRow, StatusCounts};
pub use ledger::{
    ActiveCampaign, ClaimRequest, Claimed, ClaimedRow, Ledger, Outcome, Record, RecordStats,
};
pub use notify::{notify_job_id, NotifyRow};
pub use ratelimit::{refill, Grant};

use crate::error::{Error, ErrorKind, Result};
use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The migrations, in order. `schema/` is append-only: a released file never changes.
const MIGRATIONS: &[(&str, &str)] = &[("0001_init", include_str!("../../schema/0001_init.sql"))];

/// The WAL size past which `Ledger::checkpoint_if_large` checkpoints and truncates it (the
/// automatic checkpoint cannot reset a WAL that readers keep pinned).
pub const WAL_CHECKPOINT_BYTES: u64 = 16 * 1024 * 1024;

/// The schema version this binary writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// How durable a commit is. `Full` is the default: with `Normal` a committed marker can roll
/// back on power loss, which breaks the exactly-once promise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sync {
    Full,
    Normal,
}

/// How to open the store.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Create the file if it does not exist (`init`, `demo`); other commands refuse to.
    pub create: bool,
    /// `synchronous` pragma.
    pub sync: Sync,
    /// How long a connection waits for another writer before reporting the database busy.
    pub busy_timeout: Duration,
    /// Connections in the pool.
    pub pool_size: u32,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            create: false,
            sync: Sync::Full,
            busy_timeout: Duration::from_secs(10),
            pool_size: 4,
        }
    }
}

/// A handle on one database file; cheap to clone (the pool is shared).
#[derive(Clone)]
pub struct Store {
    pool: r2d2::Pool<SqliteConnectionManager>,
    path: PathBuf,
}

type Conn = r2d2::PooledConnection<SqliteConnectionManager>;

const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// Refuse a file that exists and is not a SQLite database, before SQLite touches it.
fn check_header(path: &Path) -> Result<bool> {
    use std::io::Read;
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(Error::io(&format!("cannot open {}", path.display()), e)),
    };
    let mut head = [0u8; 16];
    let mut n = 0;
    while n < 16 {
        match f.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) => return Err(Error::io(&format!("cannot read {}", path.display()), e)),
        }
    }
    if n == 0 {
        return Ok(true); // an empty file is a valid, empty database
    }
    if n < 16 || &head != SQLITE_MAGIC {
        return Err(Error::db(format!(
            "{} is not a sendonce database (not a SQLite file); it was left untouched",
            path.display()
        )));
    }
    Ok(true)
}

fn configure(conn: &Connection, sync: Sync, busy: Duration) -> rusqlite::Result<()> {
    conn.busy_timeout(busy)?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.pragma_update(
        None,
        "synchronous",
        match sync {
            Sync::Full => "FULL",
            Sync::Normal => "NORMAL",
        },
    )?;
    conn.set_prepared_statement_cache_capacity(64);
    // Crash suite only: a database size limit that makes writes fail as on a full disk.
    #[cfg(feature = "crash-points")]
    if let Some(pages) = std::env::var("SENDONCE_TEST_MAX_PAGES")
        .ok()
        .and_then(|v| v.parse::<i64>().ok())
    {
        conn.query_row(&format!("PRAGMA max_page_count={pages}"), [], |_| Ok(()))?;
    }
    Ok(())
}

impl Store {
    /// Open (and with `create`, create) a database file, check it, and bring its schema up to
    /// date.
    pub fn open(path: &Path, opts: &OpenOptions) -> Result<Store> {
        let exists = check_header(path)?;
        if !exists && !opts.create {
            return Err(Error::invalid(format!(
                "no database at {}; create one with `sendonce init` (or pass --db)",
                path.display()
            )));
        }
        let flags = if opts.create {
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
        } else {
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX
        };

        // First connection: WAL, read back, and migrations. Done before the pool exists.
        {
            let conn = Connection::open_with_flags(path, flags)
                .map_err(|e| Error::from(e).context(&format!("cannot open {}", path.display())))?;
            configure(&conn, opts.sync, opts.busy_timeout)?;
            let mode: String = conn
                .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
                .map_err(|e| Error::from(e).context(&format!("opening {}", path.display())))?;
            if !mode.eq_ignore_ascii_case("wal") {
                return Err(Error::db(format!(
                    "{} could not be put in WAL mode (journal_mode is {mode:?})",
                    path.display()
                )));
            }
            migrate(&conn)?;
        }

        let sync = opts.sync;
        let busy = opts.busy_timeout;
        let manager = SqliteConnectionManager::file(path)
            .with_flags(flags)
            .with_init(move |c| configure(c, sync, busy));
        let pool = r2d2::Pool::builder()
            .max_size(opts.pool_size.max(1))
            .min_idle(Some(1))
            .connection_timeout(Duration::from_secs(30))
            .build(manager)?;
        Ok(Store {
            pool,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn conn(&self) -> Result<Conn> {
        Ok(self.pool.get()?)
    }

    /// Run `f` in a `BEGIN IMMEDIATE` transaction and commit it. Every write goes through here.
    fn write<T>(&self, f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T>) -> Result<T> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let out = f(&tx)?;
        tx.commit()?;
        Ok(out)
    }

    /// Read-only access (a deferred read transaction is implicit per statement).
    fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let conn = self.conn()?;
        f(&conn)
    }

    /// `PRAGMA integrity_check` (the crash suite asserts it says `ok`).
    pub fn integrity_check(&self) -> Result<String> {
        self.read(|c| Ok(c.query_row("PRAGMA integrity_check", [], |r| r.get(0))?))
    }

    /// The journal mode as SQLite reports it now.
    pub fn journal_mode(&self) -> Result<String> {
        self.read(|c| Ok(c.query_row("PRAGMA journal_mode", [], |r| r.get(0))?))
    }

    /// Limit the database size in pages (disk-full simulation in tests).
    pub fn set_max_page_count(&self, pages: i64) -> Result<()> {
        let c = self.conn()?;
        c.query_row(&format!("PRAGMA max_page_count={pages}"), [], |_| Ok(()))?;
        Ok(())
    }
}

/// Apply pending migrations, one immediate transaction each; refuse a newer database.
fn migrate(conn: &Connection) -> Result<()> {
    let current: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if current > SCHEMA_VERSION {
        return Err(Error::new(
            ErrorKind::Database,
            format!(
                "the database has schema version {current}, newer than this binary understands \
                 ({SCHEMA_VERSION}); upgrade sendonce. The file was not changed"
            ),
        ));
    }
    for (i, (name, sql)) in MIGRATIONS.iter().enumerate() {
        let version = i as i64 + 1;
        if version <= current {
            continue;
        }
        conn.execute_batch("BEGIN IMMEDIATE")?;
        let run = || -> Result<bool> {
            // Another process may have migrated while we waited for the lock.
            let now: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
            if now >= version {
                return Ok(false);
            }
            conn.execute_batch(sql)
                .map_err(|e| Error::db(format!("migration {name} failed: {e}")))?;
            conn.pragma_update(None, "user_version", version)?;
            Ok(true)
        };
        match run() {
            Ok(_) => conn.execute_batch("COMMIT")?,
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(e);
            }
        }
    }
    Ok(())
}

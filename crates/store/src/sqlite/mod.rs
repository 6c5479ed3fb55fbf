//! The SQLite store: opening the file (pragmas read back), migrations, and the pool; the
//! operations themselves are written once in `store/` over `sql::Tx` (`tx.rs` is SQLite's side).

use crate::driver::{DriverError, OrDb as _};
mod dbfile;
pub(crate) mod dialect;
mod doctor;
mod error;
pub mod export;
pub mod guard;
mod ledger;
mod plans;
pub mod tx;

pub use doctor::inspect_file;
pub use guard::{restore, watermark_path, Restored, HOST_ENV};
pub use plans::QueryPlan;

use crate::sql::{args, Db, Tx};
/// Written once in `store/webhooks.rs`; `bench.rs` reports the plans of its `hot_queries`.
use crate::webhooks;
use crate::{Admin, OpenOptions, Synchronous};
use dbfile::{check_header, FileState};
use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use sendonce_domain::error::{Error, ErrorKind, Result};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The migrations, in order. `schema/` is append-only: a released file never changes.
const MIGRATIONS: &[(&str, &str)] = &[
    (
        "0001_init",
        include_str!("../../../../schema/0001_init.sql"),
    ),
    (
        "0002_installation",
        include_str!("../../../../schema/0002_installation.sql"),
    ),
    (
        "0003_subscriber_removal",
        include_str!("../../../../schema/0003_subscriber_removal.sql"),
    ),
    (
        "0004_lists",
        include_str!("../../../../schema/0004_lists.sql"),
    ),
    (
        "0005_content",
        include_str!("../../../../schema/0005_content.sql"),
    ),
    (
        "0006_tokens",
        include_str!("../../../../schema/0006_tokens.sql"),
    ),
    (
        "0007_api_messages",
        include_str!("../../../../schema/0007_api_messages.sql"),
    ),
    (
        "0008_unsubscribe",
        include_str!("../../../../schema/0008_unsubscribe.sql"),
    ),
    (
        "0009_optin",
        include_str!("../../../../schema/0009_optin.sql"),
    ),
    (
        "0010_webhooks",
        include_str!("../../../../schema/0010_webhooks.sql"),
    ),
    (
        "0011_guard",
        include_str!("../../../../schema/0011_guard.sql"),
    ),
    (
        "0012_moved",
        include_str!("../../../../schema/0012_moved.sql"),
    ),
    (
        "0013_logins",
        include_str!("../../../../schema/0013_logins.sql"),
    ),
    (
        "0014_counts",
        include_str!("../../../../schema/0014_counts.sql"),
    ),
    (
        "0015_list_counts",
        include_str!("../../../../schema/0015_list_counts.sql"),
    ),
    (
        "0016_sends_check",
        include_str!("../../../../schema/0016_sends_check.sql"),
    ),
    (
        "0017_addresses",
        include_str!("../../../../schema/0017_addresses.sql"),
    ),
    (
        "0018_operators",
        include_str!("../../../../schema/0018_operators.sql"),
    ),
    (
        "0019_report_ids",
        include_str!("../../../../schema/0019_report_ids.sql"),
    ),
    (
        "0020_stream",
        include_str!("../../../../schema/0020_stream.sql"),
    ),
    (
        "0021_templates",
        include_str!("../../../../schema/0021_templates.sql"),
    ),
    (
        "0022_stream_all",
        include_str!("../../../../schema/0022_stream_all.sql"),
    ),
    (
        "0023_webhook_sources",
        include_str!("../../../../schema/0023_webhook_sources.sql"),
    ),
    (
        "0024_events",
        include_str!("../../../../schema/0024_events.sql"),
    ),
    (
        "0025_privacy",
        include_str!("../../../../schema/0025_privacy.sql"),
    ),
    (
        "0026_windows",
        include_str!("../../../../schema/0026_windows.sql"),
    ),
];

/// `PRAGMA application_id` of every sendonce database ("SNDO"): how a file says it is ours.
pub const APPLICATION_ID: i64 = 0x534E_444F;

/// The WAL size past which `Ledger::checkpoint_if_large` checkpoints and truncates it (the
/// automatic checkpoint cannot reset a WAL that readers keep pinned).
pub const WAL_CHECKPOINT_BYTES: u64 = 16 * 1024 * 1024;

/// The schema version this binary writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// A handle on one database file; cheap to clone (the pool is shared).
#[derive(Clone)]
pub struct SqliteStore {
    pool: r2d2::Pool<SqliteConnectionManager>,
    path: PathBuf,
    /// Opened as an immutable snapshot (read-only, no `-shm` could be made): it does not see
    /// later writes by other processes.
    snapshot: bool,
    /// The clone guard and watermark of a writable open (None when read-only).
    guard: Option<std::sync::Arc<guard::Guard>>,
    /// This process's writers take turns here before `BEGIN IMMEDIATE`, first come first
    /// served ([`WriteTurn`]).
    turns: std::sync::Arc<parking_lot::Mutex<()>>,
}

/// A writer's turn at the file, held from `BEGIN IMMEDIATE` to the commit and handed to the
/// writer that waited longest when dropped. SQLite's own lock is not fair: a writer that finds
/// the file locked sleeps in its busy handler and retries, and a writer that commits and begins
/// again at once (the API's group commit under load) wins nearly every time, so the worker's
/// claims and confirmations starved while requests were accepted. Writers of other processes
/// still meet SQLite's lock and busy timeout.
pub(crate) struct WriteTurn<'a>(Option<parking_lot::MutexGuard<'a, ()>>);

impl Drop for WriteTurn<'_> {
    fn drop(&mut self) {
        if let Some(g) = self.0.take() {
            parking_lot::MutexGuard::unlock_fair(g);
        }
    }
}

type Conn = r2d2::PooledConnection<SqliteConnectionManager>;

/// For a read-only open of a WAL database whose directory we cannot write (so SQLite cannot
/// make the `-shm` index): when no process holds it open (neither `-wal` nor `-shm` beside
/// it), the file alone is the database and can be opened as an immutable snapshot. `None`
/// otherwise (then the open fails with SQLite's read-only error, which names the directory).
fn immutable_uri(path: &Path) -> Option<String> {
    // A process that has the file open keeps both files beside it (a checkpoint may leave the
    // -wal empty, but not gone); their absence is what says nobody is writing now.
    for suffix in ["-wal", "-shm"] {
        let side = PathBuf::from(format!("{}{suffix}", path.display()));
        match std::fs::symlink_metadata(&side) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            _ => return None,
        }
    }
    let abs = std::path::absolute(path).ok()?;
    let text = abs.to_str()?;
    const KEEP: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'/')
        .remove(b'-')
        .remove(b'_')
        .remove(b'.');
    Some(format!(
        "file:{}?mode=ro&immutable=1",
        percent_encoding::utf8_percent_encode(text, KEEP)
    ))
}

/// Whose file an open SQLite database is, read before anything is written to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Identity {
    /// Marked with our application id.
    Ours,
    /// Made by a sendonce from before the application id (schema present, id 0): it gets the
    /// mark the next time it is opened for writing.
    OursUnmarked,
    /// No schema at all: a new database.
    Blank,
}

fn identify(conn: &Connection, path: &Path) -> Result<Identity> {
    let app_id: i64 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .db()?;
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .db()?;
    let objects: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))
        .db()?;
    let ours_tables: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE type = 'table'
         AND name IN ('accounts', 'subscribers', 'campaigns', 'sends', 'suppressions')",
            [],
            |r| r.get(0),
        )
        .db()?;
    let foreign = || {
        Error::db(format!(
            "{} is a SQLite database of another application (application_id {app_id:#x}, \
             user_version {version}), not a sendonce database; nothing was changed",
            path.display()
        ))
    };
    match app_id {
        APPLICATION_ID => Ok(Identity::Ours),
        0 if objects == 0 && version == 0 => Ok(Identity::Blank),
        0 if version >= 1 && ours_tables == 5 => Ok(Identity::OursUnmarked),
        _ => Err(foreign()),
    }
}

/// Per-connection settings. `sync` is `None` for a read-only connection (setting it would
/// need the WAL index, which a reader that cannot write beside the file cannot make).
fn configure(conn: &Connection, sync: Option<Synchronous>, busy: Duration) -> rusqlite::Result<()> {
    conn.busy_timeout(busy)?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // Power-loss suite only (tests/crash/powerloss.rs): its control run weakens every writing
    // connection to NORMAL, to show that the suite catches what FULL prevents.
    #[cfg(feature = "crash-points")]
    let sync = match (sync, std::env::var("SENDONCE_TEST_SYNC").as_deref()) {
        (Some(_), Ok("normal")) => Some(Synchronous::Normal),
        (s, _) => s,
    };
    if let Some(sync) = sync {
        conn.pragma_update(
            None,
            "synchronous",
            match sync {
                Synchronous::Full => "FULL",
                Synchronous::Normal => "NORMAL",
            },
        )?;
    }
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

impl SqliteStore {
    /// Open (and with `create`, create) a database file, check it, and bring its schema up to
    /// date. A file that is not ours is refused before anything is written to it; a read-only
    /// open writes nothing at all.
    pub fn open(path: &Path, opts: &OpenOptions) -> Result<SqliteStore> {
        let state = check_header(path)?;
        refuse_missing(path, state, opts)?;
        if opts.create && !opts.read_only && matches!(state, FileState::Missing) {
            // Owner-only from the first byte; SQLite gives -wal and -shm the same mode.
            dbfile::create(path).map_err(|e| {
                Error::io(&format!("cannot create the database {}", path.display()), e)
            })?;
        }
        let flags = if opts.read_only {
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
        } else if opts.create {
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
        } else {
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX
        };
        let sync = (!opts.read_only).then_some(opts.sync);
        // A writer holds a shared lock on the file before SQLite opens it (see `restore`).
        let holder = match opts.read_only {
            true => None,
            false => Some(dbfile::hold_shared(path)?),
        };
        let (target, flags) = first_connection(path, flags, sync, opts)?;
        let busy = opts.busy_timeout;
        let manager = SqliteConnectionManager::file(&target)
            .with_flags(flags)
            .with_init(move |c| configure(c, sync, busy));
        let pool = r2d2::Pool::builder()
            .max_size(opts.pool_size.max(1))
            .min_idle(Some(1))
            .connection_timeout(Duration::from_secs(30))
            .build(manager)
            .db()?;
        let guard = match holder {
            None => None,
            Some(h) => Some(std::sync::Arc::new(guard::Guard::open(
                path,
                h,
                &*pool.get().db()?,
                opts,
            )?)),
        };
        let store = SqliteStore {
            pool,
            path: path.to_path_buf(),
            snapshot: flags.contains(OpenFlags::SQLITE_OPEN_URI),
            guard,
            turns: Default::default(),
        };
        if opts.create && matches!(state, FileState::Missing) {
            store.own_new_file()?;
        }
        Ok(store)
    }

    fn conn(&self) -> Result<Conn> {
        self.pool.get().db()
    }

    /// [`Self::write`] for `sendonce-bench`'s own statements (its limit loop on a table of its
    /// own); nothing of the product calls it (`tests/layers.rs`).
    pub fn raw_write<T>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T>,
    ) -> Result<T> {
        self.write(f)
    }

    /// Run `f` in a `BEGIN IMMEDIATE` transaction and commit it. Every write goes through here.
    fn write<T>(&self, f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T>) -> Result<T> {
        let _turn = self.turn();
        let mut conn = self.conn()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .db()?;
        let out = f(&tx)?;
        tx.commit().db()?;
        Ok(out)
    }

    /// Read-only access (a deferred read transaction is implicit per statement).
    fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let conn = self.conn()?;
        f(&conn)
    }
}

/// What only a SQLite file has (a snapshot open, a WAL, an owner, a copy on disk): reached
/// through `Store::file`, never on a trait PostgreSQL implements.
impl SqliteStore {
    /// Wait for this process's turn to write (see [`WriteTurn`]).
    pub(crate) fn turn(&self) -> WriteTurn<'_> {
        WriteTurn(Some(self.turns.lock()))
    }

    /// True when the file was opened as an immutable snapshot: a read-only file in a directory
    /// we cannot write, with no process holding it open at that moment. Such a store does not
    /// see later writes; commands that follow a file over time refuse it.
    pub fn is_snapshot(&self) -> bool {
        self.snapshot
    }

    /// The size of the `-wal` file beside the database (a stat, no SQL), for `/metrics`.
    pub fn wal_bytes(&self) -> Result<u64> {
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        match std::fs::metadata(&wal) {
            Ok(m) => Ok(m.len()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(Error::io("cannot read the WAL file's size", e)),
        }
    }
}

impl Admin for SqliteStore {
    fn path(&self) -> &Path {
        &self.path
    }

    /// `PRAGMA integrity_check` (the crash suite asserts it says `ok`).
    fn integrity_check(&self) -> Result<String> {
        self.read(|c| c.query_row("PRAGMA integrity_check", [], |r| r.get(0)).db())
    }

    /// The journal mode as SQLite reports it now.
    fn journal_mode(&self) -> Result<String> {
        self.read(|c| c.query_row("PRAGMA journal_mode", [], |r| r.get(0)).db())
    }

    fn check_writable(&self) -> Result<()> {
        self.write(|_| Ok(()))
    }

    fn guard_state(&self) -> Result<crate::GuardState> {
        self.guard_state_impl()
    }

    fn quick_check(&self, full: bool) -> Result<Vec<String>> {
        self.quick_check_impl(full)
    }
}

/// Only `init` and `demo` (`opts.create`) make a database: anything else refuses a missing or
/// empty file.
fn refuse_missing(path: &Path, state: FileState, opts: &OpenOptions) -> Result<()> {
    if opts.create {
        return Ok(());
    }
    match state {
        FileState::Missing => Err(Error::invalid(format!(
            "no database at {}; create one with `sendonce init` (or pass --db)",
            path.display()
        ))),
        FileState::Empty => Err(Error::invalid(format!(
            "{} is an empty file, not a sendonce database; nothing was changed \
             (`sendonce init --db {}` makes it one)",
            path.display(),
            path.display()
        ))),
        FileState::Sqlite => Ok(()),
    }
}

/// The first connection, before the pool exists: whose file it is, then (writable) WAL read
/// back and migrations, or (read-only) the schema version. Returns what the pool opens: the
/// path, or an immutable URI for a read-only file whose directory we cannot write.
fn first_connection(
    path: &Path,
    mut flags: OpenFlags,
    sync: Option<Synchronous>,
    opts: &OpenOptions,
) -> Result<(PathBuf, OpenFlags)> {
    let open = |target: &Path, flags| -> Result<Connection> {
        let conn = Connection::open_with_flags(target, flags).map_err(|e| {
            e.into_error()
                .context(&format!("cannot open {}", path.display()))
        })?;
        configure(&conn, sync, opts.busy_timeout).db()?;
        Ok(conn)
    };
    let mut target = path.to_path_buf();
    let mut conn = open(&target, flags)?;
    let mut identity = identify(&conn, path);
    if opts.read_only && identity.is_err() {
        if let Some(uri) = immutable_uri(path) {
            // A WAL file we may not write beside (no -shm can be made): with no WAL content
            // left, the file alone is the whole database.
            target = PathBuf::from(uri);
            flags |= OpenFlags::SQLITE_OPEN_URI;
            conn = open(&target, flags)?;
            identity = identify(&conn, path);
        }
    }
    let identity = identity?;
    if identity == Identity::Blank && !opts.create {
        return Err(Error::invalid(format!(
            "{} is a SQLite file without any tables, not a sendonce database; nothing was \
             changed (`sendonce init --db {}` makes it one)",
            path.display(),
            path.display()
        )));
    }
    if opts.read_only {
        if identity == Identity::Blank {
            return Err(Error::invalid(format!(
                "{} has no sendonce schema (create it with `sendonce init`)",
                path.display()
            )));
        }
        let version = check_version(&conn)?;
        if version < SCHEMA_VERSION {
            return Err(Error::db(format!(
                "{} has schema version {version}, older than this binary's {SCHEMA_VERSION}: \
                 run `sendonce init --db {}` once to upgrade it (this command only reads, so \
                 it changed nothing)",
                path.display(),
                path.display()
            )));
        }
        return Ok((target, flags));
    }
    let mode: String = conn
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .map_err(|e| {
            e.into_error()
                .context(&format!("opening {}", path.display()))
        })?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Error::db(format!(
            "{} could not be put in WAL mode (journal_mode is {mode:?})",
            path.display()
        )));
    }
    migrate(&conn)?;
    Ok((target, flags))
}

/// Refuse a database newer than this binary, without changing it. Returns its version.
fn check_version(conn: &Connection) -> Result<i64> {
    let current: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .db()?;
    if current > SCHEMA_VERSION {
        return Err(Error::new(
            ErrorKind::Database,
            format!(
                "the database has schema version {current}, newer than this binary understands \
                 ({SCHEMA_VERSION}); upgrade sendonce. The file was not changed"
            ),
        ));
    }
    Ok(current)
}

/// Apply pending migrations, one immediate transaction each; refuse a newer database. The
/// application id is written with the first migration (and onto files made before it existed).
/// Foreign keys are off while migrations run, as SQLite's procedure for rebuilding a table
/// asks (0016); a file whose references already point nowhere is refused before anything is
/// written, and every migration must leave `PRAGMA foreign_key_check` empty before it commits.
/// The connection's setting is restored after.
fn migrate(conn: &Connection) -> Result<()> {
    let current = check_version(conn)?;
    if current >= SCHEMA_VERSION {
        return migrate_pending(conn, current);
    }
    let dangling = dangling_references(conn)?;
    if !dangling.is_empty() {
        return Err(upgrade_refused(
            current,
            &format!(
                "it holds rows whose references point nowhere ({})",
                dangling.join(", ")
            ),
        ));
    }
    let fk: i64 = conn
        .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
        .db()?;
    conn.pragma_update(None, "foreign_keys", "OFF").db()?;
    let done = migrate_pending(conn, current);
    let restored = conn.pragma_update(None, "foreign_keys", fk);
    done?;
    restored.db()
}

/// Damage from outside sendonce that an upgrade found: refused with exit 5 (the service is
/// not restarted on it), the file left at schema `at` (the step that found it rolled back).
fn upgrade_refused(at: i64, what: &str) -> Error {
    Error::new(
        ErrorKind::Guarded,
        format!(
            "the database cannot be upgraded to schema {SCHEMA_VERSION}: {what}. That is damage \
             from outside sendonce (a row changed or deleted by hand, a bad disk); the upgrade \
             stopped with nothing of that step committed, the file at schema {at}. `sendonce \
             doctor` shows the file's state; restore a backup (`sendonce restore`) or repair \
             those rows, then start again"
        ),
    )
}

/// Up to five rows `PRAGMA foreign_key_check` reports, each as `table row N -> parent`.
fn dangling_references(conn: &Connection) -> Result<Vec<String>> {
    let mut st = conn.prepare("PRAGMA foreign_key_check").db()?;
    let bad = st
        .query_map([], |r| {
            let row = r
                .get::<_, Option<i64>>(1)?
                .map_or_else(|| "?".to_string(), |n| n.to_string());
            Ok(format!(
                "{} row {row} -> {}",
                r.get::<_, String>(0)?,
                r.get::<_, String>(2)?
            ))
        })
        .db()?
        .take(5)
        .collect::<rusqlite::Result<Vec<_>>>()
        .db()?;
    Ok(bad)
}

/// One migration's SQL, then the check that it left every reference pointing somewhere. A
/// constraint the file's rows break is damage ([`upgrade_refused`]); anything else is a
/// failed migration. `before`: the schema version the file is at while it runs.
fn apply_migration(conn: &Connection, name: &str, sql: &str, before: i64) -> Result<()> {
    if let Err(e) = conn.execute_batch(sql) {
        let constraint = matches!(
            &e,
            rusqlite::Error::SqliteFailure(f, _)
                if f.code == rusqlite::ErrorCode::ConstraintViolation
        );
        return Err(if constraint {
            upgrade_refused(
                before,
                &format!("migration {name} found rows that break {e}"),
            )
        } else {
            Error::db(format!("migration {name} failed: {e}"))
        });
    }
    let dangling = dangling_references(conn)?;
    if dangling.is_empty() {
        return Ok(());
    }
    Err(Error::db(format!(
        "migration {name} would leave rows whose references point nowhere ({}); it was rolled \
         back",
        dangling.join(", ")
    )))
}

/// [`migrate`]'s work from schema version `current`.
fn migrate_pending(conn: &Connection, current: i64) -> Result<()> {
    let app_id: i64 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .db()?;
    if app_id != APPLICATION_ID {
        conn.execute_batch("BEGIN IMMEDIATE").db()?;
        let marked = conn
            .pragma_update(None, "application_id", APPLICATION_ID)
            .map_err(DriverError::into_error);
        match marked {
            Ok(()) => conn.execute_batch("COMMIT").db()?,
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(e);
            }
        }
    }
    for (i, (name, sql)) in MIGRATIONS.iter().enumerate() {
        let version = i as i64 + 1;
        if version <= current {
            continue;
        }
        conn.execute_batch("BEGIN IMMEDIATE").db()?;
        let run = || -> Result<bool> {
            // Another process may have migrated while we waited for the lock.
            let now: i64 = conn
                .query_row("PRAGMA user_version", [], |r| r.get(0))
                .db()?;
            if now >= version {
                return Ok(false);
            }
            apply_migration(conn, name, sql, version - 1)?;
            conn.pragma_update(None, "user_version", version).db()?;
            Ok(true)
        };
        match run() {
            Ok(_) => conn.execute_batch("COMMIT").db()?,
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(e);
            }
        }
    }
    Ok(())
}

/// The `pending_steps` row of schema 0017's address step.
const ADDRESS_STEP: &str = "addresses_0017";

impl SqliteStore {
    /// Run the address step of schema 0017 (`store::addresses`: SQL cannot normalise Unicode)
    /// if it is still pending, with the deletion of its `pending_steps` row, in one `BEGIN
    /// IMMEDIATE` transaction. Run by every writable `store::open`; a no-op (one read) once
    /// done. Returns how many report rows it wrote (None when there was nothing to do).
    pub fn finish_address_step(&self) -> Result<Option<usize>> {
        if !Db::read(self, address_step_pending)? {
            return Ok(None);
        }
        Db::write(self, |tx| {
            // Another process may have run it while this one waited for the lock.
            if !address_step_pending(tx)? {
                return Ok(None);
            }
            let rows = crate::addresses::normalise_addresses(tx, "0017")?;
            tx.exec(
                "DELETE FROM pending_steps WHERE name = ?1",
                &args![ADDRESS_STEP],
            )?;
            Ok(Some(rows))
        })
    }
}

fn address_step_pending(tx: &mut dyn Tx) -> Result<bool> {
    let has_table = tx.exists(
        "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'pending_steps'",
        &[],
    )?;
    Ok(has_table
        && tx.exists(
            "SELECT 1 FROM pending_steps WHERE name = ?1",
            &args![ADDRESS_STEP],
        )?)
}

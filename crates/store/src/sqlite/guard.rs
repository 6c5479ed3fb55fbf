//! The clone guard and the time-travel watermark of a SQLite file (`schema/0011_guard.sql`):
//! this process's place, the watermark file beside the database, the claim generation
//! counted in every claim that leases rows, `adopt`, checks, online backup and restore.

use super::SqliteStore;
use crate::driver::{DriverError as _, OrDb as _};
use crate::{
    Admin, Adopted, GuardState, Installation, LedgerCounts, OpenOptions, Place, Watermark,
};
use rusqlite::Transaction;
use sendonce_domain::clock::now_ms;
use sendonce_domain::error::{Error, ErrorKind, Result};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;

/// `flock(2)` on an open file (`LOCK_SH`, `LOCK_EX`, `LOCK_UN`, optionally `| LOCK_NB`).
fn flock(f: &File, op: libc::c_int) -> std::io::Result<()> {
    // SAFETY: flock on a descriptor `f` owns; it stays open for the call.
    match unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(f), op) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

use crate::admin::host_id;
pub use crate::admin::HOST_ENV;

/// The file beside the database that keeps the watermark.
pub fn watermark_path(db: &Path) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push("-watermark");
    PathBuf::from(p)
}

/// Where this process works on `db`.
pub(super) fn here(db: &Path) -> Place {
    let path = std::fs::canonicalize(db)
        .or_else(|_| std::path::absolute(db))
        .unwrap_or_else(|_| db.to_path_buf());
    Place {
        host: host_id(),
        path: path.to_string_lossy().into_owned(),
    }
}

/// What a writable store keeps for the guard.
pub(super) struct Guard {
    pub(super) here: Place,
    pub(super) enforced: bool,
    /// The watermark file, kept open, and when it was last fsynced.
    mark: Mutex<Option<(File, std::time::Instant)>>,
    mark_path: PathBuf,
    installation: String,
    /// The highest generation this process saw committed: a claim that gets one not above it
    /// found the database gone back in time under the running process.
    last_committed: AtomicI64,
    /// A shared `flock` on the database file for as long as the store is open: `restore`
    /// takes it exclusively, so it refuses while any writer has the file open.
    _holder: super::dbfile::Shared,
}

impl Guard {
    pub(super) fn open(
        db: &Path,
        holder: super::dbfile::Shared,
        conn: &rusqlite::Connection,
        opts: &OpenOptions,
    ) -> Result<Self> {
        let installation: String = conn
            .query_row("SELECT id FROM installation WHERE singleton = 1", [], |r| {
                r.get(0)
            })
            .db()?;
        // A moved file takes no write at all: an opt-out, a campaign or a subscriber written
        // here would never reach the store that sends now.
        if let (true, (Some(to), at)) = (opts.guard, moved(conn)?) {
            return Err(Error::new(
                ErrorKind::Guarded,
                format!(
                    "{} {}",
                    moved_refusal(&to, at),
                    "(and every command that writes, `suppress` and `campaign` among them, goes \
                     there too: this file only answers `status`, `report` and `doctor` now)"
                ),
            ));
        }
        Ok(Guard {
            here: here(db),
            enforced: opts.guard,
            mark: Mutex::new(None),
            mark_path: watermark_path(db),
            installation,
            last_committed: AtomicI64::new(0),
            _holder: holder,
        })
    }

    /// After a claim committed `generation`: remember it and raise the watermark to it before
    /// any call of that claim goes out. The write reaches the page cache at once (a kill -9,
    /// a deleted -wal or a swapped file never loses it); it is fsynced at most once per
    /// [`MARK_SYNC_EVERY`], so a power cut can set it back by that much, never ahead of the
    /// database, whose commit was fsynced before this write was issued.
    pub(super) fn committed(&self, generation: i64, at: i64) -> Result<()> {
        self.last_committed.fetch_max(generation, Ordering::SeqCst);
        if !self.enforced {
            return Ok(());
        }
        let io = |e| {
            Error::io(
                &format!("cannot write the watermark {}", self.mark_path.display()),
                e,
            )
        };
        let mut slot = self.mark.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            let new = !self.mark_path.exists();
            let f = open_mark(&self.mark_path).map_err(io)?;
            if new {
                f.sync_all().map_err(io)?;
                sync_dir(&self.mark_path)?;
            }
            *slot = Some((f, std::time::Instant::now()));
        }
        let Some((f, synced_at)) = slot.as_mut() else {
            return Ok(());
        };
        raise_mark(f, &self.installation, generation, at, false).map_err(io)?;
        if synced_at.elapsed() >= MARK_SYNC_EVERY {
            f.sync_data().map_err(io)?;
            *synced_at = std::time::Instant::now();
        }
        Ok(())
    }
}

impl Drop for Guard {
    /// A store closing syncs the watermark it was raising.
    fn drop(&mut self) {
        let slot = self.mark.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some((f, _)) = slot.as_ref() {
            let _ = f.sync_data();
        }
    }
}

/// How often a running worker fsyncs its watermark.
pub const MARK_SYNC_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

fn open_mark(path: &Path) -> std::io::Result<File> {
    sendonce_domain::files::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

/// Under an exclusive `flock` of the open watermark file (several processes may claim from one
/// database): write `generation` in place unless a higher one of the same installation is
/// already there (`force`: write it anyway). Not synced here.
fn raise_mark(
    f: &mut File,
    installation: &str,
    generation: i64,
    at: i64,
    force: bool,
) -> std::io::Result<()> {
    flock(f, libc::LOCK_EX)?;
    let done = (|| {
        if !force {
            let mut text = String::new();
            f.seek(SeekFrom::Start(0))?;
            let _ = f.read_to_string(&mut text);
            if let Ok((inst, on_disk, _)) = decode(&text) {
                if inst == installation && on_disk >= generation {
                    return Ok(());
                }
            }
        }
        let record = encode(installation, generation, at);
        f.seek(SeekFrom::Start(0))?;
        f.write_all(record.as_bytes())?;
        if f.metadata()?.len() != record.len() as u64 {
            f.set_len(record.len() as u64)?;
        }
        Ok(())
    })();
    let _ = flock(f, libc::LOCK_UN);
    done
}

/// The record: `sendonce-watermark 1 INSTALLATION GENERATION AT CHECK\n`, fixed width, where
/// CHECK is the first 16 hex digits of the SHA-256 of what precedes it.
fn encode(installation: &str, generation: i64, at: i64) -> String {
    let body = format!("sendonce-watermark 1 {installation} {generation:020} {at:020}");
    format!("{body} {}\n", check_of(&body))
}

fn check_of(body: &str) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(body.as_bytes());
    d[..8].iter().map(|b| format!("{b:02x}")).collect()
}

fn decode(text: &str) -> std::result::Result<(String, i64, i64), String> {
    let line = text.strip_suffix('\n').unwrap_or(text);
    let (body, check) = line.rsplit_once(' ').ok_or("no checksum")?;
    if check_of(body) != check {
        return Err("its checksum does not match (torn or edited)".into());
    }
    let f: Vec<&str> = body.split(' ').collect();
    match f.as_slice() {
        ["sendonce-watermark", "1", inst, generation, at] => Ok((
            inst.to_string(),
            generation.parse().map_err(|_| "bad generation")?,
            at.parse().map_err(|_| "bad time")?,
        )),
        _ => Err("not a sendonce watermark".into()),
    }
}

/// The watermark file's bytes, read under a shared `flock` (a worker rewrites it in place
/// under an exclusive one: no torn read).
fn read_locked(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut f = File::open(path)?;
    flock(&f, libc::LOCK_SH)?; // released when `f` is closed
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Read the watermark file at `path`.
pub(super) fn read_mark(path: &Path) -> Watermark {
    match read_locked(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Watermark::Missing,
        Err(e) => Watermark::Unreadable {
            reason: e.to_string(),
        },
        Ok(bytes) => match std::str::from_utf8(&bytes)
            .map_err(|_| "not text".to_string())
            .and_then(decode)
        {
            Ok((installation, generation, at)) => Watermark::At {
                installation,
                generation,
                at,
            },
            Err(reason) => Watermark::Unreadable { reason },
        },
    }
}

/// Raise the watermark at `path` to `generation` (see [`raise_mark`]), fsynced; its directory
/// too when the file is new. For `init`, `adopt` and a worker's start.
fn write_mark(
    path: &Path,
    installation: &str,
    generation: i64,
    at: i64,
    force: bool,
) -> Result<()> {
    let io = |e| Error::io(&format!("cannot write the watermark {}", path.display()), e);
    let new = !path.exists();
    let mut f = open_mark(path).map_err(io)?;
    raise_mark(&mut f, installation, generation, at, force).map_err(io)?;
    f.sync_data().map_err(io)?;
    if new {
        sync_dir(path)?;
    }
    Ok(())
}

/// fsync the directory holding `path` (a created or renamed file's name is durable then).
pub(super) fn sync_dir(path: &Path) -> Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(&format!("cannot sync the directory {}", dir.display()), e))
}

const CLAIM_GENERATION: &str = "UPDATE guard SET generation = generation + 1, heartbeat_at = ?1,
     host = coalesce(host, ?2), path = coalesce(path, ?3)
     WHERE singleton = 1 AND moved_to IS NULL
       AND (?2 IS NULL OR host IS NULL OR (host = ?2 AND path = ?3))
     RETURNING generation";

/// Inside a claim that leased rows: count it, and check that this process may claim from this
/// file (its owner, or no owner yet) and that the file did not go back in time under it.
/// (Over the ledger's `sql::Tx`: the claim is written once, `store/ledger.rs`.)
pub(super) fn claim_generation(
    tx: &mut dyn crate::sql::Tx,
    guard: Option<&Guard>,
    now: i64,
) -> Result<i64> {
    use crate::sql::args;
    let place = guard.filter(|g| g.enforced).map(|g| &g.here);
    let generation: Option<i64> = tx.scalar_opt(
        CLAIM_GENERATION,
        &args![
            now,
            place.map(|p| p.host.as_str()),
            place.map(|p| p.path.as_str())
        ],
    )?;
    let Some(generation) = generation else {
        let (to, at): (Option<String>, Option<i64>) = tx
            .query_opt(
                "SELECT moved_to, moved_at FROM guard WHERE singleton = 1",
                &[],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?
            .unwrap_or((None, None));
        if let Some(to) = to {
            return Err(moved_error(&to, at));
        }
        let owner = tx
            .query_opt(
                "SELECT host, path FROM guard WHERE singleton = 1",
                &[],
                |r| {
                    Ok(match (r.get(0)?, r.get(1)?) {
                        (Some(host), Some(path)) => Some(Place { host, path }),
                        _ => None,
                    })
                },
            )?
            .flatten();
        return Err(copy_error(owner.as_ref(), place));
    };
    if let Some(g) = guard {
        let last = g.last_committed.load(Ordering::SeqCst);
        if generation <= last {
            return Err(Error::new(
                ErrorKind::Guarded,
                format!(
                    "the database went back in time under this running process: its claim \
                     counter is at {generation}, but this process already committed claim \
                     {last}. A snapshot or backup was put in place of the live file, or its \
                     -wal was lost. Nothing of this claim was committed and the worker \
                     stopped; stop every process on the file and run `sendonce adopt` (see \
                     docs/operations.md)"
                ),
            ));
        }
    }
    Ok(generation)
}

fn copy_error(owner: Option<&Place>, here: Option<&Place>) -> Error {
    let owner = owner.map_or("another place".to_string(), |o| o.to_string());
    let db = here.map_or("FILE", |h| h.path.as_str());
    let here = here.map_or("here".to_string(), |h| h.to_string());
    Error::new(
        ErrorKind::Guarded,
        format!(
            "this database is a copy: it belongs to {owner}, and this process works on {here}. \
             A worker on a copy would send again what the original sends, so nothing was \
             claimed. If the file was moved or restored on purpose and the original will never \
             run again, run `sendonce adopt --db {db}`"
        ),
    )
}

/// Where `migrate-store` moved this file's data, and when (`schema/0012_moved.sql`).
fn moved(c: &rusqlite::Connection) -> Result<(Option<String>, Option<i64>)> {
    c.query_row(
        "SELECT moved_to, moved_at FROM guard WHERE singleton = 1",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .db()
}

/// Why a worker refuses a file `sendonce migrate-store` moved to `to` (a URL without its
/// password) at `at`.
pub fn moved_refusal(to: &str, at: Option<i64>) -> String {
    let when = at.map_or(String::new(), |t| {
        format!(" on {}", sendonce_domain::clock::format_ms(t))
    });
    format!(
        "this database was moved to {to}{when} by `sendonce migrate-store`: its campaigns, \
         leases and suppressions live there now, and sending from this file would send again \
         what the new store sends. Nothing was claimed. Run the workers with `--db {to}` (put \
         the password in SENDONCE_DB or ~/.pgpass, not on the command line)"
    )
}

/// A claim on a moved file: refused, naming where the data went.
fn moved_error(to: &str, at: Option<i64>) -> Error {
    Error::new(ErrorKind::Guarded, moved_refusal(to, at))
}

/// Mark `db` as moved to `to` (a URL without its password): from then on no worker claims from
/// it. The caller holds the exclusive `flock` on `db` (`export::Source`), so no store of this
/// process or another has it open for writing; this writes through a connection of its own.
pub(super) fn mark_moved(db: &Path, to: &str, busy: std::time::Duration) -> Result<i64> {
    let conn = rusqlite::Connection::open_with_flags(
        db,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| {
        e.into_error()
            .context(&format!("cannot open {}", db.display()))
    })?;
    conn.busy_timeout(busy).db()?;
    conn.pragma_update(None, "synchronous", "FULL").db()?;
    let at = now_ms();
    conn.execute_batch("BEGIN IMMEDIATE").db()?;
    let changed = conn.execute(
        "UPDATE guard SET moved_to = ?1, moved_at = ?2 WHERE singleton = 1 AND moved_to IS NULL",
        rusqlite::params![to, at],
    );
    match changed {
        Ok(1) => conn.execute_batch("COMMIT").db()?,
        Ok(_) => {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(Error::new(
                ErrorKind::Conflict,
                format!("{} was already marked as moved", db.display()),
            ));
        }
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(e.into_error());
        }
    }
    Ok(at)
}

fn owner(c: &rusqlite::Connection) -> Result<Option<Place>> {
    let row: (Option<String>, Option<String>) = c
        .query_row(
            "SELECT host, path FROM guard WHERE singleton = 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .db()?;
    Ok(match row {
        (Some(host), Some(path)) => Some(Place { host, path }),
        _ => None,
    })
}

impl SqliteStore {
    /// The guard of a writable open.
    pub(super) fn guard(&self) -> Option<&Guard> {
        self.guard.as_deref()
    }

    /// After a claim transaction committed: the watermark follows its generation.
    pub(super) fn claimed(&self, generation: Option<i64>, at: i64) -> Result<()> {
        match (generation, self.guard()) {
            (Some(n), Some(g)) => g.committed(n, at),
            _ => Ok(()),
        }
    }

    fn guard_ctx(&self) -> Result<&Guard> {
        self.guard.as_deref().ok_or_else(|| {
            Error::invalid(format!(
                "{} was opened read-only: the guard needs a writable open",
                self.path().display()
            ))
        })
    }

    /// Record this place as the owner of a new file (`init`), with its watermark at 0.
    pub(super) fn own_new_file(&self) -> Result<()> {
        let g = self.guard_ctx()?;
        self.write(|tx| {
            tx.execute(
                "UPDATE guard SET host = ?1, path = ?2, adopted_at = ?3 WHERE singleton = 1",
                rusqlite::params![g.here.host, g.here.path, now_ms()],
            )
            .db()?;
            Ok(())
        })?;
        // A watermark left by a database that was at this path before is replaced.
        write_mark(&g.mark_path, &g.installation, 0, now_ms(), true)
    }
}

fn read_guard_row(c: &rusqlite::Connection) -> Result<(i64, Option<i64>, Option<i64>)> {
    c.query_row(
        "SELECT generation, heartbeat_at, adopted_at FROM guard WHERE singleton = 1",
        [],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )
    .db()
}

/// Mark what the lost timeline may have sent: every unfinished row, and the rows list building
/// adds later to the campaigns that exist now; and start a key epoch for the ids made from now
/// on.
fn mark_replay(tx: &Transaction<'_>, since: i64, label: i64) -> Result<(u64, Option<i64>)> {
    let rows = tx
        .execute(
            "UPDATE sends SET doubt_since = coalesce(min(doubt_since, ?1), ?1)
         WHERE status IN ('queued', 'leased')",
            [since],
        )
        .db()? as u64;
    let through: Option<i64> = tx
        .query_row("SELECT max(id) FROM campaigns", [], |r| r.get(0))
        .db()?;
    tx.execute(
        "UPDATE guard SET replay_since = coalesce(min(replay_since, ?1), ?1),
                          replay_through = max(coalesce(replay_through, 0), coalesce(?2, 0))
         WHERE singleton = 1",
        rusqlite::params![since, through],
    )
    .db()?;
    tx.execute(
        "INSERT INTO guard_epochs (label, adopted_at, campaigns_through, subscribers_through,
                                   lists_through, messages_through)
         VALUES (?2, ?1, (SELECT coalesce(max(id), 0) FROM campaigns),
                 (SELECT coalesce(max(id), 0) FROM subscribers),
                 (SELECT coalesce(max(id), 0) FROM lists),
                 (SELECT coalesce(max(id), 0) FROM api_messages))",
        [now_ms(), label],
    )
    .db()?;
    Ok((rows, through))
}

impl SqliteStore {
    pub(super) fn guard_state_impl(&self) -> Result<GuardState> {
        let here = self
            .guard
            .as_ref()
            .map_or_else(|| here(self.path()), |g| g.here.clone());
        let mark_path = watermark_path(self.path());
        // The watermark first: it never passes a committed claim, so a counter read after it
        // is at least as far, even while other workers keep claiming.
        let watermark = read_mark(&mark_path);
        self.read(|c| {
            let (generation, heartbeat_at, adopted_at) = read_guard_row(c)?;
            let (moved_to, moved_at) = moved(c)?;
            Ok(GuardState {
                installation: c
                    .query_row("SELECT id FROM installation", [], |r| r.get(0))
                    .db()?,
                owner: owner(c)?,
                here,
                generation,
                heartbeat_at,
                adopted_at,
                watermark,
                watermark_path: mark_path.display().to_string(),
                enforced: self.guard.as_ref().is_none_or(|g| g.enforced),
                moved_to,
                moved_at,
            })
        })
    }

    pub fn claim_ownership(&self) -> Result<()> {
        let g = self.guard_ctx()?;
        let generation = self.write(|tx| {
            tx.execute(
                "UPDATE guard SET host = ?1, path = ?2 WHERE singleton = 1 AND host IS NULL",
                rusqlite::params![g.here.host, g.here.path],
            )
            .db()?;
            Ok(read_guard_row(tx)?.0)
        })?;
        // A watermark exists before the first claim (a file from before the guard has none
        // yet): a kill right after that claim's commit must not leave a counter above 0 with no
        // watermark, which reads as a deleted one.
        if g.enforced {
            let _one = g.mark.lock().unwrap_or_else(|p| p.into_inner());
            write_mark(&g.mark_path, &g.installation, generation, now_ms(), false)?;
        }
        Ok(())
    }

    pub fn adopt(&self, behind_of: Option<i64>) -> Result<Adopted> {
        let g = self.guard_ctx()?;
        let mark = read_mark(&g.mark_path);
        let marked = match &mark {
            Watermark::At {
                installation,
                generation,
                ..
            } if *installation == g.installation => *generation,
            _ => 0,
        };
        let now = now_ms();
        let adopted = self.write(|tx| {
            let previous_owner = owner(tx)?;
            let (generation, heartbeat_at, adopted_at) = read_guard_row(tx)?;
            let ahead = marked.max(behind_of.unwrap_or(0));
            let went_back = generation < ahead;
            let generation = generation.max(ahead);
            let (mut rows_marked, mut replay_through, mut replay_since) = (0, None, None);
            if went_back {
                // The lost timeline claimed after the last claim this file remembers.
                let since = heartbeat_at.or(adopted_at).unwrap_or(0);
                (rows_marked, replay_through) = mark_replay(tx, since, generation)?;
                replay_since = Some(since);
            }
            tx.execute(
                "UPDATE guard SET host = ?1, path = ?2, adopted_at = ?3, generation = ?4
                 WHERE singleton = 1",
                rusqlite::params![g.here.host, g.here.path, now, generation],
            )
            .db()?;
            Ok(Adopted {
                previous_owner,
                owner: g.here.clone(),
                went_back,
                replay_since,
                rows_marked,
                replay_through,
                generation,
            })
        })?;
        write_mark(&g.mark_path, &g.installation, adopted.generation, now, true)?;
        Ok(adopted)
    }

    pub(super) fn quick_check_impl(&self, full: bool) -> Result<Vec<String>> {
        let sql = if full {
            "PRAGMA integrity_check"
        } else {
            "PRAGMA quick_check"
        };
        self.read(|c| {
            let mut st = c.prepare(sql).db()?;
            let found = st
                .query_map([], |r| r.get::<_, String>(0))
                .db()?
                .collect::<rusqlite::Result<Vec<_>>>()
                .db()?;
            Ok(found.into_iter().filter(|l| l != "ok").collect())
        })
    }

    pub fn backup_to(&self, to: &Path) -> Result<()> {
        let io = |what: &str, e: std::io::Error| Error::io(&format!("{what} {}", to.display()), e);
        match std::fs::symlink_metadata(to) {
            Ok(_) => {
                return Err(Error::invalid(format!(
                    "{} already exists; a backup never overwrites a file (choose a new name)",
                    to.display()
                )))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("cannot look at", e)),
        }
        // Owner-only from the first byte: VACUUM INTO accepts an empty file.
        sendonce_domain::files::options()
            .write(true)
            .create_new(true)
            .open(to)
            .map_err(|e| io("cannot create the backup", e))?;
        let target = to
            .to_str()
            .ok_or_else(|| Error::invalid(format!("{} is not a UTF-8 path", to.display())))?;
        let made = self.read(|c| {
            c.execute("VACUUM INTO ?1", [target]).db()?;
            Ok(())
        });
        if let Err(e) = made {
            let _ = std::fs::remove_file(to);
            return Err(e.context("the backup failed (the partial file was removed)"));
        }
        // A descriptor of our own on the backup is safe to close: the file is new (refused if
        // it existed) and no connection of this process has it open once VACUUM INTO returned.
        // Not `dbfile`'s kept one: a server that backs up every night must not keep every
        // rotated-away backup open.
        File::open(to)
            .and_then(|f| f.sync_all())
            .map_err(|e| io("cannot sync the backup", e))?;
        sync_dir(to)
    }
}

/// What `restore` did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Restored {
    pub from: String,
    pub db: String,
    pub counts: LedgerCounts,
    pub adopted: Adopted,
    /// The claim counter of the file that was replaced (or its watermark), if it could be read.
    pub replaced_generation: Option<i64>,
    /// Where the replaced database was kept (with its `-wal`), if there was one.
    pub kept: Option<String>,
    /// Opt-outs the replaced file had and the backup did not, carried into the restored file.
    pub opt_outs: Option<OptOuts>,
    /// Why the replaced file's opt-outs could not be carried (check them by hand).
    pub opt_outs_error: Option<String>,
}

/// Opt-outs carried from a replaced file into a restored one.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct OptOuts {
    pub suppressions: u64,
    pub subscribers: u64,
    pub memberships: u64,
}

/// Put the backup `from` in place of the database `db` (refused while any process has `db`
/// open for writing), carry over the opt-outs the replaced file recorded after the backup, then
/// adopt it. The backup is copied beside `db`, opened (and upgraded), checked with
/// `quick_check` and synced before anything is replaced. The replaced database stays under
/// `DB.replaced-MS` (hard links, with its `-wal`); `db`'s own `-wal` and `-shm` are unlinked
/// before the rename, so they cannot be replayed onto the restored file.
pub fn restore(from: &Path, db: &Path, opts: &OpenOptions) -> Result<Restored> {
    let lock = super::dbfile::lock_exclusive(db)?;
    let replaced_generation = replaced_generation(db, opts);
    let tmp = PathBuf::from(format!("{}.restoring", db.display()));
    remove_with_sides(&tmp);
    let copied = copy_private(from, &tmp).and_then(|()| check_copy(&tmp, opts));
    if let Err(e) = copied {
        remove_with_sides(&tmp);
        return Err(e);
    }
    let kept = match lock {
        Some(_) => Some(keep_replaced(db)?),
        None => None,
    };
    for side in ["-wal", "-shm"] {
        let p = PathBuf::from(format!("{}{side}", db.display()));
        match std::fs::remove_file(&p) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(Error::io(&format!("cannot remove {}", p.display()), e))
            }
            _ => {}
        }
    }
    std::fs::rename(&tmp, db)
        .map_err(|e| Error::io(&format!("cannot move the backup to {}", db.display()), e))?;
    sync_dir(db)?;
    drop(lock);
    let store = SqliteStore::open(db, opts)?;
    let (opt_outs, opt_outs_error) = match &kept {
        None => (None, None),
        Some(k) => match store.carry_opt_outs(k) {
            Ok(o) => (Some(o), None),
            Err(e) => (None, Some(e.message)),
        },
    };
    let adopted = store.adopt(replaced_generation)?;
    Ok(Restored {
        from: from.display().to_string(),
        db: db.display().to_string(),
        counts: store.ledger_counts()?,
        adopted,
        replaced_generation,
        kept: kept.map(|k| k.display().to_string()),
        opt_outs,
        opt_outs_error,
    })
}

/// Keep the database being replaced as `DB.replaced-MS` (and its `-wal`): hard links, so the
/// live names are untouched until the switch and nothing is copied.
fn keep_replaced(db: &Path) -> Result<PathBuf> {
    let kept = PathBuf::from(format!("{}.replaced-{}", db.display(), now_ms()));
    let link = |from: &Path, to: &Path| {
        std::fs::hard_link(from, to).map_err(|e| {
            Error::io(
                &format!("cannot keep {} as {}", from.display(), to.display()),
                e,
            )
        })
    };
    link(db, &kept)?;
    let wal = PathBuf::from(format!("{}-wal", db.display()));
    if wal.exists() {
        link(&wal, &PathBuf::from(format!("{}-wal", kept.display())))?;
    }
    sync_dir(db)?;
    Ok(kept)
}

impl SqliteStore {
    /// Carry into this (restored) database the opt-outs `kept` (the file it replaced, same
    /// installation) recorded: suppressions, unsubscribed or bounced subscribers (the same id
    /// and address) and list unsubscribes. A restore must never bring an opt-out back.
    fn carry_opt_outs(&self, kept: &Path) -> Result<OptOuts> {
        let path = kept
            .to_str()
            .ok_or_else(|| Error::invalid(format!("{} is not a UTF-8 path", kept.display())))?;
        let _turn = self.turn();
        let c = self.conn()?;
        c.execute("ATTACH DATABASE ?1 AS replaced", [path]).db()?;
        let carried = carry_attached(&c, kept);
        let _ = c.execute("DETACH DATABASE replaced", []);
        carried
    }
}

/// The copy of [`SqliteStore::carry_opt_outs`], with the replaced file attached.
fn carry_attached(c: &rusqlite::Connection, kept: &Path) -> Result<OptOuts> {
    let same: bool = c
        .query_row(
            "SELECT (SELECT id FROM main.installation) = (SELECT id FROM replaced.installation)",
            [],
            |r| r.get(0),
        )
        .db()?;
    if !same {
        return Err(Error::invalid(format!(
            "{} is another installation's database: its opt-outs were not carried",
            kept.display()
        )));
    }
    c.execute_batch("BEGIN IMMEDIATE").db()?;
    let run = || -> Result<OptOuts> {
        Ok(OptOuts {
            suppressions: c.execute(CARRY_SUPPRESSIONS, []).db()? as u64,
            subscribers: c.execute(CARRY_SUBSCRIBERS, []).db()? as u64,
            memberships: c.execute(CARRY_MEMBERSHIPS, []).db()? as u64,
        })
    };
    match run() {
        Ok(o) => {
            c.execute_batch("COMMIT").db()?;
            Ok(o)
        }
        Err(e) => {
            let _ = c.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

const CARRY_SUPPRESSIONS: &str = "INSERT OR IGNORE INTO main.suppressions
     (account_id, channel, address, reason, source, created_at)
     SELECT r.account_id, r.channel, r.address, r.reason, r.source, r.created_at
     FROM replaced.suppressions r WHERE r.account_id IN (SELECT id FROM main.accounts)";

const CARRY_SUBSCRIBERS: &str = "UPDATE main.subscribers SET status = r.status
     FROM replaced.subscribers r
     WHERE r.id = subscribers.id AND r.status IN ('unsubscribed', 'bounced')
       AND subscribers.status NOT IN ('unsubscribed', 'bounced')
       AND r.email_norm IS subscribers.email_norm AND r.phone IS subscribers.phone";

const CARRY_MEMBERSHIPS: &str = "UPDATE main.list_members SET status = 'unsubscribed',
     updated_at = r.updated_at
     FROM replaced.list_members r
     WHERE r.list_id = list_members.list_id AND r.subscriber_id = list_members.subscriber_id
       AND r.status = 'unsubscribed' AND list_members.status <> 'unsubscribed'";

/// How far the file being replaced (or its watermark) had gone, when it can be read at all:
/// the restored file is behind it if its own counter is lower.
fn replaced_generation(db: &Path, opts: &OpenOptions) -> Option<i64> {
    let from_mark = match read_mark(&watermark_path(db)) {
        Watermark::At { generation, .. } => Some(generation),
        _ => None,
    };
    let ro = OpenOptions {
        read_only: true,
        ..opts.clone()
    };
    let from_db = SqliteStore::open(db, &ro)
        .ok()
        .and_then(|s| s.read(|c| Ok(read_guard_row(c)?.0)).ok());
    from_mark.max(from_db)
}

/// `restore`'s copy. Plain descriptors are safe here: `from` is a backup that no store of this
/// process opens, `to` is made new, and `restore` runs in a command of its own.
fn copy_private(from: &Path, to: &Path) -> Result<()> {
    let mut src =
        File::open(from).map_err(|e| Error::io(&format!("cannot open {}", from.display()), e))?;
    let mut dst = sendonce_domain::files::options()
        .write(true)
        .create_new(true)
        .open(to)
        .map_err(|e| Error::io(&format!("cannot create {}", to.display()), e))?;
    std::io::copy(&mut src, &mut dst)
        .and_then(|_| dst.sync_all())
        .map_err(|e| {
            Error::io(
                &format!("cannot copy {} to {}", from.display(), to.display()),
                e,
            )
        })?;
    Ok(())
}

/// Open the copy as a sendonce database (upgrading an older schema), check it, and leave it
/// checkpointed into one file.
fn check_copy(tmp: &Path, opts: &OpenOptions) -> Result<()> {
    let store = SqliteStore::open(
        tmp,
        &OpenOptions {
            guard: false,
            ..opts.clone()
        },
    )
    .map_err(|e| e.context("the backup does not open as a sendonce database"))?;
    let problems = store.quick_check(false)?;
    if !problems.is_empty() {
        return Err(Error::new(
            ErrorKind::Damaged,
            format!(
                "the backup fails quick_check ({}); nothing was replaced",
                problems.into_iter().take(3).collect::<Vec<_>>().join("; ")
            ),
        ));
    }
    store.checkpoint_truncate()?;
    drop(store);
    let wal = PathBuf::from(format!("{}-wal", tmp.display()));
    if std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0) > 0 {
        return Err(Error::db(format!(
            "{} still has a write-ahead log after its check; nothing was replaced",
            tmp.display()
        )));
    }
    for side in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{side}", tmp.display()));
    }
    // Every connection of this process to `tmp` was closed with `store` above.
    File::open(tmp)
        .and_then(|f| f.sync_all())
        .map_err(|e| Error::io(&format!("cannot sync {}", tmp.display()), e))
}

fn remove_with_sides(p: &Path) {
    for side in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{side}", p.display()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watermark_record_round_trips_and_refuses_edits() {
        let r = encode("0123456789abcdef0123456789abcdef", 42, 1_700_000_000_000);
        assert_eq!(
            decode(&r).unwrap(),
            (
                "0123456789abcdef0123456789abcdef".to_string(),
                42,
                1_700_000_000_000
            )
        );
        let edited = r.replace(" 00000000000000000042 ", " 00000000000000000041 ");
        assert!(decode(&edited).is_err());
        assert!(decode(&r[..r.len() / 2]).is_err());
        assert!(decode("").is_err());
    }

    #[test]
    fn write_mark_keeps_the_highest_unless_forced() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("db-watermark");
        write_mark(&p, "a", 5, 1, false).unwrap();
        write_mark(&p, "a", 3, 2, false).unwrap();
        assert!(matches!(read_mark(&p), Watermark::At { generation: 5, .. }));
        write_mark(&p, "a", 3, 2, true).unwrap();
        assert!(matches!(read_mark(&p), Watermark::At { generation: 3, .. }));
        write_mark(&p, "b", 1, 2, false).unwrap();
        assert!(matches!(read_mark(&p), Watermark::At { generation: 1, .. }));
    }
}

//! The process's only descriptors of database files that SQLite did not open: one per file
//! (inode), opened on first use and never closed, for the header check and the `flock`s of
//! the clone guard and `restore`.
//!
//! Why never closed: POSIX record locks belong to the process and the file, not to a
//! descriptor, so closing *any* descriptor of a database file drops every lock SQLite's own
//! connections in this process hold on it (SQLite's "How To Corrupt An SQLite Database File",
//! §2.2). Another process that then closes its last connection believes it is the last one,
//! checkpoints and deletes `-wal` and `-shm`, and from then on this process and every other see
//! different databases: an opt-out written by one is not seen by the other. So a descriptor of
//! a database file is only ever opened here, and kept until the process exits. That costs one
//! descriptor per database file a process ever opens (a file replaced by `restore` keeps its
//! old one); `serve` and a worker open one or two.
//!
//! `flock` locks belong to the open file description, not the process, so they are safe on a
//! descriptor of their own; they are counted here so that several stores of one process share
//! the one shared lock, released when the last of them closes.

use sendonce_domain::error::{Error, ErrorKind, Result};
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

/// One database file's descriptor and how many stores of this process hold its shared lock.
struct Entry {
    file: File,
    /// Shared-lock holders in this process; `-1` while an exclusive lock is held.
    holders: Mutex<i64>,
}

/// Kept descriptors by (device, inode).
type Registry = Mutex<HashMap<(u64, u64), Arc<Entry>>>;

/// Every descriptor this module ever opened, by (device, inode). Entries are never removed.
fn registry() -> &'static Registry {
    static FILES: OnceLock<Registry> = OnceLock::new();
    FILES.get_or_init(Default::default)
}

/// The kept descriptor of the file at `path` now; `Ok(None)` when there is no file there.
fn entry(path: &Path) -> std::io::Result<Option<Arc<Entry>>> {
    let at = match std::fs::metadata(path) {
        Ok(m) => (m.dev(), m.ino()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut files = registry().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(e) = files.get(&at) {
        return Ok(Some(e.clone()));
    }
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    let key = (meta.dev(), meta.ino());
    if let Some(e) = files.get(&key) {
        // Replaced between the stat and the open by a file this process already holds: keep
        // the new descriptor open too (closing it would drop that file's locks).
        std::mem::forget(file);
        return Ok(Some(e.clone()));
    }
    let e = Arc::new(Entry {
        file,
        holders: Mutex::new(0),
    });
    files.insert(key, e.clone());
    Ok(Some(e))
}

/// Make a new, empty, owner-only database file at `path` (nothing when one is there already);
/// its descriptor is kept like any other, since SQLite in another thread may open the file the
/// moment it exists.
pub(super) fn create(path: &Path) -> std::io::Result<()> {
    let file = match sendonce_domain::files::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    let mut files = registry().lock().unwrap_or_else(|p| p.into_inner());
    match files.entry((meta.dev(), meta.ino())) {
        std::collections::hash_map::Entry::Occupied(_) => std::mem::forget(file),
        std::collections::hash_map::Entry::Vacant(v) => {
            v.insert(Arc::new(Entry {
                file,
                holders: Mutex::new(0),
            }));
        }
    }
    Ok(())
}

/// What is at a database path before SQLite touches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FileState {
    Missing,
    /// Zero bytes: SQLite would silently make it a new database.
    Empty,
    Sqlite,
}

const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// Refuse a file that exists and is not a SQLite database, before SQLite touches it. The first
/// 16 bytes are read through the kept descriptor (a positioned read: no shared offset).
pub(super) fn check_header(path: &Path) -> Result<FileState> {
    let cannot = |what: &str, e| Error::io(&format!("cannot {what} {}", path.display()), e);
    let Some(e) = entry(path).map_err(|e| cannot("open", e))? else {
        return Ok(FileState::Missing);
    };
    let mut head = [0u8; 16];
    let mut got = 0;
    while got < head.len() {
        match e.file.read_at(&mut head[got..], got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => return Err(cannot("read", err)),
        }
    }
    if got == 0 {
        return Ok(FileState::Empty);
    }
    if &head[..got] != SQLITE_MAGIC.as_slice() {
        return Err(Error::db(format!(
            "{} is not a sendonce database (not a SQLite file); it was left untouched",
            path.display()
        )));
    }
    Ok(FileState::Sqlite)
}

/// `flock(2)` on a kept descriptor.
fn flock(f: &File, op: libc::c_int) -> std::io::Result<()> {
    // SAFETY: flock on a descriptor the registry owns and never closes.
    match unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(f), op) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// A shared `flock` on a database file, held by one store; released (the lock, never the
/// descriptor) when the last holder of this process drops.
pub(crate) struct Shared {
    entry: Arc<Entry>,
}

impl Shared {
    /// The (device, inode) the lock is on.
    fn inode(&self) -> std::io::Result<(u64, u64)> {
        let m = self.entry.file.metadata()?;
        Ok((m.dev(), m.ino()))
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let mut n = self.entry.holders.lock().unwrap_or_else(|p| p.into_inner());
        *n -= 1;
        if *n == 0 {
            let _ = flock(&self.entry.file, libc::LOCK_UN);
        }
    }
}

/// Take (or join this process's) shared `flock` on the file at `db`, waiting while a
/// `restore` holds it exclusively. `Ok(None)`: no file there.
fn shared_once(db: &Path) -> std::io::Result<Option<Shared>> {
    let Some(entry) = entry(db)? else {
        return Ok(None);
    };
    {
        // Held across the wait: another store of this process opening the same file waits
        // with it, and a holder dropping meanwhile cannot unlock what this one is taking.
        let mut n = entry.holders.lock().unwrap_or_else(|p| p.into_inner());
        if *n < 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::WouldBlock,
                "this process holds the file exclusively",
            ));
        }
        if *n == 0 {
            flock(&entry.file, libc::LOCK_SH)?;
        }
        *n += 1;
    }
    Ok(Some(Shared { entry }))
}

/// A shared `flock` on the database file, taken before SQLite opens it and held while the
/// store is open. It waits for a `restore` in progress (which holds it exclusively); if the
/// file was replaced meanwhile, the lock is taken again on the new one, so a store never works
/// on a file that is no longer at its path.
pub(crate) fn hold_shared(db: &Path) -> Result<Shared> {
    let err = |what: &str, e| Error::io(&format!("{what} {}", db.display()), e);
    for _ in 0..5 {
        let held = shared_once(db)
            .map_err(|e| err("cannot lock", e))?
            .ok_or_else(|| Error::invalid(format!("no database at {}", db.display())))?;
        let at = held.inode().map_err(|e| err("cannot stat", e))?;
        let now = std::fs::metadata(db).map_err(|e| err("cannot stat", e))?;
        if at == (now.dev(), now.ino()) {
            return Ok(held);
        }
    }
    Err(Error::new(
        ErrorKind::Busy,
        format!("{} keeps being replaced while it is opened", db.display()),
    ))
}

/// An exclusive `flock` on a database file; released (the lock, never the descriptor) on drop.
pub(crate) struct Exclusive {
    entry: Arc<Entry>,
}

impl Drop for Exclusive {
    fn drop(&mut self) {
        let mut n = self.entry.holders.lock().unwrap_or_else(|p| p.into_inner());
        *n = 0;
        let _ = flock(&self.entry.file, libc::LOCK_UN);
    }
}

/// Take an exclusive `flock` on `db` without waiting. Refused while any process, this one
/// included, has the database open for writing (each writable store holds a shared one).
/// `Ok(None)`: no file there.
pub(crate) fn lock_exclusive(db: &Path) -> Result<Option<Exclusive>> {
    let busy = || {
        Error::new(
            ErrorKind::Busy,
            format!(
                "{} is open for writing by another process (a worker, `serve`, or another \
                 command): stop it first; nothing was changed",
                db.display()
            ),
        )
    };
    let Some(entry) =
        entry(db).map_err(|e| Error::io(&format!("cannot open {}", db.display()), e))?
    else {
        return Ok(None);
    };
    {
        let mut n = entry.holders.lock().unwrap_or_else(|p| p.into_inner());
        if *n != 0 || flock(&entry.file, libc::LOCK_EX | libc::LOCK_NB).is_err() {
            return Err(busy());
        }
        *n = -1;
    }
    Ok(Some(Exclusive { entry }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kept descriptor is shared by every caller and survives them: a second look at the
    /// same file opens nothing new.
    #[test]
    fn one_descriptor_per_file_kept_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("x.db");
        std::fs::write(&db, b"SQLite format 3\0rest").expect("write");
        assert_eq!(check_header(&db).expect("header"), FileState::Sqlite);
        let a = entry(&db).expect("entry").expect("some");
        let b = entry(&db).expect("entry").expect("some");
        assert!(Arc::ptr_eq(&a, &b));
        std::fs::write(dir.path().join("empty.db"), b"").expect("write");
        assert_eq!(
            check_header(&dir.path().join("empty.db")).expect("header"),
            FileState::Empty
        );
        assert_eq!(
            check_header(&dir.path().join("none.db")).expect("header"),
            FileState::Missing
        );
        std::fs::write(dir.path().join("text.db"), b"hello").expect("write");
        assert!(check_header(&dir.path().join("text.db")).is_err());
    }

    /// Two stores of one process share the shared lock; the exclusive one is refused until the
    /// last of them lets go, and then taken.
    #[test]
    fn shared_lock_counted_per_process() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("x.db");
        std::fs::write(&db, b"SQLite format 3\0").expect("write");
        let one = hold_shared(&db).expect("one");
        let two = hold_shared(&db).expect("two");
        drop(one);
        assert!(lock_exclusive(&db).is_err(), "one holder left");
        drop(two);
        let ex = lock_exclusive(&db).expect("exclusive").expect("file");
        assert!(hold_shared(&db).is_err(), "refused while held exclusively");
        drop(ex);
        drop(hold_shared(&db).expect("again"));
    }
}

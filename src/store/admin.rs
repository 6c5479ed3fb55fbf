//! Opening options and the installation's own questions (id, path, journal, integrity), the
//! `Admin` trait every backend implements.

use crate::error::Result;
use std::path::Path;
use std::time::Duration;

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
    /// Open read-only: nothing is written (no WAL switch, no migration), so reports work on a
    /// file the user can only read.
    pub read_only: bool,
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
            read_only: false,
            sync: Sync::Full,
            busy_timeout: Duration::from_secs(10),
            pool_size: 4,
        }
    }
}

/// The installation: what a database says about itself.
pub trait Admin: Send + std::marker::Sync {
    /// True when the store was opened as an immutable snapshot (it does not see later writes);
    /// commands that follow a database over time refuse it.
    fn is_snapshot(&self) -> bool;
    /// The id of this installation (created with the database; a copy keeps it). Part of every
    /// campaign job id, and so of every provider idempotency key.
    fn installation_id(&self) -> Result<String>;
    /// Where the database is (for messages).
    fn path(&self) -> &Path;
    /// The backend's integrity check; `ok` when sound (the crash suite asserts it).
    fn integrity_check(&self) -> Result<String>;
    /// The journal mode as the backend reports it now.
    fn journal_mode(&self) -> Result<String>;
    /// `Ok` when a write transaction can be taken now (the lock, then an empty commit): what
    /// `/readyz` reports as "database writable".
    fn check_writable(&self) -> Result<()>;
    /// Sends in doubt in the whole database (for `/metrics`): counted through the backend's
    /// index of in-doubt rows, so its cost follows the rows in doubt, not the ledger's size.
    fn in_doubt_count(&self) -> Result<u64>;
    /// Bytes of the write-ahead log (0 when there is none), for `/metrics`.
    fn wal_bytes(&self) -> Result<u64>;
}

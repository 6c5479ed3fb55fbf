//! Opening options and the installation's own questions (id, path, journal, integrity), the
//! `Admin` trait every backend implements.

use crate::sql::{Arg, Db, Tx};
use sendonce_domain::error::Result;
use std::path::Path;
use std::time::Duration;

/// How durable a commit is. `Full` is the default: with `Normal` a committed marker can roll
/// back on power loss, which breaks the exactly-once promise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Synchronous {
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
    pub sync: Synchronous,
    /// How long a connection waits for another writer before reporting the database busy.
    pub busy_timeout: Duration,
    /// Connections in the pool.
    pub pool_size: u32,
    /// Enforce the clone guard and keep the time-travel watermark (see `schema/0011_guard.sql`).
    /// Off only for `notify`'s state file, which CI caches move between machines on purpose.
    pub guard: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            create: false,
            read_only: false,
            sync: Synchronous::Full,
            busy_timeout: Duration::from_secs(10),
            pool_size: 4,
            guard: true,
        }
    }
}

/// The installation: what a database says about itself.
pub trait Admin: Send + std::marker::Sync {
    /// Where the database is (for messages).
    fn path(&self) -> &Path;
    /// The backend's integrity check; `ok` when sound (the crash suite asserts it).
    fn integrity_check(&self) -> Result<String>;
    /// The journal mode as the backend reports it now.
    fn journal_mode(&self) -> Result<String>;
    /// `Ok` when a write transaction can be taken now (the lock, then an empty commit): what
    /// `/readyz` reports as "database writable".
    fn check_writable(&self) -> Result<()>;
    /// The clone guard and the watermark, read now.
    fn guard_state(&self) -> Result<GuardState>;
    /// The backend's quick consistency check (`full`: the complete one); empty when sound,
    /// else the problems it found.
    fn quick_check(&self, full: bool) -> Result<Vec<String>>;
}

/// Where a process works on a database: the machine and the file's absolute path.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Place {
    pub host: String,
    pub path: String,
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} on host {}", self.path, self.host)
    }
}

/// The watermark kept outside the database file, as read from disk.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Watermark {
    /// No watermark file: nothing was ever claimed here, or the file is new in this place.
    Missing,
    /// The highest claim generation written beside the database, by which installation, when.
    At {
        installation: String,
        generation: i64,
        at: i64,
    },
    /// A watermark file that does not read back (edited or torn): treated as a warning that
    /// something happened to the files, never as "nothing happened".
    Unreadable { reason: String },
}

/// What the clone guard and the time-travel watermark know about an open database.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GuardState {
    pub installation: String,
    /// The place recorded as the owner (None: a file from before the guard, not claimed yet).
    pub owner: Option<Place>,
    /// This process's place.
    pub here: Place,
    /// Claim transactions that leased rows, as the database counts them.
    pub generation: i64,
    /// Time of the last such claim.
    pub heartbeat_at: Option<i64>,
    pub adopted_at: Option<i64>,
    pub watermark: Watermark,
    /// Where the watermark lives.
    pub watermark_path: String,
    /// False for a store opened without the guard (`notify`'s state file).
    pub enforced: bool,
    /// Where `sendonce migrate-store` moved this file's data (a URL without its password), and
    /// when: a worker refuses to send from a moved file (`schema/0012_moved.sql`).
    pub moved_to: Option<String>,
    pub moved_at: Option<i64>,
}

/// What `adopt` changed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Adopted {
    pub previous_owner: Option<Place>,
    pub owner: Place,
    /// The database was behind its watermark (or behind the file it replaced): it went back in
    /// time, and rows that the lost timeline may have sent are now treated as possibly
    /// delivered.
    pub went_back: bool,
    /// From when a lost call may have gone out (the last claim the database remembers).
    pub replay_since: Option<i64>,
    /// Unfinished rows marked as possibly delivered.
    pub rows_marked: u64,
    /// Campaigns (id <= this) whose rows, present or built later, are treated so.
    pub replay_through: Option<i64>,
    pub generation: i64,
}

/// Counts of a database, for `backup` and `restore` to print.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LedgerCounts {
    /// Campaigns people made, as `campaign list` shows them (the streams that hold API
    /// messages, confirmations and notifications are not counted here).
    pub campaigns: u64,
    pub subscribers: u64,
    pub sends: u64,
    pub sent: u64,
    pub in_doubt: u64,
    pub unfinished: u64,
    pub suppressions: u64,
}

/// Overrides the machine id (a container whose `/etc/machine-id` changes with every image, or is
/// shared by clones).
pub const HOST_ENV: &str = "SENDONCE_HOST_ID";

/// This machine's id: `SENDONCE_HOST_ID`, else systemd's machine id, else the host name.
pub(crate) fn host_id() -> String {
    if let Some(v) = std::env::var(HOST_ENV)
        .ok()
        .filter(|v| !v.trim().is_empty())
    {
        return v.trim().to_string();
    }
    for f in ["/etc/machine-id", "/var/lib/dbus/machine-id"] {
        if let Ok(text) = std::fs::read_to_string(f) {
            let id = text.trim();
            if !id.is_empty() {
                return id.to_string();
            }
        }
    }
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into the buffer we own.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let name = if rc == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        String::new()
    };
    format!("hostname:{name}")
}

/// What a database says about itself and its ledger, written once for both stores.
pub trait Installation: Send + std::marker::Sync {
    /// The id of this installation (created with the database; a copy keeps it). Part of every
    /// campaign job id, and so of every provider idempotency key.
    fn installation_id(&self) -> Result<String>;
    /// Sends in doubt in the whole database (for `/metrics`): counted through the index of
    /// in-doubt rows, so its cost follows the rows in doubt, not the ledger's size.
    fn in_doubt_count(&self) -> Result<u64>;
    /// The scope of the job id of this campaign's send to this subscriber
    /// (`model::key_scope`).
    fn key_scope(&self, campaign_id: i64, subscriber_id: i64) -> Result<String>;
    /// The database's ledger counts.
    fn ledger_counts(&self) -> Result<LedgerCounts>;
}

impl<S: Db> Installation for S {
    fn installation_id(&self) -> Result<String> {
        self.read(|tx| tx.scalar("SELECT id FROM installation WHERE singleton = 1", &[]))
    }

    fn in_doubt_count(&self) -> Result<u64> {
        self.read(|tx| {
            let n: i64 = tx.scalar(tx.dialect().in_doubt_count, &[])?;
            Ok(n.max(0) as u64)
        })
    }

    fn key_scope(&self, campaign_id: i64, subscriber_id: i64) -> Result<String> {
        self.read(|tx| {
            key_scope(
                tx,
                &[
                    ("campaigns_through", campaign_id),
                    ("subscribers_through", subscriber_id),
                ],
            )
        })
    }

    fn ledger_counts(&self) -> Result<LedgerCounts> {
        self.read(|tx| {
            let n: Vec<i64> = tx
                .query(
                    "SELECT (SELECT count(*) FROM campaigns WHERE kind = 'campaign'),
                            (SELECT count(*) FROM subscribers),
                            (SELECT count(*) FROM sends),
                            (SELECT count(*) FROM sends WHERE status = 'sent'),
                            (SELECT count(*) FROM sends WHERE status = 'in_doubt'),
                            (SELECT count(*) FROM sends WHERE status IN ('queued', 'leased')),
                            (SELECT count(*) FROM suppressions)",
                    &[],
                    |r| (0..7).map(|i| r.get::<i64>(i)).collect::<Result<Vec<_>>>(),
                )?
                .into_iter()
                .next()
                .unwrap_or_default();
            let at = |i: usize| n.get(i).copied().unwrap_or(0).max(0) as u64;
            Ok(LedgerCounts {
                campaigns: at(0),
                subscribers: at(1),
                sends: at(2),
                sent: at(3),
                in_doubt: at(4),
                unfinished: at(5),
                suppressions: at(6),
            })
        })
    }
}

/// The scope of a job made from these ids (column of `guard_epochs`, id): the installation,
/// with the highest label of the epochs any of the ids is above (`guard_epochs` gets a row when
/// a SQLite file adopts a lost timeline: ids made after it get a new scope, so their provider
/// keys differ from the lost timeline's). The columns are constants of the callers, the ids
/// bound.
pub(crate) fn key_scope(tx: &mut dyn Tx, ids: &[(&str, i64)]) -> Result<String> {
    let installation: String = tx.scalar("SELECT id FROM installation WHERE singleton = 1", &[])?;
    let epoch: i64 = if ids.is_empty() {
        0
    } else {
        let above: Vec<String> = ids
            .iter()
            .enumerate()
            .map(|(i, (col, _))| format!("?{} > {col}", i + 1))
            .collect();
        let args: Vec<Arg<'_>> = ids.iter().map(|(_, id)| Arg::Int(*id)).collect();
        tx.scalar(
            &format!(
                "SELECT CAST(coalesce(max(label), 0) AS BIGINT) FROM guard_epochs WHERE {}",
                above.join(" OR ")
            ),
            &args,
        )?
    };
    Ok(sendonce_domain::model::key_scope(&installation, epoch))
}

//! Guarding the file before sending, and the operator's tools around it: the check a worker
//! runs before its first claim (clone guard, time-travel watermark, `quick_check`), `adopt`,
//! `backup` and `restore`.

use sendonce_domain::clock;
use sendonce_domain::error::{Error, ErrorKind, Result};
use sendonce_store::{
    Admin, Adopted, GuardState, Installation, LedgerCounts, OpenOptions, Store, Watermark,
};
use serde::Serialize;
use std::path::Path;

/// Files up to this size get `quick_check` before a worker's first claim (about a second per
/// 100 MB here); a larger one is left to `sendonce doctor`, and the worker says so.
pub const START_CHECK_MAX_BYTES: u64 = 1 << 30;

/// Overrides [`START_CHECK_MAX_BYTES`] (bytes; 0 turns the check off).
pub const START_CHECK_ENV: &str = "SENDONCE_START_CHECK_MAX_BYTES";

/// The size limit of the check before the first claim.
fn start_check_limit() -> Result<u64> {
    match std::env::var(START_CHECK_ENV) {
        Err(_) => Ok(START_CHECK_MAX_BYTES),
        Ok(v) => v.trim().parse().map_err(|_| {
            Error::invalid(format!(
                "{START_CHECK_ENV} must be a number of bytes (0 turns the check off), not {v:?}"
            ))
        }),
    }
}

/// Why the guard refuses to send from this file, if it does.
pub fn refusal(st: &GuardState) -> Option<String> {
    // Before `enforced`: a moved file never sends, guard or not.
    if let Some(to) = &st.moved_to {
        return Some(sendonce_store::sqlite::guard::moved_refusal(
            to,
            st.moved_at,
        ));
    }
    if !st.enforced {
        return None;
    }
    let adopt = format!("`sendonce adopt --db {}`", st.here.path);
    if let Some(owner) = st.owner.as_ref().filter(|o| **o != st.here) {
        let seen = st.heartbeat_at.map_or(String::new(), |t| {
            format!(" (its last claim: {})", clock::format_ms(t))
        });
        return Some(format!(
            "this database is a copy: it belongs to {owner}{seen}, and this process works on \
             {}. A worker on a copy sends again what the original sends. If the file was moved \
             or restored on purpose and the original will never run again, run {adopt}",
            st.here
        ));
    }
    let behind = |what: String| {
        format!(
            "this database went back in time: {what}. A lost -wal, a snapshot or backup put in \
             place of the live file, or a disk that lost writes; rows claimed in the lost part \
             may have been sent. Run {adopt} to go on: every unfinished row is then treated as \
             possibly delivered (retried with the same key inside an idempotent provider's \
             window, otherwise parked in doubt for `sendonce doubts`)"
        )
    };
    match &st.watermark {
        Watermark::At {
            installation,
            generation,
            at,
        } => {
            if *installation != st.installation {
                Some(format!(
                    "the watermark {} belongs to installation {installation}, but this database \
                     is installation {}: the file was replaced by another database. If that \
                     was deliberate, run {adopt}",
                    st.watermark_path, st.installation
                ))
            } else if *generation > st.generation {
                Some(behind(format!(
                    "it remembers {} claims, its watermark {} says {generation} (written {})",
                    st.generation,
                    st.watermark_path,
                    clock::format_ms(*at)
                )))
            } else {
                None
            }
        }
        Watermark::Missing if st.generation > 0 => Some(behind(format!(
            "it has made {} claims here, but its watermark {} is gone (deleted, or the \
             database was copied without it)",
            st.generation, st.watermark_path
        ))),
        Watermark::Missing => None,
        Watermark::Unreadable { reason } => Some(behind(format!(
            "its watermark {} does not read back ({reason})",
            st.watermark_path
        ))),
    }
}

/// Before a worker's first claim: refuse a copy, a file gone back in time, or a damaged file
/// (`quick_check`, for files up to [`START_CHECK_MAX_BYTES`] or `SENDONCE_START_CHECK_MAX_BYTES`); record this place as the owner
/// of a file that has none yet.
pub fn before_sending(store: &Store) -> Result<()> {
    let st = store.guard_state()?;
    if let Some(why) = refusal(&st) {
        return Err(Error::new(ErrorKind::Guarded, why));
    }
    let size = std::fs::metadata(store.path())
        .map(|m| m.len())
        .unwrap_or(0);
    let limit = start_check_limit()?;
    if limit > 0 && size <= limit {
        // A page SQLite cannot read makes quick_check itself fail ("database disk image is
        // malformed") instead of listing problems: that is damage too.
        let problems = match store.quick_check(false) {
            Ok(p) => p,
            Err(e) if matches!(e.kind, ErrorKind::Database | ErrorKind::Damaged) => vec![e.message],
            Err(e) => return Err(e),
        };
        if !problems.is_empty() {
            return Err(damaged_at_start(store.path(), &problems));
        }
    } else {
        tracing::warn!(
            bytes = size,
            limit,
            "no quick_check before sending ({START_CHECK_ENV} is 0, or below the file's size); \
             run `sendonce doctor` to check it"
        );
    }
    if let (true, Some(file)) = (st.enforced, store.file()) {
        file.claim_ownership()?;
    }
    Ok(())
}

fn damaged_at_start(path: &Path, problems: &[String]) -> Error {
    let shown: Vec<&str> = problems.iter().take(3).map(String::as_str).collect();
    Error::new(
        ErrorKind::Guarded,
        format!(
            "{} is damaged (quick_check: {}{}); nothing was sent. Restore the latest backup \
             with `sendonce restore BACKUP --db {}` (rows the backup does not know as finished \
             are then treated as possibly delivered), or inspect it with `sendonce doctor`",
            path.display(),
            shown.join("; "),
            if problems.len() > 3 { "; …" } else { "" },
            path.display()
        ),
    )
}

/// `sendonce adopt`: this place becomes the owner of the file.
pub fn adopt(store: &Store) -> Result<Adopted> {
    match store.file() {
        Some(file) => file.adopt(None),
        None => Err(Error::invalid(
            "adopt is for a SQLite file that was moved or restored; a PostgreSQL database is \
             shared by every host and has no owner to change (restore it with PostgreSQL's own \
             tools, with every worker stopped)",
        )),
    }
}

/// What `backup` made.
#[derive(Debug, Clone, Serialize)]
pub struct Backup {
    pub path: String,
    pub bytes: u64,
    pub counts: LedgerCounts,
}

/// `sendonce backup PATH`: a consistent copy made while workers run, synced, then opened on its
/// own and checked with `quick_check`.
pub fn backup(store: &Store, to: &Path, opts: &OpenOptions) -> Result<Backup> {
    let Some(file) = store.file() else {
        return Err(Error::invalid(
            "backup writes a SQLite file; back up a PostgreSQL database with pg_dump or the \
             server's own backups (pg_basebackup, WAL archiving)",
        ));
    };
    file.backup_to(to)?;
    let copy = sendonce_store::open_file(
        to,
        &OpenOptions {
            read_only: true,
            ..opts.clone()
        },
    )
    .map_err(|e| e.context(&format!("the backup {} does not open", to.display())))?;
    let problems = copy.quick_check(false)?;
    if !problems.is_empty() {
        return Err(Error::new(
            ErrorKind::Damaged,
            format!(
                "the backup {} fails quick_check: {}",
                to.display(),
                problems.join("; ")
            ),
        ));
    }
    let bytes = std::fs::metadata(to)
        .map_err(|e| Error::io(&format!("cannot read {}", to.display()), e))?
        .len();
    Ok(Backup {
        path: to.display().to_string(),
        bytes,
        counts: copy.ledger_counts()?,
    })
}

/// `sendonce restore BACKUP`: put a backup in place of the database and adopt it.
pub fn restore(
    from: &Path,
    db: &Path,
    opts: &OpenOptions,
) -> Result<sendonce_store::sqlite::Restored> {
    if !from.is_file() {
        return Err(Error::invalid(format!(
            "no backup file at {}",
            from.display()
        )));
    }
    sendonce_store::sqlite::restore(from, db, opts)
}

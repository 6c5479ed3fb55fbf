//! `sendonce migrate-store --from FILE --to postgres://…`: copy a SQLite database into an empty
//! PostgreSQL one (workers stopped: the file's exclusive lock is held throughout), verified in
//! the copy's own transaction, then mark the file as moved so no worker sends from it again.

use sendonce_domain::clock;
use sendonce_domain::error::{Error, ErrorKind, Result};
use sendonce_store::copy::Chunk;
use sendonce_store::postgres::{self, PgStore};
use sendonce_store::sqlite::export::Source;
use sendonce_store::{Admin, OpenOptions, Target};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// What `migrate-store` did.
#[derive(Debug, Clone, Serialize)]
pub struct Migrated {
    pub from: String,
    /// The target, without its password.
    pub to: String,
    /// The store the data lives in now.
    pub store: &'static str,
    /// The same id on both sides: provider idempotency keys do not change.
    pub installation: String,
    /// Rows per table, counted in the target inside the copy's transaction.
    pub rows: BTreeMap<String, u64>,
    /// SHA-256 of every send's status, attempts, fence token and markers (equal on both sides).
    pub sends_checksum: String,
    /// When the file was marked as moved.
    #[serde(serialize_with = "clock::ser_ms")]
    pub moved_at: i64,
}

/// Copy `from` into the PostgreSQL database at `to` (the full URL: it is never shown or stored;
/// [`postgres::without_password`] is).
pub fn migrate_store(from: &Path, to: &str, opts: &OpenOptions) -> Result<Migrated> {
    let target = Target::parse(Path::new(to));
    if target.url().is_none() {
        return Err(Error::invalid(format!(
            "the target must be a postgres:// or postgresql:// URL, not {}",
            target.shown()
        )));
    }
    let shown = postgres::without_password(to);
    let source = Source::open(from, opts)?;
    let st = source.store().guard_state()?;
    if let Some(why) = crate::app::guard::refusal(&st) {
        return Err(Error::new(
            ErrorKind::Guarded,
            format!("{} is not copied: {why}", from.display()),
        ));
    }
    let problems = source.store().quick_check(false)?;
    if !problems.is_empty() {
        return Err(Error::new(
            ErrorKind::Damaged,
            format!(
                "{} fails quick_check ({}); nothing was copied. Restore a backup first \
                 (`sendonce restore`)",
                from.display(),
                problems.into_iter().take(3).collect::<Vec<_>>().join("; ")
            ),
        ));
    }
    let census = source.census()?;
    let target = PgStore::open(
        to,
        &OpenOptions {
            create: true,
            read_only: false,
            ..opts.clone()
        },
    )?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Chunk>(4);
    let imported = std::thread::scope(|s| {
        let source = &source;
        let reader = s.spawn(move || {
            source.export(&mut |chunk| {
                tx.blocking_send(chunk)
                    .map_err(|_| Error::db("the target stopped reading"))
            })
        });
        let imported = target.import(rx, census);
        let read = reader
            .join()
            .unwrap_or_else(|_| Err(Error::internal("the reader of the source panicked")));
        match (imported, read) {
            (Ok(i), Ok(())) => Ok(i),
            // The reader's failure is the cause; the import only saw the stream end.
            (Err(_), Err(e)) if e.message != "the target stopped reading" => {
                Err(e.context("reading the source (nothing was written)"))
            }
            (Err(e), _) => Err(e),
            (Ok(_), Err(e)) => Err(e),
        }
    })?;
    drop(target);
    let moved_at = source.mark_moved(&shown).map_err(|e| {
        e.context(&format!(
            "the copy to {shown} committed, but {} could not be marked as moved: start no \
             worker on the file (it would send again what the new store sends)",
            from.display()
        ))
    })?;
    Ok(Migrated {
        from: from.display().to_string(),
        to: shown,
        store: "postgres",
        installation: imported.installation,
        rows: imported.rows,
        sends_checksum: imported.sends_checksum,
        moved_at,
    })
}

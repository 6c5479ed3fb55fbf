//! `sendonce migrate-store`'s source: a SQLite file held exclusively (no worker can have it
//! open for writing), read table by table as plain cells (`store::copy`), counted, and finally
//! marked as moved.

use super::dbfile::{lock_exclusive, Exclusive};
use super::guard::mark_moved;
use super::SqliteStore;
use crate::copy::{Cell, Census, Chunk, SendsChecksum, BATCH, BATCH_BYTES, TABLES};
use crate::driver::OrDb as _;
use crate::OpenOptions;
use rusqlite::types::ValueRef;
use sendonce_domain::error::{Error, ErrorKind, Result};
use std::path::{Path, PathBuf};

/// The file being moved: the exclusive `flock` (held until this is dropped) and a read-only
/// store on it.
pub struct Source {
    store: SqliteStore,
    path: PathBuf,
    busy: std::time::Duration,
    _lock: Exclusive,
}

/// The columns copied from `table`: every column, except that the guard's place (`host`,
/// `path`: a file's owner, meaningless for a server, NULL on PostgreSQL) and its moved marker
/// (a moved file is refused before this) stay behind.
fn columns(c: &rusqlite::Connection, table: &str) -> Result<Vec<String>> {
    let mut st = c
        .prepare(&format!(
            "SELECT name FROM pragma_table_info('{table}') ORDER BY cid"
        ))
        .db()?;
    let all = st
        .query_map([], |r| r.get::<_, String>(0))
        .db()?
        .collect::<rusqlite::Result<Vec<_>>>()
        .db()?;
    if all.is_empty() {
        return Err(Error::db(format!("the source has no table {table}")));
    }
    Ok(all
        .into_iter()
        .filter(|col| {
            table != "guard" || !matches!(col.as_str(), "host" | "path" | "moved_to" | "moved_at")
        })
        .collect())
}

fn cell(v: ValueRef<'_>) -> Result<Cell> {
    Ok(match v {
        ValueRef::Null => Cell::Null,
        ValueRef::Integer(i) => Cell::Int(i),
        ValueRef::Real(f) => Cell::Real(f),
        ValueRef::Text(t) => Cell::Text(
            std::str::from_utf8(t)
                .map_err(|_| Error::new(ErrorKind::Damaged, "a text value is not UTF-8"))?
                .to_string(),
        ),
        ValueRef::Blob(b) => Cell::Blob(b.to_vec()),
    })
}

impl Source {
    /// Bring the file's schema up to date (a writable open, closed again), then take the
    /// exclusive `flock` without waiting (refused while a worker, `serve` or any writing
    /// command has the file open) and open it read-only under that lock.
    pub fn open(db: &Path, opts: &OpenOptions) -> Result<Source> {
        if !db.is_file() {
            return Err(Error::invalid(format!(
                "no database file at {}",
                db.display()
            )));
        }
        drop(SqliteStore::open(
            db,
            &OpenOptions {
                create: false,
                read_only: false,
                ..opts.clone()
            },
        )?);
        let lock = lock_exclusive(db)?
            .ok_or_else(|| Error::invalid(format!("no database file at {}", db.display())))?;
        let store = SqliteStore::open(
            db,
            &OpenOptions {
                create: false,
                read_only: true,
                ..opts.clone()
            },
        )?;
        Ok(Source {
            store,
            path: db.to_path_buf(),
            busy: opts.busy_timeout,
            _lock: lock,
        })
    }

    /// The read-only store on the file (guard state, quick_check).
    pub fn store(&self) -> &SqliteStore {
        &self.store
    }

    /// Rows per table, the ledger's checksum, the installation id and the claim counter.
    pub fn census(&self) -> Result<Census> {
        self.store.read(|c| {
            let mut census = Census::default();
            for t in TABLES {
                let n: i64 = c
                    .query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))
                    .db()?;
                census.rows.insert(t.to_string(), n.max(0) as u64);
            }
            let mut sum = SendsChecksum::default();
            let mut st = c
                .prepare(&format!(
                    "SELECT {} FROM sends ORDER BY id",
                    SendsChecksum::COLUMNS
                ))
                .db()?;
            let mut rows = st.query([]).db()?;
            while let Some(r) = rows.next().db()? {
                let status: String = r.get(1).db()?;
                sum.add(
                    r.get(0).db()?,
                    &status,
                    [
                        r.get(2).db()?,
                        r.get(3).db()?,
                        r.get(4).db()?,
                        r.get(5).db()?,
                        r.get(6).db()?,
                    ],
                );
            }
            census.sends_checksum = sum.finish();
            census.installation = c
                .query_row("SELECT id FROM installation WHERE singleton = 1", [], |r| {
                    r.get(0)
                })
                .db()?;
            census.generation = c
                .query_row(
                    "SELECT generation FROM guard WHERE singleton = 1",
                    [],
                    |r| r.get(0),
                )
                .db()?;
            let mut st = c.prepare("SELECT name, seq FROM sqlite_sequence").db()?;
            let mut rows = st.query([]).db()?;
            while let Some(r) = rows.next().db()? {
                census.sequences.insert(r.get(0).db()?, r.get(1).db()?);
            }
            Ok(census)
        })
    }

    /// Stream every table to `send` in [`TABLES`] order, in batches of [`BATCH`] rows, from
    /// one read transaction; `Chunk::Done` at the end.
    pub fn export(&self, send: &mut dyn FnMut(Chunk) -> Result<()>) -> Result<()> {
        let conn = self.store.conn()?;
        conn.execute_batch("BEGIN").db()?;
        let out = export_tables(&conn, send);
        let _ = conn.execute_batch("COMMIT");
        out?;
        send(Chunk::Done)
    }

    /// After a verified copy: mark the file as moved to `to` (a URL without its password).
    /// Returns when (Unix ms).
    pub fn mark_moved(&self, to: &str) -> Result<i64> {
        mark_moved(&self.path, to, self.busy)
    }
}

fn export_tables(
    c: &rusqlite::Connection,
    send: &mut dyn FnMut(Chunk) -> Result<()>,
) -> Result<()> {
    for &name in TABLES {
        let cols = columns(c, name)?;
        let quoted: Vec<String> = cols.iter().map(|c| format!("\"{c}\"")).collect();
        let mut st = c
            .prepare(&format!("SELECT {} FROM {name}", quoted.join(", ")))
            .db()?;
        send(Chunk::Table {
            name,
            columns: cols.clone(),
        })?;
        let mut rows = st.query([]).db()?;
        let mut batch = Vec::with_capacity(BATCH);
        let (mut n, mut bytes) = (0u64, 0usize);
        while let Some(r) = rows.next().db()? {
            let mut row = Vec::with_capacity(cols.len());
            for i in 0..cols.len() {
                let c = cell(r.get_ref(i).db()?)?;
                bytes += match &c {
                    Cell::Blob(b) => b.len(),
                    Cell::Text(t) => t.len(),
                    _ => 8,
                };
                row.push(c);
            }
            batch.push(row);
            n += 1;
            // A batch is at most BATCH rows and about BATCH_BYTES (attachments are megabytes).
            if batch.len() == BATCH || bytes >= BATCH_BYTES {
                bytes = 0;
                send(Chunk::Rows(std::mem::replace(
                    &mut batch,
                    Vec::with_capacity(BATCH),
                )))?;
            }
        }
        if !batch.is_empty() {
            send(Chunk::Rows(batch))?;
        }
        send(Chunk::End { name, rows: n })?;
    }
    Ok(())
}

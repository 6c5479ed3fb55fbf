//! `sendonce doctor`'s reads of a SQLite file: one read-only connection opened without the
//! store's migrations, each question asked on its own so that a damaged file still answers
//! the others. Nothing is written (no WAL switch, no migration, no ownership).

use super::tx::SqliteTx;
use super::{check_header, immutable_uri, FileState, SqliteStore, APPLICATION_ID, SCHEMA_VERSION};
use crate::doctor::{self, skipped, InspectOptions, Inspection, Part, MAX_LINES};
use crate::{Admin, OpenOptions};
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Open `path` read-only as a plain SQLite file; the immutable form when the directory cannot
/// be written (no `-shm` can be made) and no process holds the file. Returns the connection and
/// whether it is a snapshot.
fn open_ro(path: &Path) -> Part<(Connection, bool)> {
    match check_header(path).map_err(|e| e.message)? {
        FileState::Missing => return Err(format!("no database at {}", path.display())),
        FileState::Empty => return Err(format!("{} is an empty file", path.display())),
        FileState::Sqlite => {}
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let try_open = |target: &Path, flags: OpenFlags| -> Part<Connection> {
        let c = Connection::open_with_flags(target, flags).map_err(text)?;
        c.busy_timeout(Duration::from_secs(5)).map_err(text)?;
        c.query_row("SELECT count(*) FROM sqlite_schema", [], |r| {
            r.get::<_, i64>(0)
        })
        .map_err(text)?;
        Ok(c)
    };
    match try_open(path, flags) {
        Ok(c) => Ok((c, false)),
        Err(first) => match immutable_uri(path) {
            Some(uri) => try_open(&PathBuf::from(uri), flags | OpenFlags::SQLITE_OPEN_URI)
                .map(|c| (c, true))
                .map_err(|_| first),
            None => Err(first),
        },
    }
}

fn one(c: &Connection, sql: &str) -> Part<i64> {
    c.query_row(sql, [], |r| r.get(0)).map_err(text)
}

fn lines(c: &Connection, sql: &str) -> Part<Vec<String>> {
    let mut st = c.prepare(sql).map_err(text)?;
    let found = st
        .query_map([], |r| r.get::<_, String>(0))
        .map_err(text)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(text)?;
    Ok(found.into_iter().filter(|l| l != "ok").collect())
}

fn foreign_keys(c: &Connection) -> Part<(Vec<String>, u64)> {
    let mut st = c.prepare("PRAGMA foreign_key_check").map_err(text)?;
    let mut rows = st.query([]).map_err(text)?;
    let (mut shown, mut count) = (Vec::new(), 0u64);
    while let Some(r) = rows.next().map_err(text)? {
        count += 1;
        if shown.len() < MAX_LINES {
            let table: String = r.get(0).map_err(text)?;
            let rowid: Option<i64> = r.get(1).map_err(text)?;
            let parent: String = r.get(2).map_err(text)?;
            shown.push(format!(
                "{table} row {} points to a missing {parent} row",
                rowid.map_or("?".into(), |id| id.to_string())
            ));
        }
    }
    Ok((shown, count))
}

/// `address_collisions` per kind, and `pending` while schema 0017's address step has not run.
fn addresses(c: &Connection) -> Part<Vec<(String, u64)>> {
    let mut rows = doctor::counts_by(&mut SqliteTx(c), "address_collisions", "kind")?;
    let pending = one(
        c,
        "SELECT count(*) FROM pending_steps WHERE name = 'addresses_0017'",
    )?;
    if pending > 0 {
        rows.push(("pending".to_string(), pending as u64));
        rows.sort();
    }
    Ok(rows)
}

/// Everything `doctor` asks of the file at `path`.
pub fn inspect_file(path: &Path, opts: &InspectOptions) -> Inspection {
    let mut out = Inspection {
        opened: Ok(()),
        snapshot: false,
        application_id: skipped(),
        schema_version: skipped(),
        check: skipped(),
        foreign_keys: skipped(),
        expired_leases: skipped(),
        in_doubt: skipped(),
        stuck: skipped(),
        guard: None,
        server: None,
        ledger: None,
        addresses: None,
        broken_endpoints: None,
    };
    let (c, snapshot) = match open_ro(path) {
        Ok(v) => v,
        Err(e) => {
            out.opened = Err(e);
            return out;
        }
    };
    out.snapshot = snapshot;
    out.application_id = one(&c, "PRAGMA application_id");
    out.schema_version = one(&c, "PRAGMA user_version");
    if let Err(e) = ours(&c, path, &out.application_id) {
        out.opened = Err(e);
        return out;
    }
    out.check = lines(
        &c,
        if opts.full {
            "PRAGMA integrity_check"
        } else {
            "PRAGMA quick_check"
        },
    );
    out.foreign_keys = foreign_keys(&c);
    doctor::ask_ledger(&mut SqliteTx(&c), &mut out, opts);
    if out.schema_version.as_ref().is_ok_and(|v| *v >= 17) {
        out.addresses = Some(addresses(&c));
    }
    if out.schema_version.as_ref().is_ok_and(|v| *v >= 24) {
        out.broken_endpoints = Some(doctor::broken_endpoints(&mut SqliteTx(&c)));
    }
    drop(c);
    if out.schema_version == Ok(SCHEMA_VERSION) {
        out.guard = Some(guard_state(path));
    }
    out
}

/// The clone guard as a read-only store reads it (the schema is current).
fn guard_state(path: &Path) -> Part<crate::GuardState> {
    let ro = OpenOptions {
        read_only: true,
        pool_size: 1,
        ..Default::default()
    };
    SqliteStore::open(path, &ro)
        .and_then(|s| s.guard_state())
        .map_err(|e| e.message)
}

/// A SQLite file with our mark (or none, from before it) and the ledger's tables.
fn ours(c: &Connection, path: &Path, application_id: &Part<i64>) -> Part<()> {
    let tables = one(
        c,
        "SELECT count(*) FROM sqlite_schema WHERE type = 'table'
         AND name IN ('accounts', 'subscribers', 'campaigns', 'sends', 'suppressions')",
    );
    if matches!(application_id, Ok(APPLICATION_ID | 0)) && matches!(tables, Ok(5)) {
        return Ok(());
    }
    Err(format!(
        "{} is a SQLite file but not a sendonce database (application_id {}, {} of the \
         ledger's tables)",
        path.display(),
        application_id
            .as_ref()
            .map_or_else(|e| e.clone(), |id| format!("{id:#x}")),
        tables
            .as_ref()
            .map_or_else(|e| e.clone(), |n| n.to_string())
    ))
}

//! The PostgreSQL migrations (`schema/postgres/`, append-only) and the check that a database
//! is ours, all in one transaction (`PgStore::transaction`) under `pg_advisory_xact_lock`.

use super::tx::PgTx;
use crate::sql::{args, Tx};
use sendonce_domain::error::{Error, Result};

/// The migrations, in order: (version, name, SQL).
const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "0001_init",
        include_str!("../../../../schema/postgres/0001_init.sql"),
    ),
    (
        2,
        "0002_logins",
        include_str!("../../../../schema/postgres/0002_logins.sql"),
    ),
    (
        3,
        "0003_prefix_order",
        include_str!("../../../../schema/postgres/0003_prefix_order.sql"),
    ),
    (
        4,
        "0004_addresses",
        include_str!("../../../../schema/postgres/0004_addresses.sql"),
    ),
    (
        5,
        "0005_operators",
        include_str!("../../../../schema/postgres/0005_operators.sql"),
    ),
    (
        6,
        "0006_report_ids",
        include_str!("../../../../schema/postgres/0006_report_ids.sql"),
    ),
    (
        7,
        "0007_stream",
        include_str!("../../../../schema/postgres/0007_stream.sql"),
    ),
    (
        8,
        "0008_templates",
        include_str!("../../../../schema/postgres/0008_templates.sql"),
    ),
    (
        9,
        "0009_stream_all",
        include_str!("../../../../schema/postgres/0009_stream_all.sql"),
    ),
    (
        10,
        "0010_webhook_sources",
        include_str!("../../../../schema/postgres/0010_webhook_sources.sql"),
    ),
    (
        11,
        "0011_events",
        include_str!("../../../../schema/postgres/0011_events.sql"),
    ),
    (
        12,
        "0012_privacy",
        include_str!("../../../../schema/postgres/0012_privacy.sql"),
    ),
    (
        13,
        "0013_windows",
        include_str!("../../../../schema/postgres/0013_windows.sql"),
    ),
];

/// The schema version this binary writes: the last migration's (a database's version is the
/// highest it applied, `max(version)` of `sendonce_schema`).
pub const SCHEMA_VERSION: i32 = MIGRATIONS[MIGRATIONS.len() - 1].0;

/// The advisory lock every migrating process takes: the SQLite `application_id` ("SNDO").
const LOCK_KEY: i64 = crate::APPLICATION_ID;

/// The migration whose rows are then normalised in Rust (SQL cannot normalise Unicode):
/// `store::addresses`, SQLite's 0017 step.
const ADDRESS_STEP: i32 = 4;

/// Bring the schema up to date (or with `read_only`, only check it), in `tx`: one
/// transaction (`PgStore::transaction`). Two hosts starting together: the second waits on the
/// lock, then finds the versions the first applied.
pub(super) fn migrate(tx: &mut PgTx<'_>, shown: &str, create: bool, read_only: bool) -> Result<()> {
    if !read_only {
        tx.exec(
            "SELECT pg_advisory_xact_lock(CAST(?1 AS BIGINT))",
            &args![LOCK_KEY],
        )?;
    }
    let q: &mut dyn Tx = &mut *tx;
    let ours: bool = q.scalar("SELECT to_regclass('sendonce_schema') IS NOT NULL", &[])?;
    let applied: i32 = if ours {
        q.scalar("SELECT coalesce(max(version), 0) FROM sendonce_schema", &[])?
    } else {
        let foreign: bool = q.scalar(
            "SELECT to_regclass('accounts') IS NOT NULL OR to_regclass('sends') IS NOT NULL",
            &[],
        )?;
        if foreign {
            return Err(Error::db(format!(
                "{shown} has tables named like sendonce's but no sendonce_schema: it is not a \
                 sendonce database; nothing was changed"
            )));
        }
        if !create || read_only {
            return Err(Error::invalid(format!(
                "{shown} has no sendonce schema yet; create it with `sendonce init --db {shown}`"
            )));
        }
        0
    };
    if applied > SCHEMA_VERSION {
        return Err(Error::db(format!(
            "{shown} has schema version {applied}, newer than this sendonce ({SCHEMA_VERSION}); \
             upgrade sendonce"
        )));
    }
    if read_only {
        if applied < SCHEMA_VERSION {
            return Err(Error::db(format!(
                "{shown} has schema version {applied}, older than this sendonce \
                 ({SCHEMA_VERSION}); open it once for writing to upgrade it"
            )));
        }
        return Ok(());
    }
    if !ours {
        tx.batch(
            "CREATE TABLE sendonce_schema (
                 version    INTEGER PRIMARY KEY,
                 name       TEXT NOT NULL,
                 applied_at BIGINT NOT NULL
             )",
        )?;
    }
    apply_after(tx, applied)
}

/// Apply the migrations newer than `applied`, each with its `sendonce_schema` row (and, for
/// the address one, its step in Rust), inside the caller's transaction.
fn apply_after(tx: &mut PgTx<'_>, applied: i32) -> Result<()> {
    for &(version, name, sql) in MIGRATIONS.iter().filter(|m| m.0 > applied) {
        tx.batch(sql)
            .map_err(|e| e.context(&format!("migration {name}")))?;
        tx.exec(
            "INSERT INTO sendonce_schema (version, name, applied_at) VALUES (?1, ?2, ?3)",
            &args![version, name, sendonce_domain::clock::now_ms()],
        )?;
        if version == ADDRESS_STEP {
            crate::addresses::normalise_addresses(tx, "0004")?;
        }
        tracing::info!(migration = name, "PostgreSQL schema migrated");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::MIGRATIONS;

    /// Each migration's name starts with its version, the versions only grow, and every file
    /// of `schema/postgres/` is listed (a renumbered or forgotten file fails here, not on a
    /// database that skipped it).
    #[test]
    fn the_list_matches_the_files_and_versions_grow() {
        for pair in MIGRATIONS.windows(2) {
            assert!(pair[0].0 < pair[1].0, "{} then {}", pair[0].1, pair[1].1);
        }
        for &(version, name, _) in MIGRATIONS {
            assert!(
                name.starts_with(&format!("{version:04}_")),
                "{version} {name}"
            );
        }
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../schema/postgres");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .expect("schema/postgres is readable")
            .map(|e| {
                e.expect("a directory entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .filter_map(|f| f.strip_suffix(".sql").map(str::to_owned))
            .collect();
        files.sort();
        let listed: Vec<&str> = MIGRATIONS.iter().map(|m| m.1).collect();
        assert_eq!(files, listed);
    }
}

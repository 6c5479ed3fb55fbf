//! The PostgreSQL migrations (`schema/postgres/`, append-only) and the check that a database
//! is ours, all in one transaction under `pg_advisory_xact_lock`.

use crate::error::{Error, Result};

/// The migrations, in order: (version, name, SQL).
const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "0001_init",
        include_str!("../../../schema/postgres/0001_init.sql"),
    ),
    (
        2,
        "0002_logins",
        include_str!("../../../schema/postgres/0002_logins.sql"),
    ),
    (
        3,
        "0003_prefix_order",
        include_str!("../../../schema/postgres/0003_prefix_order.sql"),
    ),
    (
        4,
        "0004_operators",
        include_str!("../../../schema/postgres/0004_operators.sql"),
    ),
];

/// The schema version this binary writes.
pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// The advisory lock every migrating process takes: the SQLite `application_id` ("SNDO").
const LOCK_KEY: i64 = crate::store::APPLICATION_ID;

/// Bring the schema up to date (or with `read_only`, only check it). Two hosts starting
/// together: the second waits on the lock, then finds the versions the first applied.
pub(super) async fn migrate(
    client: &mut deadpool_postgres::Client,
    shown: &str,
    create: bool,
    read_only: bool,
) -> Result<()> {
    let tx = client.transaction().await?;
    if !read_only {
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK_KEY])
            .await?;
    }
    let ours: bool = tx
        .query_one("SELECT to_regclass('sendonce_schema') IS NOT NULL", &[])
        .await?
        .get(0);
    let applied: i32 = if ours {
        tx.query_one("SELECT coalesce(max(version), 0) FROM sendonce_schema", &[])
            .await?
            .get(0)
    } else {
        let foreign: bool = tx
            .query_one(
                "SELECT to_regclass('accounts') IS NOT NULL OR to_regclass('sends') IS NOT NULL",
                &[],
            )
            .await?
            .get(0);
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
        tx.batch_execute(
            "CREATE TABLE sendonce_schema (
                 version    INTEGER PRIMARY KEY,
                 name       TEXT NOT NULL,
                 applied_at BIGINT NOT NULL
             )",
        )
        .await?;
    }
    for &(version, name, sql) in MIGRATIONS.iter().filter(|m| m.0 > applied) {
        tx.batch_execute(sql)
            .await
            .map_err(|e| Error::from(e).context(&format!("migration {name}")))?;
        tx.execute(
            "INSERT INTO sendonce_schema (version, name, applied_at) VALUES ($1, $2, $3)",
            &[&version, &name, &crate::domain::clock::now_ms()],
        )
        .await?;
        tracing::info!(migration = name, "PostgreSQL schema migrated");
    }
    tx.commit().await?;
    Ok(())
}

//! `sendonce migrate-store`'s target: a SQLite file's tables (streamed as `store::copy` chunks)
//! written into an empty PostgreSQL database in ONE transaction with `COPY … FROM STDIN
//! BINARY`, each cell converted to its column's PostgreSQL type, identity sequences moved past
//! the copied ids, and the copy verified (rows per table, the ledger's checksum, the
//! installation id) inside the transaction before it commits.

use super::PgStore;
use crate::copy::{Cell, Census, Chunk, Imported, SendsChecksum, TABLES};
use crate::driver::OrDb as _;
use sendonce_domain::error::{Error, ErrorKind, Result};
use std::collections::{BTreeMap, HashMap};
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};

/// The URL without its password at all (not even `***`): what the moved file records and what
/// `migrate-store` prints, usable as `--db` with the password from SENDONCE_DB or ~/.pgpass.
pub fn without_password(url: &str) -> String {
    let shown = super::redact(url).replacen(":***@", "@", 1);
    match shown.split_once('?') {
        None => shown,
        Some((head, query)) => {
            let kept: Vec<&str> = query
                .split('&')
                .filter(|kv| !kv.starts_with("password="))
                .collect();
            match kept.is_empty() {
                true => head.to_string(),
                false => format!("{head}?{}", kept.join("&")),
            }
        }
    }
}

/// Tables whose only row comes with the schema: replaced by the source's.
const SINGLETONS: &[&str] = &["installation", "guard"];

type Param = Box<dyn ToSql + Sync + Send>;

/// `cell` as a value of the PostgreSQL type `udt` (information_schema's name).
fn convert(table: &str, column: &str, udt: &str, cell: Cell) -> Result<Param> {
    let bad = |what: &str| {
        Error::new(
            ErrorKind::Invalid,
            format!(
                "{table}.{column}: a {what} value cannot go into a PostgreSQL {udt} column; \
                 nothing was written"
            ),
        )
    };
    Ok(match (udt, cell) {
        ("int8", Cell::Int(v)) => Box::new(v),
        ("int8", Cell::Null) => Box::new(None::<i64>),
        ("int4", Cell::Int(v)) => Box::new(i32::try_from(v).map_err(|_| bad("too large integer"))?),
        ("int4", Cell::Null) => Box::new(None::<i32>),
        ("bool", Cell::Int(v @ (0 | 1))) => Box::new(v == 1),
        ("bool", Cell::Null) => Box::new(None::<bool>),
        ("text", Cell::Text(s)) => Box::new(s),
        ("text", Cell::Null) => Box::new(None::<String>),
        ("bytea", Cell::Blob(b)) => Box::new(b),
        ("bytea", Cell::Null) => Box::new(None::<Vec<u8>>),
        ("float8", Cell::Real(f)) => Box::new(f),
        ("float8", Cell::Int(v)) => Box::new(v as f64),
        ("float8", Cell::Null) => Box::new(None::<f64>),
        (_, Cell::Null) => return Err(bad("NULL")),
        (_, Cell::Int(_)) => return Err(bad("integer")),
        (_, Cell::Real(_)) => return Err(bad("real")),
        (_, Cell::Text(_)) => return Err(bad("text")),
        (_, Cell::Blob(_)) => return Err(bad("blob")),
    })
}

fn pg_type(table: &str, column: &str, udt: &str) -> Result<Type> {
    Ok(match udt {
        "int8" => Type::INT8,
        "int4" => Type::INT4,
        "bool" => Type::BOOL,
        "text" => Type::TEXT,
        "bytea" => Type::BYTEA,
        "float8" => Type::FLOAT8,
        other => {
            return Err(Error::invalid(format!(
                "{table}.{column} has the PostgreSQL type {other}, which migrate-store does \
                 not know how to fill"
            )))
        }
    })
}

fn conflict(message: String) -> Error {
    Error::new(ErrorKind::Conflict, message)
}

type Tx<'a> = deadpool_postgres::Transaction<'a>;

/// Refuse a database that holds anything beyond what its migrations made.
async fn check_empty(tx: &Tx<'_>, shown: &str) -> Result<()> {
    let tables = tx
        .query(
            "SELECT table_name::text FROM information_schema.tables
             WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'
             ORDER BY table_name",
            &[],
        )
        .await
        .db()?;
    for t in tables {
        let name: String = t.get(0);
        if name == "sendonce_schema" || SINGLETONS.contains(&name.as_str()) {
            continue;
        }
        let any: bool = tx
            .query_one(&format!("SELECT EXISTS (SELECT 1 FROM \"{name}\")"), &[])
            .await
            .db()?
            .get(0);
        if any {
            return Err(conflict(format!(
                "{shown} is not empty: its table {name} has rows. migrate-store copies only into \
                 a database with nothing in it but the schema; nothing was written"
            )));
        }
    }
    let used: bool = tx
        .query_one(
            "SELECT generation > 0 OR heartbeat_at IS NOT NULL OR adopted_at IS NOT NULL
             FROM guard WHERE singleton = 1",
            &[],
        )
        .await
        .db()?
        .get(0);
    if used {
        return Err(conflict(format!(
            "{shown} is not empty: its guard has recorded claims. migrate-store copies only into \
             a database with nothing in it but the schema; nothing was written"
        )));
    }
    Ok(())
}

/// The target's columns: table → column → type name.
async fn column_types(tx: &Tx<'_>) -> Result<HashMap<String, HashMap<String, String>>> {
    let rows = tx
        .query(
            "SELECT table_name::text, column_name::text, udt_name::text
             FROM information_schema.columns WHERE table_schema = current_schema()",
            &[],
        )
        .await
        .db()?;
    let mut out: HashMap<String, HashMap<String, String>> = HashMap::new();
    for r in rows {
        out.entry(r.get(0)).or_default().insert(r.get(1), r.get(2));
    }
    Ok(out)
}

/// The ledger's checksum on the target, in id order, in pages (never the whole table at once).
async fn sends_checksum(tx: &Tx<'_>) -> Result<String> {
    let mut sum = SendsChecksum::default();
    let mut after = i64::MIN;
    let sql = format!(
        "SELECT {} FROM sends WHERE id > $1 ORDER BY id LIMIT 10000",
        SendsChecksum::COLUMNS
    );
    loop {
        let rows = tx.query(&sql, &[&after]).await.db()?;
        let Some(last) = rows.last() else { break };
        after = last.get(0);
        for r in &rows {
            let status: String = r.get(1);
            sum.add(
                r.get(0),
                &status,
                [
                    Some(r.get::<_, i64>(2)),
                    r.get(3),
                    Some(r.get::<_, i64>(4)),
                    r.get(5),
                    r.get(6),
                ],
            );
        }
    }
    Ok(sum.finish())
}

/// The column types of every target table (`column_types`).
type Types = HashMap<String, HashMap<String, String>>;

/// The table being copied: its name, its columns with their PostgreSQL types, the COPY writer.
type Open = (
    &'static str,
    Vec<(String, String)>,
    std::pin::Pin<Box<BinaryCopyInWriter>>,
);

/// Start the COPY of table `name` with the source's `columns` (each must exist in the target).
async fn open_table(
    tx: &Tx<'_>,
    types: &Types,
    shown: &str,
    name: &'static str,
    columns: Vec<String>,
) -> Result<Open> {
    let Some(target) = types.get(name) else {
        return Err(Error::invalid(format!(
            "{shown} has no table {name}; nothing was written"
        )));
    };
    let mut cols = Vec::with_capacity(columns.len());
    let mut col_types = Vec::with_capacity(columns.len());
    for c in columns {
        let Some(udt) = target.get(&c) else {
            return Err(Error::invalid(format!(
                "{shown} has no column {name}.{c}; nothing was written"
            )));
        };
        col_types.push(pg_type(name, &c, udt)?);
        cols.push((c, udt.clone()));
    }
    if SINGLETONS.contains(&name) {
        tx.batch_execute(&format!("DELETE FROM {name}"))
            .await
            .db()?;
    }
    let list: Vec<String> = cols.iter().map(|(c, _)| format!("\"{c}\"")).collect();
    let sink = tx
        .copy_in(&format!(
            "COPY {name} ({}) FROM STDIN (FORMAT binary)",
            list.join(", ")
        ))
        .await
        .db()?;
    Ok((
        name,
        cols,
        Box::pin(BinaryCopyInWriter::new(sink, &col_types)),
    ))
}

/// Write one batch of rows of the open table, each cell converted to its column's type.
async fn write_rows(open: &mut Open, rows: Vec<Vec<Cell>>) -> Result<()> {
    let (name, cols, writer) = open;
    for row in rows {
        let mut params: Vec<Param> = Vec::with_capacity(cols.len());
        for ((c, udt), cell) in cols.iter().zip(row) {
            params.push(convert(name, c, udt, cell)?);
        }
        let refs: Vec<&(dyn ToSql + Sync)> =
            params.iter().map(|p| &**p as &(dyn ToSql + Sync)).collect();
        writer.as_mut().write(&refs).await.db()?;
    }
    Ok(())
}

/// Receive the whole stream into the tables; the rows streamed per table.
async fn receive(
    tx: &Tx<'_>,
    chunks: &mut tokio::sync::mpsc::Receiver<Chunk>,
    shown: &str,
) -> Result<BTreeMap<String, u64>> {
    let types = column_types(tx).await?;
    let mut streamed: BTreeMap<String, u64> = BTreeMap::new();
    let mut current: Option<Open> = None;
    loop {
        let Some(chunk) = chunks.recv().await else {
            return Err(Error::db(
                "the source stopped before the end of the copy; nothing was written",
            ));
        };
        match chunk {
            Chunk::Table { name, columns } => {
                current = Some(open_table(tx, &types, shown, name, columns).await?);
            }
            Chunk::Rows(rows) => {
                let Some(open) = current.as_mut() else {
                    return Err(Error::internal("rows before their table"));
                };
                write_rows(open, rows).await?;
            }
            Chunk::End { name, rows } => {
                let Some((open, _, mut writer)) = current.take() else {
                    return Err(Error::internal("the end of a table never begun"));
                };
                if open != name {
                    return Err(Error::internal("the copy's tables came out of order"));
                }
                let written = writer.as_mut().finish().await.db()?;
                if written != rows {
                    return Err(Error::db(format!(
                        "{name}: {rows} rows read, {written} written; nothing was written"
                    )));
                }
                streamed.insert(name.to_string(), rows);
            }
            Chunk::Done => return Ok(streamed),
        }
    }
}

/// Verify the copy inside its transaction, before the commit: rows per table (source, streamed
/// and target alike), the sends' checksum and the installation id.
async fn verify(
    tx: &Tx<'_>,
    expect: &Census,
    streamed: &BTreeMap<String, u64>,
) -> Result<Imported> {
    let mut counted = BTreeMap::new();
    for t in TABLES {
        let n: i64 = tx
            .query_one(&format!("SELECT count(*) FROM {t}"), &[])
            .await
            .db()?
            .get(0);
        let n = n.max(0) as u64;
        let want = expect.rows.get(*t).copied().unwrap_or(0);
        let sent = streamed.get(*t).copied().unwrap_or(0);
        if n != want || sent != want {
            return Err(Error::db(format!(
                "the copy does not verify: {t} has {want} rows in the source, {sent} \
                 were streamed and {n} are in the target; nothing was written"
            )));
        }
        counted.insert(t.to_string(), n);
    }
    let checksum = sends_checksum(tx).await?;
    if checksum != expect.sends_checksum {
        return Err(Error::db(
            "the copy does not verify: the sends' status, attempts, fence tokens and \
             markers differ from the source's; nothing was written",
        ));
    }
    let installation: String = tx
        .query_one("SELECT id FROM installation WHERE singleton = 1", &[])
        .await
        .db()?
        .get(0);
    if installation != expect.installation {
        return Err(Error::db(
            "the copy does not verify: the installation id differs; nothing was written",
        ));
    }
    Ok(Imported {
        rows: counted,
        sends_checksum: checksum,
        installation,
    })
}

/// Every identity past the highest copied id and past the id SQLite last gave
/// (`sqlite_sequence`); the claim counter at the source's.
async fn move_sequences(tx: &Tx<'_>, expect: &Census) -> Result<()> {
    let identities = tx
        .query(
            "SELECT table_name::text, column_name::text FROM information_schema.columns
             WHERE table_schema = current_schema() AND is_identity = 'YES'",
            &[],
        )
        .await
        .db()?;
    for r in identities {
        let (t, c): (String, String) = (r.get(0), r.get(1));
        let given = expect.sequences.get(&t).copied().unwrap_or(0);
        tx.query(
            &format!(
                "SELECT setval(pg_get_serial_sequence($1, $2),
                               greatest(max(\"{c}\"), $3::bigint))
                 FROM \"{t}\" HAVING greatest(max(\"{c}\"), $3::bigint) > 0"
            ),
            &[&t, &c, &given],
        )
        .await
        .db()?;
    }
    if expect.generation > 0 {
        tx.query(
            "SELECT setval('claim_generation', $1)",
            &[&expect.generation],
        )
        .await
        .db()?;
    }
    Ok(())
}

/// Turn the tables' user triggers off (during the copy) or on again.
async fn user_triggers(tx: &Tx<'_>, on: bool) -> Result<()> {
    let verb = if on { "ENABLE" } else { "DISABLE" };
    for t in TABLES {
        tx.batch_execute(&format!("ALTER TABLE {t} {verb} TRIGGER USER"))
            .await
            .db()?;
    }
    Ok(())
}

impl PgStore {
    /// Copy what `chunks` brings into this (empty) database in one transaction, verify it
    /// against `expect` (the source's census) and commit; nothing is written unless every
    /// check passes. A stream that ends without `Chunk::Done` rolls back.
    pub fn import(
        &self,
        mut chunks: tokio::sync::mpsc::Receiver<Chunk>,
        expect: Census,
    ) -> Result<Imported> {
        let shown = super::redact(&self.shown().display().to_string());
        self.run(move |pool| async move {
            let mut client = pool.get().await.db()?;
            let tx = client.transaction().await.db()?;
            // Disabling the user triggers (the frozen-content ones would refuse the copied
            // rows of approved campaigns; the singletons' refuse a replaced row) also locks
            // every table until the commit: nobody writes into the target meanwhile.
            user_triggers(&tx, false).await?;
            check_empty(&tx, &shown).await?;
            let streamed = receive(&tx, &mut chunks, &shown).await?;
            let imported = verify(&tx, &expect, &streamed).await?;
            move_sequences(&tx, &expect).await?;
            user_triggers(&tx, true).await?;
            tx.commit().await.db()?;
            Ok(imported)
        })
    }
}

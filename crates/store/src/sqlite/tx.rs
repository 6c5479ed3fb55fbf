//! SQLite's side of the seam (`store::sql`): a transaction or connection as a [`Tx`], and
//! `Db` for [`SqliteStore`] (`BEGIN IMMEDIATE` for every write).

use super::dialect::SQLITE;
use super::SqliteStore;
use crate::driver::OrDb as _;
use crate::sql::{Arg, Db, Dialect, Fields, Row, Tx, Value};
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, TransactionBehavior};
use sendonce_domain::error::{Error, Result};

/// A SQLite connection (inside a transaction or not) seen through the seam.
pub struct SqliteTx<'c>(pub &'c Connection);

impl rusqlite::ToSql for Arg<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match *self {
            Arg::Null => ValueRef::Null,
            Arg::Int(i) => ValueRef::Integer(i),
            Arg::Real(r) => ValueRef::Real(r),
            Arg::Text(t) => ValueRef::Text(t.as_bytes()),
            Arg::Blob(b) => ValueRef::Blob(b),
        }))
    }
}

impl Fields for rusqlite::Row<'_> {
    fn value(&self, i: usize) -> Result<Value<'_>> {
        Ok(match self.get_ref(i).db()? {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(i) => Value::Int(i),
            ValueRef::Real(r) => Value::Real(r),
            ValueRef::Text(t) => Value::Text(std::str::from_utf8(t).map_err(|_| {
                Error::damaged(format!(
                    "column {} holds text that is not UTF-8",
                    self.name(i)
                ))
            })?),
            ValueRef::Blob(b) => Value::Blob(b),
        })
    }

    fn name(&self, i: usize) -> &str {
        self.as_ref().column_name(i).unwrap_or("?")
    }
}

impl Tx for SqliteTx<'_> {
    fn dialect(&self) -> &'static Dialect {
        &SQLITE
    }

    fn exec(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<u64> {
        let mut st = self.0.prepare_cached(sql).db()?;
        Ok(st.execute(rusqlite::params_from_iter(args.iter())).db()? as u64)
    }

    fn each(
        &mut self,
        sql: &str,
        args: &[Arg<'_>],
        f: &mut dyn FnMut(Row<'_>) -> Result<()>,
    ) -> Result<()> {
        let mut st = self.0.prepare_cached(sql).db()?;
        let mut rows = st.query(rusqlite::params_from_iter(args.iter())).db()?;
        while let Some(r) = rows.next().db()? {
            f(Row(r))?;
        }
        Ok(())
    }
}

impl Db for SqliteStore {
    fn write<T>(&self, mut f: impl FnMut(&mut dyn Tx) -> Result<T>) -> Result<T> {
        let _turn = self.turn();
        let mut conn = self.conn()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .db()?;
        let out = f(&mut SqliteTx(&tx))?;
        tx.commit().db()?;
        Ok(out)
    }

    fn read<T>(&self, f: impl FnOnce(&mut dyn Tx) -> Result<T>) -> Result<T> {
        let conn = self.conn()?;
        f(&mut SqliteTx(&conn))
    }
}

//! PostgreSQL's side of the seam (`store::sql`): a pooled client as a [`Tx`], statements run
//! from the caller's thread, and `Db` for [`PgStore`].
//!
//! # Blocking on the store's runtime
//!
//! A statement's future is polled on the calling thread by [`block_on`] (parking the thread
//! between wake-ups) with the store's own runtime entered, so that a new connection registers
//! its socket and spawns its task there. The connection tasks run on that runtime's threads and
//! wake the caller when an answer arrives; nothing runs on the caller's runtime, so a call from
//! any thread (a blocking thread, a plain one, even an async worker of another runtime) cannot
//! deadlock on it and cannot panic. A transaction's statements all run on the caller's thread,
//! so an operation written once over `Tx` borrows its arguments instead of moving copies into a
//! task.
//!
//! # Values
//!
//! [`Arg`] converts itself to the type PostgreSQL inferred for each parameter (the `ty` that
//! `ToSql::to_sql` receives), and [`Value`] reads any column type the schema uses: booleans
//! read as 0/1 integers (SQLite's flags), `integer` and `bigint` as integers, `json`/`jsonb` as
//! text.

use super::dialect::POSTGRES;
use super::{hide, PgStore};
use crate::driver::{DriverError as _, OrDb as _};
use crate::sql::{Arg, Db, Dialect, Fields, Row, Tx, Value};
use bytes::{BufMut, BytesMut};
use sendonce_domain::error::{Error, Result};
use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type};

type BoxError = Box<dyn std::error::Error + Sync + Send>;

/// Poll `fut` to completion on this thread, with `rt` entered (see the module doc).
pub(crate) fn block_on<F: Future>(rt: &tokio::runtime::Runtime, fut: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.unpark();
        }
    }
    let _entered = rt.enter();
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

/// `sql` with SQLite's `?N` placeholders as PostgreSQL's `$N` (outside string literals).
pub(crate) fn numbered(sql: &str) -> Cow<'_, str> {
    if !sql.contains('?') {
        return Cow::Borrowed(sql);
    }
    let mut out = String::with_capacity(sql.len());
    let mut quoted = false;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\'' {
            quoted = !quoted;
        }
        let placeholder = c == '?' && !quoted && chars.peek().is_some_and(char::is_ascii_digit);
        out.push(if placeholder { '$' } else { c });
    }
    Cow::Owned(out)
}

impl ToSql for Arg<'_> {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> std::result::Result<IsNull, BoxError> {
        let text = matches!(*ty, Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME);
        match (*self, ty) {
            (Arg::Null, _) => return Ok(IsNull::Yes),
            (Arg::Int(i), &Type::INT8) => out.put_i64(i),
            (Arg::Int(i), &Type::INT4) => out.put_i32(i32::try_from(i)?),
            (Arg::Int(i), &Type::INT2) => out.put_i16(i16::try_from(i)?),
            (Arg::Int(i), &Type::BOOL) => out.put_u8(u8::from(i != 0)),
            (Arg::Int(i), &Type::FLOAT8) => out.put_f64(i as f64),
            (Arg::Int(i), _) if text => out.put_slice(i.to_string().as_bytes()),
            (Arg::Real(r), &Type::FLOAT8) => out.put_f64(r),
            (Arg::Real(r), &Type::FLOAT4) => out.put_f32(r as f32),
            (Arg::Text(t), _) if text || *ty == Type::JSON => out.put_slice(t.as_bytes()),
            (Arg::Text(t), &Type::JSONB) => {
                out.put_u8(1);
                out.put_slice(t.as_bytes());
            }
            (Arg::Blob(b), &Type::BYTEA) => out.put_slice(b),
            (arg, ty) => {
                return Err(format!("{arg:?} cannot be bound to a parameter of type {ty}").into())
            }
        }
        Ok(IsNull::No)
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    tokio_postgres::types::to_sql_checked!();
}

impl<'a> FromSql<'a> for Value<'a> {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> std::result::Result<Self, BoxError> {
        Ok(match *ty {
            Type::INT8 => Value::Int(i64::from_sql(ty, raw)?),
            Type::INT4 => Value::Int(i32::from_sql(ty, raw)?.into()),
            Type::INT2 => Value::Int(i16::from_sql(ty, raw)?.into()),
            Type::OID => Value::Int(u32::from_sql(ty, raw)?.into()),
            Type::BOOL => Value::Int(bool::from_sql(ty, raw)?.into()),
            Type::FLOAT8 => Value::Real(f64::from_sql(ty, raw)?),
            Type::FLOAT4 => Value::Real(f32::from_sql(ty, raw)?.into()),
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::JSON => {
                Value::Text(std::str::from_utf8(raw)?)
            }
            Type::JSONB => Value::Text(std::str::from_utf8(raw.get(1..).unwrap_or_default())?),
            Type::BYTEA => Value::Blob(raw),
            ref other => return Err(format!("a column of type {other} (cast it in SQL)").into()),
        })
    }

    fn from_sql_null(_: &Type) -> std::result::Result<Self, BoxError> {
        Ok(Value::Null)
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

impl Fields for tokio_postgres::Row {
    fn value(&self, i: usize) -> Result<Value<'_>> {
        self.try_get::<_, Value<'_>>(i).map_err(|e| {
            Error::db(format!(
                "database error: column {} cannot be read: {e}",
                self.name(i)
            ))
        })
    }

    fn name(&self, i: usize) -> &str {
        self.columns().get(i).map_or("?", |c| c.name())
    }
}

/// A pooled client (inside a transaction or not) seen through the seam.
pub struct PgTx<'c> {
    client: &'c deadpool_postgres::Object,
    rt: &'c tokio::runtime::Runtime,
    /// A statement failed with a deadlock or a serialization failure: the transaction may run
    /// again.
    retryable: bool,
}

impl PgTx<'_> {
    fn failed(&mut self, e: tokio_postgres::Error) -> Error {
        use tokio_postgres::error::SqlState;
        if e.code().is_some_and(|c| {
            *c == SqlState::T_R_DEADLOCK_DETECTED || *c == SqlState::T_R_SERIALIZATION_FAILURE
        }) {
            self.retryable = true;
        }
        e.into_error()
    }

    /// Run `sql` as it is (one or more statements, no parameters: a migration's file).
    pub(super) fn batch(&mut self, sql: &str) -> Result<()> {
        let c = self.client;
        block_on(self.rt, c.batch_execute(sql)).map_err(|e| self.failed(e))
    }

    fn run(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<tokio_postgres::Row>> {
        let sql = numbered(sql);
        let params: Vec<&(dyn ToSql + Sync)> = args.iter().map(|a| a as _).collect();
        let c = self.client;
        block_on(self.rt, async {
            let st = c.prepare_cached(&sql).await?;
            c.query(&st, &params).await
        })
        .map_err(|e| self.failed(e))
    }
}

impl Tx for PgTx<'_> {
    fn dialect(&self) -> &'static Dialect {
        &POSTGRES
    }

    fn exec(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<u64> {
        let sql = numbered(sql);
        let params: Vec<&(dyn ToSql + Sync)> = args.iter().map(|a| a as _).collect();
        let c = self.client;
        block_on(self.rt, async {
            let st = c.prepare_cached(&sql).await?;
            c.execute(&st, &params).await
        })
        .map_err(|e| self.failed(e))
    }

    fn each(
        &mut self,
        sql: &str,
        args: &[Arg<'_>],
        f: &mut dyn FnMut(Row<'_>) -> Result<()>,
    ) -> Result<()> {
        for r in self.run(sql, args)? {
            f(Row(&r))?;
        }
        Ok(())
    }
}

/// A pooled client that is dropped, not put back, unless its transaction ended (a panic inside
/// one must not hand an open transaction to the next caller).
struct Held {
    client: Option<deadpool_postgres::Object>,
    clean: bool,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let (false, Some(c)) = (self.clean, self.client.take()) {
            drop(deadpool_postgres::Object::take(c));
        }
    }
}

impl PgStore {
    fn runtime(&self) -> Result<&tokio::runtime::Runtime> {
        self.rt
            .as_ref()
            .ok_or_else(|| Error::db("the PostgreSQL store is closed"))
    }

    fn client(&self) -> Result<deadpool_postgres::Object> {
        block_on(self.runtime()?, self.pool.get()).db()
    }

    /// One try of a transaction on one pooled client: `BEGIN`, `f`, `COMMIT` (`ROLLBACK` when
    /// `f` or the commit fails); `Err((e, retryable))` when it did not commit. The migrations
    /// run in one (`migrate.rs`, which also runs whole SQL files through [`PgTx::batch`]).
    pub(super) fn transaction<T>(
        &self,
        f: impl FnOnce(&mut PgTx<'_>) -> Result<T>,
    ) -> std::result::Result<T, (Error, bool)> {
        let rt = self.runtime().map_err(|e| (e, false))?;
        let mut held = Held {
            client: Some(self.client().map_err(|e| (e, false))?),
            clean: false,
        };
        let Some(client) = held.client.as_ref() else {
            return Err((Error::internal("no PostgreSQL client"), false));
        };
        let mut tx = PgTx {
            client,
            rt,
            retryable: false,
        };
        let out = tx.batch("BEGIN").and_then(|()| {
            let v = f(&mut tx)?;
            tx.batch("COMMIT")?;
            Ok(v)
        });
        match out {
            Ok(v) => {
                held.clean = true;
                Ok(v)
            }
            Err(e) => {
                let retryable = tx.retryable;
                held.clean = tx.batch("ROLLBACK").is_ok();
                Err((e, retryable))
            }
        }
    }
}

impl Db for PgStore {
    fn write<T>(&self, mut f: impl FnMut(&mut dyn Tx) -> Result<T>) -> Result<T> {
        let mut tries = 0;
        loop {
            match self.transaction(|tx| f(tx)) {
                Ok(v) => return Ok(v),
                Err((_, true)) if tries < 3 => tries += 1,
                Err((e, _)) => return Err(hide(&self.secrets, e)),
            }
        }
    }

    fn read<T>(&self, f: impl FnOnce(&mut dyn Tx) -> Result<T>) -> Result<T> {
        let out = self.runtime().and_then(|rt| {
            let client = self.client()?;
            f(&mut PgTx {
                client: &client,
                rt,
                retryable: false,
            })
        });
        out.map_err(|e| hide(&self.secrets, e))
    }
}

#[cfg(test)]
mod tests {
    use super::numbered;

    #[test]
    fn placeholders_become_numbered_outside_literals() {
        assert_eq!(
            numbered("SELECT ?1, '?2', ?12 FROM t WHERE a = ?3"),
            "SELECT $1, '?2', $12 FROM t WHERE a = $3"
        );
        assert_eq!(numbered("SELECT 1"), "SELECT 1");
    }
}

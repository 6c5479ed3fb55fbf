//! The dashboard's admins and sessions on SQLite (`Logins`, tables `admins` and
//! `admin_sessions` of 0013): PHC strings and session hashes only; `last_seen_at` written at
//! most once a minute per session.

use super::SqliteStore;
use crate::error::{Error, Result};
use crate::store::logins::{role, OPERATOR};
use crate::store::{LoginRow, Logins, NewLogin, SessionRow};
use rusqlite::{named_params, params, Connection, OptionalExtension, Row};

const COLS: &str =
    "a.id, a.account_id, a.name, a.password_hash, a.created_at, a.removed_at, a.role";

fn login_from_row(r: &Row<'_>) -> rusqlite::Result<LoginRow> {
    Ok(LoginRow {
        id: r.get(0)?,
        account_id: r.get(1)?,
        name: r.get(2)?,
        password_hash: r.get(3)?,
        created_at: r.get(4)?,
        removed_at: r.get(5)?,
        operator: r.get::<_, String>(6)? == OPERATOR,
    })
}

fn live_login(c: &Connection, name: &str) -> Result<Option<LoginRow>> {
    Ok(c.prepare_cached(&format!(
        "SELECT {COLS} FROM admins a WHERE a.name = ?1 AND a.removed_at IS NULL"
    ))?
    .query_row([name], login_from_row)
    .optional()?)
}

fn live_session(
    c: &Connection,
    hash: &[u8; 32],
    now: i64,
    idle_ms: i64,
) -> Result<Option<SessionRow>> {
    Ok(c.prepare_cached(&format!(
        "SELECT {COLS}, s.id, s.created_at, s.expires_at, s.last_seen_at
         FROM admin_sessions s JOIN admins a ON a.id = s.admin_id
         WHERE s.hash = :hash AND s.expires_at > :now AND s.last_seen_at > :now - :idle
           AND a.removed_at IS NULL"
    ))?
    .query_row(
        named_params! {":hash": &hash[..], ":now": now, ":idle": idle_ms},
        |r| {
            Ok(SessionRow {
                login: login_from_row(r)?,
                id: r.get(7)?,
                created_at: r.get(8)?,
                expires_at: r.get(9)?,
                last_seen_at: r.get(10)?,
            })
        },
    )
    .optional()?)
}

fn unknown(name: &str) -> Error {
    Error::not_found(format!("no admin named {name:?}"))
}

impl Logins for SqliteStore {
    fn create_login(&self, l: &NewLogin<'_>) -> Result<i64> {
        self.write(|tx| {
            super::admin::require_account(tx, l.account_id)?;
            let inserted = tx.execute(
                "INSERT INTO admins (account_id, name, password_hash, created_at, role)
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (name) DO NOTHING",
                params![
                    l.account_id,
                    l.name,
                    l.password_hash,
                    l.created_at,
                    role(l.operator)
                ],
            )?;
            if inserted == 0 {
                return Err(Error::conflict(format!(
                    "an admin named {:?} exists (or existed: names are not reused)",
                    l.name
                )));
            }
            Ok(tx.last_insert_rowid())
        })
    }

    fn logins(&self, account_id: Option<i64>) -> Result<Vec<LoginRow>> {
        self.read(|c| {
            let mut st = c.prepare_cached(&format!(
                "SELECT {COLS} FROM admins a WHERE ?1 IS NULL OR a.account_id = ?1 ORDER BY a.id"
            ))?;
            let rows = st.query_map([account_id], login_from_row)?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }

    fn login_by_name(&self, name: &str) -> Result<Option<LoginRow>> {
        self.read(|c| live_login(c, name))
    }

    fn set_password(&self, name: &str, password_hash: &str) -> Result<LoginRow> {
        self.write(|tx| {
            let row = live_login(tx, name)?.ok_or_else(|| unknown(name))?;
            tx.execute(
                "UPDATE admins SET password_hash = ?2 WHERE id = ?1",
                params![row.id, password_hash],
            )?;
            tx.execute("DELETE FROM admin_sessions WHERE admin_id = ?1", [row.id])?;
            Ok(row)
        })
    }

    fn remove_login(&self, name: &str, now: i64) -> Result<LoginRow> {
        self.write(|tx| {
            let mut row = live_login(tx, name)?.ok_or_else(|| unknown(name))?;
            tx.execute(
                "UPDATE admins SET removed_at = ?2 WHERE id = ?1",
                params![row.id, now],
            )?;
            tx.execute("DELETE FROM admin_sessions WHERE admin_id = ?1", [row.id])?;
            row.removed_at = Some(now);
            Ok(row)
        })
    }

    fn create_session(
        &self,
        login_id: i64,
        hash: &[u8; 32],
        now: i64,
        expires_at: i64,
    ) -> Result<()> {
        self.write(|tx| {
            tx.execute(
                "DELETE FROM admin_sessions WHERE admin_id = ?1 AND expires_at <= ?2",
                params![login_id, now],
            )?;
            tx.execute(
                "INSERT INTO admin_sessions (admin_id, hash, created_at, expires_at, last_seen_at)
                 VALUES (?1, ?2, ?3, ?4, ?3)",
                params![login_id, &hash[..], now, expires_at],
            )?;
            Ok(())
        })
    }

    fn session(
        &self,
        hash: &[u8; 32],
        now: i64,
        idle_ms: i64,
        seen_every_ms: i64,
    ) -> Result<Option<SessionRow>> {
        let Some(row) = self.read(|c| live_session(c, hash, now, idle_ms))? else {
            return Ok(None);
        };
        if row.last_seen_at > now - seen_every_ms {
            return Ok(Some(row));
        }
        // Again under the write lock: a logout or removal that committed since the read wins.
        self.write(|tx| {
            tx.prepare_cached(
                "UPDATE admin_sessions SET last_seen_at = ?2 WHERE id = ?1 AND last_seen_at < ?2",
            )?
            .execute(params![row.id, now])?;
            live_session(tx, hash, now, idle_ms)
        })
    }

    fn end_session(&self, hash: &[u8; 32]) -> Result<()> {
        self.write(|tx| {
            tx.execute("DELETE FROM admin_sessions WHERE hash = ?1", [&hash[..]])?;
            Ok(())
        })
    }
}

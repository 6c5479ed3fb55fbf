//! The dashboard's admins and their sessions (`Logins`, tables `admins` and `admin_sessions`),
//! written once for both stores over `sql::Tx`. A password is kept as its Argon2id PHC string,
//! a session as the SHA-256 of its cookie; neither is ever shown. A session's `last_seen_at` is
//! written at most once a minute.

use crate::shared::require_account;
use crate::sql::{args, Db, Row, Tx};
use sendonce_domain::error::{Error, Result};

/// An admin to store.
#[derive(Debug, Clone)]
pub struct NewLogin<'a> {
    pub account_id: i64,
    pub name: &'a str,
    pub password_hash: &'a str,
    pub created_at: i64,
    /// An operator (role `operator`, schema 0018) also sees server-wide settings.
    pub operator: bool,
}

/// An admin as stored.
#[derive(Clone)]
pub struct LoginRow {
    pub id: i64,
    pub account_id: i64,
    pub name: String,
    /// Argon2id PHC string (never shown).
    pub password_hash: String,
    pub created_at: i64,
    pub removed_at: Option<i64>,
    /// Role `operator` rather than `account`.
    pub operator: bool,
}

impl std::fmt::Debug for LoginRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginRow")
            .field("id", &self.id)
            .field("account_id", &self.account_id)
            .field("name", &self.name)
            .field("removed_at", &self.removed_at)
            .field("operator", &self.operator)
            .finish_non_exhaustive()
    }
}

/// The stored role of an operator (the column `admins.role`; the other value is `account`).
pub const OPERATOR: &str = "operator";

/// The stored role for `operator`.
pub fn role(operator: bool) -> &'static str {
    if operator {
        OPERATOR
    } else {
        "account"
    }
}

/// A live session and its admin.
#[derive(Debug, Clone)]
pub struct SessionRow {
    pub id: i64,
    pub login: LoginRow,
    pub created_at: i64,
    pub expires_at: i64,
    pub last_seen_at: i64,
}

/// Admins of accounts and their sessions.
pub trait Logins: Send + Sync {
    /// Store a new admin; `NotFound` for an unknown account, `Conflict` when the name is taken
    /// (by a removed admin too: names are never reused). Returns its id.
    fn create_login(&self, l: &NewLogin<'_>) -> Result<i64>;
    /// Admins in id order (of one account, or all), removed ones included.
    fn logins(&self, account_id: Option<i64>) -> Result<Vec<LoginRow>>;
    /// The admin called `name` that is not removed.
    fn login_by_name(&self, name: &str) -> Result<Option<LoginRow>>;
    /// Replace the password of admin `name` and end its sessions; `NotFound` when there is no
    /// such admin (or it was removed).
    fn set_password(&self, name: &str, password_hash: &str) -> Result<LoginRow>;
    /// Remove admin `name` at `now` and end its sessions; `NotFound` as above.
    fn remove_login(&self, name: &str, now: i64) -> Result<LoginRow>;
    /// Start a session for admin `login_id` (its expired sessions are deleted on the way).
    fn create_session(
        &self,
        login_id: i64,
        hash: &[u8; 32],
        now: i64,
        expires_at: i64,
    ) -> Result<()>;
    /// The live session whose hash is `hash`: not past `expires_at`, seen within `idle_ms`, its
    /// admin not removed. `last_seen_at` becomes `now` when older than `seen_every_ms`.
    fn session(
        &self,
        hash: &[u8; 32],
        now: i64,
        idle_ms: i64,
        seen_every_ms: i64,
    ) -> Result<Option<SessionRow>>;
    /// End the session whose hash is `hash` (nothing when there is none).
    fn end_session(&self, hash: &[u8; 32]) -> Result<()>;
}

const COLS: &str =
    "a.id, a.account_id, a.name, a.password_hash, a.created_at, a.removed_at, a.role";

fn login_from_row(r: Row<'_>) -> Result<LoginRow> {
    Ok(LoginRow {
        id: r.get(0)?,
        account_id: r.get(1)?,
        name: r.get(2)?,
        password_hash: r.get(3)?,
        created_at: r.get(4)?,
        removed_at: r.get(5)?,
        operator: r.get::<String>(6)? == OPERATOR,
    })
}

fn live_login(tx: &mut dyn Tx, name: &str) -> Result<Option<LoginRow>> {
    tx.query_opt(
        &format!("SELECT {COLS} FROM admins a WHERE a.name = ?1 AND a.removed_at IS NULL"),
        &args![name],
        login_from_row,
    )
}

fn live_session(
    tx: &mut dyn Tx,
    hash: &[u8; 32],
    now: i64,
    idle_ms: i64,
) -> Result<Option<SessionRow>> {
    tx.query_opt(
        &format!(
            "SELECT {COLS}, s.id, s.created_at, s.expires_at, s.last_seen_at
             FROM admin_sessions s JOIN admins a ON a.id = s.admin_id
             WHERE s.hash = ?1 AND s.expires_at > ?2
               AND s.last_seen_at > CAST(?2 AS BIGINT) - CAST(?3 AS BIGINT)
               AND a.removed_at IS NULL"
        ),
        &args![hash, now, idle_ms],
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
}

fn unknown(name: &str) -> Error {
    Error::not_found(format!("no admin named {name:?}"))
}

/// End every session of admin `id`.
fn end_sessions(tx: &mut dyn Tx, id: i64) -> Result<()> {
    tx.exec("DELETE FROM admin_sessions WHERE admin_id = ?1", &args![id])?;
    Ok(())
}

impl<S: Db> Logins for S {
    fn create_login(&self, l: &NewLogin<'_>) -> Result<i64> {
        self.write(|tx| {
            require_account(tx, l.account_id)?;
            let id: Option<i64> = tx.scalar_opt(
                "INSERT INTO admins (account_id, name, password_hash, created_at, role)
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (name) DO NOTHING RETURNING id",
                &args![
                    l.account_id,
                    l.name,
                    l.password_hash,
                    l.created_at,
                    role(l.operator)
                ],
            )?;
            id.ok_or_else(|| {
                Error::conflict(format!(
                    "an admin named {:?} exists (or existed: names are not reused)",
                    l.name
                ))
            })
        })
    }

    fn logins(&self, account_id: Option<i64>) -> Result<Vec<LoginRow>> {
        self.read(|tx| {
            tx.query(
                &format!(
                    "SELECT {COLS} FROM admins a
                     WHERE CAST(?1 AS BIGINT) IS NULL OR a.account_id = ?1 ORDER BY a.id"
                ),
                &args![account_id],
                login_from_row,
            )
        })
    }

    fn login_by_name(&self, name: &str) -> Result<Option<LoginRow>> {
        self.read(|tx| live_login(tx, name))
    }

    fn set_password(&self, name: &str, password_hash: &str) -> Result<LoginRow> {
        self.write(|tx| {
            let row = live_login(tx, name)?.ok_or_else(|| unknown(name))?;
            tx.exec(
                "UPDATE admins SET password_hash = ?2 WHERE id = ?1",
                &args![row.id, password_hash],
            )?;
            end_sessions(tx, row.id)?;
            Ok(row)
        })
    }

    fn remove_login(&self, name: &str, now: i64) -> Result<LoginRow> {
        self.write(|tx| {
            let mut row = live_login(tx, name)?.ok_or_else(|| unknown(name))?;
            tx.exec(
                "UPDATE admins SET removed_at = ?2 WHERE id = ?1",
                &args![row.id, now],
            )?;
            end_sessions(tx, row.id)?;
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
            tx.exec(
                "DELETE FROM admin_sessions WHERE admin_id = ?1 AND expires_at <= ?2",
                &args![login_id, now],
            )?;
            tx.exec(
                "INSERT INTO admin_sessions (admin_id, hash, created_at, expires_at, last_seen_at)
                 VALUES (?1, ?2, ?3, ?4, ?3)",
                &args![login_id, hash, now, expires_at],
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
        let Some(row) = self.read(|tx| live_session(tx, hash, now, idle_ms))? else {
            return Ok(None);
        };
        if row.last_seen_at > now - seen_every_ms {
            return Ok(Some(row));
        }
        // Again in a writing transaction: a logout or removal that committed since the read
        // wins (the read after the UPDATE finds no row).
        self.write(|tx| {
            tx.exec(
                "UPDATE admin_sessions SET last_seen_at = ?2 WHERE id = ?1 AND last_seen_at < ?2",
                &args![row.id, now],
            )?;
            live_session(tx, hash, now, idle_ms)
        })
    }

    fn end_session(&self, hash: &[u8; 32]) -> Result<()> {
        self.write(|tx| {
            tx.exec("DELETE FROM admin_sessions WHERE hash = ?1", &args![hash])?;
            Ok(())
        })
    }
}

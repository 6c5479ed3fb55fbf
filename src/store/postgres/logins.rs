//! `Logins` on PostgreSQL: the same rules as `sqlite/logins.rs` (PHC strings and session hashes
//! only; `last_seen_at` written at most once a minute per session).

use super::ledger::{transaction, TxResult};
use super::PgStore;
use crate::error::{Error, Result};
use crate::store::logins::{role, OPERATOR};
use crate::store::{LoginRow, Logins, NewLogin, SessionRow};
use tokio_postgres::Row;

const COLS: &str =
    "a.id, a.account_id, a.name, a.password_hash, a.created_at, a.removed_at, a.role";

fn login_from_row(r: &Row) -> LoginRow {
    LoginRow {
        id: r.get(0),
        account_id: r.get(1),
        name: r.get(2),
        password_hash: r.get(3),
        created_at: r.get(4),
        removed_at: r.get(5),
        operator: r.get::<_, String>(6) == OPERATOR,
    }
}

async fn live_login(
    c: &impl deadpool_postgres::GenericClient,
    name: &str,
) -> TxResult<Option<LoginRow>> {
    let row = c
        .query_opt(
            &format!("SELECT {COLS} FROM admins a WHERE a.name = $1 AND a.removed_at IS NULL"),
            &[&name],
        )
        .await?;
    Ok(row.as_ref().map(login_from_row))
}

async fn live_session(
    c: &impl deadpool_postgres::GenericClient,
    hash: &[u8],
    now: i64,
    idle_ms: i64,
) -> TxResult<Option<SessionRow>> {
    let row = c
        .query_opt(
            &format!(
                "SELECT {COLS}, s.id, s.created_at, s.expires_at, s.last_seen_at
                 FROM admin_sessions s JOIN admins a ON a.id = s.admin_id
                 WHERE s.hash = $1 AND s.expires_at > $2 AND s.last_seen_at > $2 - $3
                   AND a.removed_at IS NULL"
            ),
            &[&hash, &now, &idle_ms],
        )
        .await?;
    Ok(row.map(|r| SessionRow {
        login: login_from_row(&r),
        id: r.get(7),
        created_at: r.get(8),
        expires_at: r.get(9),
        last_seen_at: r.get(10),
    }))
}

fn unknown(name: &str) -> Error {
    Error::not_found(format!("no admin named {name:?}"))
}

impl Logins for PgStore {
    fn create_login(&self, l: &NewLogin<'_>) -> Result<i64> {
        let (account_id, name, hash, at, role) = (
            l.account_id,
            l.name.to_string(),
            l.password_hash.to_string(),
            l.created_at,
            role(l.operator),
        );
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                if tx.query_opt("SELECT 1 FROM accounts WHERE id = $1", &[&account_id]).await?.is_none() {
                    return Err(Error::not_found(format!("unknown account id {account_id}")).into());
                }
                let id = tx
                    .query_opt(
                        "INSERT INTO admins (account_id, name, password_hash, created_at, role)
                         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name) DO NOTHING RETURNING id",
                        &[&account_id, &name, &hash, &at, &role],
                    )
                    .await?;
                match id {
                    Some(r) => Ok(r.get::<_, i64>(0)),
                    None => Err(Error::conflict(format!(
                        "an admin named {name:?} exists (or existed: names are not reused)"
                    ))
                    .into()),
                }
            })
        })
    }

    fn logins(&self, account_id: Option<i64>) -> Result<Vec<LoginRow>> {
        self.run(move |pool| async move {
            let c = pool.get().await?;
            let rows = c
                .query(
                    &format!(
                        "SELECT {COLS} FROM admins a
                         WHERE $1::BIGINT IS NULL OR a.account_id = $1 ORDER BY a.id"
                    ),
                    &[&account_id],
                )
                .await?;
            Ok(rows.iter().map(login_from_row).collect())
        })
    }

    fn login_by_name(&self, name: &str) -> Result<Option<LoginRow>> {
        let name = name.to_string();
        self.run(move |pool| async move {
            let c = pool.get().await?;
            Ok(live_login(&c, &name).await?)
        })
    }

    fn set_password(&self, name: &str, password_hash: &str) -> Result<LoginRow> {
        let (name, hash) = (name.to_string(), password_hash.to_string());
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                let Some(row) = live_login(&tx, &name).await? else {
                    return Err(unknown(&name).into());
                };
                tx.execute("UPDATE admins SET password_hash = $2 WHERE id = $1", &[&row.id, &hash])
                    .await?;
                tx.execute("DELETE FROM admin_sessions WHERE admin_id = $1", &[&row.id])
                    .await?;
                Ok(row)
            })
        })
    }

    fn remove_login(&self, name: &str, now: i64) -> Result<LoginRow> {
        let name = name.to_string();
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                let Some(mut row) = live_login(&tx, &name).await? else {
                    return Err(unknown(&name).into());
                };
                tx.execute("UPDATE admins SET removed_at = $2 WHERE id = $1", &[&row.id, &now])
                    .await?;
                tx.execute("DELETE FROM admin_sessions WHERE admin_id = $1", &[&row.id])
                    .await?;
                row.removed_at = Some(now);
                Ok(row)
            })
        })
    }

    fn create_session(
        &self,
        login_id: i64,
        hash: &[u8; 32],
        now: i64,
        expires_at: i64,
    ) -> Result<()> {
        let hash = hash.to_vec();
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                tx.execute(
                    "DELETE FROM admin_sessions WHERE admin_id = $1 AND expires_at <= $2",
                    &[&login_id, &now],
                )
                .await?;
                tx.execute(
                    "INSERT INTO admin_sessions (admin_id, hash, created_at, expires_at, last_seen_at)
                     VALUES ($1, $2, $3, $4, $3)",
                    &[&login_id, &hash, &now, &expires_at],
                )
                .await?;
                Ok(())
            })
        })
    }

    fn session(
        &self,
        hash: &[u8; 32],
        now: i64,
        idle_ms: i64,
        seen_every_ms: i64,
    ) -> Result<Option<SessionRow>> {
        let hash = hash.to_vec();
        self.run(move |pool| async move {
            let c = pool.get().await?;
            let Some(row) = live_session(&c, &hash, now, idle_ms)
                .await
                .map_err(Error::from)?
            else {
                return Ok(None);
            };
            if row.last_seen_at > now - seen_every_ms {
                return Ok(Some(row));
            }
            // The UPDATE rechecks nothing but the time: a logout that committed since the read
            // leaves no row to touch, and the read after it finds none.
            c.execute(
                "UPDATE admin_sessions SET last_seen_at = $2 WHERE id = $1 AND last_seen_at < $2",
                &[&row.id, &now],
            )
            .await?;
            Ok(live_session(&c, &hash, now, idle_ms).await?)
        })
    }

    fn end_session(&self, hash: &[u8; 32]) -> Result<()> {
        let hash = hash.to_vec();
        self.run(move |pool| async move {
            let c = pool.get().await?;
            c.execute("DELETE FROM admin_sessions WHERE hash = $1", &[&hash])
                .await?;
            Ok(())
        })
    }
}

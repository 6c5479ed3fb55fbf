//! `Tokens` on PostgreSQL: the same rules as `sqlite/tokens.rs` (hashes and prefixes only,
//! looked up by hash; `last_used_at` written at most once a minute per token).

use super::ledger::{transaction, TxResult};
use super::PgStore;
use crate::domain::token::{Hash, Scope, LAST_USED_EVERY_MS};
use crate::error::{Error, Result};
use crate::store::{NewToken, TokenRow, Tokens};
use tokio_postgres::Row;

const COLS: &str =
    "id, account_id, name, scope, prefix, hash, created_at, last_used_at, revoked_at";

fn token_from_row(r: &Row) -> Result<TokenRow> {
    let scope: String = r.get(3);
    Ok(TokenRow {
        id: r.get(0),
        account_id: r.get(1),
        name: r.get(2),
        scope: Scope::parse(&scope).map_err(|_| {
            Error::damaged(format!(
                "api_tokens.scope holds {scope:?}, which is not a token scope"
            ))
        })?,
        prefix: r.get(4),
        hash: r.get(5),
        created_at: r.get(6),
        last_used_at: r.get(7),
        revoked_at: r.get(8),
    })
}

async fn live_token_by_hash(
    c: &impl deadpool_postgres::GenericClient,
    hash: &[u8],
) -> TxResult<Option<TokenRow>> {
    let row = c
        .query_opt(
            &format!("SELECT {COLS} FROM api_tokens WHERE hash = $1 AND revoked_at IS NULL"),
            &[&hash],
        )
        .await?;
    Ok(row.as_ref().map(token_from_row).transpose()?)
}

/// Whether `last_used_at` is due for a write at `now`.
fn stale(last_used_at: Option<i64>, now: i64) -> bool {
    last_used_at.is_none_or(|t| t <= now - LAST_USED_EVERY_MS)
}

impl Tokens for PgStore {
    fn create_token(&self, t: &NewToken<'_>) -> Result<i64> {
        let (account_id, name, scope, prefix, hash, created_at) = (
            t.account_id,
            t.name.to_string(),
            t.scope.as_str(),
            t.prefix.to_string(),
            t.hash.to_vec(),
            t.created_at,
        );
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                if tx.query_opt("SELECT 1 FROM accounts WHERE id = $1", &[&account_id]).await?.is_none() {
                    return Err(Error::not_found(format!("unknown account id {account_id}")).into());
                }
                let id = tx
                    .query_opt(
                        "INSERT INTO api_tokens (account_id, name, scope, prefix, hash, created_at)
                         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (hash) DO NOTHING
                         RETURNING id",
                        &[&account_id, &name, &scope, &prefix, &hash, &created_at],
                    )
                    .await?;
                match id {
                    Some(r) => Ok(r.get::<_, i64>(0)),
                    // Two CSPRNG draws of 256 bits that collide: never in practice.
                    None => Err(Error::conflict("a token with this hash exists; try again").into()),
                }
            })
        })
    }

    fn tokens(&self, account_id: i64) -> Result<Vec<TokenRow>> {
        self.run(move |pool| async move {
            let c = pool.get().await?;
            let rows = c
                .query(
                    &format!("SELECT {COLS} FROM api_tokens WHERE account_id = $1 ORDER BY id"),
                    &[&account_id],
                )
                .await?;
            rows.iter().map(token_from_row).collect()
        })
    }

    fn revoke_token(&self, account_id: i64, id: i64, now: i64) -> Result<(TokenRow, bool)> {
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                let revoked = tx
                    .execute(
                        "UPDATE api_tokens SET revoked_at = $3
                         WHERE id = $1 AND account_id = $2 AND revoked_at IS NULL",
                        &[&id, &account_id, &now],
                    )
                    .await?;
                let row = tx
                    .query_opt(
                        &format!("SELECT {COLS} FROM api_tokens WHERE id = $1 AND account_id = $2"),
                        &[&id, &account_id],
                    )
                    .await?;
                let Some(row) = row else {
                    return Err(Error::not_found(format!(
                        "unknown token id {id} in account {account_id}"
                    ))
                    .into());
                };
                Ok((token_from_row(&row)?, revoked == 1))
            })
        })
    }

    fn authenticate(&self, hash: &Hash, now: i64) -> Result<Option<TokenRow>> {
        let hash = hash.to_vec();
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            let Some(row) = live_token_by_hash(&c, &hash).await.map_err(Error::from)? else {
                return Ok(None);
            };
            if !stale(row.last_used_at, now) {
                return Ok(Some(row));
            }
            // Written under the row's lock: a revoke that committed since the read wins (the
            // UPDATE rechecks `revoked_at`), and of two requests at once only the first writes.
            transaction!(c, tx => {
                tx.execute(
                    "UPDATE api_tokens SET last_used_at = $2
                     WHERE id = $1 AND revoked_at IS NULL
                       AND (last_used_at IS NULL OR last_used_at <= $2::bigint - $3::bigint)",
                    &[&row.id, &now, &LAST_USED_EVERY_MS],
                )
                .await?;
                live_token_by_hash(&tx, &hash).await
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_used_is_due_once_a_minute() {
        assert!(stale(None, 0));
        assert!(!stale(Some(1_000), 1_000 + LAST_USED_EVERY_MS - 1));
        assert!(stale(Some(1_000), 1_000 + LAST_USED_EVERY_MS));
    }
}

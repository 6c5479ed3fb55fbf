//! API tokens on SQLite (`Tokens`, table `api_tokens` of 0006): hashes and prefixes only, looked
//! up by hash; `last_used_at` written at most once a minute per token.

use super::codec;
use super::SqliteStore;
use crate::domain::token::{Hash, LAST_USED_EVERY_MS};
use crate::error::{Error, Result};
use crate::store::{NewToken, TokenRow, Tokens};
use rusqlite::{named_params, params, Connection, OptionalExtension, Row};

const COLS: &str =
    "id, account_id, name, scope, prefix, hash, created_at, last_used_at, revoked_at";

fn token_from_row(r: &Row<'_>) -> rusqlite::Result<TokenRow> {
    Ok(TokenRow {
        id: r.get(0)?,
        account_id: r.get(1)?,
        name: r.get(2)?,
        scope: codec::get(r, 3, "api_tokens")?,
        prefix: r.get(4)?,
        hash: r.get(5)?,
        created_at: r.get(6)?,
        last_used_at: r.get(7)?,
        revoked_at: r.get(8)?,
    })
}

fn token_by_id(c: &Connection, account_id: i64, id: i64) -> Result<Option<TokenRow>> {
    Ok(c.prepare_cached(&format!(
        "SELECT {COLS} FROM api_tokens WHERE id = ?1 AND account_id = ?2"
    ))?
    .query_row(params![id, account_id], token_from_row)
    .optional()?)
}

fn live_token_by_hash(c: &Connection, hash: &Hash) -> Result<Option<TokenRow>> {
    Ok(c.prepare_cached(&format!(
        "SELECT {COLS} FROM api_tokens WHERE hash = ?1 AND revoked_at IS NULL"
    ))?
    .query_row([&hash[..]], token_from_row)
    .optional()?)
}

/// Whether `last_used_at` is due for a write at `now`.
fn stale(last_used_at: Option<i64>, now: i64) -> bool {
    last_used_at.is_none_or(|t| t <= now - LAST_USED_EVERY_MS)
}

impl Tokens for SqliteStore {
    fn create_token(&self, t: &NewToken<'_>) -> Result<i64> {
        self.write(|tx| {
            super::admin::require_account(tx, t.account_id)?;
            let inserted = tx.execute(
                "INSERT INTO api_tokens (account_id, name, scope, prefix, hash, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (hash) DO NOTHING",
                params![
                    t.account_id,
                    t.name,
                    t.scope,
                    t.prefix,
                    &t.hash[..],
                    t.created_at
                ],
            )?;
            if inserted == 0 {
                // Two CSPRNG draws of 256 bits that collide: never in practice.
                return Err(Error::conflict("a token with this hash exists; try again"));
            }
            Ok(tx.last_insert_rowid())
        })
    }

    fn tokens(&self, account_id: i64) -> Result<Vec<TokenRow>> {
        self.read(|c| {
            let mut st = c.prepare_cached(&format!(
                "SELECT {COLS} FROM api_tokens WHERE account_id = ?1 ORDER BY id"
            ))?;
            let rows = st.query_map([account_id], token_from_row)?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }

    fn revoke_token(&self, account_id: i64, id: i64, now: i64) -> Result<(TokenRow, bool)> {
        self.write(|tx| {
            let revoked = tx.execute(
                "UPDATE api_tokens SET revoked_at = ?3
                 WHERE id = ?1 AND account_id = ?2 AND revoked_at IS NULL",
                params![id, account_id, now],
            )?;
            let row = token_by_id(tx, account_id, id)?.ok_or_else(|| {
                Error::not_found(format!("unknown token id {id} in account {account_id}"))
            })?;
            Ok((row, revoked == 1))
        })
    }

    fn authenticate(&self, hash: &Hash, now: i64) -> Result<Option<TokenRow>> {
        let Some(row) = self.read(|c| live_token_by_hash(c, hash))? else {
            return Ok(None);
        };
        if !stale(row.last_used_at, now) {
            return Ok(Some(row));
        }
        // Written again under the write lock: a revoke that committed since the read wins,
        // and of two requests at once only the first writes.
        self.write(|tx| {
            tx.prepare_cached(
                "UPDATE api_tokens SET last_used_at = :now
                 WHERE id = :id AND revoked_at IS NULL
                   AND (last_used_at IS NULL OR last_used_at <= :now - :every)",
            )?
            .execute(named_params! {":now": now, ":id": row.id, ":every": LAST_USED_EVERY_MS})?;
            live_token_by_hash(tx, hash)
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

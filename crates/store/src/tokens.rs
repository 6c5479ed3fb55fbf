//! API tokens (`Tokens`), backend-neutral: each belongs to one account and is stored as its
//! SHA-256 only; a revoked token keeps its row and never authenticates again. Written once for
//! both stores over `sql::Tx`.

use crate::shared::require_account;
use crate::sql::{args, Db, Row, Tx};
use sendonce_domain::error::{Error, Result};
use sendonce_domain::token::{Hash, Scope, LAST_USED_EVERY_MS};

/// A token to store: its hash and shown prefix, never its text.
#[derive(Debug, Clone)]
pub struct NewToken<'a> {
    pub account_id: i64,
    pub name: &'a str,
    pub scope: Scope,
    pub prefix: &'a str,
    pub hash: &'a Hash,
    pub created_at: i64,
}

/// A token as stored.
#[derive(Debug, Clone)]
pub struct TokenRow {
    pub id: i64,
    pub account_id: i64,
    pub name: String,
    pub scope: Scope,
    pub prefix: String,
    /// The SHA-256 of the token (for the caller's constant-time check; never shown).
    pub hash: Vec<u8>,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
    pub revoked_at: Option<i64>,
}

/// An account's API tokens.
pub trait Tokens: Send + Sync {
    /// Store a new token (the account must exist: `NotFound` otherwise); returns its id.
    fn create_token(&self, t: &NewToken<'_>) -> Result<i64>;
    /// The account's tokens in id order, revoked ones included.
    fn tokens(&self, account_id: i64) -> Result<Vec<TokenRow>>;
    /// Revoke token `id` of `account_id` at `now`; `NotFound` when the account has no such
    /// token (another account's token is left as it is). Returns the row and whether this call
    /// revoked it (`false`: it already was, and keeps its first `revoked_at`).
    fn revoke_token(&self, account_id: i64, id: i64, now: i64) -> Result<(TokenRow, bool)>;
    /// The unrevoked token whose hash is `hash`, if any. Its `last_used_at` becomes `now` when
    /// it is unset or older than `domain::token::LAST_USED_EVERY_MS`, so that a busy token
    /// costs one write a minute, not one per request.
    fn authenticate(&self, hash: &Hash, now: i64) -> Result<Option<TokenRow>>;
}

const COLS: &str =
    "id, account_id, name, scope, prefix, hash, created_at, last_used_at, revoked_at";

fn token_from_row(r: Row<'_>) -> Result<TokenRow> {
    Ok(TokenRow {
        id: r.get(0)?,
        account_id: r.get(1)?,
        name: r.get(2)?,
        scope: r.get(3)?,
        prefix: r.get(4)?,
        hash: r.get(5)?,
        created_at: r.get(6)?,
        last_used_at: r.get(7)?,
        revoked_at: r.get(8)?,
    })
}

fn live_token_by_hash(tx: &mut dyn Tx, hash: &Hash) -> Result<Option<TokenRow>> {
    tx.query_opt(
        &format!("SELECT {COLS} FROM api_tokens WHERE hash = ?1 AND revoked_at IS NULL"),
        &args![hash],
        token_from_row,
    )
}

/// Whether `last_used_at` is due for a write at `now`.
fn stale(last_used_at: Option<i64>, now: i64) -> bool {
    last_used_at.is_none_or(|t| t <= now - LAST_USED_EVERY_MS)
}

impl<S: Db> Tokens for S {
    fn create_token(&self, t: &NewToken<'_>) -> Result<i64> {
        self.write(|tx| {
            require_account(tx, t.account_id)?;
            let id: Option<i64> = tx.scalar_opt(
                "INSERT INTO api_tokens (account_id, name, scope, prefix, hash, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (hash) DO NOTHING RETURNING id",
                &args![
                    t.account_id,
                    t.name,
                    t.scope,
                    t.prefix,
                    t.hash,
                    t.created_at
                ],
            )?;
            // Two CSPRNG draws of 256 bits that collide: never in practice.
            id.ok_or_else(|| Error::conflict("a token with this hash exists; try again"))
        })
    }

    fn tokens(&self, account_id: i64) -> Result<Vec<TokenRow>> {
        self.read(|tx| {
            tx.query(
                &format!("SELECT {COLS} FROM api_tokens WHERE account_id = ?1 ORDER BY id"),
                &args![account_id],
                token_from_row,
            )
        })
    }

    fn revoke_token(&self, account_id: i64, id: i64, now: i64) -> Result<(TokenRow, bool)> {
        self.write(|tx| {
            let revoked = tx.exec(
                "UPDATE api_tokens SET revoked_at = ?3
                 WHERE id = ?1 AND account_id = ?2 AND revoked_at IS NULL",
                &args![id, account_id, now],
            )?;
            let row = tx
                .query_opt(
                    &format!("SELECT {COLS} FROM api_tokens WHERE id = ?1 AND account_id = ?2"),
                    &args![id, account_id],
                    token_from_row,
                )?
                .ok_or_else(|| {
                    Error::not_found(format!("unknown token id {id} in account {account_id}"))
                })?;
            Ok((row, revoked == 1))
        })
    }

    fn authenticate(&self, hash: &Hash, now: i64) -> Result<Option<TokenRow>> {
        let Some(row) = self.read(|tx| live_token_by_hash(tx, hash))? else {
            return Ok(None);
        };
        if !stale(row.last_used_at, now) {
            return Ok(Some(row));
        }
        // Written again in a writing transaction (under SQLite's write lock, under the row's
        // lock on PostgreSQL): a revoke that committed since the read wins (the UPDATE rechecks
        // `revoked_at`), and of two requests at once only the first writes.
        self.write(|tx| {
            tx.exec(
                "UPDATE api_tokens SET last_used_at = ?2
                 WHERE id = ?1 AND revoked_at IS NULL
                   AND (last_used_at IS NULL OR last_used_at <= CAST(?2 AS BIGINT) - CAST(?3 AS BIGINT))",
                &args![row.id, now, LAST_USED_EVERY_MS],
            )?;
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

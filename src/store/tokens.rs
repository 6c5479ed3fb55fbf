//! API tokens (`Tokens`), backend-neutral: each belongs to one account and is stored as its
//! SHA-256 only; a revoked token keeps its row and never authenticates again.

use crate::domain::token::{Hash, Scope};
use crate::error::Result;

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

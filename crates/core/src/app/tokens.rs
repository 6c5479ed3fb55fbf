//! API tokens of an account: create (the token is shown once and stored as SHA-256), list,
//! revoke, and authenticate a presented token into the `Caller` whose scope a route checks.

use sendonce_domain::clock;
use sendonce_domain::error::{Error, Result};
use sendonce_domain::token::{self, Scope, Token};
use sendonce_store::prelude::*;
use sendonce_store::{NewToken, Store, TokenRow};
use serde::Serialize;

/// Longest token name, in characters.
const MAX_NAME_CHARS: usize = 100;

/// A new token: `token` is its text, shown this once and never again.
#[derive(Debug, Clone, Serialize)]
pub struct Created {
    pub id: i64,
    pub token: Token,
    pub prefix: String,
    pub scope: Scope,
    pub name: String,
    pub account_id: i64,
}

/// A token's name: trimmed, not empty, at most 100 characters, no control characters.
fn checked_name(name: &str) -> Result<&str> {
    let name = name.trim();
    if name.is_empty() {
        return Err(Error::invalid("the token name is empty"));
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(Error::invalid(format!(
            "the token name is longer than {MAX_NAME_CHARS} characters"
        )));
    }
    if name.chars().any(char::is_control) {
        return Err(Error::invalid(
            "the token name contains a control character",
        ));
    }
    Ok(name)
}

/// Make a token for `account` (id or name) with this name and scope. Only its hash and prefix
/// are stored; the text is in the answer alone.
pub fn create(store: &Store, account: &str, name: &str, scope: Scope) -> Result<Created> {
    let name = checked_name(name)?;
    let account_id = store.resolve_account(account)?;
    let token = Token::generate()?;
    let prefix = token.prefix();
    let id = store.create_token(&NewToken {
        account_id,
        name,
        scope,
        prefix: &prefix,
        hash: &token.hash(),
        created_at: clock::now_ms(),
    })?;
    Ok(Created {
        id,
        token,
        prefix,
        scope,
        name: name.to_string(),
        account_id,
    })
}

/// A token as lists show it: never its text nor its hash.
#[derive(Debug, Clone, Serialize)]
pub struct TokenInfo {
    pub id: i64,
    pub account_id: i64,
    pub name: String,
    pub scope: Scope,
    pub prefix: String,
    #[serde(serialize_with = "clock::ser_ms")]
    pub created_at: i64,
    #[serde(serialize_with = "clock::ser_opt_ms")]
    pub last_used_at: Option<i64>,
    #[serde(serialize_with = "clock::ser_opt_ms")]
    pub revoked_at: Option<i64>,
}

impl From<TokenRow> for TokenInfo {
    fn from(r: TokenRow) -> Self {
        TokenInfo {
            id: r.id,
            account_id: r.account_id,
            name: r.name,
            scope: r.scope,
            prefix: r.prefix,
            created_at: r.created_at,
            last_used_at: r.last_used_at,
            revoked_at: r.revoked_at,
        }
    }
}

/// An account's tokens, in id order, revoked ones included.
#[derive(Debug, Clone, Serialize)]
pub struct Tokens {
    pub tokens: Vec<TokenInfo>,
}

/// The tokens of `account` (id or name).
pub fn list(store: &Store, account: &str) -> Result<Tokens> {
    let account_id = store.resolve_account(account)?;
    let tokens = store.tokens(account_id)?;
    Ok(Tokens {
        tokens: tokens.into_iter().map(TokenInfo::from).collect(),
    })
}

/// A revoked token; `already_revoked` when it was revoked before this call (its first
/// `revoked_at` stays).
#[derive(Debug, Clone, Serialize)]
pub struct Revoked {
    #[serde(flatten)]
    pub token: TokenInfo,
    pub already_revoked: bool,
}

/// Revoke token `id` of `account`: from the moment this returns it authenticates nothing. A
/// token of another account is `NotFound` and stays as it is.
pub fn revoke(store: &Store, account: &str, id: i64) -> Result<Revoked> {
    let account_id = store.resolve_account(account)?;
    let (row, revoked) = store.revoke_token(account_id, id, clock::now_ms())?;
    Ok(Revoked {
        token: row.into(),
        already_revoked: !revoked,
    })
}

/// Who is calling: the account a token acts for, the token, and what it may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Caller {
    pub account_id: i64,
    pub token_id: i64,
    pub scope: Scope,
}

impl Caller {
    /// `Forbidden` unless this caller's scope allows `needed`.
    pub fn require(&self, needed: Scope) -> Result<()> {
        self.require_any(&[needed])
    }

    /// `Forbidden` unless this caller's scope allows one of `any_of` (following a message:
    /// `send` or `read`).
    pub fn require_any(&self, any_of: &[Scope]) -> Result<()> {
        if any_of.iter().any(|&needed| self.scope.allows(needed)) {
            return Ok(());
        }
        let needed: Vec<&str> = any_of.iter().map(|s| s.as_str()).collect();
        Err(Error::forbidden(format!(
            "this token's scope is {}; this needs a token of scope {} or admin",
            self.scope,
            needed.join(" or ")
        )))
    }
}

/// The caller a presented token stands for. A malformed, unknown or revoked token is
/// `Unauthorized`; no message quotes it. Marks the token used (at most once a minute).
pub fn authenticate(store: &Store, presented: &str) -> Result<Caller> {
    let hash = token::parse(presented).ok_or_else(|| {
        Error::unauthorized(format!(
            "malformed API token (expected {} followed by 43 base64url characters)",
            token::MARK
        ))
    })?;
    let unknown = || Error::unauthorized("unknown or revoked API token");
    let row = store
        .authenticate(&hash, clock::now_ms())?
        .ok_or_else(unknown)?;
    // The lookup was by hash; this comparison does not depend on where two hashes differ.
    if !token::same_hash(&row.hash, &hash) {
        return Err(unknown());
    }
    Ok(Caller {
        account_id: row.account_id,
        token_id: row.id,
        scope: row.scope,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_names_are_checked() {
        assert_eq!(checked_name("  ci  ").unwrap(), "ci");
        assert!(checked_name(" ").is_err());
        assert!(checked_name("a\nb").is_err());
        assert!(checked_name(&"x".repeat(101)).is_err());
        assert!(checked_name(&"é".repeat(100)).is_ok());
    }

    #[test]
    fn a_caller_needs_a_scope_that_allows_the_request() {
        let caller = |scope| Caller {
            account_id: 1,
            token_id: 2,
            scope,
        };
        assert!(caller(Scope::Send).require(Scope::Send).is_ok());
        let e = caller(Scope::Send).require(Scope::Read).unwrap_err();
        assert_eq!(e.kind, sendonce_domain::error::ErrorKind::Forbidden);
        assert!(caller(Scope::Admin).require(Scope::Read).is_ok());
        let follow = [Scope::Send, Scope::Read];
        for s in Scope::ALL {
            assert!(
                caller(s).require_any(&follow).is_ok(),
                "{s} follows messages"
            );
        }
        assert!(caller(Scope::Read).require(Scope::Admin).is_err());
    }
}

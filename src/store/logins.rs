//! The dashboard's admins and their sessions (`Logins`), backend-neutral. A password is kept as
//! its Argon2id PHC string, a session as the SHA-256 of its cookie; neither is ever shown.

use crate::error::Result;

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

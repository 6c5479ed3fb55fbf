//! The dashboard's admins (`sendonce admin create|list|password|remove`) and their sessions: log
//! in with a name and password (rate-limited per admin, the password checked against its
//! Argon2id hash), a session looked up from its cookie, log out. An admin acts for its one
//! account, as an API token does.

use sendonce_domain::clock;
use sendonce_domain::error::{Error, ErrorKind, Result};
use sendonce_domain::login::{self, Password, SessionToken};
use sendonce_store::prelude::*;
use sendonce_store::{LoginRow, NewLogin, Store};
use serde::Serialize;

/// Failed or successful logins an admin may try at once, and then one per this many seconds.
pub const LOGIN_BURST: u32 = 5;
pub const LOGIN_EVERY_SECS: u32 = 12;

/// An admin as lists show it: never its password hash.
#[derive(Debug, Clone, Serialize)]
pub struct Admin {
    pub id: i64,
    pub account_id: i64,
    pub name: String,
    #[serde(serialize_with = "clock::ser_ms")]
    pub created_at: i64,
    #[serde(serialize_with = "clock::ser_opt_ms")]
    pub removed_at: Option<i64>,
    /// `account`: sees and acts for its own account only; `operator`: also sees the
    /// server-wide settings (the dashboard's Settings page).
    pub role: &'static str,
}

impl Admin {
    /// Whether this admin may see server-wide settings.
    pub fn is_operator(&self) -> bool {
        self.role == sendonce_store::OPERATOR
    }
}

impl From<LoginRow> for Admin {
    fn from(r: LoginRow) -> Self {
        Admin {
            id: r.id,
            account_id: r.account_id,
            name: r.name,
            created_at: r.created_at,
            removed_at: r.removed_at,
            role: sendonce_store::role(r.operator),
        }
    }
}

/// Make an admin of `account` (id or name) called `name` with `password`; an `operator` also
/// sees server-wide settings.
pub fn create(
    store: &Store,
    account: &str,
    name: &str,
    password: &Password,
    operator: bool,
) -> Result<Admin> {
    let name = login::checked_name(name)?;
    let account_id = store.resolve_account(account)?;
    let hash = login::hash_password(password)?;
    let created_at = clock::now_ms();
    let id = store.create_login(&NewLogin {
        account_id,
        name,
        password_hash: &hash,
        created_at,
        operator,
    })?;
    Ok(Admin {
        id,
        account_id,
        name: name.to_string(),
        created_at,
        removed_at: None,
        role: sendonce_store::role(operator),
    })
}

/// Admins, in id order, removed ones included.
#[derive(Debug, Clone, Serialize)]
pub struct Admins {
    pub admins: Vec<Admin>,
}

/// The admins of `account` (id or name), or of every account.
pub fn list(store: &Store, account: Option<&str>) -> Result<Admins> {
    let account_id = account.map(|a| store.resolve_account(a)).transpose()?;
    let admins = store.logins(account_id)?;
    Ok(Admins {
        admins: admins.into_iter().map(Admin::from).collect(),
    })
}

/// Give admin `name` a new password; its sessions end.
pub fn set_password(store: &Store, name: &str, password: &Password) -> Result<Admin> {
    let hash = login::hash_password(password)?;
    Ok(store.set_password(name.trim(), &hash)?.into())
}

/// Remove admin `name`: it can no longer log in, its sessions end, its name is not reused.
pub fn remove(store: &Store, name: &str) -> Result<Admin> {
    Ok(store.remove_login(name.trim(), clock::now_ms())?.into())
}

/// A session just begun: the cookie's text (to be set once, never shown) and its admin.
#[derive(Debug)]
pub struct Started {
    pub token: SessionToken,
    pub admin: Admin,
    pub expires_at: i64,
}

/// What a wrong name and a wrong password both answer: which of the two was wrong stays unsaid.
fn refused() -> Error {
    Error::unauthorized("wrong name or password")
}

/// Log in as `name` with `password`. At most [`LOGIN_BURST`] attempts per name at once, then
/// one every [`LOGIN_EVERY_SECS`] s (`Limited`), counted in the store so that every server
/// process shares them. The bucket is taken before the name is looked up and is keyed by the
/// name's hash, so a name nobody has is limited exactly like a real one, and costs the same
/// hashing time as a wrong password: neither answer tells whether the name exists.
pub fn login(store: &Store, name: &str, password: &Password) -> Result<Started> {
    use sha2::{Digest, Sha256};
    let now = clock::now_ms();
    let name = name.trim();
    let key: String = Sha256::digest(name.as_bytes())
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect();
    let grant = store.take_tokens(
        &format!("dashboard-login:{key}"),
        1,
        1.0 / f64::from(LOGIN_EVERY_SECS),
        LOGIN_BURST,
        now,
    )?;
    if grant.granted == 0 {
        return Err(Error::limited(format!(
            "too many login attempts; try again in {} s",
            (grant.wait_ms + 999) / 1000
        )));
    }
    let Some(row) = store.login_by_name(name)? else {
        let _ = login::verify_password(password, login::decoy_hash());
        return Err(refused());
    };
    if !login::verify_password(password, &row.password_hash)? {
        return Err(refused());
    }
    let token = SessionToken::generate()?;
    let expires_at = now + login::SESSION_MS;
    store.create_session(row.id, &token.hash(), now, expires_at)?;
    Ok(Started {
        token,
        admin: row.into(),
        expires_at,
    })
}

/// A live session: its admin and the CSRF token its forms carry.
#[derive(Debug, Clone)]
pub struct Session {
    pub admin: Admin,
    pub token: SessionToken,
    pub csrf: String,
}

impl Session {
    /// `Forbidden` unless `presented` is this session's CSRF token.
    pub fn check_csrf(&self, presented: &str) -> Result<()> {
        if self.token.csrf_matches(presented) {
            return Ok(());
        }
        Err(Error::forbidden(
            "this form is stale or did not come from this dashboard (missing or wrong CSRF \
             token); reload the page and try again",
        ))
    }

    /// Who decided, as a doubt's resolution records it.
    pub fn decided_by(&self) -> String {
        format!("{} (dashboard)", self.admin.name)
    }
}

/// The session a cookie's value stands for; `Unauthorized` when it is malformed, unknown,
/// expired, idle too long, or its admin was removed.
pub fn session(store: &Store, cookie: &str) -> Result<Session> {
    let gone = || Error::unauthorized("log in to the dashboard (the session ended or is unknown)");
    let token = SessionToken::parse(cookie).ok_or_else(gone)?;
    let row = store
        .session(
            &token.hash(),
            clock::now_ms(),
            login::IDLE_MS,
            login::SEEN_EVERY_MS,
        )?
        .ok_or_else(gone)?;
    let csrf = token.csrf();
    Ok(Session {
        admin: row.login.into(),
        token,
        csrf,
    })
}

/// End the session of this cookie's value (nothing when it is not one).
pub fn logout(store: &Store, cookie: &str) -> Result<()> {
    match SessionToken::parse(cookie) {
        Some(t) => store.end_session(&t.hash()),
        None => Ok(()),
    }
}

/// Whether `e` is a refused login (wrong credentials or too many attempts), as opposed to a
/// failure of the server.
pub fn is_refusal(e: &Error) -> bool {
    matches!(e.kind, ErrorKind::Unauthorized | ErrorKind::Limited)
}

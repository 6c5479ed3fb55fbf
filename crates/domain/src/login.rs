//! The dashboard's admins, pure rules but for the random source: what a login name and a
//! password must be, the Argon2id hash a password is kept as, a session's cookie text (kept only
//! as its SHA-256) and the CSRF token derived from it.
//!
//! The CSRF token is not stored: it is the SHA-256 of a fixed label and the session's secret
//! text, so the server recomputes it from the cookie on every form post, and a page can carry it
//! without revealing the cookie (SHA-256 does not run backwards).

use crate::error::{Error, Result};
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::rand::{SecureRandom, SystemRandom};
use sha2::{Digest, Sha256};

/// Shortest password accepted, in characters.
pub const MIN_PASSWORD_CHARS: usize = 12;
/// Longest password accepted, in bytes (Argon2 takes any length; a bound keeps a request cheap).
pub const MAX_PASSWORD_BYTES: usize = 1024;
/// Longest login name, in characters.
pub const MAX_NAME_CHARS: usize = 100;
/// A session ends this long after it began, whatever happens.
pub const SESSION_MS: i64 = 12 * 3_600_000;
/// A session ends after this long without a request.
pub const IDLE_MS: i64 = 2 * 3_600_000;
/// `last_seen_at` is written at most this often per session.
pub const SEEN_EVERY_MS: i64 = 60_000;

/// A password as typed: never printed (`Debug` hides it), dropped after hashing.
#[derive(Clone)]
pub struct Password(String);

impl Password {
    /// A password, checked: at least 12 characters, at most 1024 bytes, no line break (a
    /// password read from a line never holds one; one that does was pasted by mistake).
    pub fn new(text: String) -> Result<Password> {
        if text.chars().count() < MIN_PASSWORD_CHARS {
            return Err(Error::invalid(format!(
                "the password is shorter than {MIN_PASSWORD_CHARS} characters"
            )));
        }
        if text.len() > MAX_PASSWORD_BYTES {
            return Err(Error::invalid(format!(
                "the password is longer than {MAX_PASSWORD_BYTES} bytes"
            )));
        }
        if text.contains(['\n', '\r', '\0']) {
            return Err(Error::invalid(
                "the password contains a line break or a NUL byte",
            ));
        }
        Ok(Password(text))
    }

    /// A password as presented at login: not checked against the policy (a policy change must
    /// not lock anyone out), only bounded.
    pub fn presented(text: String) -> Option<Password> {
        (text.len() <= MAX_PASSWORD_BYTES).then_some(Password(text))
    }

    fn bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(…)")
    }
}

/// A login name: trimmed, 1 to 100 characters, no whitespace or control character inside.
pub fn checked_name(name: &str) -> Result<&str> {
    let name = name.trim();
    if name.is_empty() {
        return Err(Error::invalid("the admin name is empty"));
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(Error::invalid(format!(
            "the admin name is longer than {MAX_NAME_CHARS} characters"
        )));
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Error::invalid(
            "the admin name contains a space or a control character",
        ));
    }
    Ok(name)
}

fn random<const N: usize>() -> Result<[u8; N]> {
    let mut bytes = [0u8; N];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| Error::internal("the system's random source failed"))?;
    Ok(bytes)
}

/// The Argon2id PHC string of `password` with a fresh 16-byte salt (the crate's default cost:
/// 19 MiB, 2 passes, 1 lane — OWASP's recommendation).
pub fn hash_password(password: &Password) -> Result<String> {
    let salt = SaltString::encode_b64(&random::<16>()?)
        .map_err(|e| Error::internal(format!("cannot encode a salt: {e}")))?;
    Argon2::default()
        .hash_password(password.bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| Error::internal(format!("cannot hash the password: {e}")))
}

/// Whether `password` matches the PHC string `stored`. A stored string that does not parse is
/// `Damaged` (a row we wrote no longer holds what we wrote).
pub fn verify_password(password: &Password, stored: &str) -> Result<bool> {
    let parsed = PasswordHash::new(stored)
        .map_err(|e| Error::damaged(format!("admins.password_hash does not parse: {e}")))?;
    Ok(Argon2::default()
        .verify_password(password.bytes(), &parsed)
        .is_ok())
}

/// A stored hash of no one's password, verified when a login names nobody, so that an unknown
/// name costs the same time as a wrong password.
pub fn decoy_hash() -> &'static str {
    static DECOY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DECOY.get_or_init(|| {
        let salt = SaltString::encode_b64(&[7u8; 16]).expect("16 bytes always encode");
        Argon2::default()
            .hash_password(b"no one's password, for timing only", &salt)
            .map(|h| h.to_string())
            .unwrap_or_default()
    })
}

/// A session's secret: 32 random bytes as base64url, the cookie's value. Kept in the database
/// only as its SHA-256; `Debug` hides it.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionToken(String);

/// Length of a session token's text.
const SESSION_TEXT_LEN: usize = 43;

impl SessionToken {
    pub fn generate() -> Result<SessionToken> {
        Ok(SessionToken(URL_SAFE_NO_PAD.encode(random::<32>()?)))
    }

    /// A cookie's value, if it has the shape of a session token.
    pub fn parse(text: &str) -> Option<SessionToken> {
        let ok = text.len() == SESSION_TEXT_LEN
            && URL_SAFE_NO_PAD
                .decode(text)
                .is_ok_and(|bytes| bytes.len() == 32);
        ok.then(|| SessionToken(text.to_string()))
    }

    /// The text to put in the cookie.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Its SHA-256, as stored.
    pub fn hash(&self) -> [u8; 32] {
        Sha256::digest(self.0.as_bytes()).into()
    }

    /// The CSRF token of this session: what every form of the session carries.
    pub fn csrf(&self) -> String {
        let mut h = Sha256::new();
        h.update(b"sendonce dashboard csrf\0");
        h.update(self.0.as_bytes());
        URL_SAFE_NO_PAD.encode(h.finalize())
    }

    /// Whether `presented` is this session's CSRF token (compared in constant time).
    pub fn csrf_matches(&self, presented: &str) -> bool {
        crate::token::same_hash(self.csrf().as_bytes(), presented.as_bytes())
    }
}

impl std::fmt::Debug for SessionToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionToken(…)")
    }
}

/// A random value for the login form's double-submit check (before there is a session).
pub fn login_nonce() -> Result<String> {
    Ok(URL_SAFE_NO_PAD.encode(random::<24>()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_checked_and_never_printed() {
        assert!(Password::new("short".into()).is_err());
        assert!(Password::new("twelve chars".into()).is_ok());
        assert!(Password::new("a long one\nwith a break".into()).is_err());
        assert!(Password::new("x".repeat(1025)).is_err());
        let p = Password::new("correct horse battery".into()).unwrap();
        assert_eq!(format!("{p:?}"), "Password(…)");
    }

    #[test]
    fn a_hash_verifies_its_password_only() {
        let p = Password::new("correct horse battery".into()).unwrap();
        let h = hash_password(&p).unwrap();
        assert!(h.starts_with("$argon2id$"), "{h}");
        assert!(verify_password(&p, &h).unwrap());
        let wrong = Password::presented("correct horse batterx".into()).unwrap();
        assert!(!verify_password(&wrong, &h).unwrap());
        assert!(!verify_password(&p, decoy_hash()).unwrap());
        assert!(verify_password(&p, "not a hash").is_err());
        // A fresh salt each time.
        assert_ne!(h, hash_password(&p).unwrap());
    }

    #[test]
    fn sessions_and_their_csrf_tokens() {
        let s = SessionToken::generate().unwrap();
        assert_eq!(SessionToken::parse(s.expose()), Some(s.clone()));
        assert!(SessionToken::parse("short").is_none());
        assert!(SessionToken::parse(&"!".repeat(43)).is_none());
        assert!(s.csrf_matches(&s.csrf()));
        assert!(!s.csrf_matches(""));
        let other = SessionToken::generate().unwrap();
        assert!(!s.csrf_matches(&other.csrf()));
        assert!(!s.csrf().contains(s.expose()));
        assert_eq!(format!("{s:?}"), "SessionToken(…)");
    }

    #[test]
    fn names_are_checked() {
        assert_eq!(checked_name(" ana ").unwrap(), "ana");
        assert!(checked_name("").is_err());
        assert!(checked_name("a b").is_err());
        assert!(checked_name(&"x".repeat(101)).is_err());
    }
}

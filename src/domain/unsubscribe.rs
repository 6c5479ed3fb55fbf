//! Signed one-click unsubscribe tokens: pure functions that sign and verify (job id, recipient)
//! with HMAC-SHA256, so an unsubscribe link cannot be forged for another address.
//!
//! A token is self-contained: `b64url(job_id) "." b64url(recipient) "." b64url(mac)`, where
//! `mac = HMAC-SHA256(secret, "sendonce-unsubscribe-v1" 0x00 len(job_id) as u32 BE job_id
//! recipient)`. The length prefix keeps the two fields from sliding into each other; the label
//! keeps these MACs from being valid for any other use of the same secret. The recipient is
//! signed exactly as given (the sender passes the normalised address). Verification is
//! constant-time and rejects any change to any part.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Name of the environment variable that carries the signing secret.
pub const SECRET_ENV: &str = "SENDONCE_UNSUBSCRIBE_SECRET";
/// Shortest secret accepted, in bytes.
pub const MIN_SECRET_LEN: usize = 16;
/// Longest token `verify` looks at (a job id and an address fit easily).
const MAX_TOKEN_LEN: usize = 2048;
const LABEL: &[u8] = b"sendonce-unsubscribe-v1\0";

/// The signing key. Its `Debug` never shows the bytes.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// A secret of at least `MIN_SECRET_LEN` bytes. The error never quotes the value.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Secret, String> {
        let bytes = bytes.into();
        if bytes.len() < MIN_SECRET_LEN {
            return Err(format!(
                "the unsubscribe secret is too short ({} bytes; at least {MIN_SECRET_LEN} needed)",
                bytes.len()
            ));
        }
        Ok(Secret(bytes))
    }

    /// Read the secret from `SENDONCE_UNSUBSCRIBE_SECRET`.
    pub fn from_env() -> Result<Secret, String> {
        Self::from_env_value(std::env::var_os(SECRET_ENV).map(|v| v.into_encoded_bytes()))
    }

    /// The secret from the value of `SENDONCE_UNSUBSCRIBE_SECRET` (`None`: unset).
    pub fn from_env_value(value: Option<Vec<u8>>) -> Result<Secret, String> {
        match value {
            None => Err(format!(
                "{SECRET_ENV} is not set: signed unsubscribe links need a secret \
                 (at least {MIN_SECRET_LEN} bytes, e.g. from `openssl rand -hex 32`)"
            )),
            Some(v) => Secret::new(v).map_err(|e| format!("{SECRET_ENV}: {e}")),
        }
    }

    fn mac(&self, job_id: &str, recipient: &str) -> HmacSha256 {
        // HMAC takes keys of any length; `new_from_slice` cannot fail for it.
        let mut mac = match HmacSha256::new_from_slice(&self.0) {
            Ok(m) => m,
            Err(_) => unreachable!("HMAC accepts keys of any length"),
        };
        mac.update(LABEL);
        mac.update(&(job_id.len() as u32).to_be_bytes());
        mac.update(job_id.as_bytes());
        mac.update(recipient.as_bytes());
        mac
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// What a valid token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsubscribe {
    pub job_id: String,
    pub recipient: String,
}

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenError {
    /// Not three base64url parts of sane length.
    Malformed,
    /// Well-formed, but the signature does not match (forged or tampered with).
    BadSignature,
}

impl std::fmt::Display for TokenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TokenError::Malformed => "malformed unsubscribe token",
            TokenError::BadSignature => "unsubscribe token signature does not match",
        })
    }
}

impl std::error::Error for TokenError {}

/// The token for one recipient of one job. Deterministic: a retry carries the same link.
pub fn sign(secret: &Secret, job_id: &str, recipient: &str) -> String {
    let tag = secret.mac(job_id, recipient).finalize().into_bytes();
    format!(
        "{}.{}.{}",
        URL_SAFE_NO_PAD.encode(job_id),
        URL_SAFE_NO_PAD.encode(recipient),
        URL_SAFE_NO_PAD.encode(tag)
    )
}

/// Check a token and return the job and recipient it was issued for.
pub fn verify(secret: &Secret, token: &str) -> Result<Unsubscribe, TokenError> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(TokenError::Malformed);
    }
    let mut parts = token.split('.');
    let (Some(j), Some(r), Some(t), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Malformed);
    };
    let decode = |s: &str| URL_SAFE_NO_PAD.decode(s).map_err(|_| TokenError::Malformed);
    let job_id = String::from_utf8(decode(j)?).map_err(|_| TokenError::Malformed)?;
    let recipient = String::from_utf8(decode(r)?).map_err(|_| TokenError::Malformed)?;
    let tag = decode(t)?;
    secret
        .mac(&job_id, &recipient)
        .verify_slice(&tag)
        .map_err(|_| TokenError::BadSignature)?;
    Ok(Unsubscribe { job_id, recipient })
}

/// Name of the environment variable that gives the sender's public base URL.
pub const PUBLIC_URL_ENV: &str = "SENDONCE_PUBLIC_URL";
/// Longest public base URL accepted, in bytes.
const MAX_BASE_LEN: usize = 512;

/// Where a recipient's unsubscribe link points: the public base URL of the server that will
/// serve `/u/{token}` (`sendonce serve`), and the key that signs the tokens.
#[derive(Debug, Clone)]
pub struct Links {
    base: String,
    secret: Secret,
}

impl Links {
    /// `base` must be an absolute `https://` (or `http://`) URL without query or fragment; a
    /// trailing `/` is dropped. The error names the problem without quoting a secret.
    pub fn new(base: &str, secret: Secret) -> Result<Links, String> {
        let b = base.trim().trim_end_matches('/');
        let rest = b
            .strip_prefix("https://")
            .or_else(|| b.strip_prefix("http://"))
            .ok_or_else(|| format!("the public URL {b:?} must start with https:// or http://"))?;
        let host = rest.split('/').next().unwrap_or("");
        if host.is_empty()
            || b.len() > MAX_BASE_LEN
            || b.chars()
                .any(|c| c.is_control() || c.is_whitespace() || "?#\"<>\\`{}|^".contains(c))
        {
            return Err(format!(
                "the public URL {:?} is not a base URL (scheme, host, optional path; no spaces, \
                 query or fragment; at most {MAX_BASE_LEN} bytes)",
                b.chars().take(80).collect::<String>()
            ));
        }
        Ok(Links {
            base: b.to_string(),
            secret,
        })
    }

    /// The public base URL, without a trailing `/`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The signed link of one recipient of one job. Deterministic: a retry sends the same link.
    pub fn unsubscribe_url(&self, job_id: &str, recipient: &str) -> String {
        format!("{}/u/{}", self.base, sign(&self.secret, job_id, recipient))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Secret {
        Secret::new(b"0123456789abcdef-test-secret".to_vec()).unwrap()
    }

    #[test]
    fn round_trip_and_determinism() {
        let t = sign(&key(), "campaign:7:sub:42", "ana@example.com");
        assert_eq!(t, sign(&key(), "campaign:7:sub:42", "ana@example.com"));
        assert!(t
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.'));
        assert_eq!(
            verify(&key(), &t),
            Ok(Unsubscribe {
                job_id: "campaign:7:sub:42".into(),
                recipient: "ana@example.com".into()
            })
        );
    }

    #[test]
    fn verify_rejects_tampering() {
        let k = key();
        let t = sign(&k, "campaign:7:sub:42", "ana@example.com");
        let parts: Vec<&str> = t.split('.').collect();
        // Another recipient with the first one's signature.
        let other = format!(
            "{}.{}.{}",
            parts[0],
            URL_SAFE_NO_PAD.encode("bob@example.com"),
            parts[2]
        );
        assert_eq!(verify(&k, &other), Err(TokenError::BadSignature));
        // Another job.
        let other = format!(
            "{}.{}.{}",
            URL_SAFE_NO_PAD.encode("campaign:7:sub:43"),
            parts[1],
            parts[2]
        );
        assert_eq!(verify(&k, &other), Err(TokenError::BadSignature));
        // Field boundary moved: job "a" + recipient "bc" vs job "ab" + recipient "c".
        let a = sign(&k, "a", "bc");
        let ap: Vec<&str> = a.split('.').collect();
        let moved = format!(
            "{}.{}.{}",
            URL_SAFE_NO_PAD.encode("ab"),
            URL_SAFE_NO_PAD.encode("c"),
            ap[2]
        );
        assert_eq!(verify(&k, &moved), Err(TokenError::BadSignature));
        // Every single-character change of the token is refused.
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.";
        for i in 0..t.len() {
            for &c in alphabet {
                let mut b = t.clone().into_bytes();
                if b[i] == c {
                    continue;
                }
                b[i] = c;
                let changed = String::from_utf8(b).unwrap();
                // Non-canonical base64 (a change in the unused bits of a last character) is
                // refused too, so no two tokens are accepted for the same fields.
                assert!(verify(&k, &changed).is_err(), "{changed} accepted");
            }
        }
        // Another secret.
        let k2 = Secret::new(b"another-secret-of-enough-length".to_vec()).unwrap();
        assert_eq!(verify(&k2, &t), Err(TokenError::BadSignature));
        // Truncated signature, missing parts, garbage.
        assert!(verify(&k, &t[..t.len() - 4]).is_err());
        assert!(verify(&k, &t[..t.len() - 1]).is_err());
        assert_eq!(verify(&k, "abc"), Err(TokenError::Malformed));
        assert_eq!(verify(&k, "a.b.c.d"), Err(TokenError::Malformed));
        assert_eq!(verify(&k, "!!.??.**"), Err(TokenError::Malformed));
        assert_eq!(verify(&k, &"A".repeat(5000)), Err(TokenError::Malformed));
    }

    #[test]
    fn links_need_a_base_url_and_are_deterministic() {
        let l = Links::new("https://news.example.org/", key()).unwrap();
        let a = l.unsubscribe_url("job-1", "a@x.org");
        assert_eq!(a, l.unsubscribe_url("job-1", "a@x.org"));
        assert!(a.starts_with("https://news.example.org/u/"), "{a}");
        let token = a.rsplit('/').next().unwrap();
        assert_eq!(verify(&key(), token).unwrap().recipient, "a@x.org");
        for bad in [
            "news.example.org",
            "https://",
            "https://x.org/?a=1",
            "https://x .org",
            "ftp://x.org",
        ] {
            assert!(Links::new(bad, key()).is_err(), "{bad}");
        }
    }

    #[test]
    fn short_secrets_are_refused_without_echo() {
        let e = Secret::new(b"hunter2".to_vec()).unwrap_err();
        assert!(!e.contains("hunter2"), "{e}");
        assert!(!format!("{:?}", key()).contains("0123456789"));
    }
}

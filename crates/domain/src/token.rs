//! API tokens of `sendonce serve`: made from a CSPRNG, shown once, kept only as SHA-256; their
//! scopes and what each allows. Pure but for [`Token::generate`], which reads the system's
//! random source.
//!
//! A token is `so_` followed by 32 random bytes in base64url without padding (43 characters).
//! The database keeps its SHA-256 (the lookup key) and the first characters ([`Token::prefix`],
//! `so_` and 6 more) that lists show so people can tell tokens apart. Nothing here ever prints
//! a token: [`Token`]'s `Debug` shows the prefix only.

use crate::error::{Error, Result};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Serialize, Serializer};
use sha2::{Digest, Sha256};

/// What every token starts with (and what tells a sendonce token from other secrets).
pub const MARK: &str = "so_";
/// Random bytes in a token.
const RANDOM_BYTES: usize = 32;
/// Their base64url length without padding.
const BODY_LEN: usize = 43;
/// Characters of the body that the shown prefix keeps (36 of the 256 bits: enough to tell
/// tokens apart, far too few to guess the rest).
const SHOWN_BODY: usize = 6;
/// `last_used_at` is written at most this often per token, not on every request.
pub const LAST_USED_EVERY_MS: i64 = 60_000;

/// The SHA-256 of a token's whole text: what the database keeps and looks tokens up by.
pub type Hash = [u8; 32];

/// A token's text. Shown once, when it is made; `Debug` shows only its prefix and serialising
/// it (the `token create` answer) is the one place where the text leaves the process.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// A new token from the system's CSPRNG.
    pub fn generate() -> Result<Token> {
        let mut bytes = [0u8; RANDOM_BYTES];
        SystemRandom::new()
            .fill(&mut bytes)
            .map_err(|_| Error::internal("the system's random source failed"))?;
        Ok(Token::from_random(&bytes))
    }

    /// The token made of these random bytes (tests; [`Token::generate`] in use).
    pub fn from_random(bytes: &[u8; RANDOM_BYTES]) -> Token {
        Token(format!("{MARK}{}", URL_SAFE_NO_PAD.encode(bytes)))
    }

    /// The secret text, to be shown once.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Its SHA-256, as stored.
    pub fn hash(&self) -> Hash {
        hash_text(&self.0)
    }

    /// What lists show: `so_` and the first 6 characters of the body.
    pub fn prefix(&self) -> String {
        self.0.chars().take(MARK.len() + SHOWN_BODY).collect()
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token({}…)", self.prefix())
    }
}

impl Serialize for Token {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

fn hash_text(text: &str) -> Hash {
    Sha256::digest(text.as_bytes()).into()
}

/// The hash to look a presented token up by, or `None` when it cannot be one of ours (not
/// `so_` + 43 base64url characters that decode to 32 bytes). Surrounding whitespace (a
/// trailing newline from a file) is ignored. The text is never returned or quoted.
pub fn parse(presented: &str) -> Option<Hash> {
    let text = presented.trim();
    let body = text.strip_prefix(MARK)?;
    if body.len() != BODY_LEN {
        return None;
    }
    // Canonical encodings only (the decoder refuses stray trailing bits), so that one token
    // has one text.
    let bytes = URL_SAFE_NO_PAD.decode(body).ok()?;
    (bytes.len() == RANDOM_BYTES).then(|| hash_text(text))
}

/// Whether two hashes are equal, in time that does not depend on where they differ.
pub fn same_hash(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a
        .iter()
        .zip(b)
        .fold(0u8, |acc, (x, y)| acc | std::hint::black_box(x ^ y));
    std::hint::black_box(diff) == 0
}

/// What a token may do, always within its own account.
///
/// - `send`: send messages and follow them (`POST /v1/messages`, `GET /v1/messages/{id}`);
/// - `read`: read everything of the account (every `GET`), send nothing;
/// - `admin`: everything in the account.
///
/// A route asks for one scope with [`Scope::allows`]; following a message (`GET
/// /v1/messages/{id}`) is the one route two scopes below `admin` may use, so it asks for
/// `send` or `read` (`Caller::require_any` in `app::tokens`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    Send,
    Read,
    Admin,
}

impl Scope {
    pub const ALL: [Scope; 3] = [Scope::Send, Scope::Read, Scope::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Send => "send",
            Scope::Read => "read",
            Scope::Admin => "admin",
        }
    }

    /// `send`, `read` or `admin`.
    pub fn parse(s: &str) -> Result<Scope> {
        Scope::ALL
            .into_iter()
            .find(|scope| scope.as_str() == s)
            .ok_or_else(|| {
                Error::invalid(format!("unknown token scope {s:?} (send, read or admin)"))
            })
    }

    /// Whether a token of this scope may do what needs `needed`: `admin` may do everything;
    /// `send` and `read` only what needs exactly them (a `read` token sends nothing, a `send`
    /// token reads no subscriber).
    pub fn allows(self, needed: Scope) -> bool {
        self == Scope::Admin || self == needed
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_allows_exactly_what_its_doc_says() {
        use Scope::*;
        let allowed = |have: Scope, need: Scope| have.allows(need);
        for need in Scope::ALL {
            assert!(allowed(Admin, need), "admin allows {need}");
        }
        assert!(allowed(Send, Send));
        assert!(!allowed(Send, Read), "a send token reads no subscriber");
        assert!(!allowed(Send, Admin));
        assert!(allowed(Read, Read));
        assert!(!allowed(Read, Send), "a read token sends nothing");
        assert!(!allowed(Read, Admin));
    }

    #[test]
    fn scope_round_trips_and_refuses_unknown_names() {
        for s in Scope::ALL {
            assert_eq!(Scope::parse(s.as_str()).unwrap(), s);
            assert_eq!(
                serde_json::to_value(s).unwrap(),
                serde_json::json!(s.as_str())
            );
        }
        assert!(Scope::parse("Admin").is_err());
        assert!(Scope::parse("write").is_err());
    }

    #[test]
    fn token_shape_hash_and_prefix() {
        let t = Token::generate().unwrap();
        let text = t.expose();
        assert!(text.starts_with(MARK));
        assert_eq!(text.len(), MARK.len() + BODY_LEN);
        assert_eq!(t.prefix(), text[..9]);
        assert_eq!(t.hash(), <Hash>::from(Sha256::digest(text.as_bytes())));
        assert_eq!(parse(text), Some(t.hash()));
        assert_eq!(parse(&format!("{text}\n")), Some(t.hash()));
        assert_ne!(Token::generate().unwrap(), t, "two tokens differ");
    }

    #[test]
    fn a_token_is_never_in_its_debug_text() {
        let t = Token::from_random(&[7; 32]);
        let debug = format!("{t:?}");
        assert!(!debug.contains(t.expose()), "{debug}");
        assert!(debug.contains(&t.prefix()));
    }

    #[test]
    fn malformed_tokens_have_no_hash() {
        let t = Token::from_random(&[0xab; 32]);
        let text = t.expose();
        let body = &text[MARK.len()..];
        assert_eq!(parse(body), None, "no mark");
        assert_eq!(parse(&format!("xx_{body}")), None, "another mark");
        assert_eq!(parse(&text[..text.len() - 1]), None, "too short");
        assert_eq!(parse(&format!("{text}A")), None, "too long");
        assert_eq!(parse(&format!("{text}=")), None, "padding");
        assert_eq!(parse(&text.replace('q', "+")), None, "not base64url");
        assert_eq!(parse(""), None);
        // One character changed: still well-formed, another hash.
        let mut changed = text.to_string();
        let last = changed.pop().unwrap();
        changed.push(if last == 'A' { 'Q' } else { 'A' });
        assert_ne!(parse(&changed), Some(t.hash()));
    }

    #[test]
    fn same_hash_compares_whole_values() {
        let a = Token::from_random(&[1; 32]).hash();
        let b = Token::from_random(&[2; 32]).hash();
        assert!(same_hash(&a, &a));
        assert!(!same_hash(&a, &b));
        assert!(!same_hash(&a, &a[..31]));
    }
}

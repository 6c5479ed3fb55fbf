//! Signed links that a recipient clicks: unsubscribe (`/u/{token}`) and double opt-in confirm
//! (`/c/{token}`). Pure functions: seal what a link is for into an opaque token, open it again,
//! and a key ring with rotation. No I/O.
//!
//! A token is `"2" b64url(nonce ‖ ciphertext ‖ tag)`: ChaCha20-Poly1305 (ring) over a small
//! binary payload — account id, channel, address, list ids, campaign id — so the address never
//! appears readable in a URL (it would leak into every access log on the way). The nonce is the
//! first 12 bytes of an HMAC-SHA256 of the payload under a second key derived from the same
//! secret (the synthetic-IV construction): sealing is deterministic, so a retried message carries
//! the same link, and two different payloads never share a nonce. The purpose (unsubscribe or
//! confirm) is authenticated data: a confirm token does not work as an unsubscribe token. Any
//! changed byte, a token sealed with a key that is not in the ring, or an old key past its date
//! is refused; the error says which only as far as a page needs (malformed, or not valid).

use crate::address::Channel;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Name of the environment variable that carries the current signing secret.
pub const SECRET_ENV: &str = "SENDONCE_UNSUBSCRIBE_SECRET";
/// Older secrets that still open links until a date: `YYYY-MM-DD:SECRET`, separated by commas
/// or white space (a rotated-out key keeps working for mail already delivered).
pub const OLD_SECRETS_ENV: &str = "SENDONCE_UNSUBSCRIBE_OLD_SECRETS";
/// Shortest secret accepted, in bytes.
pub const MIN_SECRET_LEN: usize = 16;
/// Longest token `open` looks at (an address of 254 bytes and 64 lists fit easily).
const MAX_TOKEN_LEN: usize = 2048;
/// Most list ids one token carries.
pub const MAX_LISTS: usize = 64;
const VERSION: char = '2';
const TAG_LEN: usize = 16;

/// What a link is for. Authenticated with the token: one purpose's token is refused as another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Unsubscribe,
    Confirm,
}

impl Purpose {
    fn aad(self) -> &'static [u8] {
        match self {
            Purpose::Unsubscribe => b"sendonce-link-v2 unsubscribe",
            Purpose::Confirm => b"sendonce-link-v2 confirm",
        }
    }

    fn path(self) -> &'static str {
        match self {
            Purpose::Unsubscribe => "u",
            Purpose::Confirm => "c",
        }
    }
}

/// Who a link is for and what it covers. `lists` empty: the message went to the whole account
/// (unsubscribing then means "everything from this sender").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub account_id: i64,
    pub channel: Channel,
    /// Normalised address (lower-case email, E.164 phone).
    pub address: String,
    pub lists: Vec<i64>,
    /// The campaign the message belonged to (0: none, e.g. a confirmation message).
    pub campaign_id: i64,
}

/// One signing key. Its `Debug` never shows the bytes.
#[derive(Clone)]
pub struct Secret {
    seal: LessSafeKeyClone,
    nonce: Vec<u8>,
    /// The key of VERP return-path tags (`crate::verp`), derived from the same secret.
    verp: [u8; 32],
    /// The key webhook endpoint secrets are derived from (`crate::outhooks`).
    hooks: [u8; 32],
}

/// `LessSafeKey` is not `Clone`; keep the derived bytes to rebuild it.
#[derive(Clone)]
struct LessSafeKeyClone([u8; 32]);

impl LessSafeKeyClone {
    fn key(&self) -> LessSafeKey {
        match UnboundKey::new(&CHACHA20_POLY1305, &self.0) {
            Ok(k) => LessSafeKey::new(k),
            Err(_) => unreachable!("a 32-byte key is valid for ChaCha20-Poly1305"),
        }
    }
}

fn derive(secret: &[u8], label: &[u8]) -> [u8; 32] {
    let mut mac = hmac_key(secret);
    mac.update(label);
    mac.finalize().into_bytes().into()
}

fn hmac_key(key: &[u8]) -> HmacSha256 {
    match HmacSha256::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC accepts keys of any length"),
    }
}

impl Secret {
    /// A secret of at least `MIN_SECRET_LEN` bytes. The error never quotes the value.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Secret, String> {
        let bytes = bytes.into();
        if bytes.len() < MIN_SECRET_LEN {
            return Err(format!(
                "the link secret is too short ({} bytes; at least {MIN_SECRET_LEN} needed)",
                bytes.len()
            ));
        }
        Ok(Secret {
            seal: LessSafeKeyClone(derive(&bytes, b"sendonce-link-v2 seal key")),
            nonce: derive(&bytes, b"sendonce-link-v2 nonce key").to_vec(),
            verp: derive(&bytes, b"sendonce-verp-v1 tag key"),
            hooks: derive(&bytes, b"sendonce-hooks-v1 endpoint secret key"),
        })
    }

    /// Read the secret from `SENDONCE_UNSUBSCRIBE_SECRET`.
    pub fn from_env() -> Result<Secret, String> {
        Self::from_env_value(std::env::var_os(SECRET_ENV).map(|v| v.into_encoded_bytes()))
    }

    /// The secret from the value of `SENDONCE_UNSUBSCRIBE_SECRET` (`None`: unset).
    pub fn from_env_value(value: Option<Vec<u8>>) -> Result<Secret, String> {
        match value {
            None => Err(format!(
                "{SECRET_ENV} is not set: signed links need a secret \
                 (at least {MIN_SECRET_LEN} bytes, e.g. from `openssl rand -hex 32`)"
            )),
            Some(v) => Secret::new(v).map_err(|e| format!("{SECRET_ENV}: {e}")),
        }
    }

    fn nonce_for(&self, purpose: Purpose, payload: &[u8]) -> [u8; NONCE_LEN] {
        let mut mac = hmac_key(&self.nonce);
        mac.update(purpose.aad());
        mac.update(payload);
        let full = mac.finalize().into_bytes();
        let mut n = [0u8; NONCE_LEN];
        n.copy_from_slice(&full[..NONCE_LEN]);
        n
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Why a token was refused. Pages say no more than "not valid": which key or field failed is
/// not told to the holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenError {
    /// Not a version-2 token of sane length and alphabet.
    Malformed,
    /// Well-formed, but no key of the ring opens it (forged, changed, another purpose, or a
    /// key rotated out / past its date).
    NotValid,
}

impl std::fmt::Display for TokenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TokenError::Malformed => "malformed link token",
            TokenError::NotValid => "link token not valid (changed, or its key was retired)",
        })
    }
}

impl std::error::Error for TokenError {}

/// The current key and the rotated-out ones that still open tokens until their date.
#[derive(Debug, Clone)]
pub struct Keys {
    current: Secret,
    /// (key, open tokens until this time in ms since the epoch).
    old: Vec<(Secret, i64)>,
}

impl Keys {
    pub fn new(current: Secret) -> Keys {
        Keys {
            current,
            old: Vec::new(),
        }
    }

    /// Add a rotated-out key that opens tokens until `until_ms`.
    pub fn with_old(mut self, key: Secret, until_ms: i64) -> Keys {
        self.old.push((key, until_ms));
        self
    }

    /// The ring from the environment: `SENDONCE_UNSUBSCRIBE_SECRET` and, if set,
    /// `SENDONCE_UNSUBSCRIBE_OLD_SECRETS`.
    pub fn from_env() -> Result<Keys, String> {
        let current = Secret::from_env()?;
        let old = std::env::var(OLD_SECRETS_ENV).ok();
        Keys::new(current).with_old_list(old.as_deref())
    }

    /// Parse `YYYY-MM-DD:SECRET[,YYYY-MM-DD:SECRET...]`: each key opens tokens until the end
    /// (UTC) of its date. Errors name the entry by position, never its secret.
    pub fn with_old_list(mut self, list: Option<&str>) -> Result<Keys, String> {
        let Some(list) = list else { return Ok(self) };
        for (i, entry) in list
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|e| !e.is_empty())
            .enumerate()
        {
            let n = i + 1;
            let (date, secret) = entry.split_once(':').ok_or_else(|| {
                format!("{OLD_SECRETS_ENV}: entry {n} is not DATE:SECRET (e.g. 2027-03-01:...)")
            })?;
            let start = (date.len() == 10)
                .then(|| crate::clock::parse_rfc3339_ms(&format!("{date}T00:00:00Z")).ok())
                .flatten()
                .ok_or_else(|| {
                    format!(
                        "{OLD_SECRETS_ENV}: entry {n} has no valid date before ':' (YYYY-MM-DD)"
                    )
                })?;
            let key = Secret::new(secret.as_bytes().to_vec())
                .map_err(|e| format!("{OLD_SECRETS_ENV}: entry {n}: {e}"))?;
            self.old.push((key, start + 86_400_000));
        }
        Ok(self)
    }

    /// The current key's VERP key, for the tag of a new return path.
    pub(crate) fn verp_current(&self) -> &[u8; 32] {
        &self.current.verp
    }

    /// The VERP keys that check a tag at `now_ms`: the current one, then each old key still in
    /// its period (as for links).
    pub(crate) fn verp_valid(&self, now_ms: i64) -> impl Iterator<Item = &[u8; 32]> {
        std::iter::once(&self.current.verp).chain(
            self.old
                .iter()
                .filter(move |(_, until)| now_ms < *until)
                .map(|(k, _)| &k.verp),
        )
    }

    /// The keys webhook endpoint secrets are derived from at `now_ms` (`outhooks`): the
    /// current one first, then each old key still in its period, so that a receiver holding
    /// a secret derived from the old key keeps verifying until the old key's date.
    pub(crate) fn hook_keys(&self, now_ms: i64) -> impl Iterator<Item = &[u8; 32]> {
        std::iter::once(&self.current.hooks).chain(
            self.old
                .iter()
                .filter(move |(_, until)| now_ms < *until)
                .map(|(k, _)| &k.hooks),
        )
    }

    /// Seal `target` for `purpose` with the current key. Deterministic.
    pub fn seal(&self, purpose: Purpose, target: &Target) -> String {
        seal_with(&self.current, purpose, target)
    }

    /// Open a token at time `now_ms`: the current key, then each old key still in its period.
    pub fn open(&self, purpose: Purpose, token: &str, now_ms: i64) -> Result<Target, TokenError> {
        let raw = decode(token)?;
        let keys = std::iter::once(&self.current).chain(
            self.old
                .iter()
                .filter(|(_, until)| now_ms < *until)
                .map(|(k, _)| k),
        );
        for key in keys {
            if let Some(payload) = open_with(key, purpose, &raw) {
                return parse_payload(&payload).ok_or(TokenError::NotValid);
            }
        }
        Err(TokenError::NotValid)
    }
}

fn seal_with(key: &Secret, purpose: Purpose, target: &Target) -> String {
    let payload = payload(target);
    let nonce = key.nonce_for(purpose, &payload);
    let mut buf = payload;
    let sealed = key.seal.key().seal_in_place_append_tag(
        Nonce::assume_unique_for_key(nonce),
        Aad::from(purpose.aad()),
        &mut buf,
    );
    if sealed.is_err() {
        unreachable!("ChaCha20-Poly1305 seals any payload under 256 GiB");
    }
    let mut out = Vec::with_capacity(NONCE_LEN + buf.len());
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&buf);
    format!("{VERSION}{}", URL_SAFE_NO_PAD.encode(out))
}

fn decode(token: &str) -> Result<Vec<u8>, TokenError> {
    let body = token
        .strip_prefix(VERSION)
        .filter(|_| token.len() <= MAX_TOKEN_LEN)
        .ok_or(TokenError::Malformed)?;
    let raw = URL_SAFE_NO_PAD
        .decode(body)
        .map_err(|_| TokenError::Malformed)?;
    if raw.len() < NONCE_LEN + TAG_LEN + 3 {
        return Err(TokenError::Malformed);
    }
    Ok(raw)
}

fn open_with(key: &Secret, purpose: Purpose, raw: &[u8]) -> Option<Vec<u8>> {
    let (n, sealed) = raw.split_at(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(n).ok()?;
    let mut buf = sealed.to_vec();
    // The tag authenticates nonce, purpose and payload: only a holder of the key made it.
    let plain = key
        .seal
        .key()
        .open_in_place(nonce, Aad::from(purpose.aad()), &mut buf)
        .ok()?;
    Some(plain.to_vec())
}

/// account, channel, campaign, lists as LEB128 varints, then the address bytes.
fn payload(t: &Target) -> Vec<u8> {
    let mut p = Vec::with_capacity(16 + t.address.len() + 4 * t.lists.len());
    put_varint(&mut p, t.account_id as u64);
    p.push(match t.channel {
        Channel::Email => b'e',
        Channel::Sms => b's',
    });
    put_varint(&mut p, t.campaign_id as u64);
    let lists = &t.lists[..t.lists.len().min(MAX_LISTS)];
    put_varint(&mut p, lists.len() as u64);
    for l in lists {
        put_varint(&mut p, *l as u64);
    }
    p.extend_from_slice(t.address.as_bytes());
    p
}

fn parse_payload(p: &[u8]) -> Option<Target> {
    let mut i = 0;
    let account_id = get_varint(p, &mut i)?;
    let channel = match p.get(i)? {
        b'e' => Channel::Email,
        b's' => Channel::Sms,
        _ => return None,
    };
    i += 1;
    let campaign_id = get_varint(p, &mut i)?;
    let n = get_varint(p, &mut i)? as usize;
    if n > MAX_LISTS {
        return None;
    }
    let mut lists = Vec::with_capacity(n);
    for _ in 0..n {
        lists.push(get_varint(p, &mut i)?);
    }
    let address = std::str::from_utf8(p.get(i..)?).ok()?.to_string();
    if address.is_empty() {
        return None;
    }
    Some(Target {
        account_id,
        channel,
        address,
        lists,
        campaign_id,
    })
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// A varint as an id (positive i64), or None when it runs out, is too long or overflows.
fn get_varint(p: &[u8], i: &mut usize) -> Option<i64> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let b = *p.get(*i)?;
        *i += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return i64::try_from(v).ok();
        }
    }
    None
}

/// Name of the environment variable that gives the sender's public base URL.
pub const PUBLIC_URL_ENV: &str = "SENDONCE_PUBLIC_URL";
/// Longest public base URL accepted, in bytes.
const MAX_BASE_LEN: usize = 512;

/// Where links point: the public base URL of the server that serves `/u/{token}` and
/// `/c/{token}` (`sendonce serve`), and the keys that seal the tokens.
#[derive(Debug, Clone)]
pub struct Links {
    base: String,
    keys: Keys,
}

impl Links {
    /// `base` must be an absolute `https://` (or `http://`) URL without query or fragment; a
    /// trailing `/` is dropped. The error names the problem without quoting a secret.
    pub fn new(base: &str, keys: Keys) -> Result<Links, String> {
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
            keys,
        })
    }

    /// The public base URL, without a trailing `/`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The key ring (the server opens tokens with it).
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The link of `target` for `purpose`: `{base}/u/{token}` or `{base}/c/{token}`.
    pub fn url(&self, purpose: Purpose, target: &Target) -> String {
        format!(
            "{}/{}/{}",
            self.base,
            purpose.path(),
            self.keys.seal(purpose, target)
        )
    }

    /// The unsubscribe link of one recipient. Deterministic: a retry sends the same link.
    pub fn unsubscribe_url(&self, target: &Target) -> String {
        self.url(Purpose::Unsubscribe, target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> Secret {
        Secret::new(s.as_bytes().to_vec()).unwrap()
    }

    fn ring() -> Keys {
        Keys::new(key("0123456789abcdef-test-secret"))
    }

    fn target() -> Target {
        Target {
            account_id: 7,
            channel: Channel::Email,
            address: "ana@example.com".into(),
            lists: vec![3, 300_000],
            campaign_id: 42,
        }
    }

    #[test]
    fn round_trip_is_deterministic_and_opaque() {
        let k = ring();
        let t = k.seal(Purpose::Unsubscribe, &target());
        assert_eq!(t, k.seal(Purpose::Unsubscribe, &target()));
        assert!(t
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert!(!t.contains("ana") && !t.contains("example"));
        assert_eq!(k.open(Purpose::Unsubscribe, &t, 0), Ok(target()));
        // Another address, another token; no shared prefix beyond the version.
        let mut b = target();
        b.address = "bob@example.com".into();
        let u = k.seal(Purpose::Unsubscribe, &b);
        assert_ne!(t[1..9], u[1..9]);
        // SMS, no lists.
        let s = Target {
            account_id: 1,
            channel: Channel::Sms,
            address: "+15551234567".into(),
            lists: vec![],
            campaign_id: 0,
        };
        assert_eq!(
            k.open(Purpose::Unsubscribe, &k.seal(Purpose::Unsubscribe, &s), 0),
            Ok(s)
        );
    }

    #[test]
    fn any_change_purpose_or_key_is_refused() {
        let k = ring();
        let t = k.seal(Purpose::Unsubscribe, &target());
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        for i in 0..t.len() {
            for &c in alphabet {
                let mut b = t.clone().into_bytes();
                if b[i] == c {
                    continue;
                }
                b[i] = c;
                let changed = String::from_utf8(b).unwrap();
                assert!(
                    k.open(Purpose::Unsubscribe, &changed, 0).is_err(),
                    "{changed} accepted"
                );
            }
        }
        assert_eq!(
            k.open(Purpose::Confirm, &t, 0),
            Err(TokenError::NotValid),
            "an unsubscribe token must not confirm"
        );
        let other = Keys::new(key("another-secret-of-enough-length"));
        assert_eq!(
            other.open(Purpose::Unsubscribe, &t, 0),
            Err(TokenError::NotValid)
        );
        for bad in [
            "",
            "2",
            "1abc",
            "2!!!!",
            &"2".repeat(3000),
            &t[..t.len() - 3],
        ] {
            assert!(k.open(Purpose::Unsubscribe, bad, 0).is_err(), "{bad}");
        }
    }

    #[test]
    fn old_keys_open_until_their_date_then_not() {
        let old = key("the-old-secret-rotated-out");
        let sealed_old = Keys::new(old.clone()).seal(Purpose::Unsubscribe, &target());
        let ring = Keys::new(key("the-new-current-secret-xyz"))
            .with_old_list(Some("2027-03-01:the-old-secret-rotated-out"))
            .unwrap();
        let before = crate::clock::parse_rfc3339_ms("2027-03-01T23:59:59Z").unwrap();
        let after = crate::clock::parse_rfc3339_ms("2027-03-02T00:00:00Z").unwrap();
        assert_eq!(
            ring.open(Purpose::Unsubscribe, &sealed_old, before),
            Ok(target())
        );
        assert_eq!(
            ring.open(Purpose::Unsubscribe, &sealed_old, after),
            Err(TokenError::NotValid)
        );
        // New links are sealed with the current key.
        let fresh = ring.seal(Purpose::Unsubscribe, &target());
        assert_ne!(fresh, sealed_old);
        for bad in ["nodate", "2027-13-01:abcdefghijklmnopq", "2027-03-01:tiny"] {
            let e = Keys::new(key("the-new-current-secret-xyz"))
                .with_old_list(Some(bad))
                .unwrap_err();
            assert!(e.contains("entry 1"), "{e}");
            assert!(
                !e.contains("abcdefghijklmnopq") && !e.contains("tiny"),
                "{e}"
            );
        }
    }

    #[test]
    fn links_need_a_base_url_and_are_deterministic() {
        let l = Links::new("https://news.example.org/", ring()).unwrap();
        let a = l.unsubscribe_url(&target());
        assert_eq!(a, l.unsubscribe_url(&target()));
        assert!(a.starts_with("https://news.example.org/u/2"), "{a}");
        let c = l.url(Purpose::Confirm, &target());
        assert!(c.starts_with("https://news.example.org/c/2"), "{c}");
        let token = a.rsplit('/').next().unwrap();
        assert_eq!(
            ring().open(Purpose::Unsubscribe, token, 0).unwrap().address,
            "ana@example.com"
        );
        for bad in [
            "news.example.org",
            "https://",
            "https://x.org/?a=1",
            "https://x .org",
            "ftp://x.org",
        ] {
            assert!(Links::new(bad, ring()).is_err(), "{bad}");
        }
    }

    #[test]
    fn short_secrets_are_refused_without_echo() {
        let e = Secret::new(b"hunter2".to_vec()).unwrap_err();
        assert!(!e.contains("hunter2"), "{e}");
        assert!(!format!("{:?}", ring()).contains("0123456789"));
    }
}

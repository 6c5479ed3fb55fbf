//! VERP return paths: the envelope sender (`MAIL FROM`) of each email names the message it
//! carries, so a delivery status notification that comes back to it can be trusted. Pure: build
//! `bounces+TAG@domain` from a configured `bounces@domain`, find the tag again in the address a
//! DSN was delivered to, and check it.
//!
//! The tag is the first 10 bytes of HMAC-SHA256 over (job id, recipient) under a key derived
//! from the link secret (`SENDONCE_UNSUBSCRIBE_SECRET`, rotated with it: `links::Keys`),
//! lower-case base32: 16 characters of `a-z2-7`, so an MTA that folds the local part's case
//! keeps it valid. A DSN is believed only when its tag matches the job its returned headers
//! name and the recipient its status fields name: a forged DSN needs the key, and a recipient
//! who reads the return path of their own message can only report on that message.

use crate::links::Keys;
use data_encoding::BASE32_NOPAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Bytes of the HMAC kept in a tag (80 bits).
const TAG_BYTES: usize = 10;
/// Characters of a tag (base32 of `TAG_BYTES`).
pub const TAG_CHARS: usize = 16;
/// What separates the configured local part from the tag (Postfix's and Exim's default
/// `recipient_delimiter`).
pub const DELIMITER: char = '+';

fn mac(key: &[u8; 32], job_id: &str, recipient: &str) -> Hmac<Sha256> {
    let mut mac = match Hmac::<Sha256>::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC accepts keys of any length"),
    };
    mac.update(b"sendonce-verp-v1\0");
    mac.update(job_id.as_bytes());
    mac.update(b"\0");
    mac.update(recipient.to_ascii_lowercase().as_bytes());
    mac
}

/// The tag of (job, recipient) under the current key.
pub fn tag(keys: &Keys, job_id: &str, recipient: &str) -> String {
    BASE32_NOPAD
        .encode(
            &mac(keys.verp_current(), job_id, recipient)
                .finalize()
                .into_bytes()[..TAG_BYTES],
        )
        .to_ascii_lowercase()
}

/// Whether `tag` is the tag of (job, recipient) under a key of the ring valid at `now_ms`.
/// Compared in constant time.
pub fn matches(keys: &Keys, tag: &str, job_id: &str, recipient: &str, now_ms: i64) -> bool {
    let Ok(raw) = BASE32_NOPAD.decode(tag.to_ascii_uppercase().as_bytes()) else {
        return false;
    };
    if raw.len() != TAG_BYTES {
        return false;
    }
    keys.verp_valid(now_ms).any(|key| {
        mac(key, job_id, recipient)
            .verify_truncated_left(&raw)
            .is_ok()
    })
}

/// A configured return path `local@domain`, checked: it must be an address whose local part
/// has no `+` (the tag goes there) and leaves room for the tag (local parts are at most 64
/// octets).
pub fn check_return_path(address: &str) -> Result<(), String> {
    let (local, domain) = address
        .rsplit_once('@')
        .filter(|(l, d)| !l.is_empty() && !d.is_empty())
        .ok_or("the return path must be an address: bounces@bounce.example.com")?;
    if local.contains(DELIMITER) {
        return Err(format!(
            "the return path's local part must not contain '{DELIMITER}': the tag goes after it"
        ));
    }
    if local.len() + 1 + TAG_CHARS > 64 {
        return Err(format!(
            "the return path's local part is too long: at most {} characters leave room for the \
             tag",
            64 - 1 - TAG_CHARS
        ));
    }
    if !local
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        || domain.bytes().any(|b| b.is_ascii_whitespace() || b == b'@')
    {
        return Err(
            "the return path's local part may hold letters, digits, '.', '_' and '-' only".into(),
        );
    }
    Ok(())
}

/// The envelope sender for a message of `job_id` to `recipient`: `local+TAG@domain` from a
/// return path `local@domain` that `check_return_path` accepted.
pub fn return_path(keys: &Keys, base: &str, job_id: &str, recipient: &str) -> String {
    let (local, domain) = base.rsplit_once('@').unwrap_or((base, ""));
    format!(
        "{local}{DELIMITER}{}@{domain}",
        tag(keys, job_id, recipient)
    )
}

/// The tag in an address a DSN was delivered to (`local+TAG@domain`, any case), if it has one
/// of the right shape.
pub fn tag_in(address: &str) -> Option<String> {
    let address = address.trim().trim_start_matches('<').trim_end_matches('>');
    let (local, _) = address.rsplit_once('@')?;
    let (_, tag) = local.rsplit_once(DELIMITER)?;
    let ok = tag.len() == TAG_CHARS
        && tag
            .bytes()
            .all(|b| b.is_ascii_alphabetic() || (b'2'..=b'7').contains(&b));
    ok.then(|| tag.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::links::Secret;

    fn keys(s: &str) -> Keys {
        Keys::new(Secret::new(s.as_bytes().to_vec()).unwrap())
    }

    #[test]
    fn a_tag_names_one_job_and_one_recipient() {
        let k = keys("verp-test-secret-0123456789");
        let job = "campaign:7:sub:42@0123456789abcdef";
        let path = return_path(&k, "bounces@bounce.example.com", job, "Ann@Example.com");
        assert!(path.starts_with("bounces+"), "{path}");
        assert!(path.ends_with("@bounce.example.com"), "{path}");
        let t = tag_in(&path).unwrap();
        assert_eq!(t.len(), TAG_CHARS);
        assert!(matches(&k, &t, job, "ann@example.com", 0));
        // An MTA that upper-cases the local part keeps it valid.
        assert!(matches(&k, &t.to_uppercase(), job, "ann@example.com", 0));
        assert!(!matches(&k, &t, job, "bob@example.com", 0));
        assert!(!matches(
            &k,
            &t,
            "campaign:7:sub:43@0123456789abcdef",
            "ann@example.com",
            0
        ));
        assert!(!matches(
            &keys("another-secret-0123456789"),
            &t,
            job,
            "ann@example.com",
            0
        ));
        let mut flipped = t.clone().into_bytes();
        flipped[3] = if flipped[3] == b'a' { b'b' } else { b'a' };
        assert!(!matches(
            &k,
            std::str::from_utf8(&flipped).unwrap(),
            job,
            "ann@example.com",
            0
        ));
        assert!(!matches(&k, "short", job, "ann@example.com", 0));
    }

    #[test]
    fn an_old_key_checks_tags_until_its_date() {
        let old = Secret::new(b"old-verp-secret-0123456789".to_vec()).unwrap();
        let before = keys("old-verp-secret-0123456789");
        let t = tag(&before, "j", "a@b.c");
        let ring = keys("new-verp-secret-0123456789").with_old(old, 1_000);
        assert!(matches(&ring, &t, "j", "a@b.c", 999));
        assert!(!matches(&ring, &t, "j", "a@b.c", 1_000));
    }

    #[test]
    fn return_paths_and_tags_are_checked() {
        assert!(check_return_path("bounces@bounce.example.com").is_ok());
        for bad in ["bounces", "@x.com", "b+x@x.com", "b b@x.com", "bounces@"] {
            assert!(check_return_path(bad).is_err(), "{bad}");
        }
        assert!(check_return_path(&format!("{}@x.com", "a".repeat(48))).is_err());
        assert!(check_return_path(&format!("{}@x.com", "a".repeat(47))).is_ok());
        assert_eq!(tag_in("bounces@x.com"), None);
        assert_eq!(tag_in("bounces+abc@x.com"), None);
        assert_eq!(tag_in("bounces+abcdefgh1abcdefg@x.com"), None);
        assert_eq!(
            tag_in("<Bounces+ABCDEFGHABCDEFGH@x.com>").as_deref(),
            Some("abcdefghabcdefgh")
        );
    }
}

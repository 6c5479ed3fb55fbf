//! Address validation and normalisation: one form per email address (NFC, no invisible code
//! points, ASCII domain, lower-cased) and per phone number (E.164 by libphonenumber's rules).
//! Dedup, suppression and every lookup use these forms.

use crate::error::{Error, Result};
use icu_properties::{props::DefaultIgnorableCodePoint, CodePointSetData};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use unicode_normalization::UnicodeNormalization;

/// A delivery channel. A campaign has one; suppressions are per channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Channel {
    #[default]
    Email,
    Sms,
}

impl Channel {
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Email => "email",
            Channel::Sms => "sms",
        }
    }
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Channel {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "email" => Ok(Channel::Email),
            "sms" => Ok(Channel::Sms),
            other => Err(Error::invalid(format!(
                "unknown channel {other:?} (expected email or sms)"
            ))),
        }
    }
}

/// Check an email address and return `(as_given_trimmed, normalised)`.
///
/// Deliberately conservative: one `@`, a non-empty local part of at most 64 bytes, a domain of
/// dot-separated labels made of letters, digits and hyphens, no spaces or control characters.
/// One address has one normal form, whatever the spelling (issue 37, F5): Unicode NFC (so
/// `jose\u{301}` is `josé`), no invisible (default-ignorable) code points at all, the domain
/// through IDNA to its ASCII form (`bücher.example` is `xn--bcher-kva.example`), the local part
/// lower-cased as sendonce always did.
pub fn normalize_email(input: &str) -> Result<(String, String)> {
    let s = input.trim();
    let bad = |why: &str| Error::invalid(format!("invalid email address {s:?}: {why}"));
    if s.is_empty() {
        return Err(bad("it is empty"));
    }
    if s.len() > 254 {
        return Err(bad("longer than 254 characters"));
    }
    if s.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(bad("it contains spaces or control characters"));
    }
    refuse_invisible(s).map_err(|why| bad(&why))?;
    let nfc: String = s.nfc().collect();
    let (local, domain) = nfc.rsplit_once('@').ok_or_else(|| bad("no @"))?;
    check_local(local).map_err(bad)?;
    let domain = ascii_domain(domain).map_err(bad)?;
    let normal = format!(
        "{}@{domain}",
        local.to_lowercase().nfc().collect::<String>()
    );
    if normal.len() > 254 {
        return Err(bad(
            "longer than 254 characters once its domain is in ASCII form",
        ));
    }
    Ok((s.to_string(), normal))
}

/// Refuse default-ignorable code points (zero-width spaces and joiners, soft hyphens, bidi
/// controls, variation selectors...): invisible, so two addresses that look the same differ.
fn refuse_invisible(s: &str) -> std::result::Result<(), String> {
    let ignorable = CodePointSetData::new::<DefaultIgnorableCodePoint>();
    match s.chars().find(|&c| ignorable.contains(c)) {
        None => Ok(()),
        Some(c) => Err(format!(
            "it contains the invisible character U+{:04X}; type the address again without it",
            c as u32
        )),
    }
}

/// The rules of the part before `@` (NFC already applied).
fn check_local(local: &str) -> std::result::Result<(), &'static str> {
    if local.is_empty() || local.len() > 64 {
        return Err("the part before @ must be 1 to 64 characters");
    }
    if local.contains('@')
        || local.contains(['<', '>', '(', ')', ',', ';', ':', '\\', '"', '[', ']'])
    {
        return Err("the part before @ has characters that need quoting");
    }
    if local.starts_with('.') || local.ends_with('.') || local.contains("..") {
        return Err("misplaced dot before @");
    }
    Ok(())
}

/// The domain in its ASCII form (UTS 46 / IDNA: lower-cased, Punycode for non-ASCII labels),
/// then the host-name rules on every label.
fn ascii_domain(domain: &str) -> std::result::Result<String, &'static str> {
    let ascii = idna::domain_to_ascii_cow(domain.as_bytes(), idna::AsciiDenyList::URL)
        .map_err(|_| "the domain is not a valid host name (IDNA)")?;
    let labels: Vec<&str> = ascii.split('.').collect();
    if labels.len() < 2 {
        return Err("the domain needs a dot");
    }
    for l in &labels {
        if l.is_empty()
            || l.len() > 63
            || l.starts_with('-')
            || l.ends_with('-')
            || !l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            return Err("the domain is not a valid host name");
        }
    }
    Ok(ascii.into_owned())
}

/// Check a phone number and return it in E.164 form (`+`, country code, national number).
///
/// Parsed by `phonenumber` (libphonenumber's rules and metadata): spaces, dashes, dots and
/// parentheses are accepted, a national trunk prefix written after the country code is dropped
/// (`+44 (0)20 7946 0000` is `+442079460000`), and a number that is not valid for its country
/// is refused. The leading `+` and the country code are required, because guessing a country
/// sends texts to strangers.
pub fn normalize_phone(input: &str) -> Result<String> {
    let s = input.trim();
    let bad = |why: &str| Error::invalid(format!("invalid phone number {s:?}: {why}"));
    let rest = s
        .strip_prefix('+')
        .ok_or_else(|| bad("write it in E.164 form, with + and the country code (+14155550100)"))?;
    if !rest
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, ' ' | '-' | '.' | '(' | ')'))
    {
        return Err(bad("only digits may follow the +"));
    }
    if rest.chars().filter(char::is_ascii_digit).count() > 17 {
        return Err(bad("E.164 numbers have at most 15 digits"));
    }
    if rest.trim_start_matches([' ', '(']).starts_with('0') {
        return Err(bad("country codes do not start with 0"));
    }
    let number =
        phonenumber::parse(None, s).map_err(|e| bad(&format!("not a phone number ({e})")))?;
    if !phonenumber::is_valid(&number) {
        return Err(bad(
            "not a valid number for its country code (no such number range exists)",
        ));
    }
    Ok(number.format().mode(phonenumber::Mode::E164).to_string())
}

/// Normalise an address for a channel (used by suppressions).
pub fn normalize_for(channel: Channel, input: &str) -> Result<String> {
    match channel {
        Channel::Email => Ok(normalize_email(input)?.1),
        Channel::Sms => normalize_phone(input),
    }
}

/// The prefix of an erased address's stored form.
pub const ERASED_PREFIX: &str = "sha256:";

/// What `subscriber erase` keeps of a normalised address: `sha256:` and the lower-case hex
/// SHA-256 of it. It is kept as the suppression, the subscriber's and its sends' address, so
/// that the same address, given again, is recognised (and never sent to) without being
/// stored. Pseudonymous, not anonymous: whoever holds the address can compute the same form
/// (docs/privacy.md).
pub fn erased_form(normalised: &str) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(normalised.as_bytes());
    format!("{ERASED_PREFIX}{}", crate::bounce_auth::hex(&digest))
}

/// Whether a stored address is the form [`erased_form`] made.
pub fn is_erased_form(stored: &str) -> bool {
    stored.starts_with(ERASED_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erased_form_is_the_hex_sha256() {
        // echo -n alice@example.com | sha256sum
        assert_eq!(
            erased_form("alice@example.com"),
            "sha256:ff8d9819fc0e12bf0d24892e45987e249a28dce836a85cad60e28eaaa8c6d976"
        );
        assert!(is_erased_form(&erased_form("+14155550100")));
        assert!(normalize_email(&erased_form("a@b.org")).is_err());
        assert!(normalize_phone(&erased_form("+14155550100")).is_err());
    }

    #[test]
    fn emails() {
        assert_eq!(
            normalize_email("  Alice@Example.COM ").unwrap(),
            ("Alice@Example.COM".into(), "alice@example.com".into())
        );
        for bad in [
            "",
            "alice",
            "alice@",
            "@x.com",
            "a b@x.com",
            "a@x",
            "a@-x.com",
            "a@x..com",
            "a\r\nBcc: x@y.com@x.com",
            "a..b@x.com",
        ] {
            assert!(normalize_email(bad).is_err(), "{bad:?} accepted");
        }
    }

    /// Issue 37, F5: one form whatever the spelling; invisible characters refused by name.
    #[test]
    fn unicode_spellings_have_one_form() {
        let nfc = normalize_email("jos\u{e9}@acme.example").unwrap().1;
        assert_eq!(normalize_email("JOSE\u{301}@acme.example").unwrap().1, nfc);
        assert_eq!(
            normalize_email("user@B\u{fc}cher.example").unwrap().1,
            "user@xn--bcher-kva.example"
        );
        assert_eq!(
            normalize_email("user@xn--bcher-kva.example").unwrap().1,
            "user@xn--bcher-kva.example"
        );
        for invisible in ["jo\u{200b}se@x.com", "jose\u{ad}@x.com", "\u{feff}a@x.com"] {
            let e = normalize_email(invisible).unwrap_err();
            assert!(
                e.message.contains("invisible character U+"),
                "{}",
                e.message
            );
        }
    }

    /// Issue 37, F6: a national trunk prefix after the country code is dropped.
    #[test]
    fn trunk_prefixes_and_impossible_numbers() {
        assert_eq!(
            normalize_phone("+44 (0)20 7946 0000").unwrap(),
            "+442079460000"
        );
        assert_eq!(normalize_phone("+4402079460000").unwrap(), "+442079460000");
        let e = normalize_phone("+1 555 000 1111").unwrap_err();
        assert!(e.message.contains("not a valid number"), "{}", e.message);
    }

    #[test]
    fn phones() {
        assert_eq!(
            normalize_phone("+1 (415) 555-0100").unwrap(),
            "+14155550100"
        );
        for bad in [
            "4155550100",
            "+0123456789",
            "+12",
            "+1415555010x",
            "+1234567890123456",
        ] {
            assert!(normalize_phone(bad).is_err(), "{bad:?} accepted");
        }
    }
}

//! Address validation and normalisation: lower-cased email, E.164 phone. Dedup and suppression use these forms.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

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
    let (local, domain) = s.rsplit_once('@').ok_or_else(|| bad("no @"))?;
    if local.is_empty() || local.len() > 64 {
        return Err(bad("the part before @ must be 1 to 64 characters"));
    }
    if local.contains('@')
        || local.contains(['<', '>', '(', ')', ',', ';', ':', '\\', '"', '[', ']'])
    {
        return Err(bad("the part before @ has characters that need quoting"));
    }
    if local.starts_with('.') || local.ends_with('.') || local.contains("..") {
        return Err(bad("misplaced dot before @"));
    }
    let labels: Vec<&str> = domain.split('.').collect();
    if labels.len() < 2 {
        return Err(bad("the domain needs a dot"));
    }
    for l in &labels {
        if l.is_empty()
            || l.len() > 63
            || l.starts_with('-')
            || l.ends_with('-')
            || !l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            return Err(bad("the domain is not a valid host name"));
        }
    }
    Ok((s.to_string(), s.to_lowercase()))
}

/// Check a phone number and return it in E.164 form (`+` and 8 to 15 digits).
///
/// Spaces, dashes, dots and parentheses are accepted and removed; the leading `+` and the
/// country code are required, because guessing a country sends texts to strangers.
pub fn normalize_phone(input: &str) -> Result<String> {
    let s = input.trim();
    let bad = |why: &str| Error::invalid(format!("invalid phone number {s:?}: {why}"));
    let rest = s
        .strip_prefix('+')
        .ok_or_else(|| bad("write it in E.164 form, with + and the country code (+14155550100)"))?;
    let mut digits = String::with_capacity(rest.len() + 1);
    digits.push('+');
    for c in rest.chars() {
        match c {
            '0'..='9' => digits.push(c),
            ' ' | '-' | '.' | '(' | ')' => {}
            _ => return Err(bad("only digits may follow the +")),
        }
    }
    let n = digits.len() - 1;
    if !(8..=15).contains(&n) {
        return Err(bad("E.164 numbers have 8 to 15 digits"));
    }
    if digits.as_bytes()[1] == b'0' {
        return Err(bad("country codes do not start with 0"));
    }
    Ok(digits)
}

/// Normalise an address for a channel (used by suppressions).
pub fn normalize_for(channel: Channel, input: &str) -> Result<String> {
    match channel {
        Channel::Email => Ok(normalize_email(input)?.1),
        Channel::Sms => normalize_phone(input),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

//! Inbound provider webhooks, pure: the event a webhook reports once it is parsed (what it
//! changes here: a suppression, a removed suppression, a delivery report for a job, or
//! nothing), and the checks that say a request really came from the provider: the Standard
//! Webhooks / Svix signature (HMAC-SHA256 over `id.timestamp.body`, `v1,<base64>` entries, a
//! timestamp within five minutes) and a Basic-auth password compared in constant time. No I/O:
//! the HTTP handler passes headers and the body in, the use case (`app::webhooks`) decides.

use crate::address::Channel;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

/// How far a signed timestamp may be from our clock, either way (Standard Webhooks, Svix).
pub const TOLERANCE_SECS: i64 = 5 * 60;
/// The prefix of Svix / Standard Webhooks secrets; the rest is the base64 key.
pub const SECRET_PREFIX: &str = "whsec_";
/// Longest signature header looked at (a few rotated signatures fit easily).
const MAX_SIGNATURE_HEADER: usize = 4096;
/// Longest provider message id a report may carry (bytes; as the event id, and the
/// `webhook_events.provider_message_id` check). Real ones are a few dozen.
pub const MAX_PROVIDER_ID: usize = 512;

/// Who sends a webhook: the path segment of `/hooks/{source}/{account}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    Twilio,
    Postmark,
    Resend,
    /// Standard Webhooks, for the generic `webhook:` provider (our own small JSON schema).
    Standard,
    /// Mailgun webhooks (HMAC of timestamp and token in the body).
    Mailgun,
    /// SendGrid's Event Webhook (ECDSA P-256, the configured public key).
    Sendgrid,
    /// Brevo's transactional webhooks (Basic auth or a bearer token on the URL).
    Brevo,
    /// Amazon SES notifications through SNS (the configured signing certificate).
    Ses,
    /// Delivery status notifications (RFC 3464) piped in by the MTA (`sendonce bounce`),
    /// believed by their VERP tag (`verp`). Not an HTTP webhook: not in [`Source::ALL`].
    Dsn,
}

impl Source {
    /// The sources `serve` takes on `/hooks/{source}/{account}`.
    pub const ALL: [Source; 8] = [
        Source::Twilio,
        Source::Postmark,
        Source::Resend,
        Source::Standard,
        Source::Mailgun,
        Source::Sendgrid,
        Source::Brevo,
        Source::Ses,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Source::Twilio => "twilio",
            Source::Postmark => "postmark",
            Source::Resend => "resend",
            Source::Standard => "standard",
            Source::Mailgun => "mailgun",
            Source::Sendgrid => "sendgrid",
            Source::Brevo => "brevo",
            Source::Ses => "ses",
            Source::Dsn => "dsn",
        }
    }

    pub fn parse(s: &str) -> Option<Source> {
        Source::ALL.into_iter().find(|x| x.as_str() == s)
    }

    /// The names of every source, for messages: `twilio, postmark, ...`.
    pub fn hook_names() -> String {
        Source::ALL.map(Source::as_str).join(", ")
    }
}

/// What a webhook event changes here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Add the address to the account's suppression list.
    Suppress {
        channel: Channel,
        address: String,
        reason: String,
    },
    /// Take the address off the suppression list (Twilio START, Postmark reactivation).
    Unsuppress { channel: Channel, address: String },
    /// The provider reports the outcome of our job: delivered (or handed on: `sent`) or
    /// definitely failed. Settles the row if it is in doubt; otherwise it is recorded, and the
    /// claim consults it before it would park the row in doubt. `provider_id` is the
    /// provider's id of the message when the report names it (checked by [`provider_id`]): a
    /// row the report settles as sent keeps it.
    Delivery {
        job_id: String,
        sent: bool,
        provider_id: Option<String>,
    },
    /// Recorded, changes nothing (opens, clicks, queued statuses, soft bounces...).
    Nothing,
}

impl Effect {
    /// The provider's message id a delivery report names (kept with its event); None for
    /// anything else.
    pub fn report_id(&self) -> Option<&str> {
        match self {
            Effect::Delivery { provider_id, .. } => provider_id.as_deref(),
            _ => None,
        }
    }
}

/// One parsed, verified webhook event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The provider's id of the event, stable across its retries (the replay key).
    pub event_id: String,
    /// The provider's name of the event (`email.bounced`, `Bounce:HardBounce`, `status:delivered`).
    pub kind: String,
    /// Our job id, when the event names one.
    pub job_id: Option<String>,
    /// The recipient the event is about, when it names one (normalised).
    pub address: Option<String>,
    pub effect: Effect,
}

/// SHA-256 of a request body, hex: what a replay is compared by.
pub fn body_sha256(body: &[u8]) -> String {
    let d = Sha256::digest(body);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// The key of a `whsec_<base64>` secret (the prefix is optional). The error never quotes it.
pub fn decode_secret(text: &str) -> Result<Vec<u8>, String> {
    let t = text.trim();
    let b64 = t.strip_prefix(SECRET_PREFIX).unwrap_or(t);
    let key = STANDARD.decode(b64).map_err(|_| {
        format!("the signing secret is not {SECRET_PREFIX}<base64> (as the provider shows it)")
    })?;
    if key.len() < 16 {
        return Err(format!(
            "the signing secret is too short ({} bytes; at least 16)",
            key.len()
        ));
    }
    Ok(key)
}

fn mac(key: &[u8], id: &str, timestamp: &str, body: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length; `new_from_slice` cannot fail for it.
    let mut m = match HmacSha256::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC accepts keys of any length"),
    };
    m.update(id.as_bytes());
    m.update(b".");
    m.update(timestamp.as_bytes());
    m.update(b".");
    m.update(body);
    m
}

/// The `v1,<base64>` signature of a Standard Webhooks / Svix request (what a sender puts in
/// `webhook-signature` / `svix-signature`).
pub fn sign(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let tag = mac(key, id, &timestamp.to_string(), body)
        .finalize()
        .into_bytes();
    format!("v1,{}", STANDARD.encode(tag))
}

/// Why a request was refused (said to the caller; never names a secret).
pub type Refusal = String;

/// Check a Standard Webhooks / Svix request: the timestamp (Unix seconds) is within
/// [`TOLERANCE_SECS`] of `now_secs`, and at least one `v1,<base64>` entry of the
/// space-separated `signatures` is the HMAC-SHA256 of `id.timestamp.body` (several entries
/// while a secret is rotated). The comparison is constant-time.
pub fn verify(
    key: &[u8],
    id: &str,
    timestamp: &str,
    signatures: &str,
    body: &[u8],
    now_secs: i64,
) -> Result<(), Refusal> {
    if id.is_empty() || id.len() > 512 {
        return Err("the webhook id header is empty or too long".into());
    }
    let ts: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| "the webhook timestamp is not a number of seconds".to_string())?;
    if now_secs.abs_diff(ts) > TOLERANCE_SECS.unsigned_abs() {
        return Err(format!(
            "the webhook timestamp is more than {TOLERANCE_SECS} s away from this server's clock"
        ));
    }
    if signatures.len() > MAX_SIGNATURE_HEADER {
        return Err("the signature header is too long".into());
    }
    let m = mac(key, id, timestamp.trim(), body);
    let ok = signatures
        .split(' ')
        .filter_map(|e| e.strip_prefix("v1,"))
        .filter_map(|b| STANDARD.decode(b).ok())
        .any(|tag| m.clone().verify_slice(&tag).is_ok());
    if ok {
        Ok(())
    } else {
        Err("no valid signature".into())
    }
}

/// Whether an `Authorization: Basic ...` header carries exactly `expected` (`user:password`),
/// compared in constant time (both sides hashed first, so lengths do not show either).
pub fn basic_auth_matches(header: Option<&str>, expected: &str) -> bool {
    let presented = header
        .and_then(|h| h.strip_prefix("Basic "))
        .and_then(|b| STANDARD.decode(b.trim()).ok())
        .unwrap_or_default();
    let a = Sha256::digest(&presented);
    let b = Sha256::digest(expected.as_bytes());
    // Constant-time on the digests; an absent header hashes the empty string, compared alike.
    crate::token::same_hash(&a, &b) && header.is_some()
}

/// The provider's message id a report carries, checked: absent or empty is None; longer than
/// [`MAX_PROVIDER_ID`] bytes or holding a control character is refused (no provider makes
/// such an id, and it is shown in reports, CSV and the dashboard). The message never quotes it.
pub fn provider_id(raw: Option<&str>) -> Result<Option<String>, Refusal> {
    let Some(id) = raw.filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    if id.len() > MAX_PROVIDER_ID {
        return Err(format!(
            "the provider's message id is too long ({} bytes; at most {MAX_PROVIDER_ID})",
            id.len()
        ));
    }
    if id.chars().any(char::is_control) {
        return Err("the provider's message id holds a control character".into());
    }
    Ok(Some(id.to_string()))
}

/// Twilio's opt-out and opt-in keywords: the whole message body, trimmed, any case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keyword {
    Stop,
    Start,
}

pub fn sms_keyword(body: &str) -> Option<Keyword> {
    let b = body.trim().to_ascii_uppercase();
    match b.as_str() {
        "STOP" | "STOPALL" | "UNSUBSCRIBE" | "CANCEL" | "END" | "QUIT" => Some(Keyword::Stop),
        "START" | "UNSTOP" => Some(Keyword::Start),
        _ => None,
    }
}

/// A job id in a form every provider's tag or metadata allows (ASCII letters and digits: Resend
/// tags allow only `[A-Za-z0-9_-]`): lower-case hex of its bytes.
pub fn job_tag(job_id: &str) -> String {
    job_id.bytes().map(|b| format!("{b:02x}")).collect()
}

/// The job id of a [`job_tag`], if it is one.
pub fn job_from_tag(tag: &str) -> Option<String> {
    if !tag.len().is_multiple_of(2) || tag.len() > 1024 {
        return None;
    }
    let bytes = (0..tag.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(tag.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY_B64: &str = "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    #[test]
    fn extreme_timestamps_are_refused_without_overflow() {
        let key = decode_secret(&format!("whsec_{KEY_B64}")).unwrap();
        for ts in [i64::MIN, i64::MAX, i64::MIN + 1, -1] {
            let sig = sign(&key, "msg_1", ts, b"{}");
            for now in [0, 1_700_000_000, i64::MAX, i64::MIN] {
                if now.abs_diff(ts) <= TOLERANCE_SECS.unsigned_abs() {
                    continue;
                }
                assert!(
                    verify(&key, "msg_1", &ts.to_string(), &sig, b"{}", now).is_err(),
                    "ts {ts} at {now}"
                );
            }
        }
    }

    #[test]
    fn webhook_signatures_round_trip_and_refuse_changes() {
        let key = decode_secret(&format!("whsec_{KEY_B64}")).unwrap();
        let body = br#"{"type":"message.delivered"}"#;
        let sig = sign(&key, "msg_1", 1_700_000_000, body);
        let now = 1_700_000_010;
        assert!(verify(&key, "msg_1", "1700000000", &sig, body, now).is_ok());
        // Rotation: any matching entry is enough.
        let two = format!("v1,AAAA {sig}");
        assert!(verify(&key, "msg_1", "1700000000", &two, body, now).is_ok());
        assert!(verify(&key, "msg_2", "1700000000", &sig, body, now).is_err());
        assert!(verify(&key, "msg_1", "1700000001", &sig, body, now).is_err());
        assert!(verify(&key, "msg_1", "1700000000", &sig, b"{}", now).is_err());
        assert!(verify(&key, "msg_1", "1700000000", &sig, body, now + 400).is_err());
        assert!(verify(&key, "msg_1", "1700000000", &sig, body, now - 400).is_err());
        assert!(verify(&key, "msg_1", "1700000000", "v1,", body, now).is_err());
        assert!(verify(&key, "msg_1", "soon", &sig, body, now).is_err());
        assert!(decode_secret("whsec_!!!").is_err());
    }

    #[test]
    fn basic_auth_is_exact() {
        let h = format!("Basic {}", STANDARD.encode("hook:pa55word"));
        assert!(basic_auth_matches(Some(&h), "hook:pa55word"));
        assert!(!basic_auth_matches(Some(&h), "hook:pa55wore"));
        assert!(!basic_auth_matches(None, "hook:pa55word"));
        assert!(!basic_auth_matches(None, ""));
        assert!(!basic_auth_matches(Some("Bearer x"), "hook:pa55word"));
    }

    #[test]
    fn provider_ids_are_bounded_and_printable() {
        assert_eq!(provider_id(None), Ok(None));
        assert_eq!(provider_id(Some("")), Ok(None));
        assert_eq!(provider_id(Some("SM123")), Ok(Some("SM123".into())));
        let longest = "a".repeat(MAX_PROVIDER_ID);
        assert_eq!(provider_id(Some(&longest)), Ok(Some(longest.clone())));
        assert!(provider_id(Some(&format!("{longest}a"))).is_err());
        assert!(provider_id(Some("SM1\nX-Evil: 1")).is_err());
        assert!(provider_id(Some("SM1\u{7f}")).is_err());
    }

    #[test]
    fn keywords_and_job_tags() {
        assert_eq!(sms_keyword("  stop \n"), Some(Keyword::Stop));
        assert_eq!(sms_keyword("Unstop"), Some(Keyword::Start));
        assert_eq!(sms_keyword("stop please"), None);
        let job = "campaign:3:sub:4@0123456789abcdef";
        let tag = job_tag(job);
        assert!(tag.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_eq!(job_from_tag(&tag).as_deref(), Some(job));
        assert_eq!(job_from_tag("zz"), None);
    }
}

//! The delivery log format: one JSON line per request a provider stand-in accepted. The outbox
//! provider and `sendonce fake-provider` both write it; the crash-suite checker reads it.

use sendonce_domain::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One accepted request.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DeliveryLine {
    pub job_id: String,
    pub idempotency_key: String,
    pub channel: String,
    pub from: Option<String>,
    pub to: String,
    pub subject: Option<String>,
    pub body: String,
    /// The HTML part (email), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub html: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    /// Unix milliseconds.
    pub at: i64,
    /// True when the key had been seen before and the first id was returned: not a second
    /// delivery.
    pub replay: bool,
    pub message_id: String,
    /// Free metadata the caller sent (webhook `metadata`, Postmark `Metadata`, Twilio's
    /// `StatusCallback`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<serde_json::Value>,
    /// The fake provider's API that accepted it (`twilio`, `resend`, `postmark`); absent for
    /// the generic `/send` and the outbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<String>,
    /// Custom message headers the request asked for (e.g. `X-Sendonce-Job`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<std::collections::BTreeMap<String, String>>,
    /// The message exactly as it arrived over SMTP (after dot-unstuffing), base64: a message
    /// in 8-bit MIME need not be UTF-8. Absent for HTTP deliveries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_base64: Option<String>,
    /// The SMTP envelope (`MAIL FROM`, every `RCPT TO`). Absent for HTTP deliveries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envelope: Option<Envelope>,
    /// The files an HTTP request carried (Resend `attachments`, Postmark `Attachments`), as
    /// sent. An SMTP message's are in `raw_base64`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<LoggedAttachment>,
    /// The fake provider's inbox it was filed in (`X-Fake-Tenant`, the SMTP user, a Twilio
    /// account, an AWS key id, or `key-` and a fingerprint of the API key); absent when the
    /// request named none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// One file of an accepted request.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LoggedAttachment {
    pub filename: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_id: Option<String>,
    /// The bytes, base64 as the request carried them.
    pub content: String,
}

/// An SMTP transaction's envelope.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Envelope {
    /// The reverse path (`MAIL FROM:<...>`); empty for a bounce (`<>`).
    pub from: String,
    /// Every accepted `RCPT TO`, in order.
    pub to: Vec<String>,
}

/// Read every complete, well-formed line of a delivery log. A torn last line (a writer killed
/// mid-append, never acknowledged) is skipped, even one cut inside a multi-byte character: each
/// line is decoded on its own.
pub fn read_lines(path: &Path) -> Result<Vec<DeliveryLine>> {
    let bytes = std::fs::read(path)
        .map_err(|e| Error::io(&format!("cannot read {}", path.display()), e))?;
    Ok(bytes
        .split(|b| *b == b'\n')
        .filter_map(|l| serde_json::from_slice(l).ok())
        .collect())
}

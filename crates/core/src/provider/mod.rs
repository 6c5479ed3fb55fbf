//! Providers: what the worker calls to deliver one message, what each declares it can do
//! (idempotency window, lookup by job id), and how its answers are classified.

pub mod bounces;
pub mod deliverylog;
pub(crate) mod email;
mod httpapi;
pub mod inbound;
mod outbox;
pub mod postmark;
mod redact;
pub mod resend;
mod smtp;
pub mod twilio;
mod webhook;

pub use email::{build_email, BuiltEmail, EmailSettings, UnsubscribeSettings, EXPECTED_HEADERS};
pub use outbox::Outbox;
pub use postmark::Postmark;
pub use resend::Resend;
pub use smtp::{classify_reply, classify_transport, Phase, Smtp, TlsMode};
pub use twilio::{twilio_signature, validate_twilio_signature, Twilio};
pub use webhook::Webhook;

use sendonce_domain::address::Channel;
use sendonce_domain::error::{Error, Result};
use serde::Serialize;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// One message to deliver. Rendering is done; this is exactly what goes out.
#[derive(Debug, Clone, Serialize)]
pub struct Message {
    pub job_id: String,
    /// UUIDv5 of the job id: the same on every retry.
    pub idempotency_key: String,
    pub channel: Channel,
    pub from: Option<String>,
    /// `Reply-To` (email): `addr` or `Name <addr>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    pub to: String,
    pub subject: Option<String>,
    /// Plain-text body (SMS: the whole text).
    pub body: String,
    /// Optional HTML alternative (email only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub html: Option<String>,
    /// Where the provider should report this message's delivery (Twilio's `StatusCallback`:
    /// `PUBLIC/hooks/twilio/{account id}`; the provider adds `job_id=`), when the worker knows
    /// its public URL. A provider's own configured callback wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_callback: Option<String>,
    /// The recipient's signed unsubscribe link (email of a campaign that is not
    /// transactional): written into `List-Unsubscribe` (+ one-click `List-Unsubscribe-Post`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unsubscribe: Option<String>,
    /// Files sent with it (an API message's; email only). Never serialized: the bytes go to
    /// the provider, not into logs.
    #[serde(skip)]
    pub attachments: Vec<sendonce_domain::attachment::Attachment>,
}

impl Message {
    /// Its header values, for [`sendonce_domain::headers::check_rendered`].
    pub fn headers(&self) -> sendonce_domain::headers::Rendered<'_> {
        sendonce_domain::headers::Rendered {
            subject: self.subject.as_deref(),
            from: self.from.as_deref(),
            reply_to: self.reply_to.as_deref(),
            to: &self.to,
            unsubscribe: self.unsubscribe.as_deref(),
            job_id: &self.job_id,
        }
    }
}

/// How one call ended, as the provider classifies it.
#[derive(Debug, Clone, PartialEq)]
pub enum CallResult {
    /// Accepted; `replay` when the provider recognised the key and returned the first id.
    Accepted { provider_id: String, replay: bool },
    /// The provider says this key was already used (e.g. "same key, different body"): the
    /// message was accepted earlier. Never treated as "not sent".
    AlreadyAccepted { detail: String },
    /// It will never be accepted (invalid address, hard bounce...). `suppress` carries the
    /// reason to add the address to the suppression list.
    Permanent {
        error: String,
        suppress: Option<String>,
    },
    /// Definitely not sent (rate limited, refused before the request left).
    NotSent {
        error: String,
        retry_after: Option<Duration>,
    },
    /// Unknown: it may or may not have been delivered (timeout, 5xx, connection lost after
    /// the request was written).
    Ambiguous { error: String },
}

/// What a provider declares; recovery after a crash consults it.
#[derive(Debug, Clone)]
pub struct Capabilities {
    /// Name for logs and reports.
    pub name: String,
    /// How long the provider remembers an idempotency key. `None`: no key support, so an
    /// ambiguous outcome parks the row in doubt instead of retrying.
    pub key_window: Option<Duration>,
    /// Upper bound of one call; leases must outlive it.
    pub call_timeout: Duration,
    /// `lookup` can tell whether a job was accepted (search by our job id), so a row in doubt
    /// can be reconciled instead of waiting for an operator.
    pub can_lookup: bool,
}

pub type CallFuture<'a> = Pin<Box<dyn Future<Output = CallResult> + Send + 'a>>;

/// What a provider knows about a job id when asked after the fact (reconciliation of rows in
/// doubt).
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    /// The provider has a message for this job: it was accepted.
    Found { provider_id: String },
    /// The provider is certain it never accepted this job (its search is authoritative).
    NotFound,
    /// The provider cannot tell (no lookup support, or the lookup failed).
    Unknown { reason: String },
}

pub type LookupFuture<'a> = Pin<Box<dyn Future<Output = Lookup> + Send + 'a>>;

/// A delivery channel to the outside world. Only the worker calls `send` and `lookup`.
pub trait Provider: Send + Sync + 'static {
    fn capabilities(&self) -> &Capabilities;
    fn send<'a>(&'a self, msg: &'a Message) -> CallFuture<'a>;
    /// Ask whether a message with this job id was accepted. Providers that can search by our
    /// job id (Postmark metadata, a Message-ID search...) override this; the default cannot
    /// tell, which leaves a row in doubt for the operator.
    fn lookup<'a>(&'a self, _msg: &'a Message) -> LookupFuture<'a> {
        Box::pin(async {
            Lookup::Unknown {
                reason: "this provider cannot look messages up".into(),
            }
        })
    }
    /// The settings this provider builds RFC 5322 messages with, if it builds them itself
    /// (SMTP); HTTP APIs build their own MIME. `campaign preview --format eml` uses them.
    fn email_settings(&self) -> Option<&EmailSettings> {
        None
    }
    /// Whether a message without a sender of its own is refused (for good) by this provider:
    /// it has no default sender in its spec. `notify` asks before it records anything, so a
    /// missing `--from` is a usage error instead of a failure kept under the key.
    fn needs_sender(&self) -> bool {
        false
    }
}

/// Accepts everything, does nothing: for benchmarks of the ledger itself. With a latency, each
/// call sleeps that long first (a stand-in for a provider's round trip).
pub struct Null {
    caps: Capabilities,
    latency: Duration,
}

impl Null {
    pub fn new() -> Self {
        Self::with_latency(Duration::ZERO)
    }

    pub fn with_latency(latency: Duration) -> Self {
        Null {
            caps: Capabilities {
                name: if latency.is_zero() {
                    "null".into()
                } else {
                    format!("null?latency={}", humantime::format_duration(latency))
                },
                key_window: Some(Duration::from_secs(24 * 3600)),
                call_timeout: Duration::from_secs(1).max(latency * 4),
                can_lookup: false,
            },
            latency,
        }
    }
}

impl Default for Null {
    fn default() -> Self {
        Self::new()
    }
}

impl Provider for Null {
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }
    fn send<'a>(&'a self, msg: &'a Message) -> CallFuture<'a> {
        Box::pin(async move {
            if !self.latency.is_zero() {
                tokio::time::sleep(self.latency).await;
            }
            CallResult::Accepted {
                provider_id: format!("null-{}", msg.idempotency_key),
                replay: false,
            }
        })
    }
}

/// Build a provider from a `--provider` spec: `outbox:PATH[?idempotent=false]`,
/// `webhook:URL[#timeout=10s&key_window=24h]`, `smtp://[user@]host:port?tls=...`,
/// `twilio:ACCOUNT_SID?from=...`, `resend:?from=...`, `postmark:?from=...`, `null` or
/// `null?latency=50ms`. Credentials never appear in a spec: they come from environment
/// variables or files (see each provider).
pub fn from_spec(spec: &str) -> Result<Arc<dyn Provider>> {
    if spec == "null" {
        return Ok(Arc::new(Null::new()));
    }
    if let Some(query) = spec.strip_prefix("null?") {
        let Some(d) = query.strip_prefix("latency=") else {
            return Err(Error::invalid(format!(
                "unknown null provider option {query:?} (known: latency=DURATION)"
            )));
        };
        return Ok(Arc::new(Null::with_latency(
            sendonce_domain::clock::parse_duration(d)?,
        )));
    }
    if let Some(rest) = spec.strip_prefix("outbox:") {
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        if path.is_empty() {
            return Err(Error::invalid("outbox provider needs a path: outbox:PATH"));
        }
        let mut idempotent = true;
        for kv in query.split('&').filter(|s| !s.is_empty()) {
            match kv {
                "idempotent=true" => idempotent = true,
                "idempotent=false" => idempotent = false,
                other => {
                    return Err(Error::invalid(format!(
                        "unknown outbox option {other:?} (known: idempotent=true|false)"
                    )))
                }
            }
        }
        return Ok(Arc::new(Outbox::open(path.as_ref(), idempotent)?));
    }
    if let Some(rest) = spec.strip_prefix("webhook:") {
        return Ok(Arc::new(Webhook::from_spec(rest)?));
    }
    if let Some(rest) = spec.strip_prefix("twilio:") {
        return Ok(Arc::new(Twilio::from_spec(rest)?));
    }
    if let Some(rest) = spec.strip_prefix("resend:") {
        return Ok(Arc::new(Resend::from_spec(rest)?));
    }
    if let Some(rest) = spec.strip_prefix("postmark:") {
        return Ok(Arc::new(Postmark::from_spec(rest)?));
    }
    if spec.starts_with("smtp://") {
        return Ok(Arc::new(Smtp::from_spec(spec)?));
    }
    // The spec is not echoed: a mistyped SMTP URL may carry a password.
    let head = spec.split(['/', '?', '#', '@']).next().unwrap_or("");
    let shown = if head.len() < spec.len() {
        format!("{head:?}...")
    } else {
        format!("{head:?}")
    };
    Err(Error::invalid(format!(
        "unknown provider {shown} (known: outbox:PATH[?idempotent=false], \
         webhook:URL[#timeout=10s&key_window=24h], \
         smtp://[user@]host:port?tls=starttls|tls|none[&...], \
         twilio:ACCOUNT_SID?from=+15017122661[&status_callback=URL&base_url=URL], \
         resend:?from=ADDRESS[&base_url=URL], postmark:?from=ADDRESS[&base_url=URL], \
         null[?latency=50ms])"
    )))
}

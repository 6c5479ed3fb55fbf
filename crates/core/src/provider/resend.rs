//! Resend: `POST {base}/emails` with a JSON body (`from`, `to` as an array, `subject`, `text`,
//! `html`, `headers` carrying `X-Sendonce-Job`, `tags` with `sendonce_job` = the job id in hex, which
//! Resend's webhooks carry back), bearer auth, and `Idempotency-Key` set to the
//! message's key, which Resend remembers for 24 hours.
//!
//! Spec: `resend:?from=news@example.com[&base_url=http://127.0.0.1:PORT][&api_key_file=PATH]
//! [&timeout=10s]`. The API key comes from `SENDONCE_RESEND_API_KEY` or the file. The
//! campaign's sender, when set, wins over `from=`.
//!
//! Answers: 2xx accepted (`id`); 409 `invalid_idempotent_request` (the key was used with
//! another payload: it was accepted before) already accepted; 409
//! `concurrent_idempotent_requests` ambiguous (the first request is still running; a retry
//! with the same key is safe inside the window); 429 not sent (after `Retry-After`); other 4xx
//! permanent; 5xx, redirects, timeouts and lost replies ambiguous; a refused connect not sent.
//! Error bodies look like `{"statusCode": 409, "name": "...", "message": "..."}`.

use super::httpapi::{self, Options, Secret};
use super::webhook::{excerpt, public_url};
use super::{CallFuture, CallResult, Capabilities, Message, Provider};
use reqwest::header::{HeaderMap, ACCEPT};
use reqwest::{StatusCode, Url};
use sendonce_domain::error::Result;
use serde_json::{json, Value};
use std::time::Duration;

/// The public API endpoint.
pub const DEFAULT_BASE_URL: &str = "https://api.resend.com";
/// Where the API key is read from unless `api_key_file=` is given.
pub const API_KEY_ENV: &str = "SENDONCE_RESEND_API_KEY";
/// How long Resend remembers an idempotency key.
pub const KEY_WINDOW: Duration = Duration::from_secs(24 * 3600);

const OPTIONS: &[&str] = &["from", "base_url", "api_key_file", "timeout"];

/// A Resend account used to send email.
pub struct Resend {
    caps: Capabilities,
    client: reqwest::Client,
    /// `.../emails`.
    url: Url,
    key: Secret,
    from: Option<String>,
    timeout: Duration,
}

impl std::fmt::Debug for Resend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resend")
            .field("url", &self.url.as_str())
            .field("key", &self.key)
            .field("from", &self.from)
            .finish_non_exhaustive()
    }
}

impl Resend {
    /// Build from the part of a spec after `resend:` (`?options`, the `?` optional).
    pub fn from_spec(rest: &str) -> Result<Self> {
        let query = rest.strip_prefix('?').unwrap_or(rest);
        let o = Options::parse("resend", query, OPTIONS)?;
        let from = o.get("from").map(str::to_string);
        let base = o.base_url(DEFAULT_BASE_URL)?;
        let timeout = o.timeout()?;
        let key = o.secret("api_key_file", API_KEY_ENV, "API key")?;
        let url = httpapi::endpoint(&base, "emails");
        Ok(Resend {
            caps: Capabilities {
                name: format!("resend:{}", public_url(&url)),
                key_window: Some(KEY_WINDOW),
                call_timeout: timeout,
                can_lookup: false,
            },
            client: httpapi::client(timeout)?,
            url,
            key,
            from,
            timeout,
        })
    }

    /// The JSON body of one message. Deterministic: a retry sends the same bytes.
    pub fn payload(&self, msg: &Message) -> Value {
        let mut p = json!({
            "from": msg.from.as_ref().or(self.from.as_ref()),
            "to": [msg.to],
            "subject": msg.subject.as_deref().unwrap_or(""),
            "text": msg.body,
            "headers": {"X-Sendonce-Job": msg.job_id},
            // Resend's webhooks carry the tags back: the job in the alphabet tags allow.
            "tags": [{"name": super::inbound::RESEND_JOB_TAG,
                      "value": sendonce_domain::webhook::job_tag(&msg.job_id)}],
        });
        if let Some(reply_to) = &msg.reply_to {
            p["reply_to"] = json!(reply_to);
        }
        if let Some(html) = &msg.html {
            p["html"] = json!(html);
        }
        for (name, value) in super::email::unsubscribe_header_pairs(msg.unsubscribe.as_deref()) {
            p["headers"][name] = json!(value);
        }
        if !msg.attachments.is_empty() {
            p["attachments"] = msg
                .attachments
                .iter()
                .map(|a| {
                    let mut f = json!({
                        "filename": a.filename,
                        "content": a.base64(),
                        "content_type": a.content_type,
                    });
                    if let Some(cid) = &a.content_id {
                        f["content_id"] = json!(cid);
                    }
                    f
                })
                .collect();
        }
        p
    }

    async fn call(&self, msg: &Message) -> CallResult {
        if msg.from.is_none() && self.from.is_none() {
            return CallResult::Permanent {
                error: "resend: no sender (give the campaign a sender, or from= in the provider \
                        spec)"
                    .into(),
                suppress: None,
            };
        }
        let request = self
            .client
            .post(self.url.clone())
            .bearer_auth(self.key.expose())
            .header("Idempotency-Key", &msg.idempotency_key)
            .header(ACCEPT, "application/json")
            .timeout(self.timeout)
            .json(&self.payload(msg));
        httpapi::exchange("resend", request, &self.key, classify_response).await
    }
}

impl Provider for Resend {
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }
    fn send<'a>(&'a self, msg: &'a Message) -> CallFuture<'a> {
        Box::pin(self.call(msg))
    }
    fn needs_sender(&self) -> bool {
        self.from.is_none()
    }
}

/// What a `POST /emails` answer means.
pub fn classify_response(status: StatusCode, headers: &HeaderMap, body: &[u8]) -> CallResult {
    let http = status.as_u16();
    let v = httpapi::json_body(body);
    if status.is_success() {
        return httpapi::accepted(&v, "id");
    }
    let name = httpapi::str_field(&v, "name");
    let detail = match httpapi::str_field(&v, "message") {
        Some(m) => excerpt(m.as_bytes()),
        None => excerpt(body),
    };
    let what = match name {
        Some(n) => format!("resend: HTTP {http} {n}{detail}"),
        None => format!("resend: HTTP {http}{detail}"),
    };
    match (http, name) {
        // Same key, different payload: the first request was accepted. Reconcile, never resend.
        (409, Some("invalid_idempotent_request")) => CallResult::AlreadyAccepted { detail: what },
        // Another request with this key is still being processed: it may succeed. Inside the
        // key window a retry with the same key is safe, which the worker does for ambiguity.
        (409, _) => CallResult::Ambiguous { error: what },
        (429, _) => CallResult::NotSent {
            error: what,
            retry_after: httpapi::retry_after(headers),
        },
        (400..=499, _) => CallResult::Permanent {
            error: what,
            suppress: None,
        },
        _ => CallResult::Ambiguous { error: what },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_classified() {
        let h = HeaderMap::new();
        let c = |code: u16, body: &str| {
            classify_response(StatusCode::from_u16(code).unwrap(), &h, body.as_bytes())
        };
        assert_eq!(
            c(200, r#"{"id":"49a3999c-0ce1-4ea6-ab68-afcd6dc2e794"}"#),
            CallResult::Accepted {
                provider_id: "49a3999c-0ce1-4ea6-ab68-afcd6dc2e794".into(),
                replay: false
            }
        );
        assert!(matches!(
            c(
                409,
                r#"{"statusCode":409,"name":"invalid_idempotent_request","message":"x"}"#
            ),
            CallResult::AlreadyAccepted { .. }
        ));
        assert!(matches!(
            c(
                409,
                r#"{"statusCode":409,"name":"concurrent_idempotent_requests","message":"x"}"#
            ),
            CallResult::Ambiguous { .. }
        ));
        for code in [400, 401, 403, 422] {
            assert!(
                matches!(c(code, "{}"), CallResult::Permanent { suppress: None, .. }),
                "{code}"
            );
        }
        assert!(matches!(c(429, ""), CallResult::NotSent { .. }));
        assert!(matches!(c(500, ""), CallResult::Ambiguous { .. }));
    }
}

//! The generic webhook provider: POSTs each message as JSON with an `Idempotency-Key` header
//! and classifies the HTTP outcome (2xx accepted, 409 already accepted, 429/refused not sent,
//! other 4xx permanent, 5xx/timeouts/lost replies ambiguous).
//!
//! Spec: `webhook:URL[#timeout=10s&key_window=24h]`. Options live in the URL fragment, which
//! HTTP never sends. Without `key_window` the endpoint is treated as having no idempotency
//! window, so an ambiguous outcome parks the row in doubt instead of retrying it.
//!
//! Credentials in the URL (a password in the user info, values in the query string) are
//! treated as secrets: scrubbed from every error before it is cut or stored.

use super::redact::{self, Secret};
use super::{CallFuture, CallResult, Capabilities, Message, Provider};
use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::{StatusCode, Url};
use sendonce_domain::error::{Error, Result};
use serde_json::json;
use std::time::Duration;

/// Default upper bound of one call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Characters of a response body quoted in an error.
const EXCERPT_CHARS: usize = 200;

/// A webhook endpoint. One pooled HTTP client per provider.
pub struct Webhook {
    caps: Capabilities,
    client: reqwest::Client,
    url: Url,
    timeout: Duration,
    /// The URL's password and query values, scrubbed from every error.
    secrets: Vec<Secret>,
}

impl Webhook {
    /// Build from the part of a spec after `webhook:` (`URL[#options]`).
    pub fn from_spec(rest: &str) -> Result<Self> {
        let (url, options) = rest.split_once('#').unwrap_or((rest, ""));
        if url.is_empty() {
            return Err(Error::invalid(
                "webhook provider needs a URL: webhook:http://host:port/path",
            ));
        }
        let mut timeout = DEFAULT_TIMEOUT;
        let mut key_window = None;
        for kv in options.split('&').filter(|s| !s.is_empty()) {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            match k {
                "timeout" => {
                    timeout = sendonce_domain::clock::parse_duration(v)
                        .map_err(|e| e.context("webhook option timeout"))?;
                    if timeout.is_zero() {
                        return Err(Error::invalid("webhook option timeout must be above 0"));
                    }
                }
                "key_window" => {
                    key_window = match v {
                        "none" | "0" => None,
                        _ => Some(
                            sendonce_domain::clock::parse_duration(v)
                                .map_err(|e| e.context("webhook option key_window"))?,
                        ),
                    }
                }
                other => {
                    return Err(Error::invalid(format!(
                        "unknown webhook option {other:?} (known: timeout, key_window)"
                    )))
                }
            }
        }
        let url =
            Url::parse(url).map_err(|e| Error::invalid(format!("invalid webhook URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Error::invalid(format!(
                "webhook URL must be http or https, not {:?}",
                url.scheme()
            )));
        }
        Self::new(url, timeout, key_window)
    }

    pub fn new(url: Url, timeout: Duration, key_window: Option<Duration>) -> Result<Self> {
        // reqwest is built without its default crypto backend (aws-lc-rs needs cmake): use
        // ring, unless the process already installed a provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            // A redirected POST may turn into a GET; a redirect is reported, never followed.
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(timeout)
            .build()
            .map_err(|e| Error::new(sendonce_domain::error::ErrorKind::Provider, chain(&e)))?;
        let password = url.password().map(|p| {
            percent_encoding::percent_decode_str(p)
                .decode_utf8_lossy()
                .into_owned()
        });
        let secrets = password
            .into_iter()
            .chain(url.query_pairs().map(|(_, v)| v.into_owned()))
            .map(Secret::new)
            .collect();
        Ok(Webhook {
            caps: Capabilities {
                name: format!("webhook:{}", public_url(&url)),
                key_window,
                call_timeout: timeout,
                can_lookup: false,
            },
            client,
            url,
            timeout,
            secrets,
        })
    }

    async fn call(&self, msg: &Message) -> CallResult {
        let mut payload = json!({
            "job_id": msg.job_id,
            "to": msg.to,
            "channel": msg.channel.as_str(),
            "subject": msg.subject,
            "body": msg.body,
            "from": msg.from,
            "metadata": {"job_id": msg.job_id},
        });
        if !msg.attachments.is_empty() {
            payload["attachments"] = msg
                .attachments
                .iter()
                .map(|a| {
                    json!({"filename": a.filename, "content_type": a.content_type,
                           "content_id": a.content_id, "content": a.base64()})
                })
                .collect();
        }
        let sent = self
            .client
            .post(self.url.clone())
            .header("Idempotency-Key", &msg.idempotency_key)
            .timeout(self.timeout)
            .json(&payload)
            .send()
            .await;
        let resp = match sent {
            Ok(r) => r,
            Err(e) => return redact::redact_result(classify_error(&e), &self.secrets),
        };
        let status = resp.status();
        let headers = resp.headers().clone();
        // A body that cannot be read does not change what the status says. It is scrubbed
        // before the excerpt is cut from it.
        let body = super::httpapi::body_capped(resp).await;
        let body = redact::redact_bytes(&body, &self.secrets);
        redact::redact_result(classify_response(status, &headers, &body), &self.secrets)
    }
}

impl Provider for Webhook {
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }
    fn send<'a>(&'a self, msg: &'a Message) -> CallFuture<'a> {
        Box::pin(self.call(msg))
    }
}

/// A transport error. Only a failed connect proves the request never left.
fn classify_error(e: &reqwest::Error) -> CallResult {
    let error = chain(e);
    if e.is_connect() {
        CallResult::NotSent {
            error,
            retry_after: None,
        }
    } else {
        // Timeout, connection closed after the request was written, anything else.
        CallResult::Ambiguous { error }
    }
}

/// What an HTTP answer means for the message.
pub fn classify_response(status: StatusCode, headers: &HeaderMap, body: &[u8]) -> CallResult {
    let code = status.as_u16();
    if status.is_success() {
        let provider_id = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| match v.get("id") {
                Some(serde_json::Value::String(s)) if !s.is_empty() => Some(s.clone()),
                Some(serde_json::Value::Number(n)) => Some(n.to_string()),
                _ => None,
            })
            .unwrap_or_else(|| "unknown".to_string());
        let replay = headers
            .get("idempotent-replayed")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        return CallResult::Accepted {
            provider_id,
            replay,
        };
    }
    let what = format!("HTTP {code}{}", excerpt(body));
    match code {
        // The key was already used: the message was accepted earlier.
        409 => CallResult::AlreadyAccepted { detail: what },
        429 => CallResult::NotSent {
            error: what,
            retry_after: headers
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs),
        },
        400..=499 => CallResult::Permanent {
            error: what,
            suppress: None,
        },
        // 5xx, and redirects (a 303 after a POST can mean "processed, see there").
        _ => CallResult::Ambiguous { error: what },
    }
}

/// `": <first characters of the body>"`, single-line, or nothing for an empty body. The body
/// must already be scrubbed of secrets: a cut can split one so that no whole copy is left.
pub(super) fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return String::new();
    }
    let mut out: String = text
        .chars()
        .take(EXCERPT_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().count() > EXCERPT_CHARS {
        out.push('…');
    }
    format!(": {out}")
}

/// The error and its causes, without the URL (which may carry credentials).
pub(super) fn chain(e: &reqwest::Error) -> String {
    let mut out = String::new();
    let mut cur: Option<&dyn std::error::Error> = Some(e);
    let mut first = true;
    while let Some(err) = cur {
        let s = if first {
            // reqwest's own message names the URL; drop it.
            let mut s = err.to_string();
            if let Some(i) = s.find(" for url (") {
                s.truncate(i);
            }
            s
        } else {
            err.to_string()
        };
        if !out.ends_with(&s) {
            if !first {
                out.push_str(": ");
            }
            out.push_str(&s);
        }
        first = false;
        cur = err.source();
    }
    out
}

/// The URL for logs and reports: no user info, query or fragment.
pub(super) fn public_url(url: &Url) -> String {
    let mut u = url.clone();
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.set_query(None);
    u.set_fragment(None);
    u.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_parsed_and_checked() {
        let w = Webhook::from_spec("http://127.0.0.1:9/send#timeout=5s&key_window=24h").unwrap();
        assert_eq!(w.timeout, Duration::from_secs(5));
        assert_eq!(w.caps.key_window, Some(Duration::from_secs(24 * 3600)));
        assert_eq!(w.caps.name, "webhook:http://127.0.0.1:9/send");
        let w = Webhook::from_spec("http://127.0.0.1:9/send").unwrap();
        assert_eq!(w.timeout, DEFAULT_TIMEOUT);
        assert_eq!(w.caps.key_window, None);
        let e = Webhook::from_spec("http://127.0.0.1:9/#retries=3")
            .err()
            .unwrap();
        assert!(e.message.contains("retries"), "{}", e.message);
        assert!(Webhook::from_spec("ftp://x/").is_err());
        assert!(Webhook::from_spec("http://x/#timeout=soon").is_err());
    }

    #[test]
    fn secrets_stay_out_of_the_name() {
        let w = Webhook::from_spec("https://user:hunter2@example.com/hook?token=abc").unwrap();
        assert!(!w.caps.name.contains("hunter2"));
        assert!(!w.caps.name.contains("abc"));
    }

    #[test]
    fn url_credentials_are_secrets() {
        let w = Webhook::from_spec("https://u:pw%2Dsecret-1@example.com/hook?token=abcd1234&v=1")
            .unwrap();
        let found: Vec<&str> = w.secrets.iter().map(Secret::expose).collect();
        assert_eq!(found, ["pw-secret-1", "abcd1234", "1"]);
        let r = redact::redact_result(
            CallResult::Ambiguous {
                error: "HTTP 500: token=abcd1234 pw=pw%2Dsecret%2D1".into(),
            },
            &w.secrets,
        );
        assert_eq!(
            r,
            CallResult::Ambiguous {
                error: "HTTP 500: token=[redacted] pw=[redacted]".into()
            }
        );
    }

    #[test]
    fn statuses_are_classified() {
        let h = HeaderMap::new();
        let c = |code: u16, body: &str| {
            classify_response(StatusCode::from_u16(code).unwrap(), &h, body.as_bytes())
        };
        assert_eq!(
            c(200, r#"{"id":"m1"}"#),
            CallResult::Accepted {
                provider_id: "m1".into(),
                replay: false
            }
        );
        assert_eq!(
            c(202, "not json"),
            CallResult::Accepted {
                provider_id: "unknown".into(),
                replay: false
            }
        );
        assert!(matches!(c(409, ""), CallResult::AlreadyAccepted { .. }));
        assert!(matches!(c(418, ""), CallResult::Permanent { .. }));
        assert!(matches!(c(500, ""), CallResult::Ambiguous { .. }));
        assert!(matches!(c(303, ""), CallResult::Ambiguous { .. }));
    }
}

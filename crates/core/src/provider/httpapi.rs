//! Pieces shared by the HTTP API providers (Twilio, Resend, Postmark): spec options, secrets
//! read from an environment variable or a file (never from the spec itself), the pooled client,
//! and the transport-level classification. Every error string built here is secret-free: response
//! bodies are scrubbed (`redact.rs`) before any excerpt is cut from them.

use super::redact;
use super::webhook::chain;
use super::CallResult;
use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::Url;
use sendonce_domain::error::{Error, ErrorKind, Result};
use std::time::Duration;

/// Default upper bound of one call.
pub(super) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) use super::redact::Secret;

/// The `key=value&...` options of a spec, percent-decoded (a `+` stays a plus: phone numbers).
pub(super) struct Options {
    provider: &'static str,
    pairs: Vec<(String, String)>,
}

impl Options {
    /// Parse and check every key against `known`; a repeated key is refused.
    pub(super) fn parse(provider: &'static str, query: &str, known: &[&str]) -> Result<Self> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for kv in query.split('&').filter(|s| !s.is_empty()) {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            if !known.contains(&k) {
                return Err(Error::invalid(format!(
                    "unknown {provider} option {k:?} (known: {})",
                    known.join(", ")
                )));
            }
            if pairs.iter().any(|(p, _)| p == k) {
                return Err(Error::invalid(format!(
                    "{provider} option {k:?} is given twice"
                )));
            }
            let v = percent_encoding::percent_decode_str(v)
                .decode_utf8()
                .map_err(|_| {
                    Error::invalid(format!("{provider} option {k:?} is not valid UTF-8"))
                })?;
            pairs.push((k.to_string(), v.into_owned()));
        }
        Ok(Options { provider, pairs })
    }

    /// A non-empty value, if given.
    pub(super) fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }

    /// `base_url=` (http or https) or the provider's public endpoint.
    pub(super) fn base_url(&self, default: &str) -> Result<Url> {
        let raw = self.get("base_url").unwrap_or(default);
        let url = Url::parse(raw)
            .map_err(|e| Error::invalid(format!("invalid {} base_url: {e}", self.provider)))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Error::invalid(format!(
                "{} base_url must be http or https, not {:?}",
                self.provider,
                url.scheme()
            )));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(Error::invalid(format!(
                "{} base_url must not carry credentials (they come from the environment or a file)",
                self.provider
            )));
        }
        Ok(url)
    }

    /// `timeout=` (above zero) or the default.
    pub(super) fn timeout(&self) -> Result<Duration> {
        match self.get("timeout") {
            None => Ok(DEFAULT_TIMEOUT),
            Some(v) => {
                let t = sendonce_domain::clock::parse_duration(v)
                    .map_err(|e| e.context(&format!("{} option timeout", self.provider)))?;
                if t.is_zero() {
                    return Err(Error::invalid(format!(
                        "{} option timeout must be above 0",
                        self.provider
                    )));
                }
                Ok(t)
            }
        }
    }

    /// The credential: from the file named by option `file_key` when given, else from the
    /// environment variable `env`. Surrounding whitespace (a trailing newline) is dropped.
    pub(super) fn secret(&self, file_key: &str, env: &str, what: &str) -> Result<Secret> {
        let provider = self.provider;
        let value = match self.get(file_key) {
            Some(path) => std::fs::read_to_string(path).map_err(|e| {
                Error::io(&format!("cannot read the {provider} {what} file {path}"), e)
            })?,
            None => std::env::var(env).map_err(|_| {
                Error::invalid(format!(
                    "the {provider} provider needs its {what}: set {env} or {file_key}=PATH"
                ))
            })?,
        };
        let value = value.trim();
        if value.is_empty() {
            return Err(Error::invalid(format!("the {provider} {what} is empty")));
        }
        if value.chars().any(|c| c.is_control()) {
            return Err(Error::invalid(format!(
                "the {provider} {what} contains control characters"
            )));
        }
        Ok(Secret::new(value))
    }
}

/// `base` with `path` appended to its path (a base may carry a prefix such as `/proxy`).
pub(super) fn endpoint(base: &Url, path: &str) -> Url {
    let mut u = base.clone();
    let joined = format!(
        "{}/{}",
        u.path().trim_end_matches('/'),
        path.trim_start_matches('/')
    );
    u.set_path(&joined);
    u.set_query(None);
    u.set_fragment(None);
    u
}

/// One pooled client per provider; redirects are reported, never followed (a redirected POST
/// may turn into a GET).
pub(super) fn client(timeout: Duration) -> Result<reqwest::Client> {
    // reqwest is built without its default crypto backend (aws-lc-rs needs cmake): use ring,
    // unless the process already installed a provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(timeout)
        .build()
        .map_err(|e| Error::new(ErrorKind::Provider, chain(&e)))
}

/// A transport error. Only a failed connect proves the request never left.
pub(super) fn transport(provider: &str, e: &reqwest::Error, secret: &Secret) -> CallResult {
    let error = secret.redact(format!("{provider}: {}", chain(e)));
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

/// Send one API request and turn the answer into a `CallResult` with the provider's
/// `classify`: a transport error through [`transport`], and the secret scrubbed from whatever
/// comes back. The body is scrubbed before `classify` sees it, so the excerpt it cuts from the
/// body can never hold part of a secret. A body that cannot be read does not change what the
/// status says.
pub(super) async fn exchange(
    provider: &str,
    request: reqwest::RequestBuilder,
    secret: &Secret,
    classify: fn(reqwest::StatusCode, &HeaderMap, &[u8]) -> CallResult,
) -> CallResult {
    let resp = match request.send().await {
        Ok(r) => r,
        Err(e) => return transport(provider, &e, secret),
    };
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = body_capped(resp).await;
    let body = redact::redact_bytes(&body, std::slice::from_ref(secret));
    redact(classify(status, &headers, &body), secret)
}

/// The most of a response body that is read: an answer is a few hundred bytes; a larger one
/// (an HTML error page, a hostile server) is cut here, before it is scrubbed and excerpted.
pub(super) const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Read a response body, at most [`MAX_BODY_BYTES`]; a body that fails midway keeps what came.
pub(super) async fn body_capped(mut resp: reqwest::Response) -> Vec<u8> {
    let mut out = Vec::new();
    while let Ok(Some(chunk)) = resp.chunk().await {
        let room = MAX_BODY_BYTES.saturating_sub(out.len());
        out.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if out.len() >= MAX_BODY_BYTES {
            break;
        }
    }
    out
}

/// A 2xx answer: accepted, with the message id from the JSON body's `field`.
pub(super) fn accepted(v: &serde_json::Value, field: &str) -> CallResult {
    CallResult::Accepted {
        provider_id: str_field(v, field).unwrap_or("unknown").to_string(),
        replay: false,
    }
}

/// `Retry-After` in seconds (the HTTP-date form is not used by these APIs).
pub(super) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

/// Scrub the token from whatever text a result carries.
pub(super) fn redact(r: CallResult, secret: &Secret) -> CallResult {
    redact::redact_result(r, std::slice::from_ref(secret))
}

/// A JSON body, or `Null` when it is not JSON.
pub(super) fn json_body(body: &[u8]) -> serde_json::Value {
    serde_json::from_slice(body).unwrap_or(serde_json::Value::Null)
}

/// A string field of a JSON object, when present and non-empty.
pub(super) fn str_field<'a>(v: &'a serde_json::Value, name: &str) -> Option<&'a str> {
    v.get(name)
        .and_then(|x| x.as_str())
        .filter(|s| !s.is_empty())
}

/// An integer field (number or numeric string).
pub(super) fn int_field(v: &serde_json::Value, name: &str) -> Option<i64> {
    match v.get(name)? {
        serde_json::Value::Number(n) => n.as_i64(),
        serde_json::Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_decode_and_refuse_unknown_or_repeated_keys() {
        let o = Options::parse(
            "twilio",
            "from=+15017122661&status_callback=https%3A%2F%2Fx.example%2Fcb%3Fa%3D1",
            &["from", "status_callback"],
        )
        .unwrap();
        assert_eq!(o.get("from"), Some("+15017122661"));
        assert_eq!(o.get("status_callback"), Some("https://x.example/cb?a=1"));
        assert!(Options::parse("twilio", "token=x", &["from"]).is_err());
        assert!(Options::parse("twilio", "from=a&from=b", &["from"]).is_err());
    }

    #[test]
    fn base_urls_keep_their_prefix_and_refuse_credentials() {
        let o = Options::parse(
            "resend",
            "base_url=http://127.0.0.1:9/proxy/",
            &["base_url"],
        )
        .unwrap();
        let u = endpoint(&o.base_url("https://api.resend.com").unwrap(), "/emails");
        assert_eq!(u.as_str(), "http://127.0.0.1:9/proxy/emails");
        let o = Options::parse("resend", "", &["base_url"]).unwrap();
        let u = endpoint(&o.base_url("https://api.resend.com").unwrap(), "emails");
        assert_eq!(u.as_str(), "https://api.resend.com/emails");
        let o = Options::parse("resend", "base_url=http://u:p@h/", &["base_url"]).unwrap();
        assert!(o.base_url("https://x").is_err());
        let o = Options::parse("resend", "base_url=ftp://h/", &["base_url"]).unwrap();
        assert!(o.base_url("https://x").is_err());
    }

    #[test]
    fn secrets_are_redacted() {
        let s = Secret::new("hunter2-token");
        assert_eq!(format!("{s:?}"), "Secret([redacted])");
        assert_eq!(
            s.redact("bad token hunter2-token given".into()),
            "bad token [redacted] given"
        );
    }

    #[test]
    fn secrets_come_from_a_file_and_must_not_be_empty() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tok");
        std::fs::write(&f, "abc123\n").unwrap();
        let q = format!("token_file={}", f.display());
        let o = Options::parse("postmark", &q, &["token_file"]).unwrap();
        assert_eq!(
            o.secret("token_file", "SENDONCE_TEST_UNSET_VAR", "server token")
                .unwrap()
                .expose(),
            "abc123"
        );
        std::fs::write(&f, "\n").unwrap();
        assert!(o
            .secret("token_file", "SENDONCE_TEST_UNSET_VAR", "server token")
            .is_err());
        let o = Options::parse("postmark", "", &["token_file"]).unwrap();
        let e = o
            .secret("token_file", "SENDONCE_TEST_UNSET_VAR", "server token")
            .err()
            .unwrap();
        assert!(
            e.message.contains("SENDONCE_TEST_UNSET_VAR"),
            "{}",
            e.message
        );
    }
}

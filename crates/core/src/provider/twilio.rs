//! Twilio Programmable Messaging (SMS): `POST {base}/2010-04-01/Accounts/{sid}/Messages.json`,
//! form-encoded `To`, `From` and/or `MessagingServiceSid`, `Body` and `StatusCallback` (the
//! configured callback URL with `job_id=<job>` added, so delivery reports name the job), HTTP
//! basic auth with the account SID and auth token. Plus Twilio's request-signature check for
//! the callbacks Twilio sends back.
//!
//! Spec: `twilio:ACCOUNT_SID?from=+15017122661[&messaging_service_sid=MG...]
//! [&status_callback=https://...][&base_url=http://127.0.0.1:PORT][&auth_token_file=PATH]
//! [&timeout=10s]`. The auth token comes from `SENDONCE_TWILIO_AUTH_TOKEN` or the file.
//!
//! Twilio has no idempotency key: an ambiguous outcome parks the row in doubt. Answers:
//! 2xx accepted (the message `sid`); error 21610 (recipient replied STOP) permanent and
//! suppressed; 21211 / 21614 (invalid / not a mobile number) permanent and suppressed; 429 or
//! error 20429 not sent (retry after `Retry-After`); other 4xx permanent; 5xx, redirects and a
//! connection lost after the request was written ambiguous; a refused connect not sent.

use super::httpapi::{self, Options, Secret};
use super::webhook::{excerpt, public_url};
use super::{CallFuture, CallResult, Capabilities, Message, Provider};
use base64::Engine;
use reqwest::header::{HeaderMap, ACCEPT, CONTENT_TYPE};
use reqwest::{StatusCode, Url};
use sendonce_domain::error::{Error, Result};
use std::time::Duration;

/// The public API endpoint.
pub const DEFAULT_BASE_URL: &str = "https://api.twilio.com";
/// Where the auth token is read from unless `auth_token_file=` is given.
pub const AUTH_TOKEN_ENV: &str = "SENDONCE_TWILIO_AUTH_TOKEN";

const OPTIONS: &[&str] = &[
    "from",
    "messaging_service_sid",
    "status_callback",
    "base_url",
    "auth_token_file",
    "timeout",
];

/// A Twilio account used to send SMS.
pub struct Twilio {
    caps: Capabilities,
    client: reqwest::Client,
    /// `.../2010-04-01/Accounts/{sid}/Messages.json`.
    url: Url,
    account_sid: String,
    token: Secret,
    from: Option<String>,
    messaging_service_sid: Option<String>,
    status_callback: Option<Url>,
    timeout: Duration,
}

impl std::fmt::Debug for Twilio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Twilio")
            .field("url", &self.url.as_str())
            .field("token", &self.token)
            .field("from", &self.from)
            .finish_non_exhaustive()
    }
}

impl Twilio {
    /// Build from the part of a spec after `twilio:` (`ACCOUNT_SID?options`).
    pub fn from_spec(rest: &str) -> Result<Self> {
        let (sid, query) = rest.split_once('?').unwrap_or((rest, ""));
        if sid.is_empty() || !sid.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(Error::invalid(
                "twilio provider needs the account SID: twilio:AC...?from=+15017122661",
            ));
        }
        let o = Options::parse("twilio", query, OPTIONS)?;
        let from = match o.get("from") {
            // A phone number is checked; an alphanumeric sender ID is passed as is.
            Some(f) if f.starts_with('+') => Some(
                sendonce_domain::sms::check_e164(f).map_err(|e| e.context("twilio option from"))?,
            ),
            other => other.map(str::to_string),
        };
        let messaging_service_sid = o.get("messaging_service_sid").map(str::to_string);
        let status_callback = o
            .get("status_callback")
            .map(|s| {
                let u = Url::parse(s).map_err(|e| {
                    Error::invalid(format!("invalid twilio status_callback URL: {e}"))
                })?;
                if !matches!(u.scheme(), "http" | "https") {
                    return Err(Error::invalid(
                        "twilio status_callback must be an http or https URL",
                    ));
                }
                Ok(u)
            })
            .transpose()?;
        let base = o.base_url(DEFAULT_BASE_URL)?;
        let timeout = o.timeout()?;
        let token = o.secret("auth_token_file", AUTH_TOKEN_ENV, "auth token")?;
        let url = httpapi::endpoint(&base, &format!("2010-04-01/Accounts/{sid}/Messages.json"));
        Ok(Twilio {
            caps: Capabilities {
                name: format!("twilio:{}", public_url(&url)),
                key_window: None,
                call_timeout: timeout,
                can_lookup: false,
            },
            client: httpapi::client(timeout)?,
            url,
            account_sid: sid.to_string(),
            token,
            from,
            messaging_service_sid,
            status_callback,
            timeout,
        })
    }

    /// The form fields of one message, in the order they are sent.
    pub fn form(&self, msg: &Message) -> Vec<(&'static str, String)> {
        // The ledger stores E.164 already; normalising again costs nothing and is safe.
        let to = sendonce_domain::sms::check_e164(&msg.to).unwrap_or_else(|_| msg.to.clone());
        let mut f = vec![("To", to)];
        if let Some(from) = msg.from.as_ref().or(self.from.as_ref()) {
            f.push(("From", from.clone()));
        }
        if let Some(mg) = &self.messaging_service_sid {
            f.push(("MessagingServiceSid", mg.clone()));
        }
        f.push(("Body", msg.body.clone()));
        let job: String = form_urlencoded::byte_serialize(msg.job_id.as_bytes()).collect();
        match (&self.status_callback, msg.status_callback.as_deref()) {
            (Some(spec), _) => {
                let mut cb = spec.clone();
                cb.query_pairs_mut().append_pair("job_id", &msg.job_id);
                f.push(("StatusCallback", cb.to_string()));
            }
            // The worker's URL exactly as given (not re-serialised by a URL parser): the server
            // checks Twilio's signature over the same text.
            (None, Some(base)) => {
                let sep = if base.contains('?') { '&' } else { '?' };
                f.push(("StatusCallback", format!("{base}{sep}job_id={job}")));
            }
            (None, None) => {}
        }
        f
    }

    async fn call(&self, msg: &Message) -> CallResult {
        if let Err(e) = sendonce_domain::sms::check_e164(&msg.to) {
            return CallResult::Permanent {
                error: e.message,
                suppress: None,
            };
        }
        if msg.from.is_none() && self.from.is_none() && self.messaging_service_sid.is_none() {
            return CallResult::Permanent {
                error: "twilio: no sender (give the campaign a sender, or from= or \
                        messaging_service_sid= in the provider spec)"
                    .into(),
                suppress: None,
            };
        }
        let body = {
            let mut form = form_urlencoded::Serializer::new(String::new());
            for (k, v) in self.form(msg) {
                form.append_pair(k, &v);
            }
            form.finish()
        };
        let request = self
            .client
            .post(self.url.clone())
            .basic_auth(&self.account_sid, Some(self.token.expose()))
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(ACCEPT, "application/json")
            .timeout(self.timeout)
            .body(body);
        httpapi::exchange("twilio", request, &self.token, classify_response).await
    }
}

impl Provider for Twilio {
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }
    fn send<'a>(&'a self, msg: &'a Message) -> CallFuture<'a> {
        Box::pin(self.call(msg))
    }
    fn needs_sender(&self) -> bool {
        self.from.is_none() && self.messaging_service_sid.is_none()
    }
}

/// What a Messages API answer means. Error bodies look like
/// `{"code": 21610, "message": "...", "more_info": "...", "status": 400}`.
pub fn classify_response(status: StatusCode, headers: &HeaderMap, body: &[u8]) -> CallResult {
    let http = status.as_u16();
    let v = httpapi::json_body(body);
    if status.is_success() {
        return httpapi::accepted(&v, "sid");
    }
    let code = httpapi::int_field(&v, "code");
    let detail = match httpapi::str_field(&v, "message") {
        Some(m) => excerpt(m.as_bytes()),
        None => excerpt(body),
    };
    let what = match code {
        Some(c) => format!("twilio: HTTP {http}, error {c}{detail}"),
        None => format!("twilio: HTTP {http}{detail}"),
    };
    let permanent = |suppress: Option<&str>| CallResult::Permanent {
        error: what.clone(),
        suppress: suppress.map(str::to_string),
    };
    match (http, code) {
        (429, _) | (_, Some(20429)) => CallResult::NotSent {
            error: what.clone(),
            retry_after: httpapi::retry_after(headers),
        },
        (400..=499, Some(21610)) => permanent(Some("opted out (Twilio 21610)")),
        (400..=499, Some(21211)) => permanent(Some("invalid number (Twilio 21211)")),
        (400..=499, Some(21614)) => permanent(Some("not a mobile number (Twilio 21614)")),
        (400..=499, _) => permanent(None),
        // 5xx, and redirects (a 303 after a POST can mean "processed, see there").
        _ => CallResult::Ambiguous { error: what },
    }
}

/// Twilio's request signature (`X-Twilio-Signature`): HMAC-SHA1, keyed with the auth token,
/// over the full URL followed by every POST parameter sorted by name, each as name then value;
/// base64-encoded.
pub fn twilio_signature(auth_token: &str, url: &str, params: &[(&str, &str)]) -> String {
    let key = ring::hmac::Key::new(
        ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
        auth_token.as_bytes(),
    );
    let tag = ring::hmac::sign(&key, &signed_data(url, params));
    base64::engine::general_purpose::STANDARD.encode(tag.as_ref())
}

/// Check an `X-Twilio-Signature` header in constant time.
pub fn validate_twilio_signature(
    auth_token: &str,
    url: &str,
    params: &[(&str, &str)],
    signature: &str,
) -> bool {
    let Ok(tag) = base64::engine::general_purpose::STANDARD.decode(signature.trim()) else {
        return false;
    };
    let key = ring::hmac::Key::new(
        ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
        auth_token.as_bytes(),
    );
    ring::hmac::verify(&key, &signed_data(url, params), &tag).is_ok()
}

fn signed_data(url: &str, params: &[(&str, &str)]) -> Vec<u8> {
    let mut sorted: Vec<&(&str, &str)> = params.iter().collect();
    // Byte order of the names; a stable sort keeps repeated names in their given order.
    sorted.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let mut data = url.as_bytes().to_vec();
    for (k, v) in sorted {
        data.extend_from_slice(k.as_bytes());
        data.extend_from_slice(v.as_bytes());
    }
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Twilio's published example (see the security documentation).
    const VECTOR_URL: &str = "https://mycompany.com/myapp.php?foo=1&bar=2";
    const VECTOR_PARAMS: &[(&str, &str)] = &[
        ("CallSid", "CA1234567890ABCDE"),
        ("Caller", "+12349013030"),
        ("Digits", "1234"),
        ("From", "+12349013030"),
        ("To", "+18005551212"),
    ];

    #[test]
    fn published_signature_vector() {
        assert_eq!(
            twilio_signature("12345", VECTOR_URL, VECTOR_PARAMS),
            "0/KCTR6DLpKmkAf8muzZqo1nDgQ="
        );
        // Order of the given parameters does not matter.
        let mut shuffled = VECTOR_PARAMS.to_vec();
        shuffled.reverse();
        assert!(validate_twilio_signature(
            "12345",
            VECTOR_URL,
            &shuffled,
            "0/KCTR6DLpKmkAf8muzZqo1nDgQ="
        ));
        assert!(!validate_twilio_signature(
            "12346",
            VECTOR_URL,
            VECTOR_PARAMS,
            "0/KCTR6DLpKmkAf8muzZqo1nDgQ="
        ));
        assert!(!validate_twilio_signature(
            "12345",
            VECTOR_URL,
            VECTOR_PARAMS,
            "not base64!"
        ));
    }

    fn spec_with_token(q: &str) -> Result<Twilio> {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("token");
        std::fs::write(&f, "tok-secret-1\n").unwrap();
        Twilio::from_spec(&format!("AC123?auth_token_file={}&{q}", f.display()))
    }

    #[test]
    fn spec_and_form() {
        let t = spec_with_token(
            "from=%2B15017122661&base_url=http://127.0.0.1:9&status_callback=https://cb.example/s%3Fa%3D1",
        )
        .unwrap();
        assert_eq!(
            t.url.as_str(),
            "http://127.0.0.1:9/2010-04-01/Accounts/AC123/Messages.json"
        );
        assert_eq!(t.caps.key_window, None);
        assert!(!format!("{t:?}").contains("tok-secret-1"));
        let msg = Message {
            status_callback: None,
            reply_to: None,
            job_id: "campaign:1:sub:2".into(),
            idempotency_key: "k".into(),
            channel: sendonce_domain::address::Channel::Sms,
            from: None,
            to: "+14155550100".into(),
            subject: None,
            body: "hi".into(),
            html: None,
            unsubscribe: None,
            attachments: Vec::new(),
        };
        let f = t.form(&msg);
        assert_eq!(f[0], ("To", "+14155550100".to_string()));
        assert_eq!(f[1], ("From", "+15017122661".to_string()));
        assert_eq!(f[2], ("Body", "hi".to_string()));
        assert_eq!(
            f[3],
            (
                "StatusCallback",
                "https://cb.example/s?a=1&job_id=campaign%3A1%3Asub%3A2".to_string()
            )
        );
        assert!(spec_with_token("from=+1").is_err());
        assert!(Twilio::from_spec("?from=+15017122661").is_err());
        assert!(spec_with_token("status_callback=ftp://x/").is_err());
        assert!(spec_with_token("token=abc").is_err());
    }

    #[test]
    fn answers_are_classified() {
        let h = HeaderMap::new();
        let c = |code: u16, body: &str| {
            classify_response(StatusCode::from_u16(code).unwrap(), &h, body.as_bytes())
        };
        assert_eq!(
            c(201, r#"{"sid":"SM123","status":"queued"}"#),
            CallResult::Accepted {
                provider_id: "SM123".into(),
                replay: false
            }
        );
        let opted = c(
            400,
            r#"{"code":21610,"message":"Attempt to send to unsubscribed recipient","status":400}"#,
        );
        assert!(
            matches!(&opted, CallResult::Permanent { suppress: Some(s), error }
                if s == "opted out (Twilio 21610)" && error.contains("21610")),
            "{opted:?}"
        );
        assert!(matches!(
            c(400, r#"{"code":21211,"message":"invalid"}"#),
            CallResult::Permanent {
                suppress: Some(_),
                ..
            }
        ));
        assert!(matches!(
            c(400, r#"{"code":21606,"message":"from not capable"}"#),
            CallResult::Permanent { suppress: None, .. }
        ));
        assert!(matches!(
            c(400, r#"{"code":20429,"message":"too many"}"#),
            CallResult::NotSent { .. }
        ));
        assert!(matches!(c(429, ""), CallResult::NotSent { .. }));
        assert!(matches!(c(500, ""), CallResult::Ambiguous { .. }));
        assert!(matches!(c(302, ""), CallResult::Ambiguous { .. }));
    }
}

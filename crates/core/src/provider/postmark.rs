//! Postmark: `POST {base}/email` with a JSON body (`From`, `To`, `Subject`, `TextBody`,
//! `HtmlBody`, `Headers` carrying `X-Sendonce-Job`, `Metadata: {"sendonce_job": job}`), auth
//! header `X-Postmark-Server-Token`. Postmark has no idempotency key, but its outbound message
//! search filters by metadata, so `lookup` can tell whether a job in doubt was accepted.
//!
//! Spec: `postmark:?from=news@example.com[&message_stream=outbound]
//! [&base_url=http://127.0.0.1:PORT][&token_file=PATH][&timeout=10s]`. The server token comes
//! from `SENDONCE_POSTMARK_TOKEN` or the file. The campaign's sender, when set, wins.
//!
//! Answers (HTTP status, then the body's `ErrorCode`): 200 with `ErrorCode` 0 accepted
//! (`MessageID`); `ErrorCode` 406 (inactive recipient: bounced, complained or unsubscribed)
//! permanent and suppressed; 300 (invalid email request) and other 4xx permanent; 429 or
//! `ErrorCode` 429 not sent; 405 / 412 / 413 (the account may not send right now: no credits,
//! pending, paused) not sent, so the rows wait instead of failing the whole campaign; 5xx,
//! redirects, timeouts and lost replies ambiguous; a refused connect not sent.

use super::httpapi::{self, Options, Secret};
use super::webhook::{chain, excerpt, public_url};
use super::{CallFuture, CallResult, Capabilities, Lookup, LookupFuture, Message, Provider};
use reqwest::header::{HeaderMap, HeaderValue, ACCEPT};
use reqwest::{StatusCode, Url};
use sendonce_domain::error::Result;
use serde_json::{json, Value};
use std::time::Duration;

/// The public API endpoint.
pub const DEFAULT_BASE_URL: &str = "https://api.postmarkapp.com";
/// Where the server token is read from unless `token_file=` is given.
pub const TOKEN_ENV: &str = "SENDONCE_POSTMARK_TOKEN";
/// The metadata key that carries our job id.
pub const JOB_METADATA: &str = "sendonce_job";
const TOKEN_HEADER: &str = "X-Postmark-Server-Token";

const OPTIONS: &[&str] = &[
    "from",
    "message_stream",
    "base_url",
    "token_file",
    "timeout",
];

/// A Postmark server used to send email.
pub struct Postmark {
    caps: Capabilities,
    client: reqwest::Client,
    /// `.../email` and `.../messages/outbound`.
    send_url: Url,
    search_url: Url,
    token: Secret,
    from: Option<String>,
    message_stream: Option<String>,
    timeout: Duration,
}

impl std::fmt::Debug for Postmark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Postmark")
            .field("url", &self.send_url.as_str())
            .field("token", &self.token)
            .field("from", &self.from)
            .finish_non_exhaustive()
    }
}

impl Postmark {
    /// Build from the part of a spec after `postmark:` (`?options`, the `?` optional).
    pub fn from_spec(rest: &str) -> Result<Self> {
        let query = rest.strip_prefix('?').unwrap_or(rest);
        let o = Options::parse("postmark", query, OPTIONS)?;
        let base = o.base_url(DEFAULT_BASE_URL)?;
        let timeout = o.timeout()?;
        let token = o.secret("token_file", TOKEN_ENV, "server token")?;
        let send_url = httpapi::endpoint(&base, "email");
        Ok(Postmark {
            caps: Capabilities {
                name: format!("postmark:{}", public_url(&send_url)),
                key_window: None,
                call_timeout: timeout,
                can_lookup: true,
            },
            client: httpapi::client(timeout)?,
            search_url: httpapi::endpoint(&base, "messages/outbound"),
            send_url,
            token,
            from: o.get("from").map(str::to_string),
            message_stream: o.get("message_stream").map(str::to_string),
            timeout,
        })
    }

    /// The JSON body of one message. Deterministic: a retry sends the same bytes.
    pub fn payload(&self, msg: &Message) -> Value {
        let mut p = json!({
            "From": msg.from.as_ref().or(self.from.as_ref()),
            "To": msg.to,
            "Subject": msg.subject.as_deref().unwrap_or(""),
            "TextBody": msg.body,
            "Headers": [{"Name": "X-Sendonce-Job", "Value": msg.job_id}],
            "Metadata": {JOB_METADATA: msg.job_id},
        });
        if let Some(reply_to) = &msg.reply_to {
            p["ReplyTo"] = json!(reply_to);
        }
        if let Some(html) = &msg.html {
            p["HtmlBody"] = json!(html);
        }
        if let Some(stream) = &self.message_stream {
            p["MessageStream"] = json!(stream);
        }
        if !msg.attachments.is_empty() {
            p["Attachments"] = msg
                .attachments
                .iter()
                .map(|a| {
                    let mut f = json!({
                        "Name": a.filename,
                        "Content": a.base64(),
                        "ContentType": a.content_type,
                    });
                    if let Some(cid) = &a.content_id {
                        f["ContentID"] = json!(format!("cid:{cid}"));
                    }
                    f
                })
                .collect();
        }
        if let Some(Value::Array(h)) = p.get_mut("Headers") {
            for (name, value) in super::email::unsubscribe_header_pairs(msg.unsubscribe.as_deref())
            {
                h.push(json!({"Name": name, "Value": value}));
            }
        }
        p
    }

    fn token_header(&self) -> Option<HeaderValue> {
        let mut v = HeaderValue::from_str(self.token.expose()).ok()?;
        v.set_sensitive(true);
        Some(v)
    }

    async fn call(&self, msg: &Message) -> CallResult {
        if msg.from.is_none() && self.from.is_none() {
            return CallResult::Permanent {
                error: "postmark: no sender (give the campaign a sender, or from= in the \
                        provider spec)"
                    .into(),
                suppress: None,
            };
        }
        let Some(token) = self.token_header() else {
            return CallResult::NotSent {
                error: "postmark: the server token is not a valid header value".into(),
                retry_after: None,
            };
        };
        let request = self
            .client
            .post(self.send_url.clone())
            .header(TOKEN_HEADER, token)
            .header(ACCEPT, "application/json")
            .timeout(self.timeout)
            .json(&self.payload(msg));
        httpapi::exchange("postmark", request, &self.token, classify_response).await
    }

    /// Search outbound messages for our job id in the metadata.
    async fn find(&self, msg: &Message) -> Lookup {
        let unknown = |reason: String| Lookup::Unknown {
            reason: self.token.redact(reason),
        };
        let Some(token) = self.token_header() else {
            return unknown("postmark: the server token is not a valid header value".into());
        };
        let mut url = self.search_url.clone();
        url.query_pairs_mut()
            .append_pair("count", "1")
            .append_pair("offset", "0")
            .append_pair(&format!("metadata_{JOB_METADATA}"), &msg.job_id);
        let sent = self
            .client
            .get(url)
            .header(TOKEN_HEADER, token)
            .header(ACCEPT, "application/json")
            .timeout(self.timeout)
            .send()
            .await;
        let resp = match sent {
            Ok(r) => r,
            Err(e) => return unknown(format!("postmark search: {}", chain(&e))),
        };
        let status = resp.status();
        let body = match resp.bytes().await {
            Ok(b) => b,
            Err(e) => return unknown(format!("postmark search: {}", chain(&e))),
        };
        if !status.is_success() {
            // Scrubbed before the excerpt is cut from it.
            let body = self
                .token
                .redact(String::from_utf8_lossy(&body).into_owned());
            return unknown(format!(
                "postmark search: HTTP {}{}",
                status.as_u16(),
                excerpt(body.as_bytes())
            ));
        }
        search_result(&httpapi::json_body(&body), &msg.job_id)
    }
}

impl Provider for Postmark {
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }
    fn send<'a>(&'a self, msg: &'a Message) -> CallFuture<'a> {
        Box::pin(self.call(msg))
    }
    fn needs_sender(&self) -> bool {
        self.from.is_none()
    }
    /// Found when a message carries this job id in its metadata. Postmark keeps messages for
    /// its retention period (45 days by default) and indexes them shortly after acceptance, so
    /// ask only about rows whose call ended a while ago.
    fn lookup<'a>(&'a self, msg: &'a Message) -> LookupFuture<'a> {
        Box::pin(self.find(msg))
    }
}

/// Read a search answer (`{"TotalCount": n, "Messages": [{"MessageID", "Metadata"}...]}`).
/// A hit whose metadata names another job means the filter was not applied: that proves
/// nothing either way.
pub fn search_result(v: &Value, job_id: &str) -> Lookup {
    let (Some(total), Some(messages)) = (
        httpapi::int_field(v, "TotalCount"),
        v.get("Messages").and_then(Value::as_array),
    ) else {
        return Lookup::Unknown {
            reason: "postmark search: unexpected answer (no TotalCount or Messages)".into(),
        };
    };
    if total == 0 && messages.is_empty() {
        return Lookup::NotFound;
    }
    let hit = messages.iter().find(|m| {
        m.get("Metadata")
            .and_then(|md| md.get(JOB_METADATA))
            .and_then(Value::as_str)
            == Some(job_id)
    });
    match hit.and_then(|m| httpapi::str_field(m, "MessageID")) {
        Some(id) => Lookup::Found {
            provider_id: id.to_string(),
        },
        None => Lookup::Unknown {
            reason: format!(
                "postmark search: {total} result(s), none with {JOB_METADATA}={job_id:?} in its \
                 metadata"
            ),
        },
    }
}

/// What a `POST /email` answer means. Error bodies look like
/// `{"ErrorCode": 406, "Message": "..."}`.
pub fn classify_response(status: StatusCode, headers: &HeaderMap, body: &[u8]) -> CallResult {
    let http = status.as_u16();
    let v = httpapi::json_body(body);
    let code = httpapi::int_field(&v, "ErrorCode");
    if status.is_success() && code.unwrap_or(0) == 0 {
        return httpapi::accepted(&v, "MessageID");
    }
    let detail = match httpapi::str_field(&v, "Message") {
        Some(m) => excerpt(m.as_bytes()),
        None => excerpt(body),
    };
    let what = match code {
        Some(c) => format!("postmark: HTTP {http}, ErrorCode {c}{detail}"),
        None => format!("postmark: HTTP {http}{detail}"),
    };
    let not_sent = |retry_after| CallResult::NotSent {
        error: what.clone(),
        retry_after,
    };
    match (http, code) {
        (429, _) | (_, Some(429)) => not_sent(httpapi::retry_after(headers)),
        (500..=599, _) | (300..=399, _) => CallResult::Ambiguous { error: what },
        (_, Some(406)) => CallResult::Permanent {
            error: what,
            suppress: Some("inactive recipient (Postmark 406)".into()),
        },
        // The account, not the message: wait instead of failing every row.
        (_, Some(405 | 412 | 413)) => not_sent(None),
        (400..=499, _) => CallResult::Permanent {
            error: what,
            suppress: None,
        },
        // A 2xx with a non-zero ErrorCode, or anything unexpected.
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
            c(
                200,
                r#"{"To":"a@b.c","SubmittedAt":"2014-02-17T07:25:01-05:00","MessageID":"0a12","ErrorCode":0,"Message":"OK"}"#
            ),
            CallResult::Accepted {
                provider_id: "0a12".into(),
                replay: false
            }
        );
        assert!(matches!(
            c(422, r#"{"ErrorCode":406,"Message":"inactive"}"#),
            CallResult::Permanent { suppress: Some(s), .. } if s.contains("406")
        ));
        assert!(matches!(
            c(
                422,
                r#"{"ErrorCode":300,"Message":"Invalid email request"}"#
            ),
            CallResult::Permanent { suppress: None, .. }
        ));
        assert!(matches!(
            c(401, r#"{"ErrorCode":10,"Message":"bad token"}"#),
            CallResult::Permanent { .. }
        ));
        assert!(matches!(
            c(422, r#"{"ErrorCode":405,"Message":"no credits"}"#),
            CallResult::NotSent { .. }
        ));
        assert!(matches!(c(429, ""), CallResult::NotSent { .. }));
        assert!(matches!(c(500, ""), CallResult::Ambiguous { .. }));
        assert!(matches!(c(503, ""), CallResult::Ambiguous { .. }));
        assert!(matches!(
            c(200, r#"{"ErrorCode":300}"#),
            CallResult::Ambiguous { .. }
        ));
    }

    #[test]
    fn search_answers() {
        let job = "campaign:1:sub:2";
        assert_eq!(
            search_result(&json!({"TotalCount": 0, "Messages": []}), job),
            Lookup::NotFound
        );
        assert_eq!(
            search_result(
                &json!({"TotalCount": 1, "Messages": [
                    {"MessageID": "m-1", "Metadata": {"sendonce_job": job}}]}),
                job
            ),
            Lookup::Found {
                provider_id: "m-1".into()
            }
        );
        // The server ignored the filter: a message of another job proves nothing.
        assert!(matches!(
            search_result(
                &json!({"TotalCount": 9, "Messages": [
                    {"MessageID": "m-2", "Metadata": {"sendonce_job": "other"}}]}),
                job
            ),
            Lookup::Unknown { .. }
        ));
        assert!(matches!(
            search_result(&json!({"error": "x"}), job),
            Lookup::Unknown { .. }
        ));
    }
}

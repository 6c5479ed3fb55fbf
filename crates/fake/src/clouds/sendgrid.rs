//! SendGrid v3 `mail/send` (`POST /v3/mail/send`, what the `sendgrid` SDKs call): JSON with
//! `personalizations`, bearer auth; `202` with an empty body and the id in `X-Message-Id`, or
//! `{"errors": [{"message", "field", "help"}]}`. Each personalization is one message to its
//! recipients (its own subject, headers and `custom_args` over the request's), stored as one
//! delivery; SendGrid has no idempotency key.

use super::super::apis::{
    faults, files, header, read, record, string_map, tenant, Answer, Answers, Faults, FileFields,
    Who,
};
use super::super::journal::{IdStyle, Request};
use super::super::server::{reply, Body, Shared};
use super::{email_object, email_objects, job_of};
use hyper::body::{Bytes, Incoming};
use hyper::header::HeaderValue;
use hyper::{Request as HttpRequest, Response, StatusCode};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

pub(super) const PATH: &str = "/v3/mail/send";

/// SendGrid's limits: personalizations per request, recipients per personalization.
const MAX_PERSONALIZATIONS: usize = 1000;
const MAX_RECIPIENTS: usize = 1000;

const SENDGRID_FILES: FileFields = FileFields {
    filename: "filename",
    content: "content",
    content_type: "type",
    content_id: &["content_id"],
    type_required: false,
};

const HELP: &str = "http://sendgrid.com/docs/API_Reference/Web_API_v3/Mail/errors.html";

/// SendGrid's error body: one error naming its field.
fn error(status: StatusCode, field: Option<&str>, message: &str) -> Response<Body> {
    reply(
        status,
        json!({"errors": [{"message": message, "field": field, "help": field.map(|f| format!("{HELP}#message.{f}"))}]}),
    )
}

/// `POST /v3/mail/send`.
pub(super) async fn send(shared: &Shared, req: HttpRequest<Incoming>) -> Answer {
    let f = faults(shared, "sendgrid").await;
    let (parts, body) = match read(shared, req).await {
        Ok(x) => x,
        Err(e) => return Ok(e.apply(error(e.status, None, &e.message))),
    };
    let bearer = header(&parts, "authorization")
        .and_then(|v| v.split_once(' '))
        .filter(|(s, t)| s.eq_ignore_ascii_case("bearer") && !t.trim().is_empty());
    if bearer.is_none() {
        return Ok(error(
            StatusCode::UNAUTHORIZED,
            None,
            "The provided authorization grant is invalid, expired, or revoked",
        ));
    }
    let mut requests = match parse(&body) {
        Ok(r) => r,
        Err((field, message)) => return Ok(error(StatusCode::BAD_REQUEST, field, &message)),
    };
    let key = bearer.map_or("", |(_, t)| t.trim());
    for r in &mut requests {
        r.tenant = tenant(&parts, Who::Secret(key));
    }
    deliver(shared, &f, requests).await
}

/// Each personalization through the journal; the answer carries the first one's id. An
/// injected lost reply comes after the last is stored (the request is accepted whole).
async fn deliver(shared: &Shared, f: &Faults, requests: Vec<Request>) -> Answer {
    let (mut first, last) = (None, requests.len().saturating_sub(1));
    for (i, request) in requests.into_iter().enumerate() {
        let answers = Answers {
            ok: accepted,
            conflict: || {
                error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    None,
                    "unexpected key conflict",
                )
            },
            fail: |status: StatusCode, message: &str| error(status, None, message),
        };
        let faults = Faults {
            fail: f.fail,
            refuse: f.refuse,
            drop: f.drop && i == last,
            hang: f.hang.filter(|_| i == last),
        };
        let answer = record(shared, &faults, request, None, answers).await?;
        if answer.status() != StatusCode::ACCEPTED {
            return Ok(answer);
        }
        first.get_or_insert(answer);
    }
    Ok(first.unwrap_or_else(|| accepted("")))
}

/// `202 Accepted`, an empty body, the id in `X-Message-Id`.
fn accepted(id: &str) -> Response<Body> {
    let mut r = Response::new(http_body_util::Full::new(Bytes::new()));
    *r.status_mut() = StatusCode::ACCEPTED;
    if let Ok(v) = HeaderValue::from_str(id) {
        r.headers_mut().insert("x-message-id", v);
    }
    r
}

type Refusal = (Option<&'static str>, String);

/// The request's messages, one per personalization, checked as SendGrid checks them.
fn parse(body: &[u8]) -> Result<Vec<Request>, Refusal> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        (
            None,
            format!("Bad Request: the body is not valid JSON: {e}"),
        )
    })?;
    let from = v.get("from").ok_or((
        Some("from"),
        "The from object must be provided for every email send. It is an object that requires \
         the email parameter, but may also contain a name parameter."
            .to_string(),
    ))?;
    let from = email_object(from, "from").map_err(|m| (Some("from"), m))?;
    let (text, html) = content(&v)?;
    let attachments =
        files(v.get("attachments"), &SENDGRID_FILES).map_err(|m| (Some("attachments"), m))?;
    let headers = string_map(v.get("headers"), "headers").map_err(|m| (Some("headers"), m))?;
    let args =
        string_map(v.get("custom_args"), "custom_args").map_err(|m| (Some("custom_args"), m))?;
    let list = match v.get("personalizations") {
        Some(Value::Array(l)) if !l.is_empty() => l,
        _ => {
            return Err((
                Some("personalizations"),
                "The personalizations field is required and must have at least one \
                 personalization."
                    .into(),
            ))
        }
    };
    if list.len() > MAX_PERSONALIZATIONS {
        return Err((
            Some("personalizations"),
            format!(
                "You may not have more than {MAX_PERSONALIZATIONS} personalizations per request."
            ),
        ));
    }
    let base = Request {
        job_id: String::new(),
        idempotency_key: String::new(),
        channel: "email".into(),
        from: Some(from),
        to: String::new(),
        subject: v.get("subject").and_then(Value::as_str).map(str::to_string),
        body: text.clone().or_else(|| html.clone()).unwrap_or_default(),
        html,
        metadata: None,
        api: Some("sendgrid"),
        headers: None,
        id_style: IdStyle::SendGrid,
        raw: None,
        envelope: None,
        attachments,
        tenant: None,
    };
    list.iter()
        .enumerate()
        .map(|(i, p)| personalization(&base, p, i, (&headers, &args)))
        .collect()
}

/// `content`: `[{"type", "value"}]`, at least one, text/plain first when present.
fn content(v: &Value) -> Result<(Option<String>, Option<String>), Refusal> {
    let field = Some("content");
    let list = match v.get("content") {
        Some(Value::Array(l)) if !l.is_empty() => l,
        _ => {
            return Err((
                field,
                "Unless a valid template_id is provided, the content parameter is required. \
                 There must be at least one defined content block."
                    .into(),
            ))
        }
    };
    let (mut text, mut html) = (None, None);
    for (i, c) in list.iter().enumerate() {
        let kind = c["type"].as_str().unwrap_or_default();
        let value = c["value"].as_str().filter(|s| !s.is_empty()).ok_or((
            field,
            format!("content[{i}]: the content value must be a string at least one character in length."),
        ))?;
        match kind {
            "text/plain" if i == 0 => text = Some(value.to_string()),
            "text/plain" => {
                return Err((
                    field,
                    "If present, text/plain content must be first, followed by any other content."
                        .into(),
                ))
            }
            "text/html" => html = Some(value.to_string()),
            "" => return Err((field, format!("content[{i}]: a content type is required."))),
            _ => {}
        }
    }
    Ok((text, html))
}

/// One personalization's message: its recipients, subject, headers and arguments over the
/// request's.
fn personalization(
    base: &Request,
    p: &Value,
    i: usize,
    (headers, args): (&BTreeMap<String, String>, &BTreeMap<String, String>),
) -> Result<Request, Refusal> {
    let field = Some("personalizations");
    let at = |m: String| (field, format!("personalizations[{i}]: {m}"));
    let mut to = email_objects(p.get("to"), "to").map_err(at)?;
    if to.is_empty() {
        return Err(at(
            "the to array is required and must have at least one email".into(),
        ));
    }
    to.extend(email_objects(p.get("cc"), "cc").map_err(at)?);
    to.extend(email_objects(p.get("bcc"), "bcc").map_err(at)?);
    if to.len() > MAX_RECIPIENTS {
        return Err(at(format!("at most {MAX_RECIPIENTS} recipients")));
    }
    let subject = p
        .get("subject")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| base.subject.clone())
        .filter(|s| !s.is_empty())
        .ok_or((
            Some("subject"),
            "The subject is required. You can get around this requirement if you use a template \
             with a subject defined or if every personalization has a subject defined."
                .to_string(),
        ))?;
    let mut h = headers.clone();
    h.extend(string_map(p.get("headers"), "headers").map_err(at)?);
    let mut a = args.clone();
    a.extend(string_map(p.get("custom_args"), "custom_args").map_err(at)?);
    let job = job_of(&h).or_else(|| a.get("sendonce_job").cloned());
    let metadata: Map<String, Value> = a.into_iter().map(|(k, v)| (k, json!(v))).collect();
    Ok(Request {
        job_id: job.unwrap_or_default(),
        to: to.join(", "),
        subject: Some(subject),
        headers: (!h.is_empty()).then_some(h),
        metadata: (!metadata.is_empty()).then_some(Value::Object(metadata)),
        ..base.clone()
    })
}

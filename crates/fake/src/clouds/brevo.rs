//! Brevo transactional email (`POST /v3/smtp/email`, what the `brevo` SDKs call): JSON with
//! `sender`, `to`, `subject`, `htmlContent`/`textContent`, header `api-key`; `201` with
//! `{"messageId": "<...@smtp-relay.mailin.fr>"}`, or `{"code", "message"}` errors. The
//! `idempotencyKey` of the message's `headers` is honoured as Brevo documents it: a repeat
//! gets the first message's id and is not sent again. A repeat with another payload, which
//! Brevo's documentation does not describe, is refused here with `400 duplicate_request`.

use super::super::apis::{
    faults, files, header, read, record, tenant, Answer, Answers, FileFields, Who,
};
use super::super::journal::{IdStyle, Request};
use super::super::server::{reply, Body, Shared};
use super::{email_object, email_objects, job_of};
use hyper::body::Incoming;
use hyper::{Request as HttpRequest, Response, StatusCode};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

pub(super) const PATH: &str = "/v3/smtp/email";

/// The domain of Brevo's message ids.
const RELAY: &str = "smtp-relay.mailin.fr";

const BREVO_FILES: FileFields = FileFields {
    filename: "name",
    content: "content",
    content_type: "contentType",
    content_id: &[],
    type_required: false,
};

/// A refusal's answer, boxed: it travels in `Err`.
type Refusal = Box<Response<Body>>;

fn error(status: StatusCode, code: &str, message: &str) -> Refusal {
    Box::new(reply(status, json!({"code": code, "message": message})))
}

fn missing(what: &str) -> Refusal {
    error(
        StatusCode::BAD_REQUEST,
        "missing_parameter",
        &format!("{what} is missing"),
    )
}

fn invalid(message: &str) -> Refusal {
    error(StatusCode::BAD_REQUEST, "invalid_parameter", message)
}

/// `POST /v3/smtp/email`.
pub(super) async fn send(shared: &Shared, req: HttpRequest<Incoming>) -> Answer {
    let f = faults(shared, "brevo").await;
    let (parts, body) = match read(shared, req).await {
        Ok(x) => x,
        Err(e) => return Ok(e.apply(*invalid(&e.message))),
    };
    if header(&parts, "api-key").is_none() {
        return Ok(*error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "Key not found",
        ));
    }
    let mut request = match parse(&body) {
        Ok(r) => r,
        Err(refused) => return Ok(*refused),
    };
    request.tenant = tenant(
        &parts,
        Who::Secret(header(&parts, "api-key").unwrap_or_default()),
    );
    let answers = Answers {
        ok: |id: &str| reply(StatusCode::CREATED, json!({"messageId": id})),
        conflict: || {
            *error(
                StatusCode::BAD_REQUEST,
                "duplicate_request",
                "this idempotencyKey was already used with another request",
            )
        },
        fail: |status: StatusCode, message: &str| *error(status, "internal_error", message),
    };
    record(shared, &f, request, None, answers).await
}

/// The body checked as Brevo checks it; templates and message versions are refused (the
/// offline fake keeps no templates).
fn parse(body: &[u8]) -> Result<Request, Refusal> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| invalid(&format!("the body is not valid JSON: {e}")))?;
    for unsupported in ["templateId", "messageVersions"] {
        if v.get(unsupported).is_some_and(|x| !x.is_null()) {
            return Err(invalid(&format!(
                "{unsupported} is not supported by the offline fake: send the content itself"
            )));
        }
    }
    let sender = v.get("sender").ok_or_else(|| missing("sender"))?;
    let from = email_object(sender, "sender").map_err(|m| invalid(&m))?;
    let mut to = email_objects(v.get("to"), "to").map_err(|m| invalid(&m))?;
    if to.is_empty() {
        return Err(missing("to"));
    }
    to.extend(email_objects(v.get("cc"), "cc").map_err(|m| invalid(&m))?);
    to.extend(email_objects(v.get("bcc"), "bcc").map_err(|m| invalid(&m))?);
    let text = |k: &str| v.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
    let subject = text("subject").ok_or_else(|| missing("subject"))?;
    let (plain, html) = (text("textContent"), text("htmlContent"));
    let Some(content) = plain.or(html) else {
        return Err(missing("htmlContent or textContent"));
    };
    if let Some(list) = v.get("attachment").and_then(Value::as_array) {
        if list.iter().any(|a| a.get("url").is_some()) {
            return Err(invalid(
                "attachment url: a remote file cannot be fetched by the offline fake; send content",
            ));
        }
    }
    let attachments = files(v.get("attachment"), &BREVO_FILES).map_err(|m| invalid(&m))?;
    let headers = headers(v.get("headers")).map_err(|m| invalid(&m))?;
    let key = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("idempotencykey"))
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let mut metadata = Map::new();
    for k in ["params", "tags"] {
        if let Some(x) = v.get(k).filter(|x| !x.is_null()) {
            metadata.insert(k.to_string(), x.clone());
        }
    }
    Ok(Request {
        job_id: job_of(&headers)
            .or_else(|| mailin_job(&headers))
            .unwrap_or_default(),
        idempotency_key: key,
        channel: "email".into(),
        from: Some(from),
        to: to.join(", "),
        subject: Some(subject.to_string()),
        body: content.to_string(),
        html: html.map(str::to_string),
        metadata: (!metadata.is_empty()).then_some(Value::Object(metadata)),
        api: Some("brevo"),
        headers: (!headers.is_empty()).then_some(headers),
        id_style: IdStyle::MessageId(RELAY.into()),
        raw: None,
        envelope: None,
        attachments,
        tenant: None,
    })
}

/// `headers`: an object whose values are strings or numbers (Brevo takes both).
fn headers(v: Option<&Value>) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    match v {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            for (k, val) in m {
                let s = match val {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    _ => return Err(format!("header {k:?} must be a string")),
                };
                out.insert(k.clone(), s);
            }
        }
        Some(_) => return Err("headers must be an object".into()),
    }
    Ok(out)
}

/// The job in Brevo's custom header (`X-Mailin-custom: sendonce_job:JOB`, which Brevo sends
/// back in its webhooks), when the sender used it instead of `X-Sendonce-Job`.
fn mailin_job(headers: &BTreeMap<String, String>) -> Option<String> {
    let custom = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("x-mailin-custom"))?
        .1;
    let job = custom
        .trim()
        .strip_prefix(sendonce_core::provider::bounces::BREVO_JOB_PREFIX)?;
    (!job.is_empty()).then(|| job.to_string())
}

//! Mailgun `messages` (`POST /v3/{domain}/messages`, what the Mailgun SDKs call): a form
//! (`multipart/form-data` with files, or URL-encoded), basic auth `api:KEY`; `200` with
//! `{"id": "<...@domain>", "message": "Queued. Thank you."}`, or `{"message"}` errors (`401`
//! is a plain `Forbidden`). `h:NAME` fields are headers, `v:NAME` variables (kept as the
//! delivery's metadata), `attachment` and `inline` file parts its files; no idempotency key.

use super::super::apis::{basic_auth, faults, read, record, tenant, Answer, Answers, Who};
use super::super::journal::{IdStyle, Request};
use super::super::server::{reply, Body, Shared};
use super::{checked, job_of};
use base64::Engine;
use hyper::body::{Bytes, Incoming};
use hyper::http::request::Parts;
use hyper::{Request as HttpRequest, Response, StatusCode};
use sendonce_core::provider::deliverylog::LoggedAttachment;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// `/v3/{domain}/messages` → the domain.
pub(super) fn domain_of(path: &str) -> Option<String> {
    let rest = path.strip_prefix("/v3/")?.strip_suffix("/messages")?;
    let ok = !rest.is_empty()
        && rest
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
    ok.then(|| rest.to_string())
}

fn error(status: StatusCode, message: &str) -> Response<Body> {
    reply(status, json!({"message": message}))
}

fn forbidden() -> Response<Body> {
    let mut r = Response::new(http_body_util::Full::new(Bytes::from_static(b"Forbidden")));
    *r.status_mut() = StatusCode::UNAUTHORIZED;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// `POST /v3/{domain}/messages`.
pub(super) async fn send(shared: &Shared, req: HttpRequest<Incoming>, domain: String) -> Answer {
    let f = faults(shared, "mailgun").await;
    let (parts, body) = match read(shared, req).await {
        Ok(x) => x,
        Err(e) => return Ok(e.apply(error(e.status, &e.message))),
    };
    let key = match basic_auth(&parts) {
        Some((user, key)) if user == "api" && !key.is_empty() => key,
        _ => return Ok(forbidden()),
    };
    let form = match fields(&parts, body).await {
        Ok(f) => f,
        Err(m) => return Ok(error(StatusCode::BAD_REQUEST, &m)),
    };
    let mut request = match parse(form, &domain) {
        Ok(r) => r,
        Err(m) => return Ok(error(StatusCode::BAD_REQUEST, &m)),
    };
    request.tenant = tenant(&parts, Who::Secret(&key));
    let answers = Answers {
        ok: |id: &str| {
            reply(
                StatusCode::OK,
                json!({"id": id, "message": "Queued. Thank you."}),
            )
        },
        conflict: || error(StatusCode::INTERNAL_SERVER_ERROR, "unexpected key conflict"),
        fail: |status: StatusCode, message: &str| error(status, message),
    };
    record(shared, &f, request, None, answers).await
}

/// A form's fields in order (a name may repeat) and its files.
#[derive(Default)]
struct Form {
    fields: Vec<(String, String)>,
    files: Vec<LoggedAttachment>,
}

impl Form {
    fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.fields
            .iter()
            .filter(move |(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
    fn first<'a>(&'a self, name: &'a str) -> Option<&'a str> {
        self.all(name).find(|v| !v.trim().is_empty())
    }
}

/// The body as a form: multipart (with files) or URL-encoded.
async fn fields(parts: &Parts, body: Bytes) -> Result<Form, String> {
    let ct = parts
        .headers
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if ct.starts_with("application/x-www-form-urlencoded") {
        let fields = form_urlencoded::parse(&body).into_owned().collect();
        return Ok(Form {
            fields,
            files: Vec::new(),
        });
    }
    let boundary = multer::parse_boundary(ct)
        .map_err(|_| "send multipart/form-data or application/x-www-form-urlencoded".to_string())?;
    let stream = futures_util::stream::once(std::future::ready(Ok::<_, std::io::Error>(body)));
    let mut m = multer::Multipart::new(stream, boundary);
    let mut form = Form::default();
    while let Some(field) = m.next_field().await.map_err(|e| format!("bad form: {e}"))? {
        let name = field.name().unwrap_or_default().to_string();
        let file = field.file_name().map(str::to_string);
        let ctype = field.content_type().map(|m| m.to_string());
        let bytes = field.bytes().await.map_err(|e| format!("bad form: {e}"))?;
        match (name.as_str(), file) {
            ("attachment" | "inline", Some(filename)) => form.files.push(LoggedAttachment {
                content_id: (name == "inline").then(|| filename.clone()),
                filename,
                content_type: ctype,
                content: base64::engine::general_purpose::STANDARD.encode(&bytes),
            }),
            _ => {
                let text = String::from_utf8(bytes.to_vec())
                    .map_err(|_| format!("field {name:?} is not UTF-8"))?;
                form.fields.push((name, text));
            }
        }
    }
    Ok(form)
}

/// The form checked as Mailgun checks it.
fn parse(form: Form, domain: &str) -> Result<Request, String> {
    let from = form.first("from").ok_or("from parameter is missing")?;
    let from = checked(from, "from")?;
    let mut to = Vec::new();
    for name in ["to", "cc", "bcc"] {
        for v in form.all(name) {
            for a in v.split(',').filter(|a| !a.trim().is_empty()) {
                to.push(checked(a, &format!("'{name}' parameter"))?);
            }
        }
    }
    if form.first("to").is_none() {
        return Err("to parameter is missing".into());
    }
    let subject = form
        .first("subject")
        .ok_or("subject parameter is missing")?;
    let (text, html) = (form.first("text"), form.first("html"));
    let Some(body) = text.or(html) else {
        return Err(
            "Need at least one of 'text', 'html' or 'template' parameters specified".into(),
        );
    };
    let mut headers = BTreeMap::new();
    let mut vars = Map::new();
    for (k, v) in &form.fields {
        if let Some(h) = k.strip_prefix("h:") {
            headers.insert(h.to_string(), v.clone());
        } else if let Some(n) = k.strip_prefix("v:") {
            vars.insert(n.to_string(), json!(v));
        }
    }
    let job = job_of(&headers).or_else(|| {
        vars.get("sendonce_job")
            .and_then(Value::as_str)
            .map(str::to_string)
    });
    Ok(Request {
        job_id: job.unwrap_or_default(),
        idempotency_key: String::new(),
        channel: "email".into(),
        from: Some(from),
        to: to.join(", "),
        subject: Some(subject.to_string()),
        body: body.to_string(),
        html: html.map(str::to_string),
        metadata: (!vars.is_empty()).then_some(Value::Object(vars)),
        api: Some("mailgun"),
        headers: (!headers.is_empty()).then_some(headers),
        id_style: IdStyle::MessageId(domain.to_string()),
        raw: None,
        envelope: None,
        attachments: form.files,
        tenant: None,
    })
}

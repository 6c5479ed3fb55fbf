//! The fake provider's provider-compatible endpoints, so a real provider configuration can be
//! tested offline by pointing its `base_url` here:
//!
//! - Twilio: `POST /2010-04-01/Accounts/{sid}/Messages.json` (form body, basic auth with the
//!   account SID and any non-empty token); `201` with a Message resource (`sid` `SM...`), or
//!   `{"code", "message", "more_info", "status"}` errors: 20003 (auth), 21602 / 21603 / 21604
//!   (missing body / sender / recipient), 21211 (not E.164), 21609 (bad `StatusCallback`),
//!   21610 (recipient in `--twilio-opted-out`).
//! - Resend: `POST /emails` (JSON, bearer auth); `Idempotency-Key` honoured like `/send`
//!   (replay with the first id, `409 invalid_idempotent_request` on another payload); errors
//!   are `{"statusCode", "name", "message"}`.
//! - Postmark: `POST /email` (JSON, `X-Postmark-Server-Token`); answers `{"To",
//!   "SubmittedAt", "MessageID", "ErrorCode": 0, "Message": "OK"}` or `{"ErrorCode",
//!   "Message"}` errors; `GET /messages/outbound?count=&offset=[&recipient=][&metadata_KEY=]`
//!   searches what was accepted, newest first.
//!
//! Every accepted send goes through the same journal as `/send` (logged and fsynced before
//! the answer) with the job id taken from `X-Sendonce-Job`, Postmark `Metadata` or the
//! `job_id` of Twilio's `StatusCallback`, and gets the same injected faults (latency,
//! `--fail-rate` answered in the provider's error format and not recorded,
//! `--drop-after-accept-rate`). Credentials are checked for presence only: the fake knows no
//! real tokens.

use super::guard::{read_body, BodyError};
use super::journal::{IdStyle, Request, Verdict};
use super::server::{reply, Body, DropReply, Shared};
pub(super) use super::tenants::{bad_tenant, tenant, tenant_ok, Who};
use base64::Engine;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, AUTHORIZATION, WWW_AUTHENTICATE};
use hyper::http::request::Parts;
use hyper::{Request as HttpRequest, Response, StatusCode};
use sendonce_core::provider::deliverylog::DeliveryLine;
use sendonce_core::provider::deliverylog::LoggedAttachment;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

pub(super) type Answer = std::result::Result<Response<Body>, DropReply>;

/// The injected faults of one request; the latency (and any `--chaos` delay) has already been
/// slept.
#[derive(Default)]
pub(super) struct Faults {
    pub fail: bool,
    pub drop: bool,
    /// A `--chaos` refusal: the status and the `Retry-After` seconds.
    pub refuse: Option<(StatusCode, Option<u64>)>,
    /// A `--chaos` hang after accepting: the silence before the connection is closed.
    pub hang: Option<Duration>,
}

/// Draw the faults the same way `/send` does (three numbers per request), then `api`'s
/// `--chaos` rules, and sleep the latency and the rules' delay.
pub(super) async fn faults(shared: &Shared, api: &str) -> Faults {
    let cfg = &shared.config;
    let [lat, fail, drop] = shared.rng.unit::<3>();
    let chaos = shared.chaos.draw(api);
    let mut delay = chaos.delay;
    if let Some((lo, hi)) = cfg.latency {
        delay += lo + (hi - lo).mul_f64(lat);
    }
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    Faults {
        fail: fail < cfg.fail_rate,
        drop: drop < cfg.drop_after_accept_rate,
        refuse: chaos.refuse,
        hang: chaos.hang,
    }
}

/// A `--chaos` refusal in the API's error format, with its `Retry-After`.
pub(super) fn chaos_refusal(
    (status, retry_after): (StatusCode, Option<u64>),
    fail: impl Fn(StatusCode, &str) -> Response<Body>,
) -> Response<Body> {
    let mut r = fail(status, "injected by a --chaos rule: not recorded");
    if let Some(s) = retry_after {
        r.headers_mut()
            .insert(hyper::header::RETRY_AFTER, HeaderValue::from(s));
    }
    r
}

/// After a message is stored: a `--chaos` hang (silence, then the connection closed) or a
/// dropped reply, or the answer.
pub(super) async fn after_accept(f: &Faults) -> Result<(), DropReply> {
    if let Some(hold) = f.hang {
        tokio::time::sleep(hold).await;
        return Err(DropReply);
    }
    if f.drop {
        // Recorded and fsynced; the client never hears about it.
        return Err(DropReply);
    }
    Ok(())
}

/// The request's head and body (bounded in size and time: `guard::read_body`).
pub(super) async fn read(
    shared: &Shared,
    req: HttpRequest<Incoming>,
) -> Result<(Parts, Bytes), BodyError> {
    let (parts, body) = req.into_parts();
    Ok((parts, read_body(body, &shared.config.limits).await?))
}

/// How each API words the answers of the shared tail.
pub(super) struct Answers<Ok, Conflict, Fail>
where
    Ok: FnOnce(&str) -> Response<Body>,
    Conflict: FnOnce() -> Response<Body>,
    Fail: Fn(StatusCode, &str) -> Response<Body>,
{
    pub ok: Ok,
    pub conflict: Conflict,
    /// An error answer (injected failure, journal failure).
    pub fail: Fail,
}

/// The tail every send endpoint shares: injected failure, journal (fsync), dropped reply.
pub(super) async fn record<O, C, F>(
    shared: &Shared,
    f: &Faults,
    request: Request,
    token: Option<String>,
    a: Answers<O, C, F>,
) -> Answer
where
    O: FnOnce(&str) -> Response<Body>,
    C: FnOnce() -> Response<Body>,
    F: Fn(StatusCode, &str) -> Response<Body>,
{
    if let Some(t) = request.tenant.as_deref().filter(|t| !tenant_ok(t)) {
        return Ok((a.fail)(StatusCode::BAD_REQUEST, &bad_tenant(t)));
    }
    if let Some(refusal) = f.refuse {
        return Ok(chaos_refusal(refusal, a.fail));
    }
    if f.fail {
        return Ok((a.fail)(
            StatusCode::SERVICE_UNAVAILABLE,
            "injected failure (--fail-rate): not recorded",
        ));
    }
    let after = super::callbacks::after_journal(
        shared.config.callbacks.clone(),
        super::callbacks::Accepted::of(&request, token),
    );
    match shared.journal.submit_then(request, after).await {
        Ok(Verdict::Delivered { message_id, .. }) => {
            after_accept(f).await?;
            Ok((a.ok)(&message_id))
        }
        Ok(Verdict::Conflict) => Ok((a.conflict)()),
        Err(e) => Ok((a.fail)(StatusCode::INTERNAL_SERVER_ERROR, &e)),
    }
}

pub(super) fn header<'a>(parts: &'a Parts, name: &str) -> Option<&'a str> {
    parts
        .headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// Now, in RFC 3339 UTC with milliseconds.
pub(super) fn now_rfc3339() -> String {
    rfc3339(sendonce_domain::clock::now_ms())
}

/// RFC 3339 UTC with milliseconds.
fn rfc3339(ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

/// RFC 2822, as Twilio writes dates: `Tue, 26 Jul 2016 12:50:07 +0000`.
fn rfc2822(ms: i64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let secs = ms.max(0) / 1000;
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{}, {:02} {} {} {:02}:{:02}:{:02} +0000",
        DAYS[(days % 7) as usize],
        day,
        MONTHS[(month - 1) as usize],
        year,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

// ---------------------------------------------------------------------------------------------
// Twilio

/// The account SID of a Messages API path, if `path` is one.
pub(super) fn twilio_account(path: &str) -> Option<String> {
    let sid = path
        .strip_prefix("/2010-04-01/Accounts/")?
        .strip_suffix("/Messages.json")?;
    (!sid.is_empty() && sid.chars().all(|c| c.is_ascii_alphanumeric())).then(|| sid.to_string())
}

fn twilio_error(status: StatusCode, code: i64, message: &str) -> Response<Body> {
    let mut r = reply(
        status,
        json!({
            "code": code,
            "message": message,
            "more_info": format!("https://www.twilio.com/docs/errors/{code}"),
            "status": status.as_u16(),
        }),
    );
    if status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(
            WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"Twilio API\""),
        );
    }
    r
}

/// `(user, password)` of a basic `Authorization` header.
pub(super) fn basic_auth(parts: &Parts) -> Option<(String, String)> {
    let v = parts.headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, encoded) = v.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (user, pass) = text.split_once(':')?;
    Some((user.to_string(), pass.to_string()))
}

/// `POST /2010-04-01/Accounts/{sid}/Messages.json`.
pub(super) async fn twilio(shared: &Shared, req: HttpRequest<Incoming>, sid: String) -> Answer {
    let f = faults(shared, "twilio").await;
    let (parts, body) = match read(shared, req).await {
        Ok(x) => x,
        Err(e) => return Ok(e.apply(twilio_error(e.status, 20001, &e.message))),
    };
    let token = match basic_auth(&parts) {
        Some((user, pass)) if user == sid && !pass.is_empty() => pass,
        _ => {
            return Ok(twilio_error(
                StatusCode::UNAUTHORIZED,
                20003,
                "Authenticate",
            ))
        }
    };
    let TwilioSend {
        mut request,
        from,
        service,
    } = match parse_twilio(&body, &sid, &shared.config.twilio_opted_out) {
        Ok(s) => s,
        Err((code, message)) => return Ok(twilio_error(StatusCode::BAD_REQUEST, code, &message)),
    };
    request.tenant = tenant(&parts, Who::Name(&sid));
    let (to, text) = (request.to.clone(), request.body.clone());
    let answers = Answers {
        ok: |id: &str| twilio_message(&sid, id, &to, &text, &from, &service),
        conflict: || {
            twilio_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                20500,
                "unexpected key conflict",
            )
        },
        fail: |status: StatusCode, message: &str| {
            let code = 20000 + i64::from(status.as_u16());
            twilio_error(status, code, message)
        },
    };
    record(shared, &f, request, Some(token), answers).await
}

/// A Twilio send that passed the checks: the journal request, and the sender fields the
/// answer echoes.
struct TwilioSend {
    request: Request,
    from: Option<String>,
    service: Option<String>,
}

/// The form body of a Twilio send, checked like Twilio does; a refusal is `(code, message)`
/// for a 400.
fn parse_twilio(body: &[u8], sid: &str, opted_out: &[String]) -> Result<TwilioSend, (i64, String)> {
    let form: Vec<(String, String)> = form_urlencoded::parse(body).into_owned().collect();
    let field = |name: &str| {
        form.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let bad = |code: i64, message: &str| Err((code, message.to_string()));
    let Some(to) = field("To") else {
        return bad(21604, "A 'To' phone number is required.");
    };
    let Some(text) = field("Body") else {
        return bad(21602, "Message body is required.");
    };
    let from = field("From");
    let service = field("MessagingServiceSid");
    if from.is_none() && service.is_none() {
        return bad(21603, "A 'From' phone number is required.");
    }
    if !sendonce_domain::sms::is_e164(&to) {
        return bad(
            21211,
            &format!("The 'To' number {to} is not a valid phone number."),
        );
    }
    if opted_out.contains(&to) {
        return bad(21610, "Attempt to send to unsubscribed recipient");
    }
    let callback = field("StatusCallback");
    let job_id = match &callback {
        None => String::new(),
        Some(cb) => match reqwest::Url::parse(cb) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => u
                .query_pairs()
                .find(|(k, _)| k == "job_id")
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default(),
            _ => return bad(21609, "The StatusCallback URL is not a valid URL."),
        },
    };
    let mut metadata = Map::new();
    metadata.insert("account_sid".into(), json!(sid));
    if let Some(cb) = &callback {
        metadata.insert("StatusCallback".into(), json!(cb));
    }
    if let Some(mg) = &service {
        metadata.insert("MessagingServiceSid".into(), json!(mg));
    }
    let request = Request {
        job_id,
        idempotency_key: String::new(),
        channel: "sms".into(),
        from: from.clone().or_else(|| service.clone()),
        to,
        subject: None,
        body: text,
        html: None,
        metadata: Some(Value::Object(metadata)),
        api: Some("twilio"),
        headers: None,
        id_style: IdStyle::TwilioSid,
        raw: None,
        envelope: None,
        attachments: Vec::new(),
        tenant: None,
    };
    Ok(TwilioSend {
        request,
        from,
        service,
    })
}

/// The `201` Message resource of an accepted Twilio send.
fn twilio_message(
    sid: &str,
    id: &str,
    to: &str,
    text: &str,
    from: &Option<String>,
    service: &Option<String>,
) -> Response<Body> {
    let segments = sendonce_domain::sms::segments(text).segments;
    let now = rfc2822(sendonce_domain::clock::now_ms());
    let uri = format!("/2010-04-01/Accounts/{sid}/Messages/{id}.json");
    reply(
        StatusCode::CREATED,
        json!({
            "account_sid": sid,
            "api_version": "2010-04-01",
            "body": text,
            "date_created": now,
            "date_sent": null,
            "date_updated": now,
            "direction": "outbound-api",
            "error_code": null,
            "error_message": null,
            "from": from,
            "messaging_service_sid": service,
            "num_media": "0",
            "num_segments": segments.to_string(),
            "price": null,
            "price_unit": "USD",
            "sid": id,
            "status": if service.is_some() { "accepted" } else { "queued" },
            "subresource_uris": {
                "media": format!("/2010-04-01/Accounts/{sid}/Messages/{id}/Media.json"),
            },
            "to": to,
            "uri": uri,
        }),
    )
}

// ---------------------------------------------------------------------------------------------
// Resend

fn resend_error(status: StatusCode, name: &str, message: &str) -> Response<Body> {
    reply(
        status,
        json!({"statusCode": status.as_u16(), "name": name, "message": message}),
    )
}

/// `POST /emails`.
pub(super) async fn resend(shared: &Shared, req: HttpRequest<Incoming>) -> Answer {
    let f = faults(shared, "resend").await;
    let (parts, body) = match read(shared, req).await {
        Ok(x) => x,
        Err(e) => return Ok(e.apply(resend_error(e.status, "validation_error", &e.message))),
    };
    let bearer = header(&parts, "authorization")
        .and_then(|v| v.split_once(' '))
        .filter(|(s, t)| s.eq_ignore_ascii_case("bearer") && !t.trim().is_empty());
    if bearer.is_none() {
        return Ok(resend_error(
            StatusCode::UNAUTHORIZED,
            "missing_api_key",
            "No API key in the Authorization header (Authorization: Bearer KEY)",
        ));
    }
    let key = match parts.headers.get("idempotency-key") {
        None => String::new(),
        Some(v) => match v.to_str().map(str::trim) {
            Ok(k) if (1..=256).contains(&k.chars().count()) => k.to_string(),
            _ => {
                return Ok(resend_error(
                    StatusCode::BAD_REQUEST,
                    "invalid_idempotency_key",
                    "The idempotency key must be 1 to 256 characters",
                ))
            }
        },
    };
    let mut request = match parse_resend(&body, key) {
        Ok(r) => r,
        Err((status, name, message)) => return Ok(resend_error(status, name, &message)),
    };
    request.tenant = tenant(&parts, Who::Secret(bearer.map_or("", |(_, t)| t.trim())));
    let answers = Answers {
        ok: |id: &str| reply(StatusCode::OK, json!({"id": id})),
        conflict: || {
            resend_error(
                StatusCode::CONFLICT,
                "invalid_idempotent_request",
                "This idempotency key was already used with a different payload",
            )
        },
        fail: |status: StatusCode, message: &str| {
            resend_error(status, "internal_server_error", message)
        },
    };
    record(shared, &f, request, None, answers).await
}

type Refusal = (StatusCode, &'static str, String);

fn parse_resend(body: &[u8], key: String) -> Result<Request, Refusal> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        (
            StatusCode::BAD_REQUEST,
            "validation_error",
            format!("invalid JSON: {e}"),
        )
    })?;
    let missing = |name: &str| {
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            "missing_required_field",
            format!("the `{name}` field is missing"),
        )
    };
    let invalid = |message: String| {
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_error",
            message,
        )
    };
    let string = |name: &str| {
        v.get(name)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let from = string("from").ok_or_else(|| missing("from"))?;
    let to: Vec<String> = match v.get("to") {
        Some(Value::String(s)) if !s.is_empty() => vec![s.clone()],
        Some(Value::Array(a)) if !a.is_empty() => a
            .iter()
            .map(|x| x.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| invalid("`to` must be a string or an array of strings".into()))?,
        _ => return Err(missing("to")),
    };
    if to.len() > 50 {
        return Err(invalid("`to` takes at most 50 recipients".into()));
    }
    for t in &to {
        sendonce_domain::address::normalize_email(t).map_err(|e| invalid(e.message))?;
    }
    let subject = string("subject").ok_or_else(|| missing("subject"))?;
    let text = string("text")
        .or_else(|| string("html"))
        .ok_or_else(|| invalid("give the email a `text` or an `html` body".into()))?;
    let headers = resend_headers(v.get("headers")).map_err(invalid)?;
    let attachments = files(v.get("attachments"), &RESEND_FILES).map_err(invalid)?;
    let job_id = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("x-sendonce-job"))
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    Ok(Request {
        job_id,
        idempotency_key: key,
        channel: "email".into(),
        from: Some(from.to_string()),
        to: to.join(", "),
        subject: Some(subject.to_string()),
        body: text.to_string(),
        html: string("html").map(|h| h.to_string()),
        metadata: None,
        api: Some("resend"),
        headers: (!headers.is_empty()).then_some(headers),
        id_style: IdStyle::Uuid,
        raw: None,
        envelope: None,
        attachments,
        tenant: None,
    })
}

/// The field names of an API's attachment objects.
pub(super) struct FileFields {
    pub filename: &'static str,
    pub content: &'static str,
    pub content_type: &'static str,
    /// Every name the API takes for the content id, the first preferred.
    pub content_id: &'static [&'static str],
    /// Whether the API requires `content_type` (Postmark) or guesses it (Resend).
    pub type_required: bool,
}

const RESEND_FILES: FileFields = FileFields {
    filename: "filename",
    content: "content",
    content_type: "content_type",
    content_id: &["content_id", "inline_content_id"],
    type_required: false,
};

const POSTMARK_FILES: FileFields = FileFields {
    filename: "Name",
    content: "Content",
    content_type: "ContentType",
    content_id: &["ContentID"],
    type_required: true,
};

/// An API's attachments (absent, or an array of objects with a file name and base64 content),
/// checked as the provider checks them; a remote `path` cannot be fetched offline.
pub(super) fn files(v: Option<&Value>, f: &FileFields) -> Result<Vec<LoggedAttachment>, String> {
    let list = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(_) => return Err("attachments must be an array".into()),
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, a) in list.iter().enumerate() {
        let field = |name: &str| a.get(name).and_then(Value::as_str).map(str::to_string);
        if a.get("path").is_some() {
            return Err(format!(
                "attachment {i}: `path` (a remote file) cannot be fetched by the offline fake; \
                 send `content`"
            ));
        }
        let (Some(filename), Some(content)) = (field(f.filename), field(f.content)) else {
            return Err(format!(
                "attachment {i} needs `{}` and `{}` (base64)",
                f.filename, f.content
            ));
        };
        if base64::engine::general_purpose::STANDARD
            .decode(&content)
            .is_err()
        {
            return Err(format!("attachment {i}: `{}` is not base64", f.content));
        }
        let content_type = field(f.content_type);
        if f.type_required && content_type.is_none() {
            return Err(format!("attachment {i} needs `{}`", f.content_type));
        }
        out.push(LoggedAttachment {
            filename,
            content_type,
            content_id: f.content_id.iter().find_map(|n| field(n)),
            content,
        });
    }
    Ok(out)
}

/// Resend's `headers`: absent, or an object of strings.
fn resend_headers(v: Option<&Value>) -> Result<BTreeMap<String, String>, String> {
    string_map(v, "headers")
}

/// An object of strings named `what` (Resend's `headers`, SendGrid's `headers` and
/// `custom_args`): absent is empty.
pub(super) fn string_map(
    v: Option<&Value>,
    what: &str,
) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    match v {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            for (k, val) in m {
                let s = val
                    .as_str()
                    .ok_or_else(|| format!("{what}: {k:?} must be a string"))?;
                out.insert(k.clone(), s.to_string());
            }
        }
        Some(_) => return Err(format!("`{what}` must be an object")),
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Postmark

fn postmark_error(status: StatusCode, code: i64, message: &str) -> Response<Body> {
    reply(status, json!({"ErrorCode": code, "Message": message}))
}

/// A Postmark server token must be present; the refusal otherwise.
fn postmark_unauthorized(parts: &Parts) -> Option<Response<Body>> {
    match header(parts, "x-postmark-server-token") {
        Some(_) => None,
        None => Some(postmark_error(
            StatusCode::UNAUTHORIZED,
            10,
            "No server API token in the X-Postmark-Server-Token header",
        )),
    }
}

/// `POST /email`.
pub(super) async fn postmark_send(shared: &Shared, req: HttpRequest<Incoming>) -> Answer {
    let f = faults(shared, "postmark").await;
    let (parts, body) = match read(shared, req).await {
        Ok(x) => x,
        Err(e) if e.status == StatusCode::BAD_REQUEST => {
            return Ok(postmark_error(
                StatusCode::UNPROCESSABLE_ENTITY,
                402,
                &e.message,
            ))
        }
        Err(e) => return Ok(e.apply(postmark_error(e.status, 402, &e.message))),
    };
    if let Some(r) = postmark_unauthorized(&parts) {
        return Ok(r);
    }
    let mut request = match parse_postmark(&body) {
        Ok(r) => r,
        Err((code, message)) => {
            return Ok(postmark_error(
                StatusCode::UNPROCESSABLE_ENTITY,
                code,
                &message,
            ))
        }
    };
    let token = header(&parts, "x-postmark-server-token").unwrap_or_default();
    request.tenant = tenant(&parts, Who::Secret(token));
    let to = request.to.clone();
    let answers = Answers {
        ok: |id: &str| {
            reply(
                StatusCode::OK,
                json!({
                    "To": to,
                    "SubmittedAt": rfc3339(sendonce_domain::clock::now_ms()),
                    "MessageID": id,
                    "ErrorCode": 0,
                    "Message": "OK",
                }),
            )
        },
        conflict: || {
            postmark_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                0,
                "unexpected key conflict",
            )
        },
        fail: |status: StatusCode, message: &str| {
            // 100 is Postmark's "maintenance" code.
            let code = if status == StatusCode::SERVICE_UNAVAILABLE {
                100
            } else {
                0
            };
            postmark_error(status, code, message)
        },
    };
    record(shared, &f, request, None, answers).await
}

fn parse_postmark(body: &[u8]) -> Result<Request, (i64, String)> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| (402, format!("the body is not valid JSON: {e}")))?;
    let string = |name: &str| {
        v.get(name)
            .and_then(Value::as_str)
            .filter(|s| !s.trim().is_empty())
    };
    let from = string("From").ok_or((300, "Invalid 'From' address: none given".to_string()))?;
    let to = string("To").ok_or((300, "Zero recipients specified".to_string()))?;
    for t in to.split(',') {
        let addr = t.trim();
        // `Name <address>` is accepted; the address inside is checked.
        let addr = match (addr.rfind('<'), addr.ends_with('>')) {
            (Some(i), true) => &addr[i + 1..addr.len() - 1],
            _ => addr,
        };
        sendonce_domain::address::normalize_email(addr)
            .map_err(|e| (300, format!("Invalid 'To' address: {}", e.message)))?;
    }
    let text = string("TextBody").or_else(|| string("HtmlBody")).ok_or((
        300,
        "Provide a TextBody or an HtmlBody (or both)".to_string(),
    ))?;
    let mut headers = BTreeMap::new();
    match v.get("Headers") {
        None | Some(Value::Null) => {}
        Some(Value::Array(list)) => {
            for h in list {
                let (Some(name), Some(value)) = (
                    h.get("Name").and_then(Value::as_str),
                    h.get("Value").and_then(Value::as_str),
                ) else {
                    return Err((403, "each header needs a Name and a Value".into()));
                };
                headers.insert(name.to_string(), value.to_string());
            }
        }
        Some(_) => return Err((403, "Headers must be an array".into())),
    }
    let attachments = files(v.get("Attachments"), &POSTMARK_FILES).map_err(|e| (300, e))?;
    let metadata = match v.get("Metadata") {
        None | Some(Value::Null) => None,
        Some(m @ Value::Object(_)) => Some(m.clone()),
        Some(_) => return Err((403, "Metadata must be an object".into())),
    };
    let job_id = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("x-sendonce-job"))
        .map(|(_, v)| v.clone())
        .or_else(|| {
            metadata
                .as_ref()
                .and_then(|m| m.get(sendonce_core::provider::postmark::JOB_METADATA))
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_default();
    Ok(Request {
        job_id,
        idempotency_key: String::new(),
        channel: "email".into(),
        from: Some(from.to_string()),
        to: to.to_string(),
        subject: string("Subject").map(str::to_string),
        body: text.to_string(),
        html: string("HtmlBody").map(|h| h.to_string()),
        metadata,
        api: Some("postmark"),
        headers: (!headers.is_empty()).then_some(headers),
        id_style: IdStyle::Uuid,
        raw: None,
        envelope: None,
        attachments,
        tenant: None,
    })
}

/// `GET /messages/outbound?count=N&offset=N[&recipient=][&fromemail=][&subject=][&metadata_KEY=]`.
pub(super) async fn postmark_search(shared: &Shared, req: HttpRequest<Incoming>) -> Response<Body> {
    let (parts, _) = req.into_parts();
    if let Some(r) = postmark_unauthorized(&parts) {
        return r;
    }
    let query: Vec<(String, String)> =
        form_urlencoded::parse(parts.uri.query().unwrap_or("").as_bytes())
            .into_owned()
            .collect();
    let get = |k: &str| query.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let number = |k: &str| get(k).and_then(|v| v.trim().parse::<usize>().ok());
    let (Some(count), Some(offset)) = (number("count"), number("offset")) else {
        return postmark_error(
            StatusCode::UNPROCESSABLE_ENTITY,
            300,
            "count and offset are required numbers",
        );
    };
    if !(1..=500).contains(&count) || count + offset > 10_000 {
        return postmark_error(
            StatusCode::UNPROCESSABLE_ENTITY,
            300,
            "count must be 1 to 500, and count + offset at most 10000",
        );
    }
    // Every line, replays too, newest first, through the index (in a tenant's view, its own).
    let every = super::inbox::Filter {
        replays: true,
        ..Default::default()
    };
    let lines: Vec<DeliveryLine> = match super::inbox::filtered(shared, every, true).await {
        Ok(found) => found.into_iter().map(|f| f.line).collect(),
        Err(e) => return postmark_error(StatusCode::INTERNAL_SERVER_ERROR, 0, &e),
    };
    let metadata = metadata_of(&query);
    let found: Vec<&DeliveryLine> = lines
        .iter()
        .filter(|l| search_matches(l, &get, &metadata))
        .collect();
    let messages: Vec<Value> = found
        .iter()
        .skip(offset)
        .take(count)
        .map(|l| outbound_message(l))
        .collect();
    reply(
        StatusCode::OK,
        json!({"TotalCount": found.len(), "Messages": messages}),
    )
}

/// The `metadata_KEY=VALUE` filters of a search query.
fn metadata_of(query: &[(String, String)]) -> Vec<(&str, &str)> {
    query
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("metadata_")?, v.as_str())))
        .collect()
}

/// Whether a journal line is a Postmark send that the search's filters all keep.
fn search_matches<'q>(
    l: &DeliveryLine,
    get: &impl Fn(&str) -> Option<&'q str>,
    metadata: &[(&str, &str)],
) -> bool {
    let eq = |a: &str, b: &str| a.trim().eq_ignore_ascii_case(b.trim());
    l.api.as_deref() == Some("postmark")
        && !l.replay
        && get("recipient").is_none_or(|r| l.to.split(',').any(|t| eq(t, r)))
        && get("fromemail").is_none_or(|f| l.from.as_deref().is_some_and(|x| eq(x, f)))
        && get("subject").is_none_or(|s| l.subject.as_deref() == Some(s))
        && get("tag").is_none() // nothing is tagged
        && metadata.iter().all(|(k, v)| {
            l.metadata
                .as_ref()
                .and_then(|m| m.get(*k))
                .and_then(Value::as_str)
                == Some(*v)
        })
}

/// One message of a search answer, as Postmark's outbound message list shows it.
fn outbound_message(l: &DeliveryLine) -> Value {
    let to: Vec<&str> = l.to.split(',').map(str::trim).collect();
    json!({
        "Tag": "",
        "MessageID": l.message_id,
        "MessageStream": "outbound",
        "To": to.iter().map(|t| json!({"Email": t, "Name": null})).collect::<Vec<_>>(),
        "Cc": [],
        "Bcc": [],
        "Recipients": to,
        "ReceivedAt": rfc3339(l.at),
        "From": l.from,
        "Subject": l.subject,
        "Attachments": [],
        "Status": "Sent",
        "TrackOpens": false,
        "TrackLinks": "None",
        "Metadata": l.metadata.clone().unwrap_or_else(|| json!({})),
        "Sandboxed": false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twilio_paths() {
        assert_eq!(
            twilio_account("/2010-04-01/Accounts/AC123/Messages.json").as_deref(),
            Some("AC123")
        );
        assert!(twilio_account("/2010-04-01/Accounts//Messages.json").is_none());
        assert!(twilio_account("/2010-04-01/Accounts/A/B/Messages.json").is_none());
        assert!(twilio_account("/emails").is_none());
    }

    #[test]
    fn dates() {
        assert_eq!(rfc2822(0), "Thu, 01 Jan 1970 00:00:00 +0000");
        // 2016-07-26T12:50:07Z, a Tuesday.
        assert_eq!(
            rfc2822(1_469_537_407_000),
            "Tue, 26 Jul 2016 12:50:07 +0000"
        );
        assert_eq!(rfc2822(951_782_400_000), "Tue, 29 Feb 2000 00:00:00 +0000");
        assert_eq!(rfc3339(1_469_537_407_123), "2016-07-26T12:50:07.123Z");
    }

    #[test]
    fn resend_bodies() {
        let ok = br#"{"from":"a@b.co","to":["c@d.co"],"subject":"s","text":"t",
                     "headers":{"X-Sendonce-Job":"j1"}}"#;
        let r = parse_resend(ok, "k".into()).unwrap();
        assert_eq!(r.job_id, "j1");
        assert_eq!(r.to, "c@d.co");
        let r = parse_resend(
            br#"{"from":"a@b.co","to":"c@d.co","subject":"s","html":"<b>h</b>"}"#,
            String::new(),
        )
        .unwrap();
        assert_eq!(r.body, "<b>h</b>");
        assert_eq!(r.job_id, "");
        for bad in [
            &br#"{"to":"c@d.co","subject":"s","text":"t"}"#[..],
            br#"{"from":"a@b.co","subject":"s","text":"t"}"#,
            br#"{"from":"a@b.co","to":"c@d.co","text":"t"}"#,
            br#"{"from":"a@b.co","to":"c@d.co","subject":"s"}"#,
            br#"{"from":"a@b.co","to":"nope","subject":"s","text":"t"}"#,
            b"nope",
        ] {
            assert!(parse_resend(bad, String::new()).is_err());
        }
    }

    #[test]
    fn postmark_bodies() {
        let ok = br#"{"From":"a@b.co","To":"Carl <c@d.co>","Subject":"s","TextBody":"t",
                     "Metadata":{"sendonce_job":"j2"}}"#;
        let r = parse_postmark(ok).unwrap();
        assert_eq!(r.job_id, "j2");
        assert_eq!(r.metadata, Some(json!({"sendonce_job": "j2"})));
        let e = parse_postmark(br#"{"From":"a@b.co","Subject":"s","TextBody":"t"}"#)
            .err()
            .unwrap();
        assert_eq!(e.0, 300);
        assert_eq!(parse_postmark(b"{").err().unwrap().0, 402);
    }
}

//! Amazon SES v2 `SendEmail` (`POST /v2/email/outbound-emails`, what boto3's `sesv2` client and
//! the other AWS SDKs call): JSON in, `{"MessageId"}` out, errors as AWS's REST-JSON services
//! write them (`x-amzn-ErrorType` header, `{"message"}` body). A request must carry a SigV4
//! `Authorization` header; its signature is checked only when the fake was given a key
//! (`SENDONCE_FAKE_AWS_KEY=ACCESS_KEY_ID:SECRET`), as AWS checks it: the canonical request of
//! the signed headers, the scope's derived key, HMAC-SHA256, and a clock skew of at most 15
//! minutes.

use super::super::apis::{
    faults, files, header, read, record, tenant, Answer, Answers, FileFields, Who,
};
use super::super::journal::{IdStyle, Request};
use super::super::server::{reply, Body, Shared};
use super::{checked, job_of};
use hmac::{Hmac, Mac};
use hyper::body::Incoming;
use hyper::http::request::Parts;
use hyper::{Request as HttpRequest, Response, StatusCode};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

pub(super) const PATH: &str = "/v2/email/outbound-emails";

/// SES's limit on the recipients of one message (To, Cc and Bcc together).
const MAX_RECIPIENTS: usize = 50;

/// How far a request's `X-Amz-Date` may be from the fake's clock (AWS: 15 minutes).
const MAX_SKEW_MS: i64 = 15 * 60 * 1000;

const SES_FILES: FileFields = FileFields {
    filename: "FileName",
    content: "RawContent",
    content_type: "ContentType",
    content_id: &["ContentId"],
    type_required: false,
};

/// A refusal's answer, boxed: it travels in `Err`.
type Refusal = Box<Response<Body>>;

/// An AWS error: the type in `x-amzn-ErrorType`, the text in `{"message"}`.
fn error(status: StatusCode, kind: &str, message: &str) -> Refusal {
    let mut r = reply(status, json!({"message": message}));
    if let Ok(v) = hyper::header::HeaderValue::from_str(kind) {
        r.headers_mut().insert("x-amzn-errortype", v);
    }
    Box::new(r)
}

fn bad_request(message: &str) -> Refusal {
    error(StatusCode::BAD_REQUEST, "BadRequestException", message)
}

/// `POST /v2/email/outbound-emails`.
pub(super) async fn send(shared: &Shared, req: HttpRequest<Incoming>) -> Answer {
    let f = faults(shared, "ses").await;
    let (parts, body) = match read(shared, req).await {
        Ok(x) => x,
        Err(e) => return Ok(e.apply(*bad_request(&e.message))),
    };
    if let Err(refused) = authorize(&parts, &body, shared.config.aws_key.as_ref()) {
        return Ok(*refused);
    }
    let mut request = match parse(&body) {
        Ok(r) => r,
        Err(refused) => return Ok(*refused),
    };
    let key_id = header(&parts, "authorization")
        .and_then(parse_authorization)
        .map(|s| s.key_id.to_string())
        .unwrap_or_default();
    request.tenant = tenant(&parts, Who::Name(&key_id));
    let answers = Answers {
        ok: |id: &str| reply(StatusCode::OK, json!({"MessageId": id})),
        conflict: || *bad_request("unexpected key conflict"),
        fail: |status: StatusCode, message: &str| {
            let kind = match status {
                StatusCode::SERVICE_UNAVAILABLE => "ServiceUnavailable",
                _ => "InternalFailure",
            };
            *error(status, kind, message)
        },
    };
    record(shared, &f, request, None, answers).await
}

/// The parts of a SigV4 `Authorization` header.
struct SigV4<'a> {
    key_id: &'a str,
    /// `DATE/REGION/SERVICE/aws4_request`.
    scope: &'a str,
    signed_headers: &'a str,
    signature: &'a str,
}

fn parse_authorization(v: &str) -> Option<SigV4<'_>> {
    let rest = v.strip_prefix("AWS4-HMAC-SHA256")?.trim_start();
    let mut credential = None;
    let (mut signed_headers, mut signature) = (None, None);
    for part in rest.split(',') {
        let (k, val) = part.trim().split_once('=')?;
        match k {
            "Credential" => credential = Some(val),
            "SignedHeaders" => signed_headers = Some(val),
            "Signature" => signature = Some(val),
            _ => {}
        }
    }
    let (key_id, scope) = credential?.split_once('/')?;
    if scope.split('/').count() != 4 || !scope.ends_with("/aws4_request") {
        return None;
    }
    Some(SigV4 {
        key_id,
        scope,
        signed_headers: signed_headers?,
        signature: signature?,
    })
}

/// A SigV4 signature must be there; with a key configured it must be right and recent.
fn authorize(parts: &Parts, body: &[u8], key: Option<&(String, String)>) -> Result<(), Refusal> {
    let Some(auth) = header(parts, "authorization") else {
        return Err(error(
            StatusCode::FORBIDDEN,
            "MissingAuthenticationTokenException",
            "Missing Authentication Token",
        ));
    };
    let sig = parse_authorization(auth).ok_or_else(|| {
        error(
            StatusCode::BAD_REQUEST,
            "IncompleteSignatureException",
            "Authorization header requires 'Credential', 'SignedHeaders' and 'Signature' \
             (AWS4-HMAC-SHA256)",
        )
    })?;
    let Some((key_id, secret)) = key else {
        return Ok(());
    };
    if sig.key_id != key_id {
        return Err(error(
            StatusCode::FORBIDDEN,
            "UnrecognizedClientException",
            "The security token included in the request is invalid.",
        ));
    }
    let amz_date = header(parts, "x-amz-date").unwrap_or_default();
    if !recent(amz_date) {
        return Err(error(
            StatusCode::FORBIDDEN,
            "InvalidSignatureException",
            "Signature expired: X-Amz-Date is missing or more than 15 minutes from the time",
        ));
    }
    if !signature_matches(parts, body, &sig, amz_date, secret) {
        return Err(error(
            StatusCode::FORBIDDEN,
            "SignatureDoesNotMatchException",
            "The request signature we calculated does not match the signature you provided.",
        ));
    }
    Ok(())
}

/// Whether `amz_date` (`YYYYMMDDTHHMMSSZ`) is within 15 minutes of now.
fn recent(amz_date: &str) -> bool {
    let b = amz_date.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return false;
    }
    let rfc3339 = format!(
        "{}-{}-{}T{}:{}:{}Z",
        &amz_date[0..4],
        &amz_date[4..6],
        &amz_date[6..8],
        &amz_date[9..11],
        &amz_date[11..13],
        &amz_date[13..15]
    );
    let Ok(t) = humantime::parse_rfc3339(&rfc3339) else {
        return false;
    };
    let Ok(ms) = t.duration_since(std::time::UNIX_EPOCH) else {
        return false;
    };
    (sendonce_domain::clock::now_ms() - ms.as_millis() as i64).abs() <= MAX_SKEW_MS
}

type HmacSha256 = Hmac<Sha256>;

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    match <HmacSha256 as Mac>::new_from_slice(key) {
        Ok(mut m) => {
            m.update(data);
            m.finalize().into_bytes().to_vec()
        }
        // HMAC takes a key of any length: unreachable, and an empty key matches nothing.
        Err(_) => Vec::new(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether the request's signature is the one SigV4 gives it with `secret`, over the headers
/// it says it signed (compared in constant time by the HMAC's own check).
fn signature_matches(
    parts: &Parts,
    body: &[u8],
    sig: &SigV4<'_>,
    amz_date: &str,
    secret: &str,
) -> bool {
    let canonical = canonical_request(parts, body, sig.signed_headers);
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{}\n{}",
        sig.scope,
        hex(&Sha256::digest(canonical.as_bytes()))
    );
    let mut key = format!("AWS4{secret}").into_bytes();
    for part in sig.scope.split('/') {
        key = hmac(&key, part.as_bytes());
    }
    let Some(given) = unhex(sig.signature) else {
        return false;
    };
    let Ok(mut m) = <HmacSha256 as Mac>::new_from_slice(&key) else {
        return false;
    };
    m.update(to_sign.as_bytes());
    m.verify_slice(&given).is_ok()
}

/// Lower- or upper-case hex digits as bytes.
fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Method, path, sorted query, the signed headers (values trimmed, inner spaces folded), their
/// names and the body's SHA-256.
fn canonical_request(parts: &Parts, body: &[u8], signed_headers: &str) -> String {
    let mut query: Vec<(String, String)> =
        form_urlencoded::parse(parts.uri.query().unwrap_or_default().as_bytes())
            .map(|(k, v)| (uri_encode(&k), uri_encode(&v)))
            .collect();
    query.sort();
    let query: Vec<String> = query.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut headers = String::new();
    for name in signed_headers.split(';') {
        let values: Vec<String> = parts
            .headers
            .get_all(name)
            .iter()
            .map(|v| {
                let s = String::from_utf8_lossy(v.as_bytes());
                s.split_whitespace().collect::<Vec<_>>().join(" ")
            })
            .collect();
        headers.push_str(&format!("{name}:{}\n", values.join(",")));
    }
    let payload = match parts.headers.get("x-amz-content-sha256") {
        Some(v) => String::from_utf8_lossy(v.as_bytes()).into_owned(),
        None => hex(&Sha256::digest(body)),
    };
    format!(
        "{}\n{}\n{}\n{headers}\n{signed_headers}\n{payload}",
        parts.method,
        super::super::tenants::original_path(parts),
        query.join("&")
    )
}

/// SigV4's URI encoding: every byte but the unreserved characters as `%XX`.
fn uri_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A `SendEmail` body: simple content (subject, text and/or HTML, headers, files) or raw MIME
/// bytes; stored templates are not kept by the offline fake.
fn parse(body: &[u8]) -> Result<Request, Refusal> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        error(
            StatusCode::BAD_REQUEST,
            "SerializationException",
            &format!("the body is not valid JSON: {e}"),
        )
    })?;
    let from = v
        .get("FromEmailAddress")
        .and_then(Value::as_str)
        .map(|a| checked(a, "FromEmailAddress"))
        .transpose()
        .map_err(|m| bad_request(&m))?;
    let to = recipients(&v).map_err(|m| bad_request(&m))?;
    let content = v
        .get("Content")
        .and_then(Value::as_object)
        .ok_or_else(|| bad_request("Content is required"))?;
    let mut metadata = serde_json::Map::new();
    if let Some(tags) = v.get("EmailTags").and_then(Value::as_array) {
        for t in tags {
            if let (Some(n), Some(val)) = (t["Name"].as_str(), t["Value"].as_str()) {
                metadata.insert(n.to_string(), json!(val));
            }
        }
    }
    let mut request = match (
        content.get("Simple"),
        content.get("Raw"),
        content.get("Template"),
    ) {
        (Some(s), None, None) => simple(s, from, &to)?,
        (None, Some(r), None) => raw(r, from, &to)?,
        (None, None, Some(t)) => {
            let name = t["TemplateName"].as_str().unwrap_or("(no name)");
            return Err(error(
                StatusCode::NOT_FOUND,
                "NotFoundException",
                &format!("Template {name} does not exist (the offline fake keeps no templates: send Simple or Raw content)"),
            ));
        }
        _ => {
            return Err(bad_request(
                "Content needs exactly one of Simple, Raw or Template",
            ))
        }
    };
    if request.job_id.is_empty() {
        if let Some(j) = metadata.get("sendonce_job").and_then(Value::as_str) {
            request.job_id = j.to_string();
        }
    }
    request.metadata = (!metadata.is_empty()).then_some(Value::Object(metadata));
    Ok(request)
}

/// Destination's To, Cc and Bcc addresses: at most 50, each checked (none is refused later
/// for simple content; raw content then goes to the message's own To and Cc).
fn recipients(v: &Value) -> Result<Vec<String>, String> {
    let mut all = Vec::new();
    for field in ["ToAddresses", "CcAddresses", "BccAddresses"] {
        match v.get("Destination").and_then(|d| d.get(field)) {
            None | Some(Value::Null) => {}
            Some(Value::Array(list)) => {
                for (i, a) in list.iter().enumerate() {
                    let what = format!("Destination.{field}[{i}]");
                    let a = a
                        .as_str()
                        .ok_or_else(|| format!("{what} must be a string"))?;
                    all.push(checked(a, &what)?);
                }
            }
            Some(_) => return Err(format!("Destination.{field} must be an array")),
        }
    }
    if all.len() > MAX_RECIPIENTS {
        return Err(format!(
            "a message may have at most {MAX_RECIPIENTS} recipients (To, Cc and Bcc together)"
        ));
    }
    Ok(all)
}

/// `Content.Simple`: `Subject.Data`, `Body.Text.Data` and/or `Body.Html.Data`, `Headers`,
/// `Attachments` (`RawContent` is base64 in JSON).
fn simple(s: &Value, from: Option<String>, to: &[String]) -> Result<Request, Refusal> {
    let from =
        from.ok_or_else(|| bad_request("FromEmailAddress is required with Simple content"))?;
    if to.is_empty() {
        return Err(bad_request("Destination needs at least one address"));
    }
    let data = |path: &[&str]| {
        let mut at = s;
        for p in path {
            at = at.get(p)?;
        }
        at.get("Data").and_then(Value::as_str).map(str::to_string)
    };
    let subject = data(&["Subject"]).ok_or_else(|| bad_request("Subject.Data is required"))?;
    let (text, html) = (data(&["Body", "Text"]), data(&["Body", "Html"]));
    let Some(body) = text.clone().or_else(|| html.clone()) else {
        return Err(bad_request("Body needs Text or Html"));
    };
    let mut headers = BTreeMap::new();
    if let Some(list) = s.get("Headers").and_then(Value::as_array) {
        for h in list {
            match (h["Name"].as_str(), h["Value"].as_str()) {
                (Some(n), Some(v)) => headers.insert(n.to_string(), v.to_string()),
                _ => return Err(bad_request("each of Headers needs a Name and a Value")),
            };
        }
    }
    let attachments = files(s.get("Attachments"), &SES_FILES).map_err(|m| bad_request(&m))?;
    Ok(Request {
        job_id: job_of(&headers).unwrap_or_default(),
        idempotency_key: String::new(),
        channel: "email".into(),
        from: Some(from),
        to: to.join(", "),
        subject: Some(subject),
        body,
        html,
        metadata: None,
        api: Some("ses"),
        headers: (!headers.is_empty()).then_some(headers),
        id_style: IdStyle::Ses,
        raw: None,
        envelope: None,
        attachments,
        tenant: None,
    })
}

/// `Content.Raw.Data`: a whole MIME message (base64 in JSON), kept byte for byte as an SMTP
/// message is, with Destination as its envelope.
fn raw(r: &Value, from: Option<String>, to: &[String]) -> Result<Request, Refusal> {
    use base64::Engine;
    let data = r
        .get("Data")
        .and_then(Value::as_str)
        .ok_or_else(|| bad_request("Raw.Data is required"))?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|_| bad_request("Raw.Data is not base64"))?;
    let mut to = to.to_vec();
    if to.is_empty() {
        to = header_recipients(&bytes);
    }
    if to.is_empty() {
        return Err(bad_request(
            "no recipient: give Destination or To/Cc headers",
        ));
    }
    let envelope = sendonce_core::provider::deliverylog::Envelope {
        from: from.unwrap_or_default(),
        to,
    };
    let mut request = super::super::inbox::request_from_smtp(envelope, bytes);
    request.api = Some("ses");
    request.id_style = IdStyle::Ses;
    Ok(request)
}

/// The addresses of a MIME message's To and Cc headers.
fn header_recipients(bytes: &[u8]) -> Vec<String> {
    let Some(m) = mail_parser::MessageParser::default().parse(bytes) else {
        return Vec::new();
    };
    [m.to(), m.cc()]
        .into_iter()
        .flatten()
        .flat_map(|a| a.iter())
        .filter_map(|a| a.address().map(str::to_string))
        .collect()
}

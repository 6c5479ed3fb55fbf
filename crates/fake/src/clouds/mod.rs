//! The fake provider in the shapes of the providers users most often run behind a newsletter:
//! Amazon SES v2 (`ses`), SendGrid v3 (`sendgrid`), Mailgun (`mailgun`) and Brevo (`brevo`).
//! Each checks a request as its provider documents (required fields, addresses, files),
//! answers with its provider's status codes, ids and error bodies, and records an accepted
//! message through the same journal as `/send` (logged and fsynced before the answer), with
//! the same injected faults. Credentials are checked for presence (SES: a SigV4
//! `Authorization` header, verified against `--aws-key` when one is given).

mod brevo;
mod mailgun;
mod sendgrid;
mod ses;

use super::apis::Answer;
use super::server::Shared;
use hyper::body::Incoming;
use hyper::{Method, Request as HttpRequest};
use serde_json::Value;

/// The answer of the provider whose path `path` is, or None when no provider here owns it.
pub(super) async fn route(
    shared: &Shared,
    req: HttpRequest<Incoming>,
    path: &str,
) -> Result<Answer, HttpRequest<Incoming>> {
    let post = req.method() == Method::POST;
    match path {
        ses::PATH if post => Ok(ses::send(shared, req).await),
        sendgrid::PATH if post => Ok(sendgrid::send(shared, req).await),
        brevo::PATH if post => Ok(brevo::send(shared, req).await),
        _ => match mailgun::domain_of(path) {
            Some(domain) if post => Ok(mailgun::send(shared, req, domain).await),
            _ => Err(req),
        },
    }
}

/// Which provider a path belongs to (the request log's `api`).
pub(super) fn api_of(path: &str) -> Option<&'static str> {
    match path {
        ses::PATH => Some("ses"),
        sendgrid::PATH => Some("sendgrid"),
        brevo::PATH => Some("brevo"),
        _ => mailgun::domain_of(path).map(|_| "mailgun"),
    }
}

/// An address as the JSON APIs write one: `{"email": ..., "name": ...}` (SendGrid, Brevo).
/// Returns the address, checked.
fn email_object(v: &Value, what: &str) -> Result<String, String> {
    let email = v
        .get("email")
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| format!("{what}: an object with an `email` is required"))?;
    checked(email, what)
}

/// `address` checked as an email address (a bare address, or `Name <address>`).
fn checked(address: &str, what: &str) -> Result<String, String> {
    let a = address.trim();
    let inner = match (a.rfind('<'), a.ends_with('>')) {
        (Some(i), true) => &a[i + 1..a.len() - 1],
        _ => a,
    };
    sendonce_domain::address::normalize_email(inner)
        .map_err(|e| format!("{what}: {}", e.message))?;
    Ok(a.to_string())
}

/// A list of `{"email"}` objects: absent is empty, anything but an array is an error.
fn email_objects(v: Option<&Value>, what: &str) -> Result<Vec<String>, String> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(list)) => list
            .iter()
            .enumerate()
            .map(|(i, x)| email_object(x, &format!("{what}[{i}]")))
            .collect(),
        Some(_) => Err(format!("{what} must be an array")),
    }
}

/// The job id a sender put in a message's headers (`X-Sendonce-Job`, any case), if any.
fn job_of(headers: &std::collections::BTreeMap<String, String>) -> Option<String> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("x-sendonce-job"))
        .map(|(_, v)| v.clone())
}

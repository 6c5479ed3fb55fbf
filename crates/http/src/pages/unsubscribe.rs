//! `GET /u/{token}`: what an unsubscribe link covers and a form (this list / everything from
//! this sender); `POST /u/{token}`: the form's answer, or RFC 8058 one-click
//! (`List-Unsubscribe=One-Click`, url-encoded or multipart) answered with a short text. GET
//! never changes anything (mail scanners fetch links). A refused token is a plain page that
//! says only "not valid".

use super::{mask, message, render};
use crate::{blocking, AppState};
use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sendonce_core::app::unsubscribe::{self, Scope};
use sendonce_domain::error::{Error, ErrorKind};
use sendonce_domain::links::Target;

const NOT_VALID: &str = "This link is not valid. It may have been changed on the way, or it \
    is too old. Please use the unsubscribe link of the latest message you received, or reply \
    to the sender.";

/// A page answered instead of going on (boxed: a `Response` is large).
type Refusal = Box<Response>;

/// The token of the path opened with the server's keys, or the page that refuses it.
fn open(st: &AppState, token: Result<Path<String>, PathRejection>) -> Result<Target, Refusal> {
    let Some(keys) = &st.keys else {
        return Err(Box::new(message(
            StatusCode::SERVICE_UNAVAILABLE,
            "Not available",
            "Unsubscribe links are not set up on this server. Please reply to the sender to \
             unsubscribe.",
        )));
    };
    let Ok(Path(token)) = token else {
        return Err(Box::new(refused(ErrorKind::Invalid)));
    };
    unsubscribe::open(keys, &token, sendonce_domain::clock::now_ms())
        .map_err(|e| Box::new(refused(e.kind)))
}

/// The plain page of a refused link (400 malformed, 404 not valid), never its details.
fn refused(kind: ErrorKind) -> Response {
    let status = match kind {
        ErrorKind::Invalid => StatusCode::BAD_REQUEST,
        _ => StatusCode::NOT_FOUND,
    };
    message(status, "Link not valid", NOT_VALID)
}

/// A store error: the link's account or lists refused it (404), else a "try again" page
/// with the status `http::error` gives the kind; the message is logged, not shown.
fn failed(e: Error) -> Response {
    if e.kind == ErrorKind::NotFound {
        return refused(ErrorKind::NotFound);
    }
    tracing::error!(target: "sendonce::http", error = %e.message, "unsubscribe page failed");
    message(
        crate::status_for(e.kind).0,
        "Please try again",
        "We could not handle this just now. Please try again in a few minutes.",
    )
}

pub async fn show(
    State(st): State<AppState>,
    token: Result<Path<String>, PathRejection>,
) -> Response {
    let target = match open(&st, token) {
        Ok(t) => t,
        Err(page) => return *page,
    };
    let view = match blocking(&st, move |s| unsubscribe::view(s, &target)).await {
        Ok(v) => v,
        Err(e) => return failed(e),
    };
    render(
        StatusCode::OK,
        "unsubscribe.html",
        minijinja::context! {
            title => "Unsubscribe",
            address => mask(&view.address),
            lists => view.lists,
            suppressed => view.suppressed,
            done => view.done,
        },
    )
}

pub async fn submit(
    State(st): State<AppState>,
    token: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let target = match open(&st, token) {
        Ok(t) => t,
        Err(page) => return *page,
    };
    let (one_click, scope) = match choose(&form_fields(&headers, &body), &target) {
        Ok(x) => x,
        Err(page) => return *page,
    };
    let address = mask(&target.address);
    let done = match blocking(&st, move |s| unsubscribe::unsubscribe(s, &target, scope)).await {
        Ok(d) => d,
        Err(e) => return failed(e),
    };
    if one_click {
        let text = if done.already {
            "Already unsubscribed.\n"
        } else {
            "Unsubscribed.\n"
        };
        return plain(text);
    }
    let what = match scope {
        Scope::All => format!("everything this sender sends to {address}"),
        Scope::List if done.lists.is_empty() => "this list".to_string(),
        Scope::List => done.lists.join(", "),
    };
    let (title, text) = if done.already {
        (
            "Already unsubscribed",
            format!("You were already unsubscribed from {what}. Nothing more to do."),
        )
    } else {
        (
            "Unsubscribed",
            format!("You are unsubscribed from {what}. You will not get these messages again."),
        )
    };
    message(StatusCode::OK, title, &text)
}

/// (one-click?, scope) from the form's fields: RFC 8058's `List-Unsubscribe=One-Click`, else
/// `scope` (absent: as one-click would), or the page that asks to choose again.
fn choose(fields: &[(String, String)], target: &Target) -> Result<(bool, Scope), Refusal> {
    let field = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let choose_again =
        |text: &str| Box::new(message(StatusCode::BAD_REQUEST, "Please choose", text));
    if field("List-Unsubscribe") == Some("One-Click") {
        return Ok((true, Scope::one_click(target)));
    }
    let scope =
        match field("scope").map(Scope::parse) {
            Some(Ok(s)) => s,
            None => Scope::one_click(target),
            Some(Err(_)) => return Err(choose_again(
                "Choose what to unsubscribe from on the page of your link, then press the button.",
            )),
        };
    if scope == Scope::List && target.lists.is_empty() {
        return Err(choose_again(
            "This message was not sent to a list: choose \"everything from this sender\".",
        ));
    }
    Ok((false, scope))
}

/// A short text answer (RFC 8058: the mail client shows nothing of it).
fn plain(text: &'static str) -> Response {
    let mut res = (StatusCode::OK, text).into_response();
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    res
}

/// The fields of a form body: `application/x-www-form-urlencoded` or `multipart/form-data`
/// (RFC 8058 allows both); anything else has none.
fn form_fields(headers: &HeaderMap, body: &[u8]) -> Vec<(String, String)> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    if ct.starts_with("multipart/form-data") {
        let boundary = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.split(';')
                    .find_map(|p| p.trim().strip_prefix("boundary="))
                    .map(|b| b.trim_matches('"').to_string())
            });
        return boundary.map_or_else(Vec::new, |b| multipart_fields(body, &b));
    }
    // A missing content type is read as a form too (curl -d sends one; some clients don't).
    if ct.is_empty() || ct.starts_with("application/x-www-form-urlencoded") {
        return form_urlencoded::parse(body).into_owned().collect();
    }
    Vec::new()
}

/// The text fields of a multipart body: each part's `name` and its content.
fn multipart_fields(body: &[u8], boundary: &str) -> Vec<(String, String)> {
    let text = String::from_utf8_lossy(body);
    let delimiter = format!("--{boundary}");
    let mut out = Vec::new();
    for part in text.split(delimiter.as_str()).skip(1) {
        if part.starts_with("--") {
            break;
        }
        let part = part.strip_prefix("\r\n").unwrap_or(part);
        let Some((head, value)) = part.split_once("\r\n\r\n") else {
            continue;
        };
        let name = head.lines().find_map(|l| {
            let l = l.trim();
            l.to_ascii_lowercase()
                .starts_with("content-disposition:")
                .then(|| l.split(';').find_map(|p| p.trim().strip_prefix("name=")))?
                .map(|n| n.trim_matches('"').to_string())
        });
        if let Some(name) = name {
            let value = value.strip_suffix("\r\n").unwrap_or(value);
            out.push((name, value.to_string()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_click_bodies_in_both_encodings() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        );
        assert_eq!(
            form_fields(&h, b"List-Unsubscribe=One-Click"),
            vec![("List-Unsubscribe".to_string(), "One-Click".to_string())]
        );
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("multipart/form-data; boundary=\"XyZ\""),
        );
        let body = "--XyZ\r\nContent-Disposition: form-data; name=\"List-Unsubscribe\"\r\n\r\n\
                    One-Click\r\n--XyZ\r\nContent-Disposition: form-data; name=\"scope\"\r\n\r\n\
                    all\r\n--XyZ--\r\n";
        assert_eq!(
            form_fields(&h, body.as_bytes()),
            vec![
                ("List-Unsubscribe".to_string(), "One-Click".to_string()),
                ("scope".to_string(), "all".to_string())
            ]
        );
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        assert!(form_fields(&h, b"List-Unsubscribe=One-Click").is_empty());
    }
}

//! The assertions API, for tests: `GET /messages` (filtered; replays only with
//! `?replays=true`), `GET /messages/wait` (returns once N messages match, so tests stop
//! sleeping), `GET /messages/{id}` (parsed: headers, text, HTML, links, source),
//! `GET /messages/{id}/raw` (the exact bytes) and `DELETE /messages` (reset between tests).

use super::inbox::{self, Filter, Message};
use super::server::{reply, Body, Shared};
use hyper::body::Bytes;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Response, StatusCode};
use sendonce_core::provider::deliverylog::DeliveryLine;
use serde_json::{json, Value};
use std::time::Duration;

/// Default and longest `timeout` of `GET /messages/wait`.
const WAIT_DEFAULT: Duration = Duration::from_secs(5);
pub(super) const WAIT_MAX: Duration = Duration::from_secs(60);

/// Answer a request under `/messages` (Postmark's `/messages/outbound` is routed before).
/// `None`: not ours.
pub(super) async fn route(
    shared: &Shared,
    method: &Method,
    path: &str,
    query: Option<&str>,
) -> Option<Response<Body>> {
    let rest = path.strip_prefix("/messages")?;
    Some(match (method, rest) {
        (&Method::GET, "") => list(shared, query).await,
        (&Method::DELETE, "") => clear(shared).await,
        (&Method::GET, "/wait") => wait(shared, query).await,
        (_, "" | "/wait") => method_not_allowed(),
        (m, r) => {
            let r = r.strip_prefix('/')?;
            let (id, raw) = match r.strip_suffix("/raw") {
                Some(id) => (id, true),
                None => (r, false),
            };
            if id.is_empty() || id.contains('/') {
                return None;
            }
            if m != Method::GET {
                return Some(method_not_allowed());
            }
            one(shared, &inbox::percent_decode(id), raw).await
        }
    })
}

fn method_not_allowed() -> Response<Body> {
    reply(
        StatusCode::METHOD_NOT_ALLOWED,
        json!({"error": "method not allowed"}),
    )
}

fn error(status: StatusCode, e: impl Into<String>) -> Response<Body> {
    reply(status, json!({"error": e.into()}))
}

/// A listing entry: the delivery line's fields (the source left out) with `id`, `via` and
/// `links`.
fn entry(l: &DeliveryLine) -> Value {
    let m = Message::of(l);
    let mut v = serde_json::to_value(l).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.remove("raw_base64");
        o.insert("id".into(), json!(m.id));
        o.insert("via".into(), json!(m.via));
        o.insert("links".into(), json!(m.links));
    }
    v
}

async fn list(shared: &Shared, query: Option<&str>) -> Response<Body> {
    let filter = match Filter::parse(query) {
        Ok(f) => f,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    match inbox::filtered(shared, filter, false).await {
        Ok(found) => reply(
            StatusCode::OK,
            Value::Array(found.iter().map(|f| entry(&f.line)).collect()),
        ),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

async fn clear(shared: &Shared) -> Response<Body> {
    match inbox::clear(shared).await {
        Ok(deleted) => reply(StatusCode::OK, json!({"deleted": deleted})),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

/// `count` (default 1) and `timeout` (default 5s, at most 60s) of `GET /messages/wait`.
fn wait_params(query: Option<&str>) -> Result<(usize, Duration), String> {
    let mut count = 1;
    let mut timeout = WAIT_DEFAULT;
    for (k, v) in inbox::form_urlencoded_pairs(query) {
        match k.as_str() {
            "count" => {
                count = v
                    .parse()
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| format!("count must be a whole number from 1, got {v:?}"))?
            }
            "timeout" => {
                timeout = sendonce_domain::clock::parse_duration(&v).map_err(|_| {
                    format!("timeout must be a duration like 5s or 500ms, got {v:?}")
                })?;
                if timeout > WAIT_MAX {
                    return Err(format!(
                        "timeout {v} is longer than the most allowed, {}s",
                        WAIT_MAX.as_secs()
                    ));
                }
            }
            _ => {}
        }
    }
    Ok((count, timeout))
}

/// Look again at every change until `count` deliveries match; 408 with what matched when the
/// time is up. The lines are read from the log only to answer.
async fn wait(shared: &Shared, query: Option<&str>) -> Response<Body> {
    let (filter, (count, timeout)) =
        match Filter::parse(query).and_then(|f| Ok((f, wait_params(query)?))) {
            Ok(p) => p,
            Err(e) => return error(StatusCode::BAD_REQUEST, e),
        };
    let mut changes = shared.journal.changes();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        // Mark the current state seen before reading: a group written during the read wakes
        // the next wait.
        changes.borrow_and_update();
        let f = filter.clone();
        let matched = inbox::query(shared, move |ix| ix.read().select(&f).count()).await;
        match matched {
            Ok(n) if n >= count => return matching(shared, &filter, None).await,
            Ok(_) => {}
            Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e),
        }
        match tokio::time::timeout_at(deadline, changes.changed()).await {
            Ok(Ok(())) => continue,
            // The writer stopped (shutting down) or the time is up.
            Ok(Err(_)) | Err(_) => {
                let late = (count, timeout);
                return matching(shared, &filter, Some(late)).await;
            }
        }
    }
}

/// The deliveries matching now, oldest first: the array, or (`late`: the count wanted and the
/// time waited) the 408 with them.
async fn matching(
    shared: &Shared,
    filter: &Filter,
    late: Option<(usize, Duration)>,
) -> Response<Body> {
    let found: Vec<Value> = match inbox::filtered(shared, filter.clone(), false).await {
        Ok(f) => f.iter().map(|f| entry(&f.line)).collect(),
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e),
    };
    let Some((count, timeout)) = late else {
        return reply(StatusCode::OK, Value::Array(found));
    };
    reply(
        StatusCode::REQUEST_TIMEOUT,
        json!({
            "error": format!(
                "{} of {count} messages arrived within {}",
                found.len(),
                humantime::format_duration(timeout)
            ),
            "wanted": count,
            "found": found.len(),
            "messages": found,
        }),
    )
}

/// `GET /messages/{id}` (parsed) or `GET /messages/{id}/raw` (exact bytes).
async fn one(shared: &Shared, id: &str, raw: bool) -> Response<Body> {
    let found = match inbox::find(shared, id).await {
        Ok(f) => f,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e),
    };
    let Some(line) = found.map(|f| f.line) else {
        return error(StatusCode::NOT_FOUND, format!("no message with id {id:?}"));
    };
    let m = Message::of(&line);
    if raw {
        let (bytes, kind) = if m.channel == "sms" {
            (line.body.clone().into_bytes(), "text/plain; charset=utf-8")
        } else {
            (m.raw.clone(), "message/rfc822")
        };
        let mut r = Response::new(Body::new(Bytes::from(bytes)));
        r.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(kind));
        return r;
    }
    let mut v = serde_json::to_value(&m).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        if m.channel == "email" {
            o.insert("raw".into(), json!(String::from_utf8_lossy(&m.raw)));
        }
        o.insert("envelope".into(), json!(line.envelope));
        o.insert("metadata".into(), json!(line.metadata));
    }
    reply(StatusCode::OK, v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_parameters_are_checked() {
        assert_eq!(wait_params(None).unwrap(), (1, WAIT_DEFAULT));
        assert_eq!(
            wait_params(Some("count=3&timeout=250ms&to=a")).unwrap(),
            (3, Duration::from_millis(250))
        );
        assert!(wait_params(Some("count=0")).unwrap_err().contains("count"));
        assert!(wait_params(Some("timeout=soon"))
            .unwrap_err()
            .contains("timeout"));
        assert!(wait_params(Some("timeout=10m"))
            .unwrap_err()
            .contains("60s"));
    }
}

//! `POST /v1/messages` and `GET /v1/messages/{id}`: transactional messages with an
//! Idempotency-Key, as Stripe documents the semantics. A new message is answered 202 (queued)
//! or, when `?wait=` saw it settle, 200; that first answer is kept and given again, with
//! `Idempotent-Replayed: true`, to every retry with the same key and body.

use super::auth::Authed;
use super::{blocking, ApiError, AppState};
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use sendonce_core::app::messages::{self, MessageRequest, MessageView, Submission};
use sendonce_domain::error::Error;
use sendonce_domain::token::Scope;
use serde::Deserialize;
use std::time::{Duration, Instant};

/// Longest `?wait=`.
const MAX_WAIT: Duration = Duration::from_secs(30);
/// How often a waiting request looks at its message.
const POLL: Duration = Duration::from_millis(25);
/// A first request that has not answered after this long died before it could: its message
/// is answered from the ledger's state (the message itself was queued once, and only once).
const STALE_MS: i64 = 2 * 60 * 1000;

/// The routes of this module, as (method, path).
pub const ROUTES: &[(&str, &str)] = &[
    ("POST", "/v1/messages"),
    ("POST", "/v1/messages/batch"),
    ("GET", "/v1/messages/{id}"),
];

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v1/messages", axum::routing::post(create))
        .route(
            "/v1/messages/batch",
            axum::routing::post(super::batch::create),
        )
        .route("/v1/messages/{id}", axum::routing::get(show))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitQuery {
    /// `5s`, `500ms`: wait up to this long for the outcome.
    wait: Option<String>,
}

fn wait_of(q: &WaitQuery) -> Result<Duration, Error> {
    let Some(w) = &q.wait else {
        return Ok(Duration::ZERO);
    };
    let d = humantime::parse_duration(w)
        .map_err(|_| Error::invalid(format!("wait={w:?} is not a duration (5s, 500ms)")))?;
    if d > MAX_WAIT {
        return Err(Error::invalid(format!(
            "wait is at most {}s",
            MAX_WAIT.as_secs()
        )));
    }
    Ok(d)
}

/// The status of an answer about `view`: 202 while queued, 200 once settled.
pub(super) fn status_of(view: &MessageView) -> StatusCode {
    if view.settled() {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    }
}

fn answer(status: StatusCode, body: String, replayed: bool) -> Response {
    let mut res = (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response();
    if replayed {
        res.headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    res
}

pub async fn create(
    State(st): State<AppState>,
    who: Authed,
    headers: HeaderMap,
    query: Result<Query<WaitQuery>, axum::extract::rejection::QueryRejection>,
    body: Result<Json<MessageRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    who.caller.require(Scope::Send).map_err(|e| who.err(e))?;
    let Query(query) = query.map_err(|e| who.err(Error::invalid(e.body_text())))?;
    let wait = wait_of(&query).map_err(|e| who.err(e))?;
    let Json(req) = body.map_err(|e| rejected(&who, e))?;
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .ok_or_else(|| {
            who.err(Error::invalid(
                "an Idempotency-Key header is required (one key per message: a retry with the \
                 same key is never sent twice)",
            ))
        })?;
    let account = who.caller.account_id;
    let group = st.group.clone();
    // Without a wait the answer is known as soon as the message is: it is kept in the
    // message's own transaction (one commit per request).
    let kept = wait.is_zero().then(queued_answer);
    let submitted = blocking(&st, move |s| {
        messages::submit(s, Some(&group), account, &key, &req, kept)
    })
    .await
    .map_err(|e| who.err(e))?;
    match submitted {
        Submission::New { view, answer: kept } => {
            if let Some(w) = &st.wake {
                w.notify_one();
            }
            match kept {
                Some((status, body)) => Ok(answer(code(status), body, false)),
                None => first_answer(&st, &who, *view, wait).await,
            }
        }
        Submission::Replay { status, body } => Ok(answer(code(status), body, true)),
        Submission::InProgress { id, since } => {
            if sendonce_domain::clock::now_ms() - since < STALE_MS {
                return Err(who.err(Error::conflict(format!(
                    "a request with this Idempotency-Key (message {id}) is still in progress; \
                     retry in a moment for its answer"
                ))));
            }
            let view = blocking(&st, move |s| messages::get(s, account, id))
                .await
                .map_err(|e| who.err(e))?;
            first_answer(&st, &who, view, Duration::ZERO).await
        }
    }
}

/// A kept status as an HTTP status.
fn code(status: u16) -> StatusCode {
    StatusCode::from_u16(status).unwrap_or(StatusCode::OK)
}

/// The answer to a new message that nobody waits for, computed from its row inside the
/// submission's transaction ([`sendonce_store::Answer`]): its status and the message as JSON.
pub(super) fn queued_answer() -> sendonce_store::Answer {
    std::sync::Arc::new(|row: &sendonce_store::MessageRow| {
        let view = MessageView::from(row.clone());
        let body = serde_json::to_string(&view)
            .map_err(|e| Error::internal(format!("cannot encode the answer: {e}")))?;
        Ok((status_of(&view).as_u16(), body))
    })
}

/// Wait for the outcome if asked, answer, and keep the answer for replays.
async fn first_answer(
    st: &AppState,
    who: &Authed,
    mut view: MessageView,
    wait: Duration,
) -> Result<Response, ApiError> {
    let account = who.caller.account_id;
    let deadline = Instant::now() + wait;
    while !view.settled() && Instant::now() < deadline {
        tokio::time::sleep(POLL).await;
        let id = view.id;
        view = blocking(st, move |s| messages::get(s, account, id))
            .await
            .map_err(|e| who.err(e))?;
    }
    let status = status_of(&view);
    let body = serde_json::to_string(&view)
        .map_err(|e| who.err(Error::internal(format!("cannot encode the answer: {e}"))))?;
    let (id, saved, group) = (view.id, body.clone(), st.group.clone());
    blocking(st, move |s| {
        messages::save_answer(s, Some(&group), account, id, status.as_u16(), &saved)
    })
    .await
    .map_err(|e| who.err(e))?;
    Ok(answer(status, body, false))
}

pub async fn show(
    State(st): State<AppState>,
    who: Authed,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    who.caller
        .require_any(&[Scope::Send, Scope::Read])
        .map_err(|e| who.err(e))?;
    // Another account's id and a malformed one are the same 404.
    let id: i64 = id
        .parse()
        .map_err(|_| who.err(Error::not_found(format!("unknown message id {id:?}"))))?;
    let account = who.caller.account_id;
    let view = blocking(&st, move |s| messages::get(s, account, id))
        .await
        .map_err(|e| who.err(e))?;
    Ok((StatusCode::OK, Json(view)).into_response())
}

/// A body axum could not read: too large (413), not JSON, or not a message (400, naming the
/// field), in the one error shape.
pub(super) fn rejected(who: &Authed, e: JsonRejection) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return who.err(Error::too_large(
            "the request body is larger than the server's limit",
        ));
    }
    who.err(Error::invalid(format!(
        "the request body: {}",
        e.body_text()
    )))
}

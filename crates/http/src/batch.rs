//! `POST /v1/messages/batch`: up to 500 transactional messages in one request, each under its
//! own Idempotency-Key (listed in `idempotency_keys`, or derived from the request's one header
//! key as `KEY#INDEX`). Each message is checked and answered on its own: the batch is answered
//! 200 with one result per message, in order, each with the status and body a single
//! `POST /v1/messages` would have had (202 and the message, a replay of a key's first answer, or
//! an error); one refused message never stops the others. All of them go through the group
//! commit at once, so a batch costs a few commits, not one per message.

use super::auth::Authed;
use super::error::public;
use super::messages::{queued_answer, rejected, status_of};
use super::{blocking, ApiError, AppState};
use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use sendonce_core::app::messages::{self, MessageRequest, Submission};
use sendonce_domain::error::{Error, Result};
use sendonce_domain::token::Scope;
use serde::Deserialize;
use serde_json::{json, Value};

/// A batch as a client sends it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    messages: Vec<MessageRequest>,
    /// One key per message, in order; else the `Idempotency-Key` header names the batch.
    #[serde(default)]
    idempotency_keys: Option<Vec<String>>,
}

/// Each message's key: its own from `idempotency_keys`, or `HEADER#INDEX`; exactly one of the
/// two must be given.
fn keys(req: &BatchRequest, header: Option<&str>) -> Result<Vec<String>> {
    match (&req.idempotency_keys, header) {
        (Some(_), Some(_)) => Err(Error::invalid(
            "give either an Idempotency-Key header (the batch's key; message i gets KEY#i) or \
             idempotency_keys (one per message), not both",
        )),
        (None, None) => Err(Error::invalid(
            "an Idempotency-Key header (the batch's key; message i gets KEY#i) or \
             idempotency_keys (one per message) is required: a retried batch is never sent twice",
        )),
        (Some(k), None) if k.len() != req.messages.len() => Err(Error::invalid(format!(
            "idempotency_keys has {} keys for {} messages",
            k.len(),
            req.messages.len()
        ))),
        (Some(k), None) => Ok(k.clone()),
        (None, Some(h)) => Ok((0..req.messages.len())
            .map(|i| format!("{h}#{i}"))
            .collect()),
    }
}

pub async fn create(
    State(st): State<AppState>,
    who: Authed,
    headers: HeaderMap,
    body: std::result::Result<Json<BatchRequest>, JsonRejection>,
) -> std::result::Result<Response, ApiError> {
    who.caller.require(Scope::Send).map_err(|e| who.err(e))?;
    let Json(req) = body.map_err(|e| rejected(&who, e))?;
    let header = headers.get("idempotency-key").and_then(|v| v.to_str().ok());
    let keys = keys(&req, header).map_err(|e| who.err(e))?;
    let items: Vec<(String, MessageRequest)> = keys.into_iter().zip(req.messages).collect();
    let (account, group) = (who.caller.account_id, st.group.clone());
    let outcomes = blocking(&st, move |s| {
        messages::submit_batch(s, &group, account, &items, Some(queued_answer()))
    })
    .await
    .map_err(|e| who.err(e))?;
    let results: Vec<Value> = outcomes
        .into_iter()
        .enumerate()
        .map(|(i, outcome)| result(&who, i, outcome))
        .collect();
    if let Some(w) = &st.wake {
        w.notify_one();
    }
    let accepted = results
        .iter()
        .filter(|r| r["status"].as_u64() < Some(300))
        .count();
    let doc = json!({
        "accepted": accepted,
        "refused": results.len() - accepted,
        "results": results,
    });
    Ok((StatusCode::OK, Json(doc)).into_response())
}

/// One message's result: a new message's answer (kept with it), a replay, or an error.
fn result(who: &Authed, index: usize, outcome: Result<Submission>) -> Value {
    let refused = |e: &Error| {
        let (status, code, message) = public(e, &who.request_id);
        json!({"index": index, "status": status.as_u16(),
               "error": {"code": code, "message": message}})
    };
    match outcome {
        Ok(Submission::New { view, answer }) => {
            let status = answer.map_or_else(|| status_of(&view).as_u16(), |(s, _)| s);
            json!({"index": index, "status": status, "message": view})
        }
        Ok(Submission::Replay { status, body }) => {
            let message = serde_json::from_str(&body).unwrap_or(Value::String(body));
            json!({"index": index, "status": status, "replayed": true, "message": message})
        }
        Ok(Submission::InProgress { id, .. }) => refused(&Error::conflict(format!(
            "a request with this Idempotency-Key (message {id}) is still in progress; retry in \
             a moment for its answer"
        ))),
        Err(e) => refused(&e),
    }
}

//! Events out over HTTP, for the caller's account: the feed (`GET /v1/events`, with a cursor and
//! a long-poll `wait`) and the webhook endpoints (`/v1/webhooks`: create with the secret shown
//! once, list, show, change, rotate the secret, replay, recent deliveries, delete), through
//! `app::events`.

use super::{body, call, created, id_of, ok, query, reading, writing};
use crate::auth::Authed;
use crate::{ApiError, AppState};
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Json, Path, Query, State};
use axum::response::Response;
use axum::routing::{get, post};
use sendonce_core::app::events::{self as app, EndpointInput, EndpointUpdate};
use sendonce_domain::clock;
use sendonce_domain::error::Error;
use serde::Deserialize;
use std::time::Duration;

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v1/events", get(feed))
        .route("/v1/webhooks", get(all).post(create))
        .route("/v1/webhooks/{id}", get(show).patch(update).delete(remove))
        .route("/v1/webhooks/{id}/rotate", post(rotate))
        .route("/v1/webhooks/{id}/replay", post(replay))
        .route("/v1/webhooks/{id}/deliveries", get(deliveries))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeedQuery {
    /// `next` of the previous page; none: from the oldest event kept.
    after: Option<String>,
    /// Comma-separated types or families (`send.failed,campaign.*`).
    types: Option<String>,
    limit: Option<usize>,
    /// Wait up to this long (`30s`, at most 60 s) for an event when there is none yet.
    wait: Option<String>,
}

/// How often a waiting feed read looks again.
const POLL: Duration = Duration::from_millis(200);

async fn feed(
    State(st): State<AppState>,
    who: Authed,
    q: Result<Query<FeedQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    reading(&who)?;
    let q = query(&who, q)?;
    let after = match q.after.as_deref() {
        Some(a) => app::parse_cursor(a).map_err(|e| who.err(e))?,
        None => Default::default(),
    };
    let types = app::parse_types(q.types.as_deref()).map_err(|e| who.err(e))?;
    let wait = match q.wait.as_deref() {
        Some(w) => clock::parse_duration_in("wait", w, Duration::ZERO, app::MAX_WAIT)
            .map_err(|e| who.err(e))?,
        None => Duration::ZERO,
    };
    let limit = q.limit.unwrap_or(app::DEFAULT_PAGE);
    if limit == 0 || limit > app::MAX_PAGE {
        return Err(who.err(Error::invalid(format!(
            "limit must be between 1 and {}",
            app::MAX_PAGE
        ))));
    }
    let account = who.caller.account_id;
    let deadline = tokio::time::Instant::now() + wait;
    let mut after = after;
    loop {
        let types = types.clone();
        let page = call(&st, &who, move |s| {
            app::feed(s, account, after, &types, limit)
        })
        .await?;
        if !page.events.is_empty() || tokio::time::Instant::now() + POLL > deadline {
            return Ok(ok(page));
        }
        // Nothing for this reader yet: read on from where the scan stopped (past other
        // accounts' events and other types), not from the start again.
        after = app::parse_cursor(&page.next).map_err(|e| who.err(e))?;
        tokio::time::sleep(POLL).await;
    }
}

async fn all(State(st): State<AppState>, who: Authed) -> Result<Response, ApiError> {
    reading(&who)?;
    let account = who.caller.account_id;
    Ok(ok(
        call(&st, &who, move |s| app::endpoints(s, account)).await?
    ))
}

/// A new endpoint, as `POST /v1/webhooks` takes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewEndpoint {
    url: String,
    /// Types or families; none or empty: every event.
    #[serde(default)]
    types: Vec<String>,
    /// Deliver each subject's events one at a time, in order.
    #[serde(default)]
    ordered: bool,
}

async fn create(
    State(st): State<AppState>,
    who: Authed,
    b: Result<Json<NewEndpoint>, JsonRejection>,
) -> Result<Response, ApiError> {
    writing(&who)?;
    let b = body(&who, b)?;
    let account = who.caller.account_id;
    let (keys, events) = (st.keys.clone(), st.events.clone());
    let input = EndpointInput {
        url: b.url,
        types: b.types,
        ordered: b.ordered,
    };
    let made = call(&st, &who, move |s| {
        app::create_endpoint(s, keys.as_deref(), &events.allow, account, &input)
    })
    .await?;
    Ok(created(made))
}

async fn show(
    State(st): State<AppState>,
    who: Authed,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    reading(&who)?;
    let (account, id) = (who.caller.account_id, id_of(&who, "webhook", &id)?);
    Ok(ok(
        call(&st, &who, move |s| app::endpoint(s, account, id)).await?
    ))
}

/// A change, as `PATCH /v1/webhooks/{id}` takes it: each field given replaces the stored one.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Change {
    url: Option<String>,
    types: Option<Vec<String>>,
    ordered: Option<bool>,
    /// false: disable; true: enable (also an endpoint the circuit breaker turned off).
    enabled: Option<bool>,
}

async fn update(
    State(st): State<AppState>,
    who: Authed,
    Path(id): Path<String>,
    b: Result<Json<Change>, JsonRejection>,
) -> Result<Response, ApiError> {
    writing(&who)?;
    let (account, id) = (who.caller.account_id, id_of(&who, "webhook", &id)?);
    let b = body(&who, b)?;
    let events = st.events.clone();
    let u = EndpointUpdate {
        url: b.url,
        types: b.types,
        ordered: b.ordered,
        enabled: b.enabled,
    };
    Ok(ok(call(&st, &who, move |s| {
        app::update_endpoint(s, &events.allow, account, id, &u)
    })
    .await?))
}

async fn remove(
    State(st): State<AppState>,
    who: Authed,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    writing(&who)?;
    let (account, id) = (who.caller.account_id, id_of(&who, "webhook", &id)?);
    call(&st, &who, move |s| app::delete_endpoint(s, account, id)).await?;
    Ok(ok(serde_json::json!({ "deleted": id })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rotate {
    /// How long the current secret keeps signing beside the new one (`24h` by default).
    overlap: Option<String>,
}

async fn rotate(
    State(st): State<AppState>,
    who: Authed,
    Path(id): Path<String>,
    b: Option<Json<Rotate>>,
) -> Result<Response, ApiError> {
    writing(&who)?;
    let (account, id) = (who.caller.account_id, id_of(&who, "webhook", &id)?);
    let overlap = match b.and_then(|Json(r)| r.overlap) {
        Some(t) => clock::parse_duration_in("overlap", &t, Duration::ZERO, clock::MAX_DURATION)
            .map_err(|e| who.err(e))?,
        None => app::DEFAULT_OVERLAP,
    };
    let keys = st.keys.clone();
    Ok(ok(call(&st, &who, move |s| {
        app::rotate_endpoint(s, keys.as_deref(), account, id, overlap)
    })
    .await?))
}

/// What to deliver again: one event, a range of event ids, or the events of a time range.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Replay {
    /// `evt_…` (as in a delivery's `webhook-id`).
    event: Option<String>,
    from: Option<String>,
    to: Option<String>,
    /// RFC 3339 times: the events that happened between them.
    since: Option<String>,
    until: Option<String>,
}

fn event_number(who: &Authed, text: &str) -> Result<i64, ApiError> {
    app::parse_event_id(text).map_err(|e| who.err(e))
}

async fn replay(
    State(st): State<AppState>,
    who: Authed,
    Path(id): Path<String>,
    b: Result<Json<Replay>, JsonRejection>,
) -> Result<Response, ApiError> {
    writing(&who)?;
    let (account, id) = (who.caller.account_id, id_of(&who, "webhook", &id)?);
    let b = body(&who, b)?;
    if let (Some(since), Some(until), None, None, None) =
        (b.since, b.until, &b.event, &b.from, &b.to)
    {
        let queued = call(&st, &who, move |s| {
            app::replay_times(s, account, id, &since, &until)
        })
        .await?;
        return Ok(ok(serde_json::json!({ "queued": queued })));
    }
    let (from, to) = match (&b.event, &b.from, &b.to) {
        (Some(e), None, None) => {
            let n = event_number(&who, e)?;
            (n, n)
        }
        (None, Some(f), Some(t)) => (event_number(&who, f)?, event_number(&who, t)?),
        _ => {
            return Err(who.err(Error::invalid(
                "replay takes `event`, both `from` and `to` (event ids), or both `since` and \
                 `until` (RFC 3339 times)",
            )))
        }
    };
    let queued = call(&st, &who, move |s| app::replay(s, account, id, from, to)).await?;
    Ok(ok(serde_json::json!({ "queued": queued })))
}

async fn deliveries(
    State(st): State<AppState>,
    who: Authed,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    reading(&who)?;
    let (account, id) = (who.caller.account_id, id_of(&who, "webhook", &id)?);
    Ok(ok(call(&st, &who, move |s| {
        app::deliveries(s, account, id)
    })
    .await?))
}

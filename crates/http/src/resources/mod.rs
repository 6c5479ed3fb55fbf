//! The resource routes of the API: subscribers, lists, suppressions, campaigns, doubts and
//! stored templates of the token's own account, and its events out (feed and webhooks). Reads need scope `read`, writes `admin`; an id
//! of another account is answered 404 exactly as an id that does not exist (the ownership
//! checks are in `app/`).

mod campaigns;
mod events;
mod lists;
mod subscribers;
mod templates;

use super::auth::Authed;
use super::{blocking, ApiError, AppState};
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Json, Query};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use sendonce_domain::error::{Error, Result};
use sendonce_domain::token::Scope;
use serde::Serialize;

/// The routes of this module, as (method, path).
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/v1/subscribers"),
    ("POST", "/v1/subscribers"),
    ("GET", "/v1/subscribers/{id}"),
    ("PATCH", "/v1/subscribers/{id}"),
    ("DELETE", "/v1/subscribers/{id}"),
    ("GET", "/v1/subscribers/{id}/export"),
    ("POST", "/v1/subscribers/{id}/erase"),
    ("GET", "/v1/lists"),
    ("POST", "/v1/lists"),
    ("GET", "/v1/lists/{id}"),
    ("DELETE", "/v1/lists/{id}"),
    ("GET", "/v1/suppressions"),
    ("POST", "/v1/suppressions"),
    ("DELETE", "/v1/suppressions/{channel}/{address}"),
    ("GET", "/v1/campaigns"),
    ("POST", "/v1/campaigns"),
    ("GET", "/v1/campaigns/{id}"),
    ("POST", "/v1/campaigns/{id}/approve"),
    ("POST", "/v1/campaigns/{id}/pause"),
    ("POST", "/v1/campaigns/{id}/resume"),
    ("POST", "/v1/campaigns/{id}/cancel"),
    ("GET", "/v1/campaigns/{id}/report"),
    ("GET", "/v1/campaigns/{id}/doubts"),
    ("POST", "/v1/doubts/{send_id}/resolve"),
    ("GET", "/v1/templates"),
    ("POST", "/v1/templates"),
    ("GET", "/v1/templates/{name}"),
    ("GET", "/v1/events"),
    ("GET", "/v1/webhooks"),
    ("POST", "/v1/webhooks"),
    ("GET", "/v1/webhooks/{id}"),
    ("PATCH", "/v1/webhooks/{id}"),
    ("DELETE", "/v1/webhooks/{id}"),
    ("POST", "/v1/webhooks/{id}/rotate"),
    ("POST", "/v1/webhooks/{id}/replay"),
    ("GET", "/v1/webhooks/{id}/deliveries"),
];

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .merge(subscribers::routes())
        .merge(lists::routes())
        .merge(campaigns::routes())
        .merge(templates::routes())
        .merge(events::routes())
}

/// A read: scope `read` (or `admin`).
fn reading(who: &Authed) -> Result<(), ApiError> {
    who.caller.require(Scope::Read).map_err(|e| who.err(e))
}

/// A write: scope `admin`.
fn writing(who: &Authed) -> Result<(), ApiError> {
    who.caller.require(Scope::Admin).map_err(|e| who.err(e))
}

/// The caller's account, as the use cases take an account (its id).
fn account(who: &Authed) -> String {
    who.caller.account_id.to_string()
}

/// A numeric id from the path; a malformed one is the same 404 as an unknown one.
fn id_of(who: &Authed, kind: &str, text: &str) -> Result<i64, ApiError> {
    text.trim()
        .parse()
        .map_err(|_| who.err(Error::not_found(format!("unknown {kind} id {text:?}"))))
}

/// Run a use case on a blocking thread; its error is this request's.
async fn call<T: Send + 'static>(
    st: &AppState,
    who: &Authed,
    f: impl FnOnce(&sendonce_store::Store) -> Result<T> + Send + 'static,
) -> Result<T, ApiError> {
    blocking(st, f).await.map_err(|e| who.err(e))
}

/// A JSON body, or the error of one that could not be read (413, or 400 naming the field).
fn body<T>(who: &Authed, b: Result<Json<T>, JsonRejection>) -> Result<T, ApiError> {
    b.map(|Json(t)| t)
        .map_err(|e| super::messages::rejected(who, e))
}

/// A query string, or 400 naming what is wrong with it.
fn query<T>(who: &Authed, q: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(t)| t)
        .map_err(|e| who.err(Error::invalid(e.body_text())))
}

/// 200 with `v`.
fn ok<T: Serialize>(v: T) -> Response {
    (StatusCode::OK, Json(v)).into_response()
}

/// 201 with `v`: something was created.
fn created<T: Serialize>(v: T) -> Response {
    (StatusCode::CREATED, Json(v)).into_response()
}

//! `/v1/templates` (save a version, list the latest, show one version) of the caller's account,
//! through `app::templates`.

use super::{account, body, call, created, ok, query, reading, writing};
use crate::auth::Authed;
use crate::{ApiError, AppState};
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Json, Path, Query, State};
use axum::response::Response;
use axum::routing::get;
use sendonce_core::app::templates::{self, TemplateRequest};
use serde::Deserialize;

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v1/templates", get(all).post(save))
        .route("/v1/templates/{name}", get(show))
}

async fn all(State(st): State<AppState>, who: Authed) -> Result<Response, ApiError> {
    reading(&who)?;
    let acct = account(&who);
    Ok(ok(
        call(&st, &who, move |s| templates::list(s, &acct)).await?
    ))
}

async fn save(
    State(st): State<AppState>,
    who: Authed,
    b: Result<Json<TemplateRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    writing(&who)?;
    let req = body(&who, b)?;
    let acct = account(&who);
    let saved = call(&st, &who, move |s| templates::save(s, &acct, &req)).await?;
    Ok(created(saved))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Version {
    /// Default: the latest.
    version: Option<i64>,
}

async fn show(
    State(st): State<AppState>,
    who: Authed,
    Path(name): Path<String>,
    q: Result<Query<Version>, QueryRejection>,
) -> Result<Response, ApiError> {
    reading(&who)?;
    let v = query(&who, q)?;
    let acct = account(&who);
    Ok(ok(call(&st, &who, move |s| {
        templates::show(s, &acct, &name, v.version)
    })
    .await?))
}

//! Operations endpoints: `/healthz` (the process answers), `/readyz` (the database writable,
//! its schema version, the in-process worker alive when there is one), and the JSON 404.

use super::error::body;
use super::{blocking, AppState};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sendonce_store::prelude::*;
use serde_json::json;
use std::sync::atomic::Ordering;

/// The routes of this module, as (method, path).
pub const ROUTES: &[(&str, &str)] = &[("GET", "/healthz"), ("GET", "/readyz")];

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/healthz", axum::routing::get(healthz))
        .route("/readyz", axum::routing::get(readyz))
}

pub async fn healthz() -> Response {
    Json(json!({"status": "ok"})).into_response()
}

pub async fn readyz(State(st): State<AppState>) -> Response {
    let db = blocking(&st, |s| s.check_writable()).await;
    let worker = st.worker_alive.as_ref().map(|a| a.load(Ordering::SeqCst));
    let ready = db.is_ok() && worker != Some(false);
    let target = sendonce_store::Target::parse(&st.ops.db);
    let doc = json!({
        "status": if ready { "ready" } else { "not_ready" },
        "database": if db.is_ok() { "ok" } else { "unavailable" },
        "store": target.kind(),
        "schema_version": target.schema_version(),
        "worker": match worker { None => "none", Some(true) => "running", Some(false) => "stopped" },
    });
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(doc)).into_response()
}

pub async fn not_found(req: axum::extract::Request) -> Response {
    let (parts, _) = req.into_parts();
    let id = super::auth::request_id(&parts);
    body(StatusCode::NOT_FOUND, "not_found", "no such route", &id)
}

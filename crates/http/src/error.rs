//! The one place HTTP statuses are decided: an error kind becomes a status and the one JSON
//! error shape, `{"error": {"code", "message", "request_id"}}`. Errors that are not the
//! client's (database, I/O, damage, bugs) are logged with the request id and answered with a
//! generic message: no SQL, path or secret reaches a client.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sendonce_domain::error::{Error, ErrorKind};
use serde_json::json;

/// An error on its way to the client, with the request it belongs to.
#[derive(Debug)]
pub struct ApiError {
    pub error: Error,
    pub request_id: String,
}

/// The status and the `code` of an error kind.
pub fn status_for(kind: ErrorKind) -> (StatusCode, &'static str) {
    match kind {
        ErrorKind::Invalid => (StatusCode::BAD_REQUEST, "invalid"),
        ErrorKind::NotFound => (StatusCode::NOT_FOUND, "not_found"),
        ErrorKind::Conflict => (StatusCode::CONFLICT, "conflict"),
        ErrorKind::KeyReused => (StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused"),
        ErrorKind::TooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
        ErrorKind::Limited => (StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
        ErrorKind::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
        ErrorKind::Forbidden => (StatusCode::FORBIDDEN, "forbidden"),
        ErrorKind::Busy => (StatusCode::SERVICE_UNAVAILABLE, "busy"),
        ErrorKind::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        ErrorKind::Guarded => (StatusCode::SERVICE_UNAVAILABLE, "guarded"),
        ErrorKind::Database
        | ErrorKind::Io
        | ErrorKind::Provider
        | ErrorKind::Damaged
        | ErrorKind::Internal
        | ErrorKind::ClosedOutput => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
    }
}

/// The body of an error answer.
pub fn body(status: StatusCode, code: &str, message: &str, request_id: &str) -> Response {
    let doc = json!({"error": {"code": code, "message": message, "request_id": request_id}});
    (status, Json(doc)).into_response()
}

/// The status, code and message an error is answered with: a server fault is logged and
/// answered without its details.
pub fn public(error: &Error, request_id: &str) -> (StatusCode, &'static str, String) {
    let (status, code) = status_for(error.kind);
    let message = if status.is_server_error() && status != StatusCode::SERVICE_UNAVAILABLE {
        tracing::error!(request_id = %request_id, error = %error, "request failed");
        format!("internal error (request {request_id}); the server log has the details")
    } else {
        error.message.clone()
    };
    (status, code, message)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, message) = public(&self.error, &self.request_id);
        body(status, code, &message, &self.request_id)
    }
}

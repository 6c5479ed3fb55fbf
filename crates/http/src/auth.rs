//! Who is calling: the `Authorization: Bearer TOKEN` header checked against the stored token
//! hashes (`app::tokens`), giving the account every handler scopes its reads and writes to.
//! The token itself is never logged or echoed.

use super::{blocking, ApiError, AppState};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use sendonce_core::app::tokens::{self, Caller};
use sendonce_domain::error::Error;

/// This request's id (set by the request-log middleware).
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// The request id of `parts`, or a fresh one.
pub fn request_id(parts: &Parts) -> String {
    parts
        .extensions
        .get::<RequestId>()
        .map(|r| r.0.clone())
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string())
}

/// An authenticated caller and the id of its request.
pub struct Authed {
    pub caller: Caller,
    pub request_id: String,
}

impl Authed {
    /// An error of this request.
    pub fn err(&self, error: Error) -> ApiError {
        ApiError {
            error,
            request_id: self.request_id.clone(),
        }
    }
}

impl FromRequestParts<AppState> for Authed {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, ApiError> {
        let request_id = request_id(parts);
        let err = |error| ApiError {
            error,
            request_id: request_id.clone(),
        };
        let presented = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(|t| t.trim().to_string())
            .ok_or_else(|| {
                err(Error::unauthorized(
                    "send an API token: Authorization: Bearer TOKEN (`sendonce token create`)",
                ))
            })?;
        let caller = blocking(st, move |s| tokens::authenticate(s, &presented))
            .await
            .map_err(err)?;
        Ok(Authed { caller, request_id })
    }
}

//! Provider webhooks: `POST /hooks/{twilio|postmark|resend|standard|mailgun|sendgrid|brevo|
//! ses}/{account}`. No API token: each request is verified the way its provider signs
//! (`app::webhooks`), with the secret, key or certificate of the account's `[[webhook]]` entry;
//! an unknown account and an unconfigured source are the same 404. Twilio is answered with
//! empty TwiML, the others with a small JSON receipt (SendGrid and SES: one per event).

use super::auth::request_id;
use super::{blocking, ApiError, AppState};
use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use sendonce_core::app::webhooks::{self, Inbound};
use sendonce_domain::webhook::Source;

/// The routes of this module, as (method, path).
pub const ROUTES: &[(&str, &str)] = &[
    ("POST", "/hooks/twilio/{account}"),
    ("POST", "/hooks/postmark/{account}"),
    ("POST", "/hooks/resend/{account}"),
    ("POST", "/hooks/standard/{account}"),
    ("POST", "/hooks/mailgun/{account}"),
    ("POST", "/hooks/sendgrid/{account}"),
    ("POST", "/hooks/brevo/{account}"),
    ("POST", "/hooks/ses/{account}"),
];

/// One route per source, each answered by [`handle`] with its source.
pub fn routes() -> axum::Router<AppState> {
    use axum::routing::post;
    Source::ALL
        .into_iter()
        .fold(axum::Router::new(), |router, source| {
            let path = format!("/hooks/{}/{{account}}", source.as_str());
            let answer = move |State(st): State<AppState>, Path(a): Path<String>, req: Request| {
                handle(st, source, a, req)
            };
            router.route(&path, post(answer))
        })
}

/// The headers any provider signs with (copied, lower-case; nothing else is looked at).
const SIGNING_HEADERS: &[&str] = &[
    "x-twilio-signature",
    "authorization",
    "svix-id",
    "svix-timestamp",
    "svix-signature",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "x-twilio-email-event-webhook-signature",
    "x-twilio-email-event-webhook-timestamp",
];

async fn handle(st: AppState, source: Source, account: String, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let rid = request_id(&parts);
    let err = |error| ApiError {
        error,
        request_id: rid.clone(),
    };
    let limit = st.body_limit;
    let body: Bytes = match axum::body::to_bytes(body, limit).await {
        Ok(b) => b,
        Err(_) => {
            return err(sendonce_domain::error::Error::new(
                sendonce_domain::error::ErrorKind::TooLarge,
                format!("the webhook body is larger than {limit} bytes or was cut"),
            ))
            .into_response()
        }
    };
    let path_and_query = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| parts.uri.path().to_string());
    let headers: Vec<(String, String)> = SIGNING_HEADERS
        .iter()
        .filter_map(|h| {
            let v = parts.headers.get(*h)?.to_str().ok()?;
            Some((h.to_string(), v.to_string()))
        })
        .collect();
    let hooks = st.hooks.clone();
    let now_ms = sendonce_domain::clock::now_ms();
    let got = blocking(&st, move |s| {
        let req = Inbound {
            source,
            account: &account,
            path_and_query: &path_and_query,
            headers: &headers,
            body: &body,
            now_ms,
        };
        webhooks::receive(s, &hooks, &req)
    })
    .await;
    match got {
        Ok(_) if source == Source::Twilio => (
            [(axum::http::header::CONTENT_TYPE, "text/xml")],
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response/>",
        )
            .into_response(),
        Ok(receipt) => Json(receipt).into_response(),
        Err(e) => err(e).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listed_routes_are_the_served_ones() {
        let served: Vec<String> = Source::ALL
            .iter()
            .map(|s| format!("/hooks/{}/{{account}}", s.as_str()))
            .collect();
        let listed: Vec<&str> = ROUTES.iter().map(|(_, p)| *p).collect();
        assert_eq!(served, listed);
        assert!(ROUTES.iter().all(|(m, _)| *m == "POST"));
    }
}

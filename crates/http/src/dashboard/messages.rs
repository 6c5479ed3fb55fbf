//! `/admin/messages`: the account's transactional stream (the API's messages), newest first,
//! searched by the start of a recipient, a state or a provider's message id, paged by keyset.
//! Read-only: a message is followed here, never changed.

use super::{fail, page, Signed};
use crate::{blocking, AppState};
use axum::extract::{Query, State};
use axum::response::Response;
use axum::routing::get;
use minijinja::context;
use sendonce_core::app::messages::{self, MessageFilter};
use serde::Deserialize;

pub const ROUTES: &[(&str, &str)] = &[("GET", "/admin/messages")];

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new().route("/admin/messages", get(all))
}

/// The search form's fields, all optional.
#[derive(Debug, Default, Deserialize)]
struct Search {
    #[serde(default)]
    to: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    provider_id: Option<String>,
    #[serde(default)]
    before: Option<i64>,
}

/// The states the form offers, as (value, label).
const STATES: &[(&str, &str)] = &[
    ("", "Any"),
    ("queued", "Queued"),
    ("sent", "Sent"),
    ("suppressed", "Suppressed"),
    ("failed", "Failed"),
    ("in_doubt", "In doubt"),
];

async fn all(State(st): State<AppState>, Signed(session): Signed, q: Query<Search>) -> Response {
    let Query(q) = q;
    let acct = session.admin.account_id.to_string();
    let (to, status, provider_id, before) = (
        q.to.clone(),
        q.status.clone(),
        q.provider_id.clone(),
        q.before,
    );
    let res = blocking(&st, move |s| {
        let f = MessageFilter {
            to: to.as_deref(),
            status: status.as_deref(),
            provider_id: provider_id.as_deref(),
            before,
        };
        messages::page(s, &acct, &f)
    })
    .await;
    let next = |before: i64| {
        form_urlencoded::Serializer::new(String::new())
            .append_pair("to", q.to.as_deref().unwrap_or(""))
            .append_pair("status", q.status.as_deref().unwrap_or(""))
            .append_pair("provider_id", q.provider_id.as_deref().unwrap_or(""))
            .append_pair("before", &before.to_string())
            .finish()
    };
    match res {
        Ok(p) => page(
            &session,
            "messages",
            "admin/messages.html",
            context! {
                title => "Messages", messages => p.messages,
                next => p.next_before.map(next), paged => q.before.is_some(),
                to => q.to, status => q.status.unwrap_or_default(),
                provider_id => q.provider_id, states => STATES,
            },
        ),
        Err(e) => fail(Some(&session), &e),
    }
}

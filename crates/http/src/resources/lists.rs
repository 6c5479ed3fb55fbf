//! `/v1/lists` (list, create, show, remove) and `/v1/suppressions` (list, add, remove) of the
//! caller's account, through `app::lists` and `app::suppressions`.

use super::{account, body, call, created, ok, reading, writing};
use crate::auth::Authed;
use crate::{ApiError, AppState};
use axum::extract::rejection::JsonRejection;
use axum::extract::{Json, Path, State};
use axum::response::Response;
use axum::routing::{delete, get};
use sendonce_core::app::lists::{self, NewListRequest};
use sendonce_core::app::suppressions::{self, Entry};
use sendonce_domain::address::Channel;
use sendonce_domain::error::Error;
use sendonce_store::ConfirmContent;
use serde::Deserialize;

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v1/lists", get(all).post(create))
        .route("/v1/lists/{id}", get(show).delete(remove))
        .route("/v1/suppressions", get(suppressed).post(suppress))
        .route("/v1/suppressions/{channel}/{address}", delete(unsuppress))
}

async fn all(State(st): State<AppState>, who: Authed) -> Result<Response, ApiError> {
    reading(&who)?;
    let acct = account(&who);
    Ok(ok(call(&st, &who, move |s| lists::list(s, &acct)).await?))
}

/// A new list, as `list create` takes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewList {
    name: String,
    description: Option<String>,
    /// `single` (the default) or `double`.
    optin: Option<String>,
    /// Takes signups from the public form (`/subscribe`).
    #[serde(default)]
    public: bool,
    /// A double opt-in list's confirmation message: sender (required), subject and text
    /// body templates (default: `domain::optin`'s).
    confirm_from: Option<String>,
    confirm_subject: Option<String>,
    confirm_body: Option<String>,
}

async fn create(
    State(st): State<AppState>,
    who: Authed,
    b: Result<Json<NewList>, JsonRejection>,
) -> Result<Response, ApiError> {
    writing(&who)?;
    let n = body(&who, b)?;
    let acct = account(&who);
    let list = call(&st, &who, move |s| {
        let req = NewListRequest {
            account: &acct,
            name: &n.name,
            description: n.description.as_deref(),
            optin: n.optin.as_deref().unwrap_or("single"),
            public: n.public,
            confirm: ConfirmContent {
                from: n.confirm_from.as_deref(),
                subject: n.confirm_subject.as_deref(),
                body: n.confirm_body.as_deref(),
            },
        };
        lists::create(s, &req)
    })
    .await?;
    Ok(created(list))
}

async fn show(
    State(st): State<AppState>,
    who: Authed,
    Path(key): Path<String>,
) -> Result<Response, ApiError> {
    reading(&who)?;
    let acct = account(&who);
    Ok(ok(
        call(&st, &who, move |s| lists::show(s, &acct, &key)).await?
    ))
}

async fn remove(
    State(st): State<AppState>,
    who: Authed,
    Path(key): Path<String>,
) -> Result<Response, ApiError> {
    writing(&who)?;
    let acct = account(&who);
    Ok(ok(
        call(&st, &who, move |s| lists::remove(s, &acct, &key)).await?
    ))
}

async fn suppressed(State(st): State<AppState>, who: Authed) -> Result<Response, ApiError> {
    reading(&who)?;
    let acct = account(&who);
    Ok(ok(
        call(&st, &who, move |s| suppressions::list(s, &acct)).await?
    ))
}

/// An address to suppress on one channel, and why.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewSuppression {
    channel: String,
    address: String,
    reason: Option<String>,
}

async fn suppress(
    State(st): State<AppState>,
    who: Authed,
    b: Result<Json<NewSuppression>, JsonRejection>,
) -> Result<Response, ApiError> {
    writing(&who)?;
    let n = body(&who, b)?;
    let acct = account(&who);
    let added = call(&st, &who, move |s| {
        let channel: Channel = n.channel.parse()?;
        let entry = Entry::new(channel, &n.address)?;
        suppressions::add(s, &acct, &entry, n.reason.as_deref().unwrap_or("manual"))
    })
    .await?;
    Ok(if added.added {
        created(added)
    } else {
        ok(added)
    })
}

async fn unsuppress(
    State(st): State<AppState>,
    who: Authed,
    Path((channel, address)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    writing(&who)?;
    let acct = account(&who);
    let removed = call(&st, &who, move |s| {
        let channel: Channel = channel
            .parse()
            .map_err(|_| Error::not_found(format!("unknown channel {channel:?} (email, sms)")))?;
        let entry = Entry::new(channel, &address)?;
        suppressions::remove(s, &acct, &entry)
    })
    .await?;
    Ok(ok(removed))
}

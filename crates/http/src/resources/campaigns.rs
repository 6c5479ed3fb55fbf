//! `/v1/campaigns` (list, create, show with counts per state, approve, pause, resume, cancel,
//! report pages) and the doubts of a campaign with their resolution. Every campaign and send id
//! is checked to be the caller's (`app::campaigns::owned`, `app::doubts::owned_send`) before
//! anything else reads or changes it.

use super::{account, body, call, created, id_of, ok, query, reading, writing};
use crate::auth::Authed;
use crate::{ApiError, AppState};
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Json, Path, Query, State};
use axum::response::Response;
use axum::routing::{get, post};
use sendonce_core::app::campaigns::{self, Draft};
use sendonce_core::app::{doubts, limits};
use sendonce_domain::clock;
use sendonce_domain::error::Result;
use sendonce_store::Store;
use serde::Deserialize;

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v1/campaigns", get(list).post(create))
        .route("/v1/campaigns/{id}", get(show))
        .route("/v1/campaigns/{id}/approve", post(approve))
        .route("/v1/campaigns/{id}/pause", post(pause))
        .route("/v1/campaigns/{id}/resume", post(resume))
        .route("/v1/campaigns/{id}/cancel", post(cancel))
        .route("/v1/campaigns/{id}/report", get(report))
        .route("/v1/campaigns/{id}/doubts", get(in_doubt))
        .route("/v1/doubts/{send_id}/resolve", post(resolve))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    status: Option<String>,
}

async fn list(
    State(st): State<AppState>,
    who: Authed,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    reading(&who)?;
    let q = query(&who, q)?;
    let acct = account(&who);
    let list = call(&st, &who, move |s| {
        let status = q
            .status
            .as_deref()
            .map(campaigns::parse_status)
            .transpose()?;
        campaigns::list(s, Some(&acct), status)
    })
    .await?;
    Ok(ok(list))
}

/// A new draft, as `campaign create` takes it (the bodies inline instead of files).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewCampaign {
    name: String,
    channel: String,
    from: Option<String>,
    subject: Option<String>,
    text: Option<String>,
    html: Option<String>,
    reply_to: Option<String>,
    /// Lists (ids or names); none: every confirmed subscriber of the account.
    #[serde(default)]
    lists: Vec<String>,
    filter: Option<String>,
    /// Receipts and the like: no List-Unsubscribe, approvable without a public URL.
    #[serde(default)]
    transactional: bool,
    /// `HH:MM-HH:MM` in each recipient's zone, or `any`; absent: the account's default.
    send_window: Option<String>,
    /// SMS quiet hours `HH:MM-HH:MM`, or `off`; absent: the account's.
    sms_hours: Option<String>,
}

async fn create(
    State(st): State<AppState>,
    who: Authed,
    b: Result<Json<NewCampaign>, JsonRejection>,
) -> Result<Response, ApiError> {
    writing(&who)?;
    let n = body(&who, b)?;
    let acct = account(&who);
    let made = call(&st, &who, move |s| {
        let draft = Draft {
            name: n.name,
            channel: n.channel.parse()?,
            sender: n.from,
            subject: n.subject,
            body: n.text.unwrap_or_default(),
            html: n.html,
            reply_to: n.reply_to,
            filter: n.filter,
            transactional: n.transactional,
            send_window: n.send_window,
            sms_hours: n.sms_hours,
        }
        .checked()?;
        campaigns::create(s, &acct, &draft, &n.lists)
    })
    .await?;
    Ok(created(made))
}

/// Campaign `text` of the caller's account, or the 404 of an unknown one.
async fn owned<T: Send + 'static>(
    st: &AppState,
    who: &Authed,
    text: &str,
    f: impl FnOnce(&Store, i64) -> Result<T> + Send + 'static,
) -> Result<T, ApiError> {
    let id = id_of(who, "campaign", text)?;
    let account_id = who.caller.account_id;
    call(st, who, move |s| {
        campaigns::owned(s, account_id, id)?;
        f(s, id)
    })
    .await
}

async fn show(
    State(st): State<AppState>,
    who: Authed,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    reading(&who)?;
    Ok(ok(owned(&st, &who, &id, campaigns::status).await?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApproveQuery {
    /// RFC 3339; now when absent.
    at: Option<String>,
}

async fn approve(
    State(st): State<AppState>,
    who: Authed,
    Path(id): Path<String>,
    q: Result<Query<ApproveQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    writing(&who)?;
    let q = query(&who, q)?;
    let links = st.links.clone();
    let approved = owned(&st, &who, &id, move |s, id| {
        let at = match &q.at {
            Some(t) => clock::parse_rfc3339_ms(t)?,
            None => clock::now_ms(),
        };
        campaigns::approve(s, id, at, links.as_deref(), campaigns::Empty::Warn)
    })
    .await?;
    Ok(ok(approved))
}

async fn pause(
    State(st): State<AppState>,
    who: Authed,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    writing(&who)?;
    Ok(ok(owned(&st, &who, &id, campaigns::pause).await?))
}

async fn resume(
    State(st): State<AppState>,
    who: Authed,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    writing(&who)?;
    Ok(ok(owned(&st, &who, &id, campaigns::resume).await?))
}

async fn cancel(
    State(st): State<AppState>,
    who: Authed,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    writing(&who)?;
    Ok(ok(owned(&st, &who, &id, campaigns::cancel).await?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportQuery {
    /// A send id: the page starts after it.
    after: Option<i64>,
    limit: Option<usize>,
}

async fn report(
    State(st): State<AppState>,
    who: Authed,
    Path(id): Path<String>,
    q: Result<Query<ReportQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    reading(&who)?;
    let q = query(&who, q)?;
    let page = owned(&st, &who, &id, move |s, id| {
        campaigns::report_page(s, id, q.after.unwrap_or(0), limits::page(q.limit)?)
    })
    .await?;
    Ok(ok(page))
}

async fn in_doubt(
    State(st): State<AppState>,
    who: Authed,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    reading(&who)?;
    Ok(ok(owned(&st, &who, &id, doubts::list).await?))
}

/// What happened to a send in doubt.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Outcome {
    /// It was delivered.
    Sent,
    /// It was not: send it again.
    Requeue,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resolution {
    #[serde(rename = "as")]
    outcome: Outcome,
}

async fn resolve(
    State(st): State<AppState>,
    who: Authed,
    Path(send_id): Path<String>,
    b: Result<Json<Resolution>, JsonRejection>,
) -> Result<Response, ApiError> {
    writing(&who)?;
    let send_id = id_of(&who, "send", &send_id)?;
    let r = body(&who, b)?;
    let (account_id, token_id) = (who.caller.account_id, who.caller.token_id);
    let resolved = call(&st, &who, move |s| {
        doubts::owned_send(s, account_id, send_id)?;
        let sent = matches!(r.outcome, Outcome::Sent);
        let by = format!("api token {token_id}");
        let decision = doubts::Decision::new(send_id, sent, !sent, Some(by), None)?;
        doubts::resolve(s, &decision)
    })
    .await?;
    Ok(ok(resolved))
}

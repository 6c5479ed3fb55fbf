//! `/v1/subscribers`: list (cursor paging, status filter), create (optionally joining lists,
//! with the consent the application declares), show, change, remove, export and erase one
//! subscriber of the caller's account, by id, email or phone, as `sendonce subscriber ...`
//! does through the same use cases.

use super::{account, body, call, created, ok, query, reading, writing};
use crate::auth::Authed;
use crate::{ApiError, AppState};
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Json, Path, Query, State};
use axum::response::Response;
use axum::routing::{get, post};
use sendonce_core::app::privacy::{self, IpPolicy};
use sendonce_core::app::subscribers::{self, Page, Update};
use sendonce_core::app::{import, limits};
use sendonce_store::Consent;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v1/subscribers", get(list).post(create))
        .route(
            "/v1/subscribers/{id}",
            get(show).patch(change).delete(remove),
        )
        .route("/v1/subscribers/{id}/export", get(export))
        .route("/v1/subscribers/{id}/erase", post(erase))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    after: Option<i64>,
    limit: Option<usize>,
    status: Option<String>,
}

/// A page of subscribers and the cursor of the next one (`null`: this was the last).
#[derive(Debug, Serialize)]
struct Listed {
    #[serde(flatten)]
    page: subscribers::Subscribers,
    next_after: Option<i64>,
}

async fn list(
    State(st): State<AppState>,
    who: Authed,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    reading(&who)?;
    let q = query(&who, q)?;
    let acct = account(&who);
    let page = call(&st, &who, move |s| {
        let limit = limits::page(q.limit)?;
        let page = Page {
            account: &acct,
            status: subscribers::status_filter(q.status.as_deref())?,
            after: q.after.unwrap_or(0),
            limit,
        };
        let page = subscribers::list(s, &page)?;
        let last = page.subscribers.last().map(|s| s.id);
        let next_after = limits::next_after(page.subscribers.len(), limit, last);
        Ok(Listed { page, next_after })
    })
    .await?;
    Ok(ok(page))
}

/// A new subscriber, as `subscriber add` takes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewSubscriber {
    email: Option<String>,
    phone: Option<String>,
    name: Option<String>,
    /// pending, confirmed (the default), unsubscribed or bounced.
    status: Option<String>,
    #[serde(default)]
    attrs: BTreeMap<String, String>,
    /// Lists (ids or names) to join.
    #[serde(default)]
    lists: Vec<String>,
    /// The opt-in, as the application saw it; recorded with the subscriber (source `api`).
    consent: Option<ApiConsent>,
}

/// An opt-in an application declares: the lawful basis, the client's address and user agent,
/// the text the person was shown. The address is kept as `[privacy] consent_ip` says.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiConsent {
    basis: Option<String>,
    ip: Option<String>,
    user_agent: Option<String>,
    text: Option<String>,
}

impl ApiConsent {
    fn consent(&self, policy: IpPolicy) -> sendonce_domain::error::Result<Consent> {
        Ok(Consent {
            source: "api",
            basis: privacy::consent_text("consent.basis", self.basis.as_deref())?,
            ip: match self.ip.as_deref() {
                Some(ip) => policy.keep_text(ip)?,
                None => None,
            },
            user_agent: privacy::consent_text("consent.user_agent", self.user_agent.as_deref())?,
            text: privacy::consent_text("consent.text", self.text.as_deref())?,
        })
    }
}

async fn create(
    State(st): State<AppState>,
    who: Authed,
    b: Result<Json<NewSubscriber>, JsonRejection>,
) -> Result<Response, ApiError> {
    writing(&who)?;
    let n = body(&who, b)?;
    let acct = account(&who);
    let links = st.links.clone();
    let policy = st.consent_ip;
    let shown = call(&st, &who, move |s| {
        let attrs: Vec<(String, String)> = n.attrs.into_iter().collect();
        let mut new = import::subscriber(
            n.email.as_deref(),
            n.phone.as_deref(),
            n.name.as_deref(),
            Some(n.status.as_deref().unwrap_or("confirmed")),
            &attrs,
        )?;
        new.consent = Some(n.consent.unwrap_or_default().consent(policy)?);
        let added = subscribers::add(s, &acct, &new, &n.lists, links.as_deref())?;
        subscribers::show(s, &acct, &added.id.to_string())
    })
    .await?;
    Ok(created(shown))
}

async fn show(
    State(st): State<AppState>,
    who: Authed,
    Path(key): Path<String>,
) -> Result<Response, ApiError> {
    reading(&who)?;
    let acct = account(&who);
    let s = call(&st, &who, move |s| subscribers::show(s, &acct, &key)).await?;
    Ok(ok(s))
}

/// A change to a subscriber; an empty attribute value removes the attribute.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Change {
    name: Option<String>,
    status: Option<String>,
    #[serde(default)]
    attrs: BTreeMap<String, String>,
}

async fn change(
    State(st): State<AppState>,
    who: Authed,
    Path(key): Path<String>,
    b: Result<Json<Change>, JsonRejection>,
) -> Result<Response, ApiError> {
    writing(&who)?;
    let c = body(&who, b)?;
    let acct = account(&who);
    let s = call(&st, &who, move |s| {
        let attrs: Vec<String> = c.attrs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let u = Update {
            account: &acct,
            subscriber: &key,
            name: c.name.as_deref(),
            status: c.status.as_deref(),
            attrs: &attrs,
        };
        subscribers::update(s, &u)
    })
    .await?;
    Ok(ok(s))
}

async fn remove(
    State(st): State<AppState>,
    who: Authed,
    Path(key): Path<String>,
) -> Result<Response, ApiError> {
    writing(&who)?;
    let acct = account(&who);
    let r = call(&st, &who, move |s| subscribers::remove(s, &acct, &key)).await?;
    Ok(ok(r))
}

/// Everything held about one subscriber (removed and erased ones included), as `subscriber
/// export` gives it.
async fn export(
    State(st): State<AppState>,
    who: Authed,
    Path(key): Path<String>,
) -> Result<Response, ApiError> {
    reading(&who)?;
    let acct = account(&who);
    let data = call(&st, &who, move |s| privacy::export(s, &acct, &key)).await?;
    Ok(ok(data))
}

/// Erase one subscriber (`subscriber erase`): what was changed, table by table.
async fn erase(
    State(st): State<AppState>,
    who: Authed,
    Path(key): Path<String>,
) -> Result<Response, ApiError> {
    writing(&who)?;
    let acct = account(&who);
    let erased = call(&st, &who, move |s| privacy::erase(s, &acct, &key)).await?;
    Ok(ok(erased))
}

//! `/admin/webhooks`: the account's webhook endpoints (events out) through `app::events`: the
//! list with a form that adds one and shows its `whsec_…` secret once, an endpoint's page with
//! its latest deliveries, enable / disable, a rotated secret shown once, replay of one event or
//! a range, and deleting one through a confirmation page.

use super::{fail, page, see_other, Posted, Signed};
use crate::{blocking, AppState};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use minijinja::context;
use sendonce_core::app::admins::Session;
use sendonce_core::app::events::{
    self, DeliveryInfo, EndpointInfo, EndpointInput, EndpointUpdate, WithSecret,
};
use sendonce_domain::error::{Error, ErrorKind, Result};
use serde::Deserialize;

pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/admin/webhooks"),
    ("POST", "/admin/webhooks"),
    ("GET", "/admin/webhooks/{webhook}"),
    ("POST", "/admin/webhooks/{webhook}/enable"),
    ("POST", "/admin/webhooks/{webhook}/disable"),
    ("POST", "/admin/webhooks/{webhook}/rotate"),
    ("POST", "/admin/webhooks/{webhook}/replay"),
    ("GET", "/admin/webhooks/{webhook}/delete"),
    ("POST", "/admin/webhooks/{webhook}/delete"),
];

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/admin/webhooks", get(list).post(create))
        .route("/admin/webhooks/{webhook}", get(show))
        .route("/admin/webhooks/{webhook}/enable", post(enable))
        .route("/admin/webhooks/{webhook}/disable", post(disable))
        .route("/admin/webhooks/{webhook}/rotate", post(rotate))
        .route("/admin/webhooks/{webhook}/replay", post(replay))
        .route(
            "/admin/webhooks/{webhook}/delete",
            get(confirm).post(delete),
        )
}

/// The flash a page shows after a redirect (`?done=…`, with `queued` after a replay and `id`
/// after a delete).
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct Flash {
    done: Option<String>,
    queued: Option<String>,
    id: Option<String>,
}

/// The new-endpoint form's fields: the URL, types comma-separated (none: every event), the
/// `ordered` checkbox.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct NewForm {
    url: String,
    types: String,
    ordered: Option<String>,
}

/// A form with no field of its own (its CSRF token only).
#[derive(Debug, Deserialize, Default)]
pub struct Bare {}

/// The replay form's fields: one event id, a range of them, or a range of times (RFC 3339).
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct ReplayForm {
    event: String,
    from: String,
    to: String,
    since: String,
    until: String,
}

/// What a replay form asks for.
#[derive(Debug, PartialEq)]
enum Asked {
    Ids(i64, i64),
    Times(String, String),
}

/// An endpoint id from the path; anything else is an endpoint that does not exist.
fn endpoint_id(text: &str) -> Result<i64> {
    text.parse::<i64>()
        .map_err(|_| Error::not_found(format!("unknown webhook endpoint id {text}")))
}

fn account(session: &Session) -> i64 {
    session.admin.account_id
}

async fn list(
    State(st): State<AppState>,
    Signed(session): Signed,
    Query(f): Query<Flash>,
) -> Response {
    let acct = account(&session);
    match blocking(&st, move |s| events::endpoints(s, acct)).await {
        Ok(all) => list_page(&session, all, None, &NewForm::default(), &f),
        Err(e) => fail(Some(&session), &e),
    }
}

/// The endpoints page: the list, the form (with what was typed and the error, after a bad
/// post), and the flash of a deleted endpoint.
fn list_page(
    session: &Session,
    all: Vec<EndpointInfo>,
    error: Option<&Error>,
    form: &NewForm,
    flash: &Flash,
) -> Response {
    let deleted = match flash.done.as_deref() {
        Some("deleted") => flash.id.as_deref().and_then(|i| i.parse::<i64>().ok()),
        _ => None,
    };
    let mut res = page(
        session,
        "webhooks",
        "admin/webhooks.html",
        context! {
            title => "Webhooks",
            endpoints => all,
            error => error.map(|e| e.message.clone()),
            url => form.url,
            types => form.types,
            ordered => form.ordered.is_some(),
            deleted => deleted,
        },
    );
    if error.is_some() {
        *res.status_mut() = StatusCode::BAD_REQUEST;
    }
    res
}

/// The page that shows an endpoint's secret, this once (after adding or rotating).
fn secret_page(session: &Session, made: &WithSecret, rotated: bool) -> Response {
    let overlap_hours = events::DEFAULT_OVERLAP.as_secs() / 3600;
    page(
        session,
        "webhooks",
        "admin/webhook_secret.html",
        context! {
            title => if rotated { "New webhook secret" } else { "New webhook endpoint" },
            e => made.endpoint,
            secret => made.secret,
            rotated => rotated,
            overlap_hours => overlap_hours,
        },
    )
}

async fn create(State(st): State<AppState>, Posted(session, form): Posted<NewForm>) -> Response {
    let acct = account(&session);
    let (keys, settings) = (st.keys.clone(), st.events.clone());
    let (url, types, ordered) = (
        form.url.trim().to_string(),
        form.types.clone(),
        form.ordered.is_some(),
    );
    let made = blocking(&st, move |s| {
        let input = EndpointInput {
            url,
            types: events::parse_types(Some(&types))?,
            ordered,
        };
        events::create_endpoint(s, keys.as_deref(), &settings.allow, acct, &input)
    })
    .await;
    match made {
        Ok(made) => secret_page(&session, &made, false),
        Err(e) if e.kind == ErrorKind::Invalid => {
            match blocking(&st, move |s| events::endpoints(s, acct)).await {
                Ok(all) => list_page(&session, all, Some(&e), &form, &Flash::default()),
                Err(e) => fail(Some(&session), &e),
            }
        }
        Err(e) => fail(Some(&session), &e),
    }
}

/// Endpoint `id` of the account and its latest deliveries.
fn with_deliveries(
    s: &sendonce_store::Store,
    acct: i64,
    id: i64,
) -> Result<(EndpointInfo, Vec<DeliveryInfo>)> {
    Ok((
        events::endpoint(s, acct, id)?,
        events::deliveries(s, acct, id)?,
    ))
}

/// An endpoint's page, with a flash after a redirect or the error of a bad replay form (400).
async fn endpoint_page(
    st: &AppState,
    session: &Session,
    id: &str,
    flash: &Flash,
    error: Option<&Error>,
) -> Response {
    let acct = account(session);
    let found = match endpoint_id(id) {
        Ok(id) => blocking(st, move |s| with_deliveries(s, acct, id)).await,
        Err(e) => Err(e),
    };
    let (e, deliveries) = match found {
        Ok(found) => found,
        Err(e) => return fail(Some(session), &e),
    };
    let queued = flash.queued.as_deref().and_then(|q| q.parse::<u64>().ok());
    let mut res = page(
        session,
        "webhooks",
        "admin/webhook.html",
        context! {
            title => format!("Webhook endpoint {}", e.id),
            e => e,
            deliveries => deliveries,
            done => flash.done,
            queued => queued,
            error => error.map(|e| e.message.clone()),
            overlap_hours => events::DEFAULT_OVERLAP.as_secs() / 3600,
        },
    );
    if error.is_some() {
        *res.status_mut() = StatusCode::BAD_REQUEST;
    }
    res
}

async fn show(
    State(st): State<AppState>,
    Signed(session): Signed,
    Path(id): Path<String>,
    Query(f): Query<Flash>,
) -> Response {
    endpoint_page(&st, &session, &id, &f, None).await
}

/// Enable (also an endpoint the circuit breaker turned off) or disable endpoint `id`.
async fn set_enabled(st: &AppState, session: &Session, id: &str, on: bool) -> Response {
    let acct = account(session);
    let settings = st.events.clone();
    let done = match endpoint_id(id) {
        Ok(id) => {
            blocking(st, move |s| {
                let u = EndpointUpdate {
                    enabled: Some(on),
                    ..EndpointUpdate::default()
                };
                events::update_endpoint(s, &settings.allow, acct, id, &u)
            })
            .await
        }
        Err(e) => Err(e),
    };
    let word = if on { "enabled" } else { "disabled" };
    match done {
        Ok(e) => see_other(&format!("/admin/webhooks/{}?done={word}", e.id)),
        Err(e) => fail(Some(session), &e),
    }
}

async fn enable(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Posted(session, _): Posted<Bare>,
) -> Response {
    set_enabled(&st, &session, &id, true).await
}

async fn disable(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Posted(session, _): Posted<Bare>,
) -> Response {
    set_enabled(&st, &session, &id, false).await
}

async fn rotate(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Posted(session, _): Posted<Bare>,
) -> Response {
    let acct = account(&session);
    let keys = st.keys.clone();
    let made = match endpoint_id(&id) {
        Ok(id) => {
            blocking(&st, move |s| {
                events::rotate_endpoint(s, keys.as_deref(), acct, id, events::DEFAULT_OVERLAP)
            })
            .await
        }
        Err(e) => Err(e),
    };
    match made {
        Ok(made) => secret_page(&session, &made, true),
        Err(e) => fail(Some(&session), &e),
    }
}

/// What a replay form names: one event, both ends of a range of ids, or of times.
fn replay_range(f: &ReplayForm) -> Result<Asked> {
    let given = |t: &str| !t.trim().is_empty();
    let ids = (given(&f.event), given(&f.from), given(&f.to));
    let times = (given(&f.since), given(&f.until));
    match (ids, times) {
        ((true, false, false), (false, false)) => {
            let n = events::parse_event_id(&f.event)?;
            Ok(Asked::Ids(n, n))
        }
        ((false, true, true), (false, false)) => Ok(Asked::Ids(
            events::parse_event_id(&f.from)?,
            events::parse_event_id(&f.to)?,
        )),
        ((false, false, false), (true, true)) => Ok(Asked::Times(
            f.since.trim().to_string(),
            f.until.trim().to_string(),
        )),
        _ => Err(Error::invalid(
            "replay takes one event id, both a from and a to event id, or both a since and an \
             until time",
        )),
    }
}

async fn replay(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Posted(session, f): Posted<ReplayForm>,
) -> Response {
    let acct = account(&session);
    let done = match endpoint_id(&id) {
        Ok(n) => {
            blocking(&st, move |s| {
                let queued = match replay_range(&f)? {
                    Asked::Ids(from, to) => events::replay(s, acct, n, from, to)?,
                    Asked::Times(since, until) => events::replay_times(s, acct, n, &since, &until)?,
                };
                Ok((n, queued))
            })
            .await
        }
        Err(e) => Err(e),
    };
    match done {
        Ok((n, queued)) => see_other(&format!(
            "/admin/webhooks/{n}?done=replayed&queued={queued}"
        )),
        // The endpoint's page again with the error (a 404 when the endpoint is not ours).
        Err(e) if e.kind == ErrorKind::Invalid => {
            endpoint_page(&st, &session, &id, &Flash::default(), Some(&e)).await
        }
        Err(e) => fail(Some(&session), &e),
    }
}

async fn confirm(
    State(st): State<AppState>,
    Signed(session): Signed,
    Path(id): Path<String>,
) -> Response {
    let acct = account(&session);
    let found = match endpoint_id(&id) {
        Ok(id) => blocking(&st, move |s| events::endpoint(s, acct, id)).await,
        Err(e) => Err(e),
    };
    match found {
        Ok(e) => page(
            &session,
            "webhooks",
            "admin/webhook_delete.html",
            context! { title => "Delete a webhook endpoint", e => e },
        ),
        Err(e) => fail(Some(&session), &e),
    }
}

async fn delete(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Posted(session, _): Posted<Bare>,
) -> Response {
    let acct = account(&session);
    let done = match endpoint_id(&id) {
        Ok(n) => {
            blocking(&st, move |s| {
                events::delete_endpoint(s, acct, n).map(|()| n)
            })
            .await
        }
        Err(e) => Err(e),
    };
    match done {
        Ok(n) => see_other(&format!("/admin/webhooks?done=deleted&id={n}")),
        Err(e) => fail(Some(&session), &e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(event: &str, from: &str, to: &str) -> ReplayForm {
        ReplayForm {
            event: event.into(),
            from: from.into(),
            to: to.into(),
            ..ReplayForm::default()
        }
    }

    #[test]
    fn a_replay_names_one_event_or_a_range() {
        assert_eq!(
            replay_range(&form("evt_12", "", "")).ok(),
            Some(Asked::Ids(12, 12))
        );
        assert_eq!(
            replay_range(&form(" 7 ", "", "")).ok(),
            Some(Asked::Ids(7, 7))
        );
        assert_eq!(
            replay_range(&form("", "evt_3", "evt_9")).ok(),
            Some(Asked::Ids(3, 9))
        );
        let times = ReplayForm {
            since: "2026-12-07T09:00:00Z".into(),
            until: "2026-12-07T10:00:00Z".into(),
            ..ReplayForm::default()
        };
        assert_eq!(
            replay_range(&times).ok(),
            Some(Asked::Times(
                "2026-12-07T09:00:00Z".into(),
                "2026-12-07T10:00:00Z".into()
            ))
        );
        let mixed = ReplayForm {
            since: "2026-12-07T09:00:00Z".into(),
            ..form("evt_1", "", "")
        };
        for bad in [
            form("", "", ""),
            form("evt_1", "evt_1", "evt_2"),
            form("", "evt_1", ""),
            form("evt_x", "", ""),
            form("evt_0", "", ""),
            mixed,
        ] {
            let e = replay_range(&bad).err();
            assert_eq!(e.map(|e| e.kind), Some(ErrorKind::Invalid), "{bad:?}");
        }
    }
}

//! `/admin/doubts`: the account's sends in doubt across its campaigns (paged), each with its
//! route and any delivery report, and the operator's decision on one: "mark as sent" or "send
//! again", through a confirmation page whose form posts the decision (`app::doubts::resolve`,
//! recorded as "NAME (dashboard)").

use super::{fail, page, see_other, Posted, Signed};
use crate::{blocking, AppState};
use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::get;
use sendonce_core::app::doubts::{self, Decision, RouteSource};
use sendonce_domain::error::{Error, Result};
use serde::Deserialize;

pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/admin/doubts"),
    ("GET", "/admin/doubts/{send_id}/resolve"),
    ("POST", "/admin/doubts/{send_id}/resolve"),
];

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new().route("/admin/doubts", get(list)).route(
        "/admin/doubts/{send_id}/resolve",
        get(confirm).post(resolve),
    )
}

#[derive(Debug, Deserialize, Default)]
pub struct ListQuery {
    after: Option<String>,
    done: Option<String>,
}

async fn list(
    State(st): State<AppState>,
    Signed(session): Signed,
    Query(q): Query<ListQuery>,
) -> Response {
    let account = session.admin.account_id;
    let ops = st.ops.clone();
    let after = q.after.clone();
    let got = blocking(&st, move |s| {
        let routes = RouteSource {
            config: ops.file.as_ref(),
            provider: ops.provider.as_deref(),
        };
        doubts::account_list(s, account, after.as_deref(), routes)
    })
    .await;
    match got {
        Ok(d) => page(
            &session,
            "doubts",
            "admin/doubts.html",
            minijinja::context! {
                title => "Sends in doubt",
                doubts => d.in_doubt,
                next => d.next,
                paged => q.after.is_some(),
                done => q.done.as_deref().and_then(flash),
            },
        ),
        Err(e) => fail(Some(&session), &e),
    }
}

/// The `done` flash after a decision: (send id, its state now).
fn flash(done: &str) -> Option<(i64, &'static str)> {
    let (id, status) = done.split_once('-')?;
    let status = match status {
        "sent" => "sent",
        "queued" => "queued to be sent again",
        _ => return None,
    };
    Some((id.parse().ok()?, status))
}

/// `sent` (it was delivered) or `requeue` (it was not: send it again).
fn choice(v: Option<&str>) -> Result<bool> {
    match v {
        Some("sent") => Ok(true),
        Some("requeue") => Ok(false),
        _ => Err(Error::invalid(
            "say what happened: as=sent (it was delivered) or as=requeue (it was not: send it again)",
        )),
    }
}

/// A send id from the path; anything else is a send that does not exist.
fn send_id(text: &str) -> Result<i64> {
    text.parse::<i64>()
        .map_err(|_| Error::not_found(format!("unknown send id {text}")))
}

#[derive(Debug, Deserialize, Default)]
pub struct As {
    #[serde(rename = "as")]
    choice: Option<String>,
}

async fn confirm(
    State(st): State<AppState>,
    Signed(session): Signed,
    Path(id): Path<String>,
    Query(q): Query<As>,
) -> Response {
    let account = session.admin.account_id;
    let id = match send_id(&id) {
        Ok(v) => v,
        Err(e) => return fail(Some(&session), &e),
    };
    // Whose send first: another account's id is 404 whatever the query says.
    if let Err(e) = blocking(&st, move |s| doubts::owned_send(s, account, id)).await {
        return fail(Some(&session), &e);
    }
    match choice(q.choice.as_deref()) {
        Ok(as_sent) => page(
            &session,
            "doubts",
            "admin/doubt_confirm.html",
            minijinja::context! {
                title => if as_sent { "Mark as sent" } else { "Send again" },
                send_id => id,
                as_sent => as_sent,
                by => session.decided_by(),
            },
        ),
        Err(e) => fail(Some(&session), &e),
    }
}

async fn resolve(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Posted(session, form): Posted<As>,
) -> Response {
    let account = session.admin.account_id;
    let checked = send_id(&id).and_then(|id| choice(form.choice.as_deref()).map(|c| (id, c)));
    let (id, as_sent) = match checked {
        Ok(v) => v,
        Err(e) => return fail(Some(&session), &e),
    };
    let by = session.decided_by();
    let done = blocking(&st, move |s| {
        doubts::owned_send(s, account, id)?;
        let decision = Decision::new(id, as_sent, !as_sent, Some(by), None)?;
        doubts::resolve(s, &decision)
    })
    .await;
    match done {
        Ok(r) => see_other(&format!("/admin/doubts?done={}-{}", r.send_id, r.status)),
        Err(e) => fail(Some(&session), &e),
    }
}

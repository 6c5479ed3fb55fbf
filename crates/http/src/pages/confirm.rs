//! `GET /c/{token}` and `POST /c/{token}`: the double opt-in confirm page. GET only shows the
//! list, the masked address and a "Confirm subscription" button (mail scanners fetch links;
//! nothing changes on GET); POST moves the membership from pending to subscribed through
//! `app::optin`. A refused token is a plain 404 page; nothing internal is ever shown.

use super::{mask, message, render};
use crate::{blocking, AppState};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use sendonce_core::app::optin::{self, Found, Link, State as Member};
use sendonce_domain::error::{Error, ErrorKind};

/// The routes of this page, as (method, path).
pub const ROUTES: &[(&str, &str)] = &[("GET", "/c/{token}"), ("POST", "/c/{token}")];

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new().route("/c/{token}", axum::routing::get(show).post(confirm))
}

/// Why a link was not opened.
enum Unopened {
    /// No secret on this server.
    NotSetUp,
    /// Changed, forged, for another purpose, or its key retired.
    Refused,
}

impl Unopened {
    fn page(self) -> Response {
        match self {
            Unopened::NotSetUp => message(
                StatusCode::SERVICE_UNAVAILABLE,
                "Not available",
                "Confirmation links are not set up on this server yet. Please try again later.",
            ),
            Unopened::Refused => refused(),
        }
    }
}

/// The opened link, or why not.
fn opened(st: &AppState, token: &str) -> Result<Link, Unopened> {
    let keys = st.keys.as_deref().ok_or(Unopened::NotSetUp)?;
    optin::open(keys, token).map_err(|_| Unopened::Refused)
}

fn refused() -> Response {
    message(
        StatusCode::NOT_FOUND,
        "Link not valid",
        "This confirmation link is not valid. Please use the link of your most recent \
         confirmation email, unchanged.",
    )
}

/// A store error as a page: busy is "try again", the rest "something went wrong" (logged).
pub(super) fn failed(e: &Error) -> Response {
    if e.kind == ErrorKind::Busy {
        return message(
            StatusCode::SERVICE_UNAVAILABLE,
            "Busy",
            "The service is busy. Please try again in a moment.",
        );
    }
    if e.kind == ErrorKind::NotFound {
        return refused();
    }
    tracing::error!(target: "sendonce::http", error = %e, "a page failed");
    message(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Something went wrong",
        "Something went wrong on our side. Please try again later.",
    )
}

/// The page for a link's state; `done` after a POST that confirmed.
fn page(link: &Link, f: &Found, done: bool) -> Response {
    let (title, text, pending) = match (f.state, done) {
        (Member::Pending, true) => (
            "Subscription confirmed",
            "Thank you: you are subscribed.",
            false,
        ),
        (Member::Pending, false) => ("Confirm your subscription", "", true),
        (Member::Subscribed, _) => (
            "Already confirmed",
            "This subscription was already confirmed: there is nothing more to do.",
            false,
        ),
        (Member::Unsubscribed, _) => (
            "Unsubscribed",
            "You unsubscribed from this list after signing up, so this link does not subscribe \
             you again. To subscribe again, sign up anew.",
            false,
        ),
        (Member::Gone, _) => (
            "Nothing to confirm",
            "This address is no longer waiting for confirmation on this list.",
            false,
        ),
    };
    render(
        StatusCode::OK,
        "confirm.html",
        minijinja::context! {
            title => title,
            text => text,
            pending => pending,
            list => f.list_name,
            address => mask(&link.address),
        },
    )
}

async fn show(State(st): State<AppState>, Path(token): Path<String>) -> Response {
    let link = match opened(&st, &token) {
        Ok(l) => l,
        Err(why) => return why.page(),
    };
    let l = link.clone();
    match blocking(&st, move |s| optin::show(s, &l)).await {
        Ok(f) => page(&link, &f, false),
        Err(e) => failed(&e),
    }
}

async fn confirm(
    State(st): State<AppState>,
    Path(token): Path<String>,
    req: axum::extract::Request,
) -> Response {
    let link = match opened(&st, &token) {
        Ok(l) => l,
        Err(why) => return why.page(),
    };
    let l = link.clone();
    let seen = super::seen(&st, &req);
    match blocking(&st, move |s| optin::confirm(s, &l, &seen)).await {
        Ok(f) => page(&link, &f, true),
        Err(e) => failed(&e),
    }
}

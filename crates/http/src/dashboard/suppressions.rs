//! `/admin/suppressions`: the account's suppression list, searched by address prefix and paged
//! by keyset; adding an address with a reason, and taking one off with a reason through a
//! confirmation page.

use super::{fail, page, see_other, Posted, Signed};
use crate::{blocking, AppState};
use axum::extract::{Query, State};
use axum::response::Response;
use axum::routing::get;
use minijinja::context;
use sendonce_core::app::suppressions::{self, channel_of, Entry};
use serde::Deserialize;

pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/admin/suppressions"),
    ("POST", "/admin/suppressions"),
    ("GET", "/admin/suppressions/remove"),
    ("POST", "/admin/suppressions/remove"),
];

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/admin/suppressions", get(all).post(add))
        .route("/admin/suppressions/remove", get(confirm).post(remove))
}

#[derive(Debug, Default, Deserialize)]
struct Browse {
    #[serde(default)]
    q: Option<String>,
    #[serde(default)]
    after: Option<String>,
    #[serde(default)]
    done: Option<String>,
}

async fn all(
    State(st): State<AppState>,
    Signed(session): Signed,
    Query(b): Query<Browse>,
) -> Response {
    let acct = session.admin.account_id.to_string();
    let (q, after) = (b.q.clone(), b.after.clone());
    let res = blocking(&st, move |s| {
        suppressions::page(s, &acct, q.as_deref(), after.as_deref())
    })
    .await;
    let next_query = |next: &str| {
        form_urlencoded::Serializer::new(String::new())
            .append_pair("q", b.q.as_deref().unwrap_or(""))
            .append_pair("after", next)
            .finish()
    };
    match res {
        Ok(p) => page(
            &session,
            "suppressions",
            "admin/suppressions.html",
            context! {
                title => "Suppressions", suppressions => p.suppressions,
                next => p.next.as_deref().map(next_query), q => b.q, done => b.done,
            },
        ),
        Err(e) => fail(Some(&session), &e),
    }
}

#[derive(Debug, Deserialize)]
struct Reasoned {
    #[serde(default)]
    address: String,
    #[serde(default)]
    reason: String,
}

/// The entry an address typed in a form names: an email address (it has an `@` or a letter)
/// or a phone number.
fn entry(address: &str) -> sendonce_domain::error::Result<Entry> {
    Entry::new(channel_of(address.trim()), address.trim())
}

async fn add(State(st): State<AppState>, Posted(session, f): Posted<Reasoned>) -> Response {
    let acct = session.admin.account_id.to_string();
    let res = blocking(&st, move |s| {
        let reason = f.reason.trim();
        if reason.is_empty() {
            return Err(sendonce_domain::error::Error::invalid(
                "give a reason for suppressing the address",
            ));
        }
        suppressions::add(s, &acct, &entry(&f.address)?, reason)
    })
    .await;
    match res {
        Ok(a) if a.added => see_other("/admin/suppressions?done=added"),
        Ok(_) => see_other("/admin/suppressions?done=already"),
        Err(e) => fail(Some(&session), &e),
    }
}

#[derive(Debug, Deserialize)]
struct Address {
    #[serde(default)]
    address: String,
}

async fn confirm(
    State(st): State<AppState>,
    Signed(session): Signed,
    Query(a): Query<Address>,
) -> Response {
    let acct = session.admin.account_id.to_string();
    let res = blocking(&st, move |s| {
        let e = entry(&a.address)?;
        let found = suppressions::page(s, &acct, Some(&e.address), None)?
            .suppressions
            .into_iter()
            .find(|x| x.address == e.address && x.channel == e.channel);
        found.ok_or_else(|| {
            sendonce_domain::error::Error::not_found(format!(
                "{} is not on this account's suppression list",
                e.address
            ))
        })
    })
    .await;
    match res {
        Ok(s) => page(
            &session,
            "suppressions",
            "admin/suppressions_remove.html",
            context! { title => "Remove a suppression", s => s },
        ),
        Err(e) => fail(Some(&session), &e),
    }
}

async fn remove(State(st): State<AppState>, Posted(session, f): Posted<Reasoned>) -> Response {
    let acct = session.admin.account_id.to_string();
    let by = session.decided_by();
    let res = blocking(&st, move |s| {
        suppressions::remove_with_reason(s, &acct, &entry(&f.address)?, &f.reason, &by)
    })
    .await;
    match res {
        Ok(_) => see_other("/admin/suppressions?done=removed"),
        Err(e) => fail(Some(&session), &e),
    }
}

//! `/admin/tokens`: the account's API tokens (never their text), a form that makes one and
//! shows its text once on the answer page (never stored, never shown again), and revoking one
//! through a confirmation page.

use super::{fail, page, see_other, Posted, Signed};
use crate::{blocking, AppState};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use sendonce_core::app::tokens::{self, TokenInfo};
use sendonce_domain::error::{Error, ErrorKind, Result};
use sendonce_domain::token::Scope;
use serde::Deserialize;

pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/admin/tokens"),
    ("POST", "/admin/tokens"),
    ("GET", "/admin/tokens/{token}/revoke"),
    ("POST", "/admin/tokens/{token}/revoke"),
];

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/admin/tokens", get(list).post(create))
        .route("/admin/tokens/{token}/revoke", get(confirm).post(revoke))
}

#[derive(Debug, Deserialize, Default)]
pub struct ListQuery {
    done: Option<String>,
}

/// The new-token form's fields.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct NewForm {
    name: String,
    scope: String,
}

fn scopes() -> Vec<&'static str> {
    Scope::ALL.iter().map(|s| s.as_str()).collect()
}

async fn list(
    State(st): State<AppState>,
    Signed(session): Signed,
    Query(q): Query<ListQuery>,
) -> Response {
    let account = session.admin.account_id.to_string();
    let done = q.done.as_deref().and_then(|d| d.parse::<i64>().ok());
    match blocking(&st, move |s| tokens::list(s, &account)).await {
        Ok(t) => tokens_page(&session, t.tokens, None, &NewForm::default(), done),
        Err(e) => fail(Some(&session), &e),
    }
}

/// The tokens page: the list, the form (with what was typed and the error, after a bad post),
/// and the flash of a revoked token.
fn tokens_page(
    session: &sendonce_core::app::admins::Session,
    list: Vec<TokenInfo>,
    error: Option<&Error>,
    form: &NewForm,
    revoked: Option<i64>,
) -> Response {
    let mut res = page(
        session,
        "tokens",
        "admin/tokens.html",
        minijinja::context! {
            title => "API tokens",
            tokens => list,
            scopes => scopes(),
            error => error.map(|e| e.message.clone()),
            name => form.name,
            scope => form.scope,
            revoked => revoked,
        },
    );
    if error.is_some() {
        *res.status_mut() = StatusCode::BAD_REQUEST;
    }
    res
}

async fn create(State(st): State<AppState>, Posted(session, form): Posted<NewForm>) -> Response {
    let account = session.admin.account_id.to_string();
    let (name, scope) = (form.name.clone(), form.scope.clone());
    let made = blocking(&st, move |s| {
        let scope = Scope::parse(&scope)?;
        tokens::create(s, &account, &name, scope)
    })
    .await;
    match made {
        Ok(c) => page(
            &session,
            "tokens",
            "admin/token_created.html",
            minijinja::context! {
                title => "New API token",
                token => c.token.expose(),
                name => c.name,
                scope => c.scope.as_str(),
                prefix => c.prefix,
            },
        ),
        Err(e) if e.kind == ErrorKind::Invalid => {
            let account = session.admin.account_id.to_string();
            match blocking(&st, move |s| tokens::list(s, &account)).await {
                Ok(t) => tokens_page(&session, t.tokens, Some(&e), &form, None),
                Err(e) => fail(Some(&session), &e),
            }
        }
        Err(e) => fail(Some(&session), &e),
    }
}

/// A token id from the path; anything else is a token that does not exist.
fn token_id(text: &str) -> Result<i64> {
    text.parse::<i64>()
        .map_err(|_| Error::not_found(format!("unknown token id {text}")))
}

/// Token `id` of the signed-in account, or `NotFound` (another account's token included).
fn owned(s: &sendonce_store::Store, account_id: i64, id: i64) -> Result<TokenInfo> {
    tokens::list(s, &account_id.to_string())?
        .tokens
        .into_iter()
        .find(|t| t.id == id)
        .ok_or_else(|| Error::not_found(format!("unknown token id {id}")))
}

async fn confirm(
    State(st): State<AppState>,
    Signed(session): Signed,
    Path(id): Path<String>,
) -> Response {
    let account = session.admin.account_id;
    let found = match token_id(&id) {
        Ok(id) => blocking(&st, move |s| owned(s, account, id)).await,
        Err(e) => Err(e),
    };
    match found {
        Ok(t) => page(
            &session,
            "tokens",
            "admin/token_revoke.html",
            minijinja::context! { title => "Revoke a token", t => t },
        ),
        Err(e) => fail(Some(&session), &e),
    }
}

async fn revoke(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Posted(session, _): Posted<ListQuery>,
) -> Response {
    let account = session.admin.account_id;
    let done = match token_id(&id) {
        Ok(id) => {
            blocking(&st, move |s| {
                owned(s, account, id)?;
                tokens::revoke(s, &account.to_string(), id)
            })
            .await
        }
        Err(e) => Err(e),
    };
    match done {
        Ok(r) => see_other(&format!("/admin/tokens?done={}", r.token.id)),
        Err(e) => fail(Some(&session), &e),
    }
}

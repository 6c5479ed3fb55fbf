//! `/admin/login` and `/admin/logout`: the login form (with its own double-submit nonce, since
//! there is no session yet to derive a CSRF token from), the password check through
//! `app::admins::login`, a per-client-address limit on top of the store's per-admin one, and
//! the session cookie set or cleared.

use super::{
    cookie, fail, over_https, render, same_origin, see_other, set_cookie, Posted, PREFIX,
    SESSION_COOKIE,
};
use crate::limiter::Limiter;
use crate::{blocking, AppState};
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Extension, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use sendonce_core::app::admins;
use sendonce_domain::login::{login_nonce, Password};
use serde::Deserialize;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/admin"),
    ("GET", "/admin/login"),
    ("POST", "/admin/login"),
    ("POST", "/admin/logout"),
];

/// The login form's nonce cookie (compared with the form's hidden field).
const NONCE_COOKIE: &str = "sendonce_login";
/// Login attempts a client address may make at once, and per minute after that.
pub const LOGIN_BURST_PER_CLIENT: u32 = 20;
pub const LOGIN_PER_MINUTE_PER_CLIENT: u32 = 10;

pub fn routes() -> axum::Router<AppState> {
    let limiter = Arc::new(Limiter::new(
        LOGIN_BURST_PER_CLIENT,
        LOGIN_PER_MINUTE_PER_CLIENT,
    ));
    axum::Router::new()
        .route(PREFIX, get(|| async { see_other("/admin/campaigns") }))
        .route("/admin/", get(|| async { see_other("/admin/campaigns") }))
        .route("/admin/login", get(form).post(submit))
        .route("/admin/logout", post(logout))
        .layer(Extension(limiter))
}

#[derive(Debug, Deserialize, Default)]
pub struct Next {
    next: Option<String>,
}

/// Where to go after logging in: a dashboard path of ours, never another site nor another
/// page of this one. The path is resolved as a browser resolves it (`.` and `..` segments,
/// `%2e` spelt dots) before it must be inside `/admin/`; the resolved path is what is used.
fn next_page(next: Option<&str>) -> String {
    const HOME: &str = "/admin/campaigns";
    let Some(n) =
        next.filter(|n| !n.contains('\\') && n.bytes().all(|b| (0x21..0x7f).contains(&b)))
    else {
        return HOME.to_string();
    };
    let (path, rest) = n.split_at(n.find(['?', '#']).unwrap_or(n.len()));
    match resolve(path) {
        Some(p) if p.starts_with("/admin/") => format!("{p}{rest}"),
        _ => HOME.to_string(),
    }
}

/// `path` with its `.` and `..` segments (`%2e` spelt too) resolved (RFC 3986 5.2.4); None
/// when it is not an absolute path, has an empty segment (`//`) or an encoded separator
/// (`%2f`, `%5c`).
fn resolve(path: &str) -> Option<String> {
    let lower = path.to_ascii_lowercase();
    if lower.contains("%2f") || lower.contains("%5c") {
        return None;
    }
    let segments: Vec<&str> = path.strip_prefix('/')?.split('/').collect();
    let mut out: Vec<&str> = Vec::new();
    for (i, seg) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        let dots = seg.to_ascii_lowercase().replace("%2e", ".");
        match dots.as_str() {
            "." | ".." => {
                if dots == ".." {
                    out.pop();
                }
                if last {
                    out.push("");
                }
            }
            "" if !last => return None,
            _ => out.push(seg),
        }
    }
    Some(format!("/{}", out.join("/")))
}

/// The form, with a fresh nonce in a cookie and in a hidden field.
fn login_page(
    st: &AppState,
    h: &HeaderMap,
    next: &str,
    error: Option<&str>,
    status: StatusCode,
) -> Response {
    let nonce = match login_nonce() {
        Ok(n) => n,
        Err(e) => return fail(None, &e),
    };
    let mut res = render(
        status,
        "admin/login.html",
        minijinja::context! { title => "Log in", nonce => nonce, next => next, error => error },
    );
    res.headers_mut().append(
        header::SET_COOKIE,
        set_cookie(NONCE_COOKIE, &nonce, over_https(h, st), None),
    );
    res
}

async fn form(
    State(st): State<AppState>,
    h: HeaderMap,
    q: Result<Query<Next>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let next = next_page(q.as_ref().ok().and_then(|q| q.next.as_deref()));
    login_page(&st, &h, &next, None, StatusCode::OK)
}

#[derive(Debug, Deserialize)]
struct Credentials {
    #[serde(default)]
    name: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    nonce: String,
    #[serde(default)]
    next: Option<String>,
}

async fn submit(
    State(st): State<AppState>,
    Extension(limiter): Extension<Arc<Limiter>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    h: HeaderMap,
    body: Bytes,
) -> Response {
    let Ok(c) = serde_urlencoded::from_bytes::<Credentials>(&body) else {
        return login_page(
            &st,
            &h,
            "/admin/campaigns",
            Some("The form did not parse."),
            StatusCode::BAD_REQUEST,
        );
    };
    let next = next_page(c.next.as_deref());
    let nonce_ok = cookie(&h, NONCE_COOKIE).is_some_and(|n| {
        !n.is_empty() && sendonce_domain::token::same_hash(n.as_bytes(), c.nonce.as_bytes())
    });
    if same_origin(&h, &st).is_err() || !nonce_ok {
        let msg = "This form is stale or came from another site. Try again.";
        return login_page(&st, &h, &next, Some(msg), StatusCode::FORBIDDEN);
    }
    if let Err(wait) = limiter.take(peer.ip(), Instant::now()) {
        let msg = format!(
            "Too many attempts from here; try again in {} s.",
            wait.as_secs() + 1
        );
        return login_page(&st, &h, &next, Some(&msg), StatusCode::TOO_MANY_REQUESTS);
    }
    let Some(password) = Password::presented(c.password) else {
        return login_page(
            &st,
            &h,
            &next,
            Some("Wrong name or password."),
            StatusCode::UNAUTHORIZED,
        );
    };
    let name = c.name;
    match blocking(&st, move |s| admins::login(s, &name, &password)).await {
        Ok(started) => {
            tracing::info!(target: "sendonce::http", admin = %started.admin.name, "dashboard login");
            let secure = over_https(&h, &st);
            let mut res = see_other(&next);
            let cookies = res.headers_mut();
            cookies.append(
                header::SET_COOKIE,
                set_cookie(SESSION_COOKIE, started.token.expose(), secure, None),
            );
            cookies.append(
                header::SET_COOKIE,
                set_cookie(NONCE_COOKIE, "", secure, Some(0)),
            );
            res
        }
        Err(e) if admins::is_refusal(&e) => {
            let (status, _) = crate::status_for(e.kind);
            let msg = if e.kind == sendonce_domain::error::ErrorKind::Limited {
                format!("{}.", capitalised(&e.message))
            } else {
                "Wrong name or password.".to_string()
            };
            login_page(&st, &h, &next, Some(&msg), status)
        }
        Err(e) => fail(None, &e),
    }
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
        .unwrap_or_default()
}

#[derive(Debug, Deserialize)]
struct Nothing {}

async fn logout(
    State(st): State<AppState>,
    h: HeaderMap,
    Posted(session, _): Posted<Nothing>,
) -> Response {
    let token = session.token.expose().to_string();
    if let Err(e) = blocking(&st, move |s| admins::logout(s, &token)).await {
        return fail(Some(&session), &e);
    }
    let mut res = see_other("/admin/login");
    res.headers_mut().append(
        header::SET_COOKIE,
        set_cookie(SESSION_COOKIE, "", over_https(&h, &st), Some(0)),
    );
    res.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_stays_on_the_dashboard() {
        assert_eq!(next_page(Some("/admin/lists?q=a")), "/admin/lists?q=a");
        for bad in [
            "https://evil.example/",
            "//evil.example/admin/",
            "/u/x",
            "/admin/\\evil",
            "/admin/../../u/x",
            "/admin/../u/x",
            "/admin/%2e%2e/u/x",
            "/admin/%2E%2e/%2e%2E/u/x",
            "/admin/.%2e/u/x",
            "/admin/%2e./u/x",
            "/admin/campaigns/../../u/x?next=/admin/",
            "/admin/..",
            "/admin/%2e%2e",
            "/admin/..%2fu/x",
            "/admin/..%5cu/x",
            "/admin//evil.example/",
            "/admin/\\..\\..\\u",
            "http://127.0.0.1/admin/",
            "/admin/\t../u",
        ] {
            assert_eq!(next_page(Some(bad)), "/admin/campaigns", "{bad}");
        }
        for (ok, to) in [
            (
                "/admin/lists/../campaigns?status=sent",
                "/admin/campaigns?status=sent",
            ),
            ("/admin/./lists/%2e/", "/admin/lists/"),
            ("/admin/x/..", "/admin/"),
            ("/admin/lists?next=/../../u", "/admin/lists?next=/../../u"),
        ] {
            assert_eq!(next_page(Some(ok)), to, "{ok}");
        }
        assert_eq!(next_page(None), "/admin/campaigns");
    }
}

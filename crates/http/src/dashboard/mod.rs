//! The dashboard at `/admin/`: server-rendered pages for an account's admin (`sendonce admin
//! create`). Every page calls the same use cases of `app/` as the CLI and the API, scoped to the
//! admin's one account: an id of another account is "not found", as in the API.
//!
//! - **Sessions**: `POST /admin/login` checks the password (`app::admins::login`, rate-limited per
//!   admin in the store and per client address here) and sets the session cookie: HttpOnly,
//!   SameSite=Strict, Path=/admin, and Secure when the request came over HTTPS (a proxy's
//!   `X-Forwarded-Proto: https`, or an `https://` public URL). The database keeps only the
//!   cookie's SHA-256.
//! - **CSRF**: every form carries the session's CSRF token (derived from the cookie, never
//!   stored) and [`Posted`] refuses a post without it, or from another origin, before anything
//!   is read or changed. The login form has its own double-submit nonce.
//! - **Pages**: `layout.html` (navigation, the logout form) over the pages' look; each page's
//!   module renders through [`page`]; errors through [`fail`], statuses from `http::error`.
//!   A small script (`/admin/static/dashboard.js`, `script-src 'self'`) refreshes live numbers;
//!   every page works without it.

pub(super) mod campaigns;
mod doubts;
mod lists;
pub mod login;
mod messages;
mod overview;
pub mod sandbox;
mod settings;
mod subscribers;
mod suppressions;
mod tokens;
mod webhooks;

use super::pages::environment_with;
use super::{blocking, AppState};
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use minijinja::Environment;
use sendonce_core::app::admins::{self, Session};
use sendonce_domain::error::{Error, ErrorKind};
use serde::de::DeserializeOwned;
use std::sync::OnceLock;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "sendonce_session";
/// Where every dashboard page lives.
pub const PREFIX: &str = "/admin";
/// Largest form body a dashboard page reads (a CSV import's is `import::MAX_CSV`).
pub const FORM_LIMIT: usize = 4 * 1024 * 1024;

/// The dashboard's routes, as (method, path), for the tests that visit every page.
pub fn route_list() -> Vec<(&'static str, &'static str)> {
    [
        login::ROUTES,
        overview::ROUTES,
        campaigns::ROUTES,
        doubts::ROUTES,
        tokens::ROUTES,
        settings::ROUTES,
        lists::ROUTES,
        subscribers::ROUTES,
        suppressions::ROUTES,
        messages::ROUTES,
        webhooks::ROUTES,
    ]
    .concat()
}

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .merge(login::routes())
        .merge(overview::routes())
        .merge(campaigns::routes())
        .merge(doubts::routes())
        .merge(tokens::routes())
        .merge(settings::routes())
        .merge(lists::routes())
        .merge(subscribers::routes())
        .merge(suppressions::routes())
        .merge(messages::routes())
        .merge(webhooks::routes())
}

/// Every dashboard template, by name (auto-escaped), over the pages' templates.
const TEMPLATES: &[(&str, &str)] = &[
    ("admin/layout.html", include_str!("templates/layout.html")),
    ("admin/login.html", include_str!("templates/login.html")),
    ("admin/error.html", include_str!("templates/error.html")),
    (
        "admin/campaigns.html",
        include_str!("templates/campaigns.html"),
    ),
    (
        "admin/campaign.html",
        include_str!("templates/campaign.html"),
    ),
    (
        "admin/campaign_new.html",
        include_str!("templates/campaign_new.html"),
    ),
    (
        "admin/campaign_confirm.html",
        include_str!("templates/campaign_confirm.html"),
    ),
    (
        "admin/campaign_preview.html",
        include_str!("templates/campaign_preview.html"),
    ),
    (
        "admin/campaign_recipients.html",
        include_str!("templates/campaign_recipients.html"),
    ),
    ("admin/doubts.html", include_str!("templates/doubts.html")),
    (
        "admin/doubt_confirm.html",
        include_str!("templates/doubt_confirm.html"),
    ),
    ("admin/tokens.html", include_str!("templates/tokens.html")),
    (
        "admin/token_created.html",
        include_str!("templates/token_created.html"),
    ),
    (
        "admin/token_revoke.html",
        include_str!("templates/token_revoke.html"),
    ),
    (
        "admin/settings.html",
        include_str!("templates/settings.html"),
    ),
    ("admin/lists.html", include_str!("templates/lists.html")),
    ("admin/list.html", include_str!("templates/list.html")),
    (
        "admin/list_new.html",
        include_str!("templates/list_new.html"),
    ),
    (
        "admin/list_unsubscribe.html",
        include_str!("templates/list_unsubscribe.html"),
    ),
    (
        "admin/subscriber.html",
        include_str!("templates/subscriber.html"),
    ),
    (
        "admin/subscriber_erase.html",
        include_str!("templates/subscriber_erase.html"),
    ),
    ("admin/import.html", include_str!("templates/import.html")),
    (
        "admin/import_preview.html",
        include_str!("templates/import_preview.html"),
    ),
    (
        "admin/suppressions.html",
        include_str!("templates/suppressions.html"),
    ),
    (
        "admin/messages.html",
        include_str!("templates/messages.html"),
    ),
    (
        "admin/suppressions_remove.html",
        include_str!("templates/suppressions_remove.html"),
    ),
    (
        "admin/webhooks.html",
        include_str!("templates/webhooks.html"),
    ),
    ("admin/webhook.html", include_str!("templates/webhook.html")),
    (
        "admin/webhook_secret.html",
        include_str!("templates/webhook_secret.html"),
    ),
    (
        "admin/webhook_delete.html",
        include_str!("templates/webhook_delete.html"),
    ),
];

fn env() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| environment_with(TEMPLATES))
}

/// The signed-in admin of a request: its session, found from the cookie. A request without a
/// live session is sent to the login page (`303`), with the page it wanted as `next`.
pub struct Signed(pub Session);

impl FromRequestParts<AppState> for Signed {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, Response> {
        let to_login = || {
            let next = parts
                .uri
                .path_and_query()
                .map_or(PREFIX, |p| p.as_str())
                .to_string();
            let q: String = form_urlencoded::Serializer::new(String::new())
                .append_pair("next", &next)
                .finish();
            Redirect::to(&format!("{PREFIX}/login?{q}")).into_response()
        };
        let Some(cookie) = cookie(&parts.headers, SESSION_COOKIE) else {
            return Err(to_login());
        };
        match blocking(st, move |s| admins::session(s, &cookie)).await {
            Ok(session) => Ok(Signed(session)),
            Err(e) if e.kind == ErrorKind::Unauthorized => Err(to_login()),
            Err(e) => Err(fail(None, &e)),
        }
    }
}

/// A form posted by the signed-in admin, checked before anything else runs: it came from this
/// origin (`Origin`, `Sec-Fetch-Site`), it carries the session's CSRF token in the field
/// `csrf`, and its fields parse as `T`. A refused post changes nothing and answers 403.
pub struct Posted<T>(pub Session, pub T);

impl<T: DeserializeOwned + Send> FromRequest<AppState> for Posted<T> {
    type Rejection = Response;

    async fn from_request(req: Request, st: &AppState) -> Result<Self, Response> {
        let (mut parts, body) = req.into_parts();
        let Signed(session) = Signed::from_request_parts(&mut parts, st).await?;
        if let Err(e) = same_origin(&parts.headers, st) {
            return Err(fail(Some(&session), &e));
        }
        let bytes = axum::body::to_bytes(body, FORM_LIMIT).await.map_err(|_| {
            fail(
                Some(&session),
                &Error::too_large(format!("a form is at most {FORM_LIMIT} bytes")),
            )
        })?;
        let fields = form_fields::<T>(&session, &bytes).map_err(|e| fail(Some(&session), &e))?;
        Ok(Posted(session, fields))
    }
}

/// The fields of a posted form, after its CSRF token was checked.
pub fn form_fields<T: DeserializeOwned>(
    session: &Session,
    body: &Bytes,
) -> sendonce_domain::error::Result<T> {
    let csrf = form_urlencoded::parse(body)
        .find(|(k, _)| k == "csrf")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default();
    session.check_csrf(&csrf)?;
    serde_urlencoded::from_bytes(body)
        .map_err(|e| Error::invalid(format!("the form's fields do not parse: {e}")))
}

/// `Forbidden` when the browser says the request came from another site: `Sec-Fetch-Site` other
/// than same-origin, or an `Origin` whose host is neither the request's `Host`, nor a proxy's
/// `X-Forwarded-Host`, nor the host of the configured public URL (behind a reverse proxy the
/// `Host` header is often the proxy's upstream address).
pub fn same_origin(h: &HeaderMap, st: &AppState) -> sendonce_domain::error::Result<()> {
    let public = st.links.as_ref().map(|l| l.base().to_string());
    same_origin_as(h, public.as_deref())
}

fn same_origin_as(h: &HeaderMap, public: Option<&str>) -> sendonce_domain::error::Result<()> {
    let cross = || Error::forbidden("this form was posted from another site; nothing was changed");
    if let Some(site) = h.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        if !matches!(site, "same-origin" | "none") {
            return Err(cross());
        }
    }
    let Some(origin) = h.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return Ok(());
    };
    let host_of = |url: &str| -> String {
        let rest = url.split_once("://").map_or("", |(_, rest)| rest);
        rest.split('/').next().unwrap_or("").to_ascii_lowercase()
    };
    let origin_host = host_of(origin);
    let header_host = |name: header::HeaderName| {
        h.get(name)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim().to_ascii_lowercase())
    };
    let allowed = [
        header_host(header::HOST),
        header_host(header::HeaderName::from_static("x-forwarded-host")),
        public.map(host_of),
    ];
    let known = allowed.iter().flatten().any(|a| *a == origin_host);
    if origin == "null" || origin_host.is_empty() || !known {
        return Err(cross());
    }
    Ok(())
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn cookie(h: &HeaderMap, name: &str) -> Option<String> {
    h.get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

/// Whether the browser reached us over HTTPS (then cookies get `Secure`): a proxy's
/// `X-Forwarded-Proto: https`, or a public URL that starts with `https://`.
pub fn over_https(h: &HeaderMap, st: &AppState) -> bool {
    let forwarded = h
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"));
    forwarded
        || st
            .links
            .as_ref()
            .is_some_and(|l| l.base().starts_with("https://"))
}

/// A `Set-Cookie` value: HttpOnly, SameSite=Strict, Path=/admin, Secure over HTTPS;
/// `max_age` 0 deletes it.
pub fn set_cookie(name: &str, value: &str, secure: bool, max_age: Option<i64>) -> HeaderValue {
    let mut c = format!("{name}={value}; Path={PREFIX}; HttpOnly; SameSite=Strict");
    if let Some(age) = max_age {
        c.push_str(&format!("; Max-Age={age}"));
    }
    if secure {
        c.push_str("; Secure");
    }
    HeaderValue::from_str(&c).unwrap_or_else(|_| HeaderValue::from_static("invalid=1"))
}

/// Render dashboard page `name` for `session` with `ctx`: the layout gets the admin's name, the
/// CSRF token for the logout form and every other form, and `nav` (which menu entry is lit).
pub fn page(session: &Session, nav: &str, name: &str, ctx: minijinja::Value) -> Response {
    let ctx = minijinja::context! {
        admin => session.admin.name,
        account_id => session.admin.account_id,
        csrf => session.csrf,
        nav => nav,
        ..ctx
    };
    render(StatusCode::OK, name, ctx)
}

/// Render template `name` with `status`; a template error is our bug: logged, a plain 500.
pub fn render(status: StatusCode, name: &str, ctx: minijinja::Value) -> Response {
    match env().get_template(name).and_then(|t| t.render(ctx)) {
        Ok(body) => html(status, body),
        Err(e) => {
            tracing::error!(template = name, error = %e, "a dashboard page did not render");
            html(
                StatusCode::INTERNAL_SERVER_ERROR,
                "<!doctype html><title>Error</title><p>Something went wrong on our side.</p>"
                    .to_string(),
            )
        }
    }
}

/// An error as a dashboard page, with the status `http::error` gives its kind. Errors that are
/// not the reader's (database, I/O, bugs) are logged and shown without their message.
pub fn fail(session: Option<&Session>, e: &Error) -> Response {
    let (status, _) = super::status_for(e.kind);
    let text = if status.is_server_error() && status != StatusCode::SERVICE_UNAVAILABLE {
        tracing::error!(error = %e, "a dashboard request failed");
        "Something went wrong on our side; the server log has the details.".to_string()
    } else {
        e.message.clone()
    };
    let title = status.canonical_reason().unwrap_or("Error");
    let ctx = minijinja::context! { title => title, text => text, status => status.as_u16() };
    match session {
        Some(s) => {
            let mut res = page(s, "", "admin/error.html", ctx);
            *res.status_mut() = status;
            res
        }
        None => render(status, "admin/error.html", ctx),
    }
}

/// A redirect after a successful post (303: the browser follows it with a GET).
pub fn see_other(to: &str) -> Response {
    Redirect::to(to).into_response()
}

fn html(status: StatusCode, body: String) -> Response {
    let mut res = (status, body).into_response();
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; script-src 'self'; \
             connect-src 'self'; img-src 'self' data:; frame-src 'self'; form-action 'self'; \
             frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    security_headers(h);
    res
}

/// What every dashboard answer carries: no caching, no sniffing, no referrer to other sites,
/// no framing by other sites.
pub fn security_headers(h: &mut HeaderMap) {
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_parses() {
        for (name, _) in TEMPLATES {
            assert!(env().get_template(name).is_ok(), "{name}");
        }
    }

    #[test]
    fn cookies_are_read_and_set_safely() {
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_static("a=1; sendonce_session=xyz"),
        );
        assert_eq!(cookie(&h, SESSION_COOKIE).as_deref(), Some("xyz"));
        assert_eq!(cookie(&h, "b"), None);
        let c = set_cookie(SESSION_COOKIE, "v", true, None);
        let c = c.to_str().unwrap();
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict") && c.contains("Secure"));
        assert!(!set_cookie("n", "v", false, Some(0))
            .to_str()
            .unwrap()
            .contains("Secure"));
    }

    #[test]
    fn cross_site_posts_are_refused() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8080"));
        assert!(same_origin_as(&h, None).is_ok());
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8080"),
        );
        assert!(same_origin_as(&h, None).is_ok());
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert!(same_origin_as(&h, None).is_err());
        // Behind a proxy: the public URL's host is this site too.
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://mail.example.org"),
        );
        assert!(same_origin_as(&h, None).is_err());
        assert!(same_origin_as(&h, Some("https://mail.example.org/")).is_ok());
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8080"),
        );
        h.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(same_origin_as(&h, None).is_err());
    }
}

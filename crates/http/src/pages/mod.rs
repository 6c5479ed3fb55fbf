//! The pages a recipient sees (no login): unsubscribe (`/u/{token}`), double opt-in confirm
//! (`/c/{token}`) and the public signup form (`/subscribe`). Server-rendered HTML from templates
//! embedded in the binary and auto-escaped by minijinja; plain forms, no JavaScript; one small
//! stylesheet inline so a page reads well on a phone. A refused token or any error is a plain
//! page with a status, never a stack trace or an internal message.

mod confirm;
mod subscribe;
mod unsubscribe;

use super::AppState;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use minijinja::Environment;
use std::sync::OnceLock;

/// The routes of this module, as (method, path).
pub fn route_list() -> Vec<(&'static str, &'static str)> {
    [confirm::ROUTES, subscribe::ROUTES, UNSUBSCRIBE_ROUTES].concat()
}

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .merge(confirm::routes())
        .merge(subscribe::routes())
        .route(
            "/u/{token}",
            axum::routing::get(unsubscribe::show).post(unsubscribe::submit),
        )
}

/// The client of a page's request as a consent record keeps it: its address (the TCP peer,
/// as `[privacy] consent_ip` keeps it; a forwarded-for header is anyone's to write) and its
/// user agent (at most `privacy::MAX_CONSENT_TEXT` bytes).
pub(crate) fn seen(st: &AppState, req: &axum::extract::Request) -> sendonce_store::Seen {
    use sendonce_core::app::privacy::{clip, consent_text, MAX_CONSENT_TEXT};
    let peer = req
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip());
    let agent = req
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .map(|a| clip(a, MAX_CONSENT_TEXT));
    sendonce_store::Seen {
        ip: peer.and_then(|ip| st.consent_ip.keep(ip)),
        user_agent: consent_text("the user agent", agent).ok().flatten(),
    }
}

/// The unsubscribe page's routes (`unsubscribe.rs`).
const UNSUBSCRIBE_ROUTES: &[(&str, &str)] = &[("GET", "/u/{token}"), ("POST", "/u/{token}")];

/// Every page template, by name (names ending in `.html` are auto-escaped).
const TEMPLATES: &[(&str, &str)] = &[
    ("base.html", include_str!("templates/base.html")),
    ("message.html", include_str!("templates/message.html")),
    ("confirm.html", include_str!("templates/confirm.html")),
    ("subscribe.html", include_str!("templates/subscribe.html")),
    (
        "unsubscribe.html",
        include_str!("templates/unsubscribe.html"),
    ),
];

fn env() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| environment_with(&[]))
}

/// The pages' templates plus `extra` (which may `{% extends "base.html" %}` for the same look),
/// auto-escaped: for the binary's other server-rendered pages (the fake provider's inbox).
pub fn environment_with(extra: &[(&'static str, &'static str)]) -> Environment<'static> {
    let mut env = Environment::new();
    for (name, src) in TEMPLATES.iter().chain(extra) {
        // The templates are part of the binary; a test renders each one.
        if let Err(e) = env.add_template(name, src) {
            tracing::error!(template = name, error = %e, "a page template does not parse");
        }
    }
    env
}

/// Render page `name` with `ctx` and `status`. A template error is logged and answered as a
/// plain 500 page (it is our bug, not the reader's).
pub fn render(status: StatusCode, name: &str, ctx: minijinja::Value) -> Response {
    let html = env().get_template(name).and_then(|t| t.render(ctx));
    match html {
        Ok(body) => html_response(status, body),
        Err(e) => {
            tracing::error!(template = name, error = %e, "a page did not render");
            html_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "<!doctype html><title>Error</title><p>Something went wrong on our side. \
                 Please try again later.</p>"
                    .to_string(),
            )
        }
    }
}

/// A page with a title and one paragraph (refused links, done, errors).
pub fn message(status: StatusCode, title: &str, text: &str) -> Response {
    render(
        status,
        "message.html",
        minijinja::context! { title => title, text => text },
    )
}

fn html_response(status: StatusCode, body: String) -> Response {
    let mut res = (status, body).into_response();
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    // No script, no frame, no referrer leak of the token in the URL.
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; \
             frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    res
}

/// `ana@example.com` → `a**@example.com`; `+15551234567` → `+1******4567`: enough for the
/// reader to recognise their own address, not enough to read someone else's from a shoulder.
pub fn mask(address: &str) -> String {
    if let Some((local, domain)) = address.split_once('@') {
        let first: String = local.chars().take(1).collect();
        let stars = local.chars().count().saturating_sub(1).clamp(2, 8);
        return format!("{first}{}@{domain}", "*".repeat(stars));
    }
    let chars: Vec<char> = address.chars().collect();
    if chars.len() <= 6 {
        return "*".repeat(chars.len());
    }
    let head: String = chars[..2].iter().collect();
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{head}{}{tail}", "*".repeat(chars.len() - 6))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_parses_and_escapes() {
        for (name, _) in TEMPLATES {
            assert!(env().get_template(name).is_ok(), "{name}");
        }
        let html = env()
            .get_template("message.html")
            .unwrap()
            .render(minijinja::context! { title => "<b>t</b>", text => "<script>x</script>" })
            .unwrap();
        assert!(
            html.contains("&lt;script&gt;") && !html.contains("<script>"),
            "{html}"
        );
    }

    #[test]
    fn masks() {
        assert_eq!(mask("ana@example.com"), "a**@example.com");
        assert_eq!(mask("a@example.com"), "a**@example.com");
        assert_eq!(mask("alexandra.long@x.org"), "a********@x.org");
        assert_eq!(mask("+15551234567"), "+1******4567");
    }
}

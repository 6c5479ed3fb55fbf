//! The public signup form of a list: `GET /subscribe/{list}` renders it, `POST /subscribe`
//! takes it (`list` = the list's id, `email`, optional `name`, and the honeypot `website`,
//! hidden by CSS) through `app::optin::signup`. Only lists marked public answer; every other
//! id is the same 404 page. Rate-limited per client address (the TCP peer: a forwarded-for
//! header is anyone's to write) with an in-memory token bucket; the answer never tells whether
//! the address was already known.

use super::confirm::failed;
use super::{message, render};
use crate::limiter::Limiter;
use crate::{blocking, AppState};
use axum::extract::{ConnectInfo, Path, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use axum::Extension;
use sendonce_core::app::optin::{self, Signed, Signup};
use sendonce_domain::error::ErrorKind;
use sendonce_store::Consent;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

/// The routes of this page, as (method, path).
pub const ROUTES: &[(&str, &str)] = &[("GET", "/subscribe/{list}"), ("POST", "/subscribe")];

/// Signups a client address may send at once, and per minute after that.
pub const SIGNUP_BURST: u32 = 5;
pub const SIGNUP_PER_MINUTE: u32 = 5;
/// Largest signup form body read, in bytes.
const FORM_LIMIT: usize = 16 * 1024;

pub fn routes() -> axum::Router<AppState> {
    let limiter = Arc::new(Limiter::new(SIGNUP_BURST, SIGNUP_PER_MINUTE));
    axum::Router::new()
        .route("/subscribe/{list}", axum::routing::get(form))
        .route("/subscribe", axum::routing::post(submit))
        .layer(Extension(limiter))
}

async fn form(State(st): State<AppState>, Path(list): Path<String>) -> Response {
    match blocking(&st, move |s| optin::public_list(s, &list)).await {
        Ok(l) => render(
            StatusCode::OK,
            "subscribe.html",
            minijinja::context! {
                title => format!("Subscribe to {}", l.name),
                description => l.description,
                list_id => l.id,
                double => (l.optin == sendonce_store::OptIn::Double).then_some(DOUBLE_NOTICE),
            },
        ),
        Err(e) => not_found_or(&e),
    }
}

/// What the form of a double opt-in list says under its button (`subscribe.html`).
const DOUBLE_NOTICE: &str = "We will send you an email with a link to confirm.";

/// The text the signup form shows (its title and the list's description), as a consent
/// record keeps it.
fn form_text(l: &sendonce_store::ListRow) -> String {
    let mut text = format!("Subscribe to {}", l.name);
    if let Some(d) = l.description.as_deref().filter(|d| !d.trim().is_empty()) {
        text.push('\n');
        text.push_str(d);
    }
    if l.optin == sendonce_store::OptIn::Double {
        text.push('\n');
        text.push_str(DOUBLE_NOTICE);
    }
    text
}

fn not_found_or(e: &sendonce_domain::error::Error) -> Response {
    if e.kind == ErrorKind::NotFound {
        return message(
            StatusCode::NOT_FOUND,
            "Not found",
            "There is no signup form here.",
        );
    }
    failed(e)
}

/// The form's fields, each once (a repeated field keeps its first value).
#[derive(Default)]
struct Fields {
    list: String,
    email: String,
    name: String,
    website: String,
}

fn fields(body: &[u8]) -> Fields {
    let mut f = Fields::default();
    for (k, v) in form_urlencoded::parse(body) {
        let slot = match &*k {
            "list" => &mut f.list,
            "email" => &mut f.email,
            "name" => &mut f.name,
            "website" => &mut f.website,
            _ => continue,
        };
        if slot.is_empty() {
            *slot = v.into_owned();
        }
    }
    f
}

async fn submit(
    State(st): State<AppState>,
    Extension(limiter): Extension<Arc<Limiter>>,
    req: Request,
) -> Response {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::from([0, 0, 0, 0]), |c| c.0.ip());
    if let Err(wait) = limiter.take(peer, Instant::now()) {
        let mut res = message(
            StatusCode::TOO_MANY_REQUESTS,
            "Too many requests",
            "Too many signups from your network in a short time. Please wait a minute and try \
             again.",
        );
        let secs = wait.as_secs().max(1).to_string();
        if let Ok(v) = HeaderValue::from_str(&secs) {
            res.headers_mut().insert(header::RETRY_AFTER, v);
        }
        return res;
    }
    let seen = super::seen(&st, &req);
    let body = match axum::body::to_bytes(req.into_body(), FORM_LIMIT).await {
        Ok(b) => b,
        Err(_) => {
            return message(
                StatusCode::PAYLOAD_TOO_LARGE,
                "Too large",
                "This form is larger than a signup form can be.",
            )
        }
    };
    let f = fields(&body);
    let links = st.links.clone();
    let done = blocking(&st, move |s| {
        let text = optin::public_list(s, &f.list)
            .map(|l| form_text(&l))
            .unwrap_or_default();
        let signup = Signup {
            list: &f.list,
            email: &f.email,
            name: Some(f.name.as_str()),
            honeypot: &f.website,
            consent: Consent {
                source: "form",
                ip: seen.ip,
                user_agent: seen.user_agent,
                text: Some(text),
                basis: None,
            },
        };
        optin::signup(s, links.as_deref(), &signup)
    })
    .await;
    match done {
        Ok(Signed::Accepted) => message(
            StatusCode::OK,
            "Check your inbox",
            "Check your inbox to confirm: we sent a link to the address you gave. Nothing \
             happens until you open it.",
        ),
        Ok(Signed::Subscribed) => message(
            StatusCode::OK,
            "Thank you",
            "You are subscribed. Every message has a link to unsubscribe.",
        ),
        Ok(Signed::Unavailable) => message(
            StatusCode::SERVICE_UNAVAILABLE,
            "Not available",
            "This signup form cannot take signups right now. Please try again later.",
        ),
        Err(e) if e.kind == ErrorKind::Invalid => {
            message(StatusCode::BAD_REQUEST, "Please check the form", &e.message)
        }
        Err(e) => not_found_or(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_fields_first_value_wins() {
        let f = fields(b"list=3&email=a%40b.org&name=A+B&website=&email=x@y.z&other=1");
        assert_eq!(
            (f.list.as_str(), f.email.as_str(), f.name.as_str()),
            ("3", "a@b.org", "A B")
        );
        assert!(f.website.is_empty());
    }
}

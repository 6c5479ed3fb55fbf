//! The public signup form of a list: `GET /subscribe/{list}` renders it, `POST /subscribe`
//! takes it (`list` = the list's id, `email`, optional `name`, and the honeypot `website`,
//! hidden by CSS) through `app::optin::signup`. Only lists marked public answer; every other
//! id is the same 404 page. Rate-limited per client address (the TCP peer: a forwarded-for
//! header is anyone's to write) with an in-memory token bucket; the answer never tells whether
//! the address was already known.

use super::confirm::failed;
use super::{message, render};
use crate::app::optin::{self, Signed, Signup};
use crate::error::ErrorKind;
use crate::http::{blocking, AppState};
use axum::extract::{ConnectInfo, Path, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use axum::Extension;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The routes of this page, as (method, path).
pub const ROUTES: &[(&str, &str)] = &[("GET", "/subscribe/{list}"), ("POST", "/subscribe")];

/// Signups a client address may send at once, and per minute after that.
pub const SIGNUP_BURST: u32 = 5;
pub const SIGNUP_PER_MINUTE: u32 = 5;
/// Largest signup form body read, in bytes.
const FORM_LIMIT: usize = 16 * 1024;
/// Client addresses remembered before full buckets are forgotten.
const MAX_TRACKED: usize = 10_000;

pub fn routes() -> axum::Router<AppState> {
    let limiter = Arc::new(Limiter::new(SIGNUP_BURST, SIGNUP_PER_MINUTE));
    axum::Router::new()
        .route("/subscribe/{list}", axum::routing::get(form))
        .route("/subscribe", axum::routing::post(submit))
        .layer(Extension(limiter))
}

/// Token buckets by client address (IPv6 by /64, what one host usually holds).
pub struct Limiter {
    buckets: Mutex<HashMap<IpAddr, (f64, Instant)>>,
    burst: f64,
    per_sec: f64,
}

impl Limiter {
    pub fn new(burst: u32, per_minute: u32) -> Limiter {
        Limiter {
            buckets: Mutex::new(HashMap::new()),
            burst: f64::from(burst),
            per_sec: f64::from(per_minute) / 60.0,
        }
    }

    /// Take one token for `ip` at `now`: `Ok` or how long until the next one.
    pub fn take(&self, ip: IpAddr, now: Instant) -> Result<(), Duration> {
        let key = match ip {
            IpAddr::V6(v6) if v6.to_ipv4_mapped().is_none() => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        // A poisoned lock only means another request panicked mid-update: the map is usable.
        let mut map = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_TRACKED {
            let (burst, rate) = (self.burst, self.per_sec);
            map.retain(|_, (t, at)| *t + now.duration_since(*at).as_secs_f64() * rate < burst);
            if map.len() >= MAX_TRACKED {
                // Over MAX_TRACKED addresses signing up within minutes: memory stays bounded,
                // and everyone starts again from a full bucket.
                tracing::warn!("signup rate limit: too many client addresses, buckets reset");
                map.clear();
            }
        }
        let (tokens, at) = map.entry(key).or_insert((self.burst, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * self.per_sec).min(self.burst);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            return Ok(());
        }
        Err(Duration::from_secs_f64((1.0 - *tokens) / self.per_sec))
    }
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
                double => l.optin == crate::store::OptIn::Double,
            },
        ),
        Err(e) => not_found_or(&e),
    }
}

fn not_found_or(e: &crate::error::Error) -> Response {
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
        let signup = Signup {
            list: &f.list,
            email: &f.email,
            name: Some(f.name.as_str()),
            honeypot: &f.website,
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
    fn bucket_allows_the_burst_then_refills() {
        let l = Limiter::new(5, 5);
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        let t0 = Instant::now();
        for _ in 0..5 {
            assert!(l.take(ip, t0).is_ok());
        }
        let wait = l.take(ip, t0).unwrap_err();
        assert!(wait <= Duration::from_secs(12), "{wait:?}");
        // Another address has its own bucket; the same /64 shares one.
        assert!(l.take("192.0.2.8".parse().unwrap(), t0).is_ok());
        let a: IpAddr = "2001:db8::1".parse().unwrap();
        let b: IpAddr = "2001:db8::2".parse().unwrap();
        for _ in 0..5 {
            assert!(l.take(a, t0).is_ok());
        }
        assert!(l.take(b, t0).is_err());
        // 12 s later one token is back.
        assert!(l.take(ip, t0 + Duration::from_secs(12)).is_ok());
        assert!(l.take(ip, t0 + Duration::from_secs(12)).is_err());
    }

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

//! A message's HTML part as its own response under a sandboxing CSP (a unique origin, no
//! script, nothing remote loads): the dashboard's campaign preview frame, the fake provider's
//! web inbox frame and its Mailpit `/view/{ID}.html` all answer through this one function.

use axum::body::Bytes;
use axum::http::header::{self, HeaderValue};
use axum::http::Response;

/// The HTML part's policy, even when opened on its own.
pub(crate) const HTML_CSP: &str = "sandbox; default-src 'none'; img-src data:; \
     style-src 'unsafe-inline'; frame-ancestors 'self'; base-uri 'none'; form-action 'none'";

/// `html` as a sandboxed HTML response (200), for any body type made from bytes.
pub fn sandboxed_html<B: From<Bytes>>(html: String) -> Response<B> {
    let mut r = Response::new(B::from(Bytes::from(html)));
    let h = r.headers_mut();
    let pairs = [
        (header::CONTENT_TYPE, "text/html; charset=utf-8"),
        (header::CONTENT_SECURITY_POLICY, HTML_CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
    ];
    for (name, v) in pairs {
        h.insert(name, HeaderValue::from_static(v));
    }
    r
}

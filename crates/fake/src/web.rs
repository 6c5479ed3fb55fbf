//! The fake provider's web inbox for people: `GET /` (messages newest first, search, paging, a
//! "Clear inbox" button posting to `POST /clear` with a per-process token), `GET /inbox/{id}`
//! (one message: text, the HTML in a sandboxed frame, headers, source, links; an SMS as a
//! bubble with its segments) and `GET /inbox/{id}/html` (the HTML part under a sandboxing CSP:
//! no script runs, nothing remote loads). Server-rendered with the pages' templates, no script.

use super::inbox::{self, Filter, Message};
use super::server::{Body, Shared};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Method, Request as HttpRequest, Response, StatusCode};
use minijinja::{context, Environment};
use std::sync::OnceLock;

/// Messages on one page of the list.
const PAGE: usize = 100;
/// Characters of an SMS text shown in the list.
const PREVIEW: usize = 80;

/// Every page but the HTML part's: no script, styles inline, the HTML part framed from here.
const PAGE_CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; \
     frame-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
const TEMPLATES: &[(&str, &str)] = &[
    ("fake/inbox.html", include_str!("templates/inbox.html")),
    ("fake/message.html", include_str!("templates/message.html")),
];

fn env() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| sendonce_http::pages::environment_with(TEMPLATES))
}

/// Whether the web inbox answers this request: `GET /`, `/inbox` and below, `/clear`.
pub(super) fn is_ours(method: &Method, path: &str) -> bool {
    (method == Method::GET && path == "/")
        || path == "/clear"
        || path == "/inbox"
        || path.starts_with("/inbox/")
}

pub(super) async fn handle(shared: &Shared, req: HttpRequest<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    let query = req.uri().query().map(str::to_string);
    match (req.method(), path.as_str()) {
        (&Method::GET, "/") => list(shared, query.as_deref()).await,
        (&Method::POST, "/clear") => clear(shared, req).await,
        (_, "/clear") => not_allowed("POST"),
        (&Method::GET | &Method::HEAD, "/inbox") => redirect("/"),
        (&Method::GET | &Method::HEAD, p) => {
            let rest = p.strip_prefix("/inbox/").unwrap_or_default();
            match rest.strip_suffix("/html") {
                Some(id) if !id.contains('/') => {
                    html_part(shared, &inbox::percent_decode(id)).await
                }
                None if !rest.is_empty() && !rest.contains('/') => {
                    view(shared, &inbox::percent_decode(rest)).await
                }
                _ => notice(StatusCode::NOT_FOUND, "Not found", "There is no such page."),
            }
        }
        _ => not_allowed("GET"),
    }
}

/// The per-process token the "Clear inbox" form carries: a cross-site page cannot read it, so
/// it cannot post a working form. `None` if the system has no random source.
fn token() -> Option<&'static str> {
    static TOKEN: OnceLock<Option<String>> = OnceLock::new();
    TOKEN
        .get_or_init(|| {
            use ring::rand::SecureRandom;
            let mut b = [0u8; 24];
            ring::rand::SystemRandom::new().fill(&mut b).ok()?;
            Some(b.iter().map(|x| format!("{x:02x}")).collect())
        })
        .as_deref()
}

/// Equal, in time that does not depend on where they differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The list's parameters, read as an HTML form sends them (`+` is a space): `q`, `to`,
/// `channel`, `page`.
struct ListQuery {
    q: String,
    to: String,
    channel: String,
    page: usize,
}

impl ListQuery {
    fn parse(query: Option<&str>) -> Result<ListQuery, String> {
        let mut out = ListQuery {
            q: String::new(),
            to: String::new(),
            channel: String::new(),
            page: 1,
        };
        for (k, v) in inbox::form_urlencoded_pairs(query) {
            let v = v.trim().to_string();
            match k.as_str() {
                "q" => out.q = v,
                "to" => out.to = v,
                "channel" => match v.as_str() {
                    "" | "email" | "sms" => out.channel = v,
                    _ => return Err(format!("channel must be email or sms, got {v:?}")),
                },
                "page" if !v.is_empty() => {
                    out.page =
                        v.parse().ok().filter(|p| *p >= 1).ok_or_else(|| {
                            format!("page must be a whole number from 1, got {v:?}")
                        })?
                }
                _ => {}
            }
        }
        Ok(out)
    }

    fn filter(&self) -> Filter {
        let some = |s: &str| Some(s.to_string()).filter(|s| !s.is_empty());
        Filter {
            text: some(&self.q),
            to: some(&self.to),
            channel: some(&self.channel),
            ..Filter::default()
        }
    }

    /// The query string of the same search on page `page`.
    fn href(&self, page: usize) -> String {
        let mut s = form_urlencoded::Serializer::new(String::new());
        for (k, v) in [("q", &self.q), ("to", &self.to), ("channel", &self.channel)] {
            if !v.is_empty() {
                s.append_pair(k, v);
            }
        }
        if page > 1 {
            s.append_pair("page", &page.to_string());
        }
        let (base, q) = (super::tenants::base(), s.finish());
        if q.is_empty() {
            format!("{base}/")
        } else {
            format!("{base}/?{q}")
        }
    }
}

/// `2026-12-03T21:16:17.123Z` as `2026-12-03 21:16:17`.
fn short_time(ms: i64) -> String {
    let t = inbox::rfc3339(ms);
    t.get(..19).unwrap_or(&t).replace('T', " ")
}

/// Page `wanted` (or the last) of the messages a filter keeps, newest first: how many messages
/// the inbox holds, how many match, the page shown and its messages read from the log.
async fn page_of(
    shared: &Shared,
    filter: Filter,
    wanted: usize,
) -> Result<(usize, usize, usize, Vec<inbox::Found>), String> {
    inbox::query(shared, move |ix| {
        let (all, found, page, picks) = {
            let st = ix.read();
            let found: Vec<u32> = st.select(&filter).collect();
            let pages = found.len().div_ceil(PAGE).max(1);
            let page = wanted.min(pages);
            let shown: Vec<u32> = found
                .iter()
                .skip((page - 1) * PAGE)
                .take(PAGE)
                .copied()
                .collect();
            (st.live(), found.len(), page, st.picks_at(&shown))
        };
        (all, found, page, picks.load())
    })
    .await
}

async fn list(shared: &Shared, query: Option<&str>) -> Response<Body> {
    let q = match ListQuery::parse(query) {
        Ok(q) => q,
        Err(e) => return notice(StatusCode::BAD_REQUEST, "Bad search", &e),
    };
    let paged = page_of(shared, q.filter(), q.page).await;
    let (all, found, page, lines) = match paged {
        Ok(p) => p,
        Err(e) => return failed(&e),
    };
    let pages = found.div_ceil(PAGE).max(1);
    let rows: Vec<minijinja::Value> = lines
        .iter()
        .map(|f| {
            let l = &f.line;
            let to = match &l.envelope {
                Some(e) => e.to.join(", "),
                None => l.to.clone(),
            };
            let summary = match (l.channel.as_str(), &l.subject) {
                ("sms", _) | (_, None) => {
                    let mut s: String = l.body.chars().take(PREVIEW).collect();
                    if l.body.chars().count() > PREVIEW {
                        s.push('…');
                    }
                    s
                }
                (_, Some(s)) => s.clone(),
            };
            context! {
                id => l.message_id,
                href => format!("{}/inbox/{}", super::tenants::base(), urlencode(&l.message_id)),
                channel => l.channel,
                to => to,
                from => l.from,
                summary => summary,
                has_subject => l.channel != "sms" && l.subject.is_some(),
                time => short_time(l.at),
                datetime => inbox::rfc3339(l.at),
            }
        })
        .collect();
    page_response(render(
        "fake/inbox.html",
        context! {
            title => "Inbox",
            rows => rows,
            total => all,
            found => found,
            searching => !(q.q.is_empty() && q.to.is_empty() && q.channel.is_empty()),
            q => q.q,
            to => q.to,
            channel => q.channel,
            page => page,
            pages => pages,
            prev => (page > 1).then(|| q.href(page - 1)),
            next => (page < pages).then(|| q.href(page + 1)),
            token => token().unwrap_or_default(),
            base => super::tenants::base(),
        },
    ))
}

async fn clear(shared: &Shared, req: HttpRequest<Incoming>) -> Response<Body> {
    let body = match super::guard::read_body(req.into_body(), &shared.config.limits).await {
        Ok(b) => b,
        Err(e) => {
            return e.apply(notice(
                StatusCode::BAD_REQUEST,
                "Not cleared",
                "The form did not arrive whole; nothing was deleted.",
            ))
        }
    };
    let sent = form_urlencoded::parse(&body)
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.into_owned());
    let ok = match (token(), sent) {
        (Some(t), Some(s)) => same_secret(t.as_bytes(), s.as_bytes()),
        _ => false,
    };
    if !ok {
        return notice(
            StatusCode::FORBIDDEN,
            "Not cleared",
            "This form did not come from this inbox's page (its token is missing or from an \
             earlier run); nothing was deleted. Reload the inbox and try again.",
        );
    }
    match inbox::clear(shared).await {
        Ok(_) => redirect("/"),
        Err(e) => failed(&e),
    }
}

/// The message with `id`, or the 404 page.
async fn message(shared: &Shared, id: &str) -> Result<Message, Response<Body>> {
    let found = inbox::find(shared, id).await.map_err(|e| failed(&e))?;
    found.map(|f| Message::of(&f.line)).ok_or_else(|| {
        notice(
            StatusCode::NOT_FOUND,
            "No such message",
            "There is no message with this id (the inbox may have been cleared).",
        )
    })
}

async fn view(shared: &Shared, id: &str) -> Response<Body> {
    let m = match message(shared, id).await {
        Ok(m) => m,
        Err(r) => return r,
    };
    let title = match (&m.subject, m.channel.as_str()) {
        (_, "sms") => format!("SMS to {}", m.to.join(", ")),
        (Some(s), _) if !s.is_empty() => s.clone(),
        _ => "(no subject)".to_string(),
    };
    let raw = (m.channel != "sms").then(|| String::from_utf8_lossy(&m.raw).into_owned());
    page_response(render(
        "fake/message.html",
        context! {
            title => title,
            m => minijinja::Value::from_serialize(&m),
            to => m.to.join(", "),
            time => short_time(m.at),
            html_href => format!("{}/inbox/{}/html", super::tenants::base(), urlencode(&m.id)),
            base => super::tenants::base(),
            raw => raw,
        },
    ))
}

async fn html_part(shared: &Shared, id: &str) -> Response<Body> {
    let m = match message(shared, id).await {
        Ok(m) => m,
        Err(r) => return r,
    };
    let Some(html) = m.html else {
        return notice(
            StatusCode::NOT_FOUND,
            "No HTML part",
            "This message has no HTML part.",
        );
    };
    sandboxed_html(html)
}

/// A message's HTML part as its own response, sandboxed: the web inbox's frame and Mailpit's
/// `/view/{ID}.html` both serve it through the dashboard's one implementation.
pub(super) fn sandboxed_html(html: String) -> Response<Body> {
    sendonce_http::dashboard::sandbox::sandboxed_html(html)
}

/// A message id as one path segment (ids are `fake-<hex>`, SIDs or UUIDs: kept as they are).
fn urlencode(s: &str) -> String {
    const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(s, SEGMENT).to_string()
}

/// A template rendered, or the plain error page (a template error is our bug, logged).
fn render(name: &str, ctx: minijinja::Value) -> Result<String, ()> {
    env()
        .get_template(name)
        .and_then(|t| t.render(ctx))
        .map_err(|e| tracing::error!(template = name, error = %e, "an inbox page did not render"))
}

fn page_response(html: Result<String, ()>) -> Response<Body> {
    match html {
        Ok(body) => html_response(StatusCode::OK, body),
        Err(()) => html_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            "<!doctype html><title>Error</title><p>This page did not render (see the log).</p>"
                .into(),
        ),
    }
}

/// A page with a title and one paragraph, and a link back to the inbox.
fn notice(status: StatusCode, title: &str, text: &str) -> Response<Body> {
    let mut r = page_response(render(
        "message.html",
        context! { title => title, text => text },
    ));
    *r.status_mut() = status;
    r
}

fn failed(e: &str) -> Response<Body> {
    tracing::error!(error = %e, "fake provider: the inbox cannot read the delivery log");
    notice(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Cannot read the inbox",
        &format!("The delivery log could not be read: {e}"),
    )
}

fn not_allowed(allow: &'static str) -> Response<Body> {
    let mut r = notice(
        StatusCode::METHOD_NOT_ALLOWED,
        "Method not allowed",
        "This page does not answer that method.",
    );
    r.headers_mut()
        .insert(hyper::header::ALLOW, HeaderValue::from_static(allow));
    r
}

/// A 303 to `to` under this request's tenant view (`/t/{tenant}`), if any.
fn redirect(to: &str) -> Response<Body> {
    let mut r = Response::new(Body::new(Bytes::new()));
    *r.status_mut() = StatusCode::SEE_OTHER;
    let to = format!("{}{to}", super::tenants::base());
    if let Ok(v) = HeaderValue::from_str(&to) {
        r.headers_mut().insert(hyper::header::LOCATION, v);
    }
    headers(&mut r, PAGE_CSP);
    r
}

fn html_response(status: StatusCode, body: String) -> Response<Body> {
    let mut r = Response::new(Body::new(Bytes::from(body)));
    *r.status_mut() = status;
    headers(&mut r, PAGE_CSP);
    r
}

fn headers(r: &mut Response<Body>, csp: &'static str) {
    let h = r.headers_mut();
    let set = |h: &mut hyper::HeaderMap, name: HeaderName, v: &'static str| {
        h.insert(name, HeaderValue::from_static(v));
    };
    set(h, hyper::header::CONTENT_TYPE, "text/html; charset=utf-8");
    set(h, hyper::header::CONTENT_SECURITY_POLICY, csp);
    set(h, hyper::header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(h, hyper::header::REFERRER_POLICY, "no-referrer");
    set(h, hyper::header::CACHE_CONTROL, "no-store");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_queries_read_like_forms() {
        let q = ListQuery::parse(Some("q=big+sale&to=%2B14155550100&page=2")).unwrap();
        assert_eq!(q.q, "big sale");
        assert_eq!(q.to, "+14155550100");
        assert_eq!(q.page, 2);
        assert_eq!(q.href(3), "/?q=big+sale&to=%2B14155550100&page=3");
        assert_eq!(ListQuery::parse(None).unwrap().href(1), "/");
        assert!(ListQuery::parse(Some("page=0")).is_err());
        assert!(ListQuery::parse(Some("channel=fax")).is_err());
        let f = ListQuery::parse(Some("channel=sms")).unwrap().filter();
        assert_eq!(f.channel.as_deref(), Some("sms"));
        assert!(!f.replays);
        assert_eq!(urlencode("fake-0a_b.c~"), "fake-0a_b.c~");
        assert_eq!(urlencode("a/b c"), "a%2Fb%20c");
    }

    #[test]
    fn tokens_compare_whole() {
        let t = token().expect("a random source");
        assert_eq!(t.len(), 48);
        assert!(same_secret(t.as_bytes(), t.as_bytes()));
        assert!(!same_secret(t.as_bytes(), &t.as_bytes()[..47]));
        assert!(!same_secret(b"abc", b"abd"));
    }

    #[test]
    fn templates_render_and_escape() {
        let row = context! {
            id => "x", href => "/inbox/x", channel => "email", to => "<b>@x",
            summary => "<script>alert(1)</script>", has_subject => true,
            time => "t", datetime => "t",
        };
        let html = render(
            "fake/inbox.html",
            context! { title => "Inbox", rows => vec![row], total => 1, found => 1,
            page => 1, pages => 1, token => "tok" },
        )
        .unwrap();
        assert!(
            html.contains("&lt;script&gt;") && !html.contains("<script>"),
            "{html}"
        );
        assert!(html.contains(r#"value="tok""#), "{html}");
    }
}

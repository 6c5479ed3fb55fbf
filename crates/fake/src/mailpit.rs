//! Mailpit-compatible API: the message endpoints existing test suites call (`/api/v1/messages`,
//! `/api/v1/message/{ID}` with `/raw`, `/headers`, `/html`, `/api/v1/search`, `/api/v1/info`,
//! `/view/{ID}.html|.txt`), answered from the delivery log in Mailpit's JSON shapes so a Mailpit
//! client (the `mailpit-api` npm package, Cypress plugins) works against the fake unchanged.
//! Replays are never listed (Mailpit has no such thing); SMS deliveries are messages whose From
//! and To are the phone numbers and whose Text is the body. Listings and searches go through the
//! inbox index; read flags and tags (`marks`) live there too. `search`: the search syntax.

mod marks;
mod search;

use super::inbox::{self, Header, Message};
use super::index::Found;
use super::server::{reply, Body, Shared};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request as HttpRequest, Response, StatusCode};
use mail_parser::MimeHeaders;
use search::Search;
use sendonce_core::provider::deliverylog::DeliveryLine;
use serde_json::{json, Value};
use sha2::Digest;

/// Default page size of the listings, as Mailpit's.
const DEFAULT_LIMIT: usize = 50;
/// Characters of the text in a listing's `Snippet`, as Mailpit's.
const SNIPPET: usize = 250;

/// Whether a path belongs here (`/api/v1/...` and `/view/...`).
pub(super) fn owns(path: &str) -> bool {
    path.starts_with("/api/v1/") || path.starts_with("/view/")
}

/// Answer a request under `/api/v1/` or `/view/`.
pub(super) async fn handle(shared: &Shared, req: HttpRequest<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    let query = req.uri().query().map(str::to_string);
    let query = query.as_deref();
    let method = req.method().clone();
    match (&method, path.as_str()) {
        (&Method::GET, "/api/v1/messages") => list(shared, query, None).await,
        (&Method::DELETE | &Method::PUT, "/api/v1/messages" | "/api/v1/tags") => {
            let body = match super::guard::read_body(req.into_body(), &shared.config.limits).await {
                Ok(body) => body,
                Err(e) => return e.apply(text(StatusCode::BAD_REQUEST, e.message.clone())),
            };
            match (&method, path.as_str()) {
                (&Method::DELETE, "/api/v1/messages") => delete(shared, &body).await,
                (&Method::PUT, "/api/v1/messages") => marks::set_read(shared, &body).await,
                (&Method::PUT, _) => marks::set_tags(shared, &body).await,
                _ => not_allowed(&method, &path),
            }
        }
        (&Method::PUT | &Method::DELETE, p) if p.starts_with("/api/v1/tags/") => {
            let tag = inbox::percent_decode(&p["/api/v1/tags/".len()..]);
            if method == Method::DELETE {
                return marks::retag(shared, tag, None).await;
            }
            match super::guard::read_body(req.into_body(), &shared.config.limits).await {
                Ok(body) => marks::retag(shared, tag, Some(&body)).await,
                Err(e) => e.apply(text(StatusCode::BAD_REQUEST, e.message.clone())),
            }
        }
        (&Method::GET, "/api/v1/search") => match search_query(query) {
            Ok(q) => list(shared, query, Some(q)).await,
            Err(e) => text(StatusCode::BAD_REQUEST, e),
        },
        (&Method::DELETE, "/api/v1/search") => match search_query(query) {
            Ok(q) => delete_search(shared, q).await,
            Err(e) => text(StatusCode::BAD_REQUEST, e),
        },
        (&Method::GET, "/api/v1/info") => info(shared).await,
        (&Method::GET, "/api/v1/webui") => reply(StatusCode::OK, webui()),
        (&Method::GET, "/api/v1/tags") => marks::tags(shared).await,
        (&Method::GET, p) => match one_path(p) {
            Some((id, what)) => one(shared, &id, what, query).await,
            None => not_found(),
        },
        (
            _,
            "/api/v1/messages" | "/api/v1/search" | "/api/v1/info" | "/api/v1/webui"
            | "/api/v1/tags",
        ) => not_allowed(&method, &path),
        _ => not_found(),
    }
}

fn not_allowed(method: &Method, path: &str) -> Response<Body> {
    text(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{method} is not supported on {path} by sendonce fake-provider"),
    )
}

/// What a message path asks for.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Part {
    Summary,
    Raw,
    Headers,
    Html,
    Text,
}

/// `/api/v1/message/{ID}[/raw|/headers|/html]`, `/view/{ID}.html|.txt`.
fn one_path(path: &str) -> Option<(String, Part)> {
    let (id, part) = if let Some(rest) = path.strip_prefix("/api/v1/message/") {
        match rest.split_once('/') {
            None => (rest, Part::Summary),
            Some((id, "raw")) => (id, Part::Raw),
            Some((id, "headers")) => (id, Part::Headers),
            Some((id, "html")) => (id, Part::Html),
            Some(_) => return None,
        }
    } else {
        let rest = path.strip_prefix("/view/")?;
        if let Some(id) = rest.strip_suffix(".html") {
            (id, Part::Html)
        } else if let Some(id) = rest.strip_suffix(".txt") {
            (id, Part::Text)
        } else {
            return None;
        }
    };
    let id = inbox::percent_decode(id);
    (!id.is_empty() && !id.contains('/')).then_some((id, part))
}

fn text(status: StatusCode, body: impl Into<String>) -> Response<Body> {
    typed(
        status,
        "text/plain; charset=utf-8",
        body.into().into_bytes(),
    )
}

fn typed(status: StatusCode, kind: &'static str, body: Vec<u8>) -> Response<Body> {
    let mut r = Response::new(Body::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(kind));
    r
}

fn not_found() -> Response<Body> {
    text(StatusCode::NOT_FOUND, "Not found")
}

fn server_error(e: String) -> Response<Body> {
    text(StatusCode::INTERNAL_SERVER_ERROR, e)
}

/// `start` and `limit` (Mailpit's pagination); a bad value is an error naming it.
fn page(query: Option<&str>) -> Result<(usize, usize), String> {
    let mut start = 0;
    let mut limit = DEFAULT_LIMIT;
    for (k, v) in inbox::form_urlencoded_pairs(query) {
        let n = || {
            v.parse::<usize>()
                .map_err(|_| format!("{k} must be a whole number, got {v:?}"))
        };
        match k.as_str() {
            "start" if !v.is_empty() => start = n()?,
            "limit" if !v.is_empty() => limit = n()?,
            _ => {}
        }
    }
    Ok((start, limit))
}

/// `query=` of the search endpoints, required.
fn search_query(query: Option<&str>) -> Result<Search, String> {
    let q = inbox::query_value(query, "query").unwrap_or_default();
    if q.trim().is_empty() {
        return Err("Error: no search query".into());
    }
    Ok(Search::parse(&q))
}

/// The counts of a listing: the mailbox's, the matches', and every tag in use.
struct Counts {
    total: usize,
    unread: usize,
    matched: usize,
    matched_unread: usize,
    tags: Vec<String>,
}

/// `GET /api/v1/messages` and `GET /api/v1/search`: newest first, a page of the matches read
/// from the log.
async fn list(shared: &Shared, query: Option<&str>, search: Option<Search>) -> Response<Body> {
    let (start, limit) = match page(query) {
        Ok(p) => p,
        Err(e) => return text(StatusCode::BAD_REQUEST, e),
    };
    let listed = inbox::query(shared, move |ix| {
        let (counts, picks) = {
            let st = ix.read();
            let (mut matched, mut matched_unread, mut shown) = (0, 0, Vec::new());
            for i in st.newest() {
                let e = st.entry(i);
                if search.as_ref().is_none_or(|s| s.matches(&st, e)) {
                    if matched >= start && shown.len() < limit {
                        shown.push(i);
                    }
                    matched += 1;
                    matched_unread += usize::from(!e.read);
                }
            }
            let counts = Counts {
                total: st.live(),
                unread: st.unread(),
                matched,
                matched_unread,
                tags: st.tag_names(),
            };
            (counts, st.picks_at(&shown))
        };
        (counts, picks.load())
    })
    .await;
    let (c, found) = match listed {
        Ok(l) => l,
        Err(e) => return server_error(e),
    };
    let shown: Vec<Value> = found.iter().map(|f| View::found(f).summary()).collect();
    reply(
        StatusCode::OK,
        json!({
            "total": c.total,
            "unread": c.unread,
            "count": shown.len(),
            "messages_count": c.matched,
            "messages_unread": c.matched_unread,
            "start": start,
            "tags": c.tags,
            "messages": shown,
        }),
    )
}

/// `DELETE /api/v1/messages`: `{"IDs": [...]}` deletes those, no body (or no IDs) all.
async fn delete(shared: &Shared, body: &[u8]) -> Response<Body> {
    let ids: Vec<String> = if body.iter().all(u8::is_ascii_whitespace) {
        Vec::new()
    } else {
        match serde_json::from_slice::<Value>(body) {
            Ok(v) => match marks::ids_of(&v) {
                Ok(ids) => ids,
                Err(e) => return text(StatusCode::BAD_REQUEST, e),
            },
            Err(e) => return text(StatusCode::BAD_REQUEST, format!("invalid JSON body: {e}")),
        }
    };
    let done = if ids.is_empty() {
        inbox::clear(shared).await.map(|_| ())
    } else {
        inbox::delete(shared, ids).await.map(|_| ())
    };
    match done {
        Ok(()) => text(StatusCode::OK, "ok"),
        Err(e) => server_error(e),
    }
}

/// `DELETE /api/v1/search?query=`: every message the search matches.
async fn delete_search(shared: &Shared, search: Search) -> Response<Body> {
    let found = inbox::query(shared, move |ix| {
        let st = ix.read();
        st.newest()
            .filter(|&i| search.matches(&st, st.entry(i)))
            .map(|i| st.entry(i).id().to_string())
            .collect::<Vec<_>>()
    })
    .await;
    let ids = match found {
        Ok(ids) => ids,
        Err(e) => return server_error(e),
    };
    if ids.is_empty() {
        return text(StatusCode::OK, "ok");
    }
    match shared.journal.delete(ids).await {
        Ok(_) => text(StatusCode::OK, "ok"),
        Err(e) => server_error(e),
    }
}

/// `GET /api/v1/info`.
async fn info(shared: &Shared) -> Response<Body> {
    let counted = inbox::query(shared, |ix| {
        let st = ix.read();
        let smtp: Vec<u64> = st
            .newest()
            .filter_map(|i| st.entry(i).smtp_size.map(u64::from))
            .collect();
        (st.live(), st.unread(), st.tag_counts(), smtp, st.size())
    })
    .await;
    let (messages, unread, tags, smtp, (_, index_bytes)) = match counted {
        Ok(c) => c,
        Err(e) => return server_error(e),
    };
    let log = shared.journal.log_path();
    let version = env!("CARGO_PKG_VERSION");
    reply(
        StatusCode::OK,
        json!({
            "Version": version,
            "LatestVersion": version,
            "Database": log.display().to_string(),
            "DatabaseSize": std::fs::metadata(log).map(|m| m.len()).unwrap_or(0),
            "Messages": messages,
            "Unread": unread,
            "Tags": tags,
            // The fake's own: what its inbox index holds in memory.
            "IndexBytes": index_bytes,
            "RuntimeStats": {
                "Uptime": 0,
                "Memory": rss_bytes(),
                "MessagesDeleted": 0,
                "SMTPAccepted": smtp.len(),
                "SMTPAcceptedSize": smtp.iter().sum::<u64>(),
                "SMTPRejected": 0,
                "SMTPIgnored": 0,
            },
        }),
    )
}

/// This process's resident memory in bytes (Linux's `/proc/self/status`; 0 elsewhere).
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib * 1024)
}

/// `GET /api/v1/webui`: the web UI configuration Mailpit clients read.
fn webui() -> Value {
    json!({
        "Label": "sendonce fake-provider",
        "ChaosEnabled": false,
        "DuplicatesIgnored": false,
        "HideDeleteAllButton": false,
        "SpamAssassin": false,
        "MessageRelay": {
            "Enabled": false,
            "SMTPServer": "",
            "ReturnPath": "",
            "AllowedRecipients": "",
            "BlockedRecipients": "",
            "OverrideFrom": "",
            "PreserveMessageIDs": false,
            "RecipientAllowlist": "",
        },
    })
}

/// One message: summary, source, headers, HTML or text. `latest` is the newest message (the
/// newest a `query=` search matches, when given). Reading the summary marks it read, as
/// Mailpit does.
async fn one(shared: &Shared, id: &str, part: Part, query: Option<&str>) -> Response<Body> {
    let search = (id == "latest")
        .then(|| inbox::query_value(query, "query"))
        .flatten()
        .filter(|v| !v.trim().is_empty())
        .map(|v| Search::parse(&v));
    let id = id.to_string();
    let found = inbox::query(shared, move |ix| {
        let picks = {
            let st = ix.read();
            let at = if id == "latest" {
                st.newest()
                    .find(|&i| search.as_ref().is_none_or(|s| s.matches(&st, st.entry(i))))
            } else {
                st.find(&id)
            };
            st.picks_at(at.as_slice())
        };
        let found = picks.load().pop();
        if let Some(f) = found.as_ref().filter(|_| part == Part::Summary) {
            ix.write()
                .set_read(Some(std::slice::from_ref(&f.line.message_id)), true);
        }
        found
    })
    .await;
    let found = match found {
        Ok(Some(f)) => f,
        Ok(None) => return not_found(),
        Err(e) => return server_error(e),
    };
    let v = View::found(&found);
    match part {
        Part::Summary => reply(StatusCode::OK, v.full()),
        Part::Raw => typed(StatusCode::OK, "text/plain; charset=utf-8", v.source()),
        Part::Headers => reply(StatusCode::OK, v.headers()),
        Part::Text => typed(
            StatusCode::OK,
            "text/plain; charset=utf-8",
            v.m.text.clone().into_bytes(),
        ),
        Part::Html => match &v.m.html {
            // The message's HTML is someone else's: no script runs, nothing remote loads.
            Some(html) => super::web::sandboxed_html(html.clone()),
            None => not_found(),
        },
    }
}

/// A name and an address, Mailpit's (Go's `mail.Address`) shape.
#[derive(Debug, Clone, PartialEq)]
struct Addr {
    name: String,
    address: String,
}

impl Addr {
    fn json(&self) -> Value {
        json!({"Name": self.name, "Address": self.address})
    }
    fn plain(address: &str) -> Addr {
        Addr {
            name: String::new(),
            address: address.to_string(),
        }
    }
}

fn list_json(a: &[Addr]) -> Value {
    Value::Array(a.iter().map(Addr::json).collect())
}

/// The addresses of a header value (RFC 5322 address list, encoded words decoded).
fn addresses(value: &str) -> Vec<Addr> {
    let bytes = format!("{value}\r\n");
    let parsed = mail_parser::parsers::MessageStream::new(bytes.as_bytes()).parse_address();
    let Some(list) = parsed.as_address() else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|a| {
            Some(Addr {
                name: a.name().unwrap_or_default().to_string(),
                address: a.address()?.to_string(),
            })
        })
        .collect()
}

/// The addresses Mailpit shows of a delivery.
struct Addrs {
    from: Option<Addr>,
    to: Vec<Addr>,
    cc: Vec<Addr>,
    bcc: Vec<Addr>,
    reply_to: Vec<Addr>,
}

/// A delivery's addresses from its headers (the message's own, or those made for an HTTP
/// email; an SMS has its numbers).
fn addrs_of(l: &DeliveryLine, headers: &[Header]) -> Addrs {
    if l.channel == "sms" {
        return Addrs {
            from: l.from.as_deref().map(Addr::plain),
            to: vec![Addr::plain(&l.to)],
            cc: Vec::new(),
            bcc: Vec::new(),
            reply_to: Vec::new(),
        };
    }
    let all = |name: &str| -> Vec<Addr> {
        headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(name))
            .flat_map(|h| addresses(&h.value))
            .collect()
    };
    let from = all("From")
        .into_iter()
        .next()
        .or_else(|| l.from.as_deref().map(Addr::plain));
    let mut to = all("To");
    if to.is_empty() && l.envelope.is_none() {
        to.push(Addr::plain(&l.to));
    }
    let cc = all("Cc");
    // Envelope recipients the headers do not name: Mailpit's Bcc.
    let bcc = match &l.envelope {
        Some(e) => {
            e.to.iter()
                .filter(|r| {
                    !to.iter()
                        .chain(&cc)
                        .any(|a| a.address.eq_ignore_ascii_case(r))
                })
                .map(|r| Addr::plain(r))
                .collect()
        }
        None => all("Bcc"),
    };
    Addrs {
        from,
        to,
        cc,
        bcc,
        reply_to: all("Reply-To"),
    }
}

/// Addresses as the search reads them: `name <address>`, joined, lower-cased.
fn searchable<'a>(a: impl Iterator<Item = &'a Addr>) -> String {
    a.map(|a| format!("{} <{}>", a.name, a.address))
        .collect::<Vec<_>>()
        .join(", ")
        .to_lowercase()
}

/// What the index keeps for the search of a delivery: its To, its From, its Cc and Bcc, as
/// [`searchable`] has them (the headers read without the body).
pub(super) fn search_fields(l: &DeliveryLine) -> [String; 3] {
    let a = addrs_of(l, &inbox::headers_of(l));
    [
        searchable(a.to.iter()),
        searchable(a.from.iter()),
        searchable(a.cc.iter().chain(&a.bcc)),
    ]
}

/// A delivery read once, with what Mailpit's shapes need beyond `Message`.
struct View {
    m: Message,
    a: Addrs,
    return_path: String,
    message_id: String,
    /// The message's own date when it has one, else when it arrived.
    date: String,
    read: bool,
    tags: Vec<String>,
}

impl View {
    /// A delivery read from the log, with its marks.
    fn found(f: &Found) -> View {
        let mut v = View::of(&f.line);
        v.read = f.read;
        v.tags = f.tags.clone();
        v
    }

    fn of(l: &DeliveryLine) -> View {
        let m = Message::of(l);
        let a = addrs_of(l, &m.headers);
        let header = |name: &str| m.header(name).next().map(str::to_string);
        if m.channel == "sms" {
            return View {
                a,
                return_path: String::new(),
                message_id: m.id.clone(),
                date: m.date.clone(),
                m,
                read: false,
                tags: Vec::new(),
            };
        }
        let return_path = match &l.envelope {
            Some(e) => e.from.clone(),
            None => header("Return-Path")
                .map(|r| r.trim_matches(|c| c == '<' || c == '>').to_string())
                .unwrap_or_default(),
        };
        let message_id = header("Message-ID")
            .map(|v| {
                v.trim()
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_string()
            })
            .unwrap_or_else(|| m.id.clone());
        let date = header("Date")
            .filter(|_| m.raw_received)
            .and_then(|d| {
                let bytes = format!("{d}\r\n");
                mail_parser::parsers::MessageStream::new(bytes.as_bytes())
                    .parse_date()
                    .as_datetime()
                    .map(|t| t.to_rfc3339())
            })
            .unwrap_or_else(|| m.date.clone());
        View {
            a,
            return_path,
            message_id,
            date,
            m,
            read: false,
            tags: Vec::new(),
        }
    }

    /// The list entry (Mailpit's `MessageSummary`).
    fn summary(&self) -> Value {
        let snippet: String = self
            .m
            .text
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .chars()
            .take(SNIPPET)
            .collect();
        json!({
            "ID": self.m.id,
            "MessageID": self.message_id,
            "Read": self.read,
            "From": self.a.from.as_ref().map(Addr::json),
            "To": list_json(&self.a.to),
            "Cc": list_json(&self.a.cc),
            "Bcc": list_json(&self.a.bcc),
            "ReplyTo": list_json(&self.a.reply_to),
            "Subject": self.m.subject.clone().unwrap_or_default(),
            "Created": self.m.date,
            "Username": "",
            "Tags": self.tags,
            "Size": self.m.size,
            "Attachments": self.m.attachments,
            "Snippet": snippet,
        })
    }

    /// The whole message (Mailpit's `Message`).
    fn full(&self) -> Value {
        let unsubscribe = self.m.header("List-Unsubscribe").next().unwrap_or("");
        let links = inbox::unsubscribe_links(unsubscribe);
        let (inline, attachments) = self.attachments();
        json!({
            "ID": self.m.id,
            "MessageID": self.message_id,
            "From": self.a.from.as_ref().map(Addr::json),
            "To": list_json(&self.a.to),
            "Cc": list_json(&self.a.cc),
            "Bcc": list_json(&self.a.bcc),
            "ReplyTo": list_json(&self.a.reply_to),
            "ReturnPath": self.return_path,
            "Subject": self.m.subject.clone().unwrap_or_default(),
            "ListUnsubscribe": {
                "Header": unsubscribe,
                "Links": links,
                "Errors": "",
                "HeaderPost": self.m.header("List-Unsubscribe-Post").next().unwrap_or(""),
            },
            "Date": self.date,
            "Tags": self.tags,
            "Username": "",
            "Text": self.m.text,
            "HTML": self.m.html.clone().unwrap_or_default(),
            "Size": self.m.size,
            "Inline": inline,
            "Attachments": attachments,
        })
    }

    /// Inline parts and attachments of a received message (HTTP deliveries carry none).
    /// `PartID` is the part's index; only the SHA-256 checksum is given.
    fn attachments(&self) -> (Vec<Value>, Vec<Value>) {
        let (mut inline, mut attached) = (Vec::new(), Vec::new());
        if self.m.attachments == 0 {
            return (inline, attached);
        }
        let Some(p) = mail_parser::MessageParser::default().parse(&self.m.raw) else {
            return (inline, attached);
        };
        for (i, &part_id) in p.attachments.iter().enumerate() {
            let Some(part) = p.attachment(i as u32) else {
                continue;
            };
            let kind = part
                .content_type()
                .map(|c| match c.subtype() {
                    Some(s) => format!("{}/{s}", c.ctype()),
                    None => c.ctype().to_string(),
                })
                .unwrap_or_else(|| "application/octet-stream".into());
            let contents = part.contents();
            let v = json!({
                "PartID": part_id.to_string(),
                "FileName": part.attachment_name().unwrap_or_default(),
                "ContentType": kind,
                "ContentID": part.content_id().unwrap_or_default(),
                "Size": contents.len(),
                "Checksums": {
                    "MD5": "",
                    "SHA1": "",
                    "SHA256": format!("{:x}", sha2::Sha256::digest(contents)),
                },
            });
            let is_inline = part
                .content_disposition()
                .is_some_and(|d| d.ctype().eq_ignore_ascii_case("inline"))
                && part.content_id().is_some();
            if is_inline {
                inline.push(v);
            } else {
                attached.push(v);
            }
        }
        (inline, attached)
    }

    /// The source: the exact bytes for SMTP, the synthesized one for HTTP email, the body
    /// for SMS.
    fn source(&self) -> Vec<u8> {
        if self.m.channel == "sms" {
            self.m.text.clone().into_bytes()
        } else {
            self.m.raw.clone()
        }
    }

    /// The headers as Mailpit (Go's `mail.Header`) gives them: canonical names, sorted, each
    /// with its values in order. SMS: From and To.
    fn headers(&self) -> Value {
        let mut map: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        if self.m.channel == "sms" {
            if let Some(f) = &self.a.from {
                map.insert("From".into(), vec![f.address.clone()]);
            }
            map.insert(
                "To".into(),
                self.a.to.iter().map(|a| a.address.clone()).collect(),
            );
        }
        for h in &self.m.headers {
            map.entry(canonical(&h.name))
                .or_default()
                .push(h.value.clone());
        }
        // An HTTP email: the headers of the source made for it, as a client reading `/raw`
        // sees them (MIME-Version, Content-Type...).
        if !self.m.raw_received && self.m.channel == "email" {
            if let Some(p) = mail_parser::MessageParser::default().parse_headers(&self.m.raw) {
                map.clear();
                for (name, value) in p.headers_raw() {
                    map.entry(canonical(name))
                        .or_default()
                        .push(value.trim().to_string());
                }
            }
        }
        json!(map)
    }
}

/// `message-id` → `Message-Id`: Go's canonical MIME header key.
fn canonical(name: &str) -> String {
    let mut upper = true;
    name.chars()
        .map(|c| {
            let out = if upper {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            };
            upper = c == '-';
            out
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_names() {
        assert_eq!(
            one_path("/api/v1/message/latest/headers"),
            Some(("latest".into(), Part::Headers))
        );
        assert_eq!(
            one_path("/view/fake-1.html"),
            Some(("fake-1".into(), Part::Html))
        );
        assert_eq!(one_path("/api/v1/message/x/part/1"), None);
        assert_eq!(canonical("MESSAGE-ID"), "Message-Id");
        assert_eq!(canonical("x-sendonce-job"), "X-Sendonce-Job");
        assert_eq!(
            addresses("\"Kim, K.\" <kim@example.org>, lee@example.org"),
            [
                Addr {
                    name: "Kim, K.".into(),
                    address: "kim@example.org".into()
                },
                Addr::plain("lee@example.org")
            ]
        );
        assert!(page(Some("limit=x")).unwrap_err().contains("limit"));
    }

    /// A search as it was answered before the index: on the message parsed from its line.
    fn scan_matches(s: &Search, v: &View) -> bool {
        use search::Field;
        let to = searchable(v.a.to.iter());
        let from = searchable(v.a.from.iter());
        let subject = v.m.subject.clone().unwrap_or_default().to_lowercase();
        s.terms.iter().all(|t| {
            let hit = match t.field {
                Field::To => to.contains(&t.value),
                Field::From => from.contains(&t.value),
                Field::Subject => subject.contains(&t.value),
                Field::Read | Field::Tagged | Field::Tag => false,
                Field::Unread => true,
                Field::Any => {
                    to.contains(&t.value)
                        || from.contains(&t.value)
                        || subject.contains(&t.value)
                        || searchable(v.a.cc.iter().chain(&v.a.bcc)).contains(&t.value)
                        || v.m.text.to_lowercase().contains(&t.value)
                        || v.m.id.to_lowercase() == t.value
                }
            };
            hit != t.negated
        })
    }

    #[test]
    fn the_index_answers_searches_as_a_scan_of_the_parsed_messages() {
        use crate::index::testing::{self, Rand};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let lines = testing::lines(11, 400);
        let mut bytes = Vec::new();
        for l in &lines {
            bytes.extend(serde_json::to_vec(l).unwrap());
            bytes.push(b'\n');
        }
        std::fs::write(&path, bytes).unwrap();
        let index = crate::index::Index::build(&path, |_| {}).unwrap();
        let st = index.read();
        let views: Vec<View> = lines
            .iter()
            .rev()
            .filter(|l| !l.replay)
            .map(View::of)
            .collect();
        let words = [
            "to:kim",
            "from:shop",
            "subject:invoice",
            "zz-needle",
            "\"shop, k.\"",
            "-to:lee",
            "bounce",
            "fake-3",
            "FAKE-30",
            "öl",
            "is:unread",
            "-is:read",
            "to:+1415",
            "cc-nobody",
            "lorem",
            "from:news",
            "!subject:welcome",
            "kim@example.org",
            "tag:x",
            "example",
        ];
        let mut r = Rand::new(5);
        let mut hits = 0;
        for _ in 0..300 {
            let q: Vec<&str> = (0..1 + r.below(3)).map(|_| r.pick(&words)).collect();
            let s = Search::parse(&q.join(" "));
            let want: Vec<&str> = views
                .iter()
                .filter(|v| scan_matches(&s, v))
                .map(|v| v.m.id.as_str())
                .collect();
            let got: Vec<&str> = st
                .newest()
                .filter(|&i| s.matches(&st, st.entry(i)))
                .map(|i| st.entry(i).id())
                .collect();
            assert_eq!(got, want, "{q:?}");
            hits += got.len();
        }
        assert!(
            hits > 1000,
            "the searches found too little to prove anything: {hits}"
        );
    }
}

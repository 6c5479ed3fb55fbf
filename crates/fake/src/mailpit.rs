//! Mailpit-compatible API: the message endpoints existing test suites call (`/api/v1/messages`,
//! `/api/v1/message/{ID}` with `/raw`, `/headers`, `/html`, `/api/v1/search`, `/api/v1/info`,
//! `/view/{ID}.html|.txt`), answered from the delivery log in Mailpit's JSON shapes so a Mailpit
//! client (the `mailpit-api` npm package, Cypress plugins) works against the fake unchanged.
//! Replays are never listed (Mailpit has no such thing); SMS deliveries are messages whose From
//! and To are the phone numbers and whose Text is the body. Nothing is marked read.

use super::inbox::{self, Message};
use super::server::{reply, Body, Shared};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request as HttpRequest, Response, StatusCode};
use mail_parser::MimeHeaders;
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
        (&Method::DELETE, "/api/v1/messages") => {
            match super::guard::read_body(req.into_body(), &shared.config.limits).await {
                Ok(body) => delete(shared, &body).await,
                Err(e) => e.apply(text(StatusCode::BAD_REQUEST, e.message.clone())),
            }
        }
        (&Method::GET, "/api/v1/search") => match search_query(query) {
            Ok(q) => list(shared, query, Some(&q)).await,
            Err(e) => text(StatusCode::BAD_REQUEST, e),
        },
        (&Method::DELETE, "/api/v1/search") => match search_query(query) {
            Ok(q) => delete_search(shared, &q).await,
            Err(e) => text(StatusCode::BAD_REQUEST, e),
        },
        (&Method::GET, "/api/v1/info") => info(shared).await,
        (&Method::GET, "/api/v1/webui") => reply(StatusCode::OK, webui()),
        (&Method::GET, "/api/v1/tags") => reply(StatusCode::OK, json!([])),
        (&Method::GET, p) => match one_path(p) {
            Some((id, what)) => one(shared, &id, what, query).await,
            None => not_found(),
        },
        (
            _,
            "/api/v1/messages" | "/api/v1/search" | "/api/v1/info" | "/api/v1/webui"
            | "/api/v1/tags",
        ) => text(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{method} is not supported on {path} by sendonce fake-provider"),
        ),
        _ => not_found(),
    }
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

/// Every delivery that is not a replay, newest first.
async fn messages(shared: &Shared) -> Result<Vec<DeliveryLine>, String> {
    let lines = inbox::lines(shared).await?;
    Ok(inbox::select(&lines, &inbox::Filter::default())
        .into_iter()
        .cloned()
        .collect())
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

/// `GET /api/v1/messages` and `GET /api/v1/search`.
async fn list(shared: &Shared, query: Option<&str>, search: Option<&Search>) -> Response<Body> {
    let (start, limit) = match page(query) {
        Ok(p) => p,
        Err(e) => return text(StatusCode::BAD_REQUEST, e),
    };
    let all = match messages(shared).await {
        Ok(l) => l,
        Err(e) => return server_error(e),
    };
    let total = all.len();
    let views: Vec<View> = all.iter().map(View::of).collect();
    let matching: Vec<&View> = views
        .iter()
        .filter(|v| search.is_none_or(|s| s.matches(v)))
        .collect();
    let shown: Vec<Value> = matching
        .iter()
        .skip(start)
        .take(limit)
        .map(|v| v.summary())
        .collect();
    reply(
        StatusCode::OK,
        json!({
            "total": total,
            "unread": total,
            "count": shown.len(),
            "messages_count": matching.len(),
            "messages_unread": matching.len(),
            "start": start,
            "tags": [],
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
            Ok(v) => match v.get("IDs") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(a)) => {
                    match a.iter().map(|i| i.as_str().map(str::to_string)).collect() {
                        Some(ids) => ids,
                        None => return text(StatusCode::BAD_REQUEST, "IDs must be strings"),
                    }
                }
                Some(_) => return text(StatusCode::BAD_REQUEST, "IDs must be an array of strings"),
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
async fn delete_search(shared: &Shared, search: &Search) -> Response<Body> {
    let ids: Vec<String> = match messages(shared).await {
        Ok(all) => all
            .iter()
            .map(View::of)
            .filter(|v| search.matches(v))
            .map(|v| v.m.id)
            .collect(),
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
    let all = match inbox::lines(shared).await {
        Ok(l) => l,
        Err(e) => return server_error(e),
    };
    let delivered: Vec<&DeliveryLine> = all.iter().filter(|l| !l.replay).collect();
    let smtp: Vec<Message> = delivered
        .iter()
        .filter(|l| l.raw_base64.is_some())
        .map(|l| Message::of(l))
        .collect();
    let log = shared.journal.log_path();
    let version = env!("CARGO_PKG_VERSION");
    reply(
        StatusCode::OK,
        json!({
            "Version": version,
            "LatestVersion": version,
            "Database": log.display().to_string(),
            "DatabaseSize": std::fs::metadata(log).map(|m| m.len()).unwrap_or(0),
            "Messages": delivered.len(),
            "Unread": delivered.len(),
            "Tags": {},
            "RuntimeStats": {
                "Uptime": 0,
                "Memory": 0,
                "MessagesDeleted": 0,
                "SMTPAccepted": smtp.len(),
                "SMTPAcceptedSize": smtp.iter().map(|m| m.size).sum::<usize>(),
                "SMTPRejected": 0,
                "SMTPIgnored": 0,
            },
        }),
    )
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
/// newest a `query=` search matches, when given).
async fn one(shared: &Shared, id: &str, part: Part, query: Option<&str>) -> Response<Body> {
    let all = match messages(shared).await {
        Ok(l) => l,
        Err(e) => return server_error(e),
    };
    let line = if id == "latest" {
        let search = inbox::query_value(query, "query")
            .filter(|v| !v.trim().is_empty())
            .map(|v| Search::parse(&v));
        all.iter()
            .find(|l| search.as_ref().is_none_or(|s| s.matches(&View::of(l))))
    } else {
        all.iter().find(|l| l.message_id == id)
    };
    let Some(line) = line else {
        return not_found();
    };
    let v = View::of(line);
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

/// A delivery read once, with what Mailpit's shapes need beyond `Message`.
struct View {
    m: Message,
    from: Option<Addr>,
    to: Vec<Addr>,
    cc: Vec<Addr>,
    bcc: Vec<Addr>,
    reply_to: Vec<Addr>,
    return_path: String,
    message_id: String,
    /// The message's own date when it has one, else when it arrived.
    date: String,
}

impl View {
    fn of(l: &DeliveryLine) -> View {
        let m = Message::of(l);
        let header = |name: &str| m.header(name).next().map(str::to_string);
        let all = |name: &str| -> Vec<Addr> { m.header(name).flat_map(addresses).collect() };
        if m.channel == "sms" {
            return View {
                from: l.from.as_deref().map(Addr::plain),
                to: vec![Addr::plain(&l.to)],
                cc: Vec::new(),
                bcc: Vec::new(),
                reply_to: Vec::new(),
                return_path: String::new(),
                message_id: m.id.clone(),
                date: m.date.clone(),
                m,
            };
        }
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
            from,
            to,
            cc,
            bcc,
            reply_to: all("Reply-To"),
            return_path,
            message_id,
            date,
            m,
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
            "Read": false,
            "From": self.from.as_ref().map(Addr::json),
            "To": list_json(&self.to),
            "Cc": list_json(&self.cc),
            "Bcc": list_json(&self.bcc),
            "ReplyTo": list_json(&self.reply_to),
            "Subject": self.m.subject.clone().unwrap_or_default(),
            "Created": self.m.date,
            "Username": "",
            "Tags": [],
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
            "From": self.from.as_ref().map(Addr::json),
            "To": list_json(&self.to),
            "Cc": list_json(&self.cc),
            "Bcc": list_json(&self.bcc),
            "ReplyTo": list_json(&self.reply_to),
            "ReturnPath": self.return_path,
            "Subject": self.m.subject.clone().unwrap_or_default(),
            "ListUnsubscribe": {
                "Header": unsubscribe,
                "Links": links,
                "Errors": "",
                "HeaderPost": self.m.header("List-Unsubscribe-Post").next().unwrap_or(""),
            },
            "Date": self.date,
            "Tags": [],
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
            if let Some(f) = &self.from {
                map.insert("From".into(), vec![f.address.clone()]);
            }
            map.insert(
                "To".into(),
                self.to.iter().map(|a| a.address.clone()).collect(),
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

/// The subset of Mailpit's search syntax understood: free words and `"quoted phrases"`
/// (anywhere: subject, addresses, text, id), `to:`, `from:`, `subject:`, each negated by a
/// leading `-` or `!`; every term must hold. Case-insensitive "contains" throughout.
#[derive(Debug, Default, PartialEq)]
struct Search {
    terms: Vec<Term>,
}

#[derive(Debug, PartialEq)]
struct Term {
    field: Field,
    value: String,
    negated: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Field {
    Any,
    To,
    From,
    Subject,
}

impl Search {
    fn parse(q: &str) -> Search {
        let mut words = Vec::new();
        let mut cur = String::new();
        let mut quoted = false;
        for c in q.chars() {
            match c {
                '"' => quoted = !quoted,
                c if c.is_whitespace() && !quoted => {
                    if !cur.is_empty() {
                        words.push(std::mem::take(&mut cur));
                    }
                }
                c => cur.push(c),
            }
        }
        if !cur.is_empty() {
            words.push(cur);
        }
        let terms = words
            .into_iter()
            .filter_map(|w| {
                let (negated, w) = match w.strip_prefix(['-', '!']) {
                    Some(rest) if !rest.is_empty() => (true, rest.to_string()),
                    _ => (false, w),
                };
                let (field, value) = match w.split_once(':') {
                    Some((k, v)) if k.eq_ignore_ascii_case("to") => (Field::To, v),
                    Some((k, v)) if k.eq_ignore_ascii_case("from") => (Field::From, v),
                    Some((k, v)) if k.eq_ignore_ascii_case("subject") => (Field::Subject, v),
                    _ => (Field::Any, w.as_str()),
                };
                (!value.is_empty()).then(|| Term {
                    field,
                    value: value.to_lowercase(),
                    negated,
                })
            })
            .collect();
        Search { terms }
    }

    fn matches(&self, v: &View) -> bool {
        let addrs = |a: &mut dyn Iterator<Item = &Addr>| {
            a.map(|a| format!("{} <{}>", a.name, a.address))
                .collect::<Vec<_>>()
                .join(", ")
                .to_lowercase()
        };
        let to = addrs(&mut v.to.iter());
        let from = addrs(&mut v.from.iter());
        let subject = v.m.subject.clone().unwrap_or_default().to_lowercase();
        self.terms.iter().all(|t| {
            let hit = match t.field {
                Field::To => to.contains(&t.value),
                Field::From => from.contains(&t.value),
                Field::Subject => subject.contains(&t.value),
                Field::Any => {
                    to.contains(&t.value)
                        || from.contains(&t.value)
                        || subject.contains(&t.value)
                        || addrs(&mut v.cc.iter().chain(&v.bcc)).contains(&t.value)
                        || v.m.text.to_lowercase().contains(&t.value)
                        || v.m.id.to_lowercase() == t.value
                }
            };
            hit != t.negated
        })
    }
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

    #[test]
    fn search_syntax() {
        let s = Search::parse("to:kim \"big sale\" -subject:spam !from:x");
        assert_eq!(s.terms.len(), 4);
        assert_eq!(s.terms[1].value, "big sale");
        assert!(s.terms[2].negated && s.terms[2].field == Field::Subject);
        assert!(s.terms[3].negated && s.terms[3].field == Field::From);
    }
}

//! The fake provider's inbox model: the delivery log read as messages people and tests look at.
//! One `Message` per delivery line (SMTP ones parsed from their exact bytes with mail-parser,
//! HTTP ones from their fields), the filters every listing shares (`Filter`), the links found in
//! a message, and the `Request` an SMTP transaction becomes. Listings go through the index
//! (`index.rs`); `query`, `filtered` and `find` run it off the runtime's threads.

pub(crate) use super::index::Found;
use super::index::Index;
use super::journal::{IdStyle, Request};
use super::server::Shared;
use base64::Engine;
use sendonce_core::provider::deliverylog::{DeliveryLine, Envelope};
use serde::Serialize;

/// Which deliveries a listing shows. Every field narrows; all absent lists every delivery that
/// is not a replay.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Filter {
    /// An exact recipient (the line's `to`, or any SMTP `RCPT TO`), case-insensitive for email.
    pub to: Option<String>,
    /// The sender (`from`, or the SMTP `MAIL FROM`), exact, case-insensitive.
    pub from: Option<String>,
    /// Contained in the subject, case-insensitive.
    pub subject: Option<String>,
    pub job_id: Option<String>,
    /// `email` or `sms`.
    pub channel: Option<String>,
    /// Accepted at or after this time (unix ms).
    pub since: Option<i64>,
    /// Contained (case-insensitive) in the recipient, sender, subject or text.
    pub text: Option<String>,
    /// Also list replays (a retried key answered with the first id; not a second delivery).
    pub replays: bool,
}

impl Filter {
    /// From a query string: `to`, `from`, `subject`, `job_id`, `channel`, `since` (unix ms or
    /// RFC 3339), `q` (free text), `replays=true`. Other keys are left to the caller (`count`,
    /// `timeout`...). A bad value is an error naming the key.
    pub(crate) fn parse(query: Option<&str>) -> Result<Filter, String> {
        let mut f = Filter::default();
        for (k, v) in form_urlencoded_pairs(query) {
            let some = |v: String| Some(v).filter(|s| !s.is_empty());
            match k.as_str() {
                "to" => f.to = some(v),
                "from" => f.from = some(v),
                "subject" => f.subject = some(v),
                "job_id" => f.job_id = some(v),
                "channel" => match v.as_str() {
                    "" => {}
                    "email" | "sms" => f.channel = Some(v),
                    _ => return Err(format!("channel must be email or sms, got {v:?}")),
                },
                "since" if !v.is_empty() => f.since = Some(parse_since(&v)?),
                "q" | "query" => f.text = some(v),
                "replays" => {
                    f.replays = match v.as_str() {
                        "true" | "1" | "yes" => true,
                        "" | "false" | "0" | "no" => false,
                        _ => return Err(format!("replays must be true or false, got {v:?}")),
                    }
                }
                _ => {}
            }
        }
        Ok(f)
    }

    /// Whether a line passes: the meaning the index (`State::select`) answers without reading
    /// the log, kept as the full scan the tests compare it with.
    #[cfg(test)]
    pub(crate) fn matches(&self, l: &DeliveryLine) -> bool {
        let same = |a: &str, b: &str| a.eq_ignore_ascii_case(b);
        let contains =
            |hay: &str, needle: &str| hay.to_lowercase().contains(&needle.to_lowercase());
        let envelope = l.envelope.as_ref();
        (self.replays || !l.replay)
            && self.to.as_deref().is_none_or(|t| {
                same(&l.to, t) || envelope.is_some_and(|e| e.to.iter().any(|r| same(r, t)))
            })
            && self.from.as_deref().is_none_or(|f| {
                l.from.as_deref().is_some_and(|x| same(x, f))
                    || envelope.is_some_and(|e| same(&e.from, f))
            })
            && self
                .subject
                .as_deref()
                .is_none_or(|s| l.subject.as_deref().is_some_and(|x| contains(x, s)))
            && self.job_id.as_deref().is_none_or(|j| l.job_id == j)
            && self.channel.as_deref().is_none_or(|c| l.channel == c)
            && self.since.is_none_or(|t| l.at >= t)
            && self.text.as_deref().is_none_or(|q| {
                contains(&l.to, q)
                    || l.from.as_deref().is_some_and(|x| contains(x, q))
                    || l.subject.as_deref().is_some_and(|x| contains(x, q))
                    || contains(&l.body, q)
            })
    }
}

/// `since=`: unix milliseconds, or an RFC 3339 time.
fn parse_since(v: &str) -> Result<i64, String> {
    if let Ok(ms) = v.parse::<i64>() {
        return Ok(ms);
    }
    humantime::parse_rfc3339_weak(v)
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as i64)
        .ok_or_else(|| format!("since must be unix milliseconds or an RFC 3339 time, got {v:?}"))
}

/// The pairs of a query string, decoded as browsers, `URLSearchParams` and Python's `requests`
/// encode them (`+` is a space, `%2B` a plus), except in `to` and `from`: an address or a
/// phone number has no space, so there a `+` stays a plus (`?to=+14155550100` typed by hand).
pub(crate) fn form_urlencoded_pairs(query: Option<&str>) -> Vec<(String, String)> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|s| !s.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            let k = percent_decode(&k.replace('+', " "));
            let v = match k.as_str() {
                "to" | "from" => percent_decode(v),
                _ => percent_decode(&v.replace('+', " ")),
            };
            (k, v)
        })
        .collect()
}

/// One value of a query string, decoded as [`form_urlencoded_pairs`] does.
pub(crate) fn query_value(query: Option<&str>, key: &str) -> Option<String> {
    form_urlencoded_pairs(query)
        .into_iter()
        .find_map(|(k, v)| (k == key).then_some(v))
}

/// `%XX` decoding; anything else is kept as is.
pub(crate) fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// Run `f` on the index off the runtime's threads: a scan of a big inbox, and reading the lines
/// it picked from the log, block.
pub(crate) async fn query<R: Send + 'static>(
    shared: &Shared,
    f: impl FnOnce(&Index) -> R + Send + 'static,
) -> Result<R, String> {
    let (index, view) = (shared.journal.index(), super::tenants::view());
    // The blocking thread answers in this request's tenant view, if it has one.
    tokio::task::spawn_blocking(move || super::tenants::in_view(view, || f(&index)))
        .await
        .map_err(|e| e.to_string())
}

/// The ids of every delivery this request sees (in a tenant's view, that tenant's).
async fn visible_ids(shared: &Shared) -> Result<Vec<String>, String> {
    query(shared, |ix| {
        let st = ix.read();
        st.newest().map(|i| st.entry(i).id().to_string()).collect()
    })
    .await
}

/// Delete the deliveries `ids` this request sees (in a tenant's view, another tenant's ids
/// are left alone). Returns how many went.
pub(crate) async fn delete(shared: &Shared, mut ids: Vec<String>) -> Result<usize, String> {
    if super::tenants::view().is_some() {
        let seen: std::collections::HashSet<String> =
            visible_ids(shared).await?.into_iter().collect();
        ids.retain(|id| seen.contains(id));
    }
    shared.journal.delete(ids).await
}

/// Empty the inbox this request sees: every message, or in a tenant's view (`/t/{tenant}/`)
/// only that tenant's. Returns how many deliveries went.
pub(crate) async fn clear(shared: &Shared) -> Result<usize, String> {
    if super::tenants::view().is_none() {
        return shared.journal.clear().await;
    }
    let ids = visible_ids(shared).await?;
    shared.journal.delete(ids).await
}

/// Every delivery a filter keeps, read from the log: oldest first, or newest first.
pub(crate) async fn filtered(
    shared: &Shared,
    filter: Filter,
    newest_first: bool,
) -> Result<Vec<Found>, String> {
    query(shared, move |ix| {
        let picks = {
            let st = ix.read();
            let mut at: Vec<u32> = st.select(&filter).collect();
            if !newest_first {
                at.reverse();
            }
            st.picks_at(&at)
        };
        picks.load()
    })
    .await
}

/// The delivery with this id (the first delivery, never its replays), read from the log.
pub(crate) async fn find(shared: &Shared, id: &str) -> Result<Option<Found>, String> {
    let id = id.to_string();
    query(shared, move |ix| {
        let picks = {
            let st = ix.read();
            st.picks_at(st.find(&id).as_slice())
        };
        picks.load().pop()
    })
    .await
}

/// The headers a delivery shows, without parsing its body: an SMTP message's own, those made
/// for an HTTP email, none for an SMS (as `Message::of` has them).
pub(crate) fn headers_of(l: &DeliveryLine) -> Vec<Header> {
    let raw = l
        .raw_base64
        .as_deref()
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok());
    match raw {
        Some(raw) => mail_parser::MessageParser::default()
            .parse_headers(&raw)
            .map(|p| {
                p.headers_raw()
                    .map(|(n, v)| Header {
                        name: n.to_string(),
                        value: unfold(v),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        None if l.channel == "sms" => Vec::new(),
        None => synthesized_headers(l),
    }
}

/// One header as it appears in the message (unfolded).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct Header {
    pub name: String,
    pub value: String,
}

/// What an SMS costs, for the inbox.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct Sms {
    pub segments: usize,
    pub encoding: String,
    pub characters: usize,
}

/// A delivery as people and tests read it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Message {
    pub id: String,
    pub channel: String,
    /// `smtp`, `twilio`, `resend`, `postmark` or `send` (the generic webhook format).
    pub via: String,
    pub job_id: String,
    pub from: Option<String>,
    /// The recipients: every `RCPT TO` for SMTP, the one `to` otherwise.
    pub to: Vec<String>,
    pub subject: Option<String>,
    /// Unix milliseconds, and the same as RFC 3339.
    pub at: i64,
    pub date: String,
    pub replay: bool,
    pub headers: Vec<Header>,
    pub text: String,
    pub html: Option<String>,
    /// Every http(s) and mailto link in the text, the HTML and `List-Unsubscribe`, in order,
    /// once each.
    pub links: Vec<String>,
    /// Bytes of the raw source.
    pub size: usize,
    /// Attachments (SMTP messages only; HTTP deliveries carry none).
    pub attachments: usize,
    /// SMS only.
    pub sms: Option<Sms>,
    #[serde(skip)]
    pub raw: Vec<u8>,
    /// Whether `raw` is the exact bytes received (SMTP), or made here from an HTTP request's
    /// fields so every email has a source to show.
    pub raw_received: bool,
}

impl Message {
    pub(crate) fn of(l: &DeliveryLine) -> Message {
        let raw = l
            .raw_base64
            .as_deref()
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok());
        let mut m = Message {
            id: l.message_id.clone(),
            channel: l.channel.clone(),
            via: via(l).to_string(),
            job_id: l.job_id.clone(),
            from: l.from.clone(),
            to: match &l.envelope {
                Some(e) => e.to.clone(),
                None => vec![l.to.clone()],
            },
            subject: l.subject.clone(),
            at: l.at,
            date: rfc3339(l.at),
            replay: l.replay,
            headers: Vec::new(),
            text: l.body.clone(),
            html: l.html.clone(),
            links: Vec::new(),
            size: 0,
            attachments: 0,
            sms: None,
            raw: Vec::new(),
            raw_received: raw.is_some(),
        };
        match raw {
            Some(raw) => m.fill_from_raw(raw),
            None if l.channel == "sms" => {
                let s = sendonce_domain::sms::segments(&l.body);
                m.sms = Some(Sms {
                    segments: s.segments,
                    encoding: s.encoding.to_string(),
                    characters: s.characters,
                });
                m.size = l.body.len();
            }
            None => {
                m.headers = synthesized_headers(l);
                m.raw = synthesize(&m.headers, l);
                m.size = m.raw.len();
            }
        }
        m.links = links(&m.text, m.html.as_deref(), &m.headers);
        m
    }

    /// Headers, text, HTML and attachments from the exact bytes received.
    fn fill_from_raw(&mut self, raw: Vec<u8>) {
        self.size = raw.len();
        if let Some(p) = mail_parser::MessageParser::default().parse(&raw) {
            self.headers = p
                .headers_raw()
                .map(|(n, v)| Header {
                    name: n.to_string(),
                    value: unfold(v),
                })
                .collect();
            self.text = p.body_text(0).map(|t| t.into_owned()).unwrap_or_default();
            // Only a real text/html part: mail-parser would make HTML out of a text part.
            self.html = p
                .html_part(0)
                .filter(|part| part.is_text_html())
                .and_then(|_| p.body_html(0))
                .map(|h| h.into_owned());
            self.attachments = p.attachment_count();
        }
        self.raw = raw;
    }

    /// The header's values, in order (case-insensitive name).
    pub(crate) fn header<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> {
        self.headers
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value.as_str())
    }
}

/// Which front door accepted the line.
fn via(l: &DeliveryLine) -> &str {
    if l.raw_base64.is_some() || l.envelope.is_some() {
        "smtp"
    } else {
        l.api.as_deref().unwrap_or("send")
    }
}

pub(crate) fn rfc3339(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

/// A header value on one line: folding (CRLF + white space) becomes one space.
fn unfold(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let mut lines = v.split('\n');
    if let Some(first) = lines.next() {
        out.push_str(first.trim_end_matches('\r'));
    }
    for l in lines {
        let l = l.trim_end_matches('\r');
        if !l.is_empty() {
            out.push(' ');
            out.push_str(l.trim_start());
        }
    }
    out.trim().to_string()
}

/// The headers an HTTP email would have carried.
fn synthesized_headers(l: &DeliveryLine) -> Vec<Header> {
    let h = |name: &str, value: String| Header {
        name: name.into(),
        value,
    };
    let mut out = Vec::new();
    if let Some(f) = &l.from {
        out.push(h("From", f.clone()));
    }
    out.push(h("To", l.to.clone()));
    if let Some(r) = &l.reply_to {
        out.push(h("Reply-To", r.clone()));
    }
    if let Some(s) = &l.subject {
        out.push(h("Subject", s.clone()));
    }
    out.push(h("Date", rfc3339(l.at)));
    out.push(h("Message-ID", format!("<{}@fake-provider>", l.message_id)));
    for (k, v) in l.headers.iter().flatten() {
        out.push(h(k, v.clone()));
    }
    out
}

/// An RFC 5322 rendering of an HTTP email (UTF-8, 8-bit): the API's "raw source" for a message
/// that never had one. Marked with `X-Fake-Provider-Source: synthesized`.
fn synthesize(headers: &[Header], l: &DeliveryLine) -> Vec<u8> {
    let mut s = String::new();
    for h in headers {
        let value = if h.value.is_ascii() {
            h.value.clone()
        } else {
            format!(
                "=?UTF-8?B?{}?=",
                base64::engine::general_purpose::STANDARD.encode(&h.value)
            )
        };
        s.push_str(&format!(
            "{}: {}\r\n",
            h.name,
            value.replace(['\r', '\n'], " ")
        ));
    }
    s.push_str("X-Fake-Provider-Source: synthesized\r\nMIME-Version: 1.0\r\n");
    let text = l.body.replace("\r\n", "\n").replace('\n', "\r\n");
    match &l.html {
        None => {
            s.push_str("Content-Type: text/plain; charset=utf-8\r\n");
            s.push_str("Content-Transfer-Encoding: 8bit\r\n\r\n");
            s.push_str(&text);
        }
        Some(html) => {
            let b = format!("=_part_{}", l.message_id);
            s.push_str(&format!(
                "Content-Type: multipart/alternative; boundary=\"{b}\"\r\n\r\n"
            ));
            s.push_str(&format!(
                "--{b}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            ));
            s.push_str(&format!(
                "Content-Transfer-Encoding: 8bit\r\n\r\n{text}\r\n"
            ));
            s.push_str(&format!(
                "--{b}\r\nContent-Type: text/html; charset=utf-8\r\n"
            ));
            s.push_str("Content-Transfer-Encoding: 8bit\r\n\r\n");
            s.push_str(&html.replace("\r\n", "\n").replace('\n', "\r\n"));
            s.push_str(&format!("\r\n--{b}--\r\n"));
        }
    }
    s.into_bytes()
}

/// Links in reading order, once each: `List-Unsubscribe` first (what a test most often
/// follows), then the text's, then the HTML's `href`s.
pub(crate) fn links(text: &str, html: Option<&str>, headers: &[Header]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |u: String| {
        if !out.contains(&u) {
            out.push(u);
        }
    };
    for h in headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("list-unsubscribe"))
    {
        for u in unsubscribe_links(&h.value) {
            add(u);
        }
    }
    for u in urls_in(text) {
        add(u);
    }
    if let Some(html) = html {
        for u in hrefs_in(html) {
            add(u);
        }
    }
    out
}

/// The `<...>` URLs of a `List-Unsubscribe` value that are http(s) or mailto (RFC 2369); any
/// other scheme (`javascript:`) is left out.
pub(crate) fn unsubscribe_links(value: &str) -> Vec<String> {
    value
        .split(',')
        .filter_map(|p| p.trim().strip_prefix('<')?.strip_suffix('>'))
        .map(str::trim)
        .filter(|u| linkable(u))
        .map(str::to_string)
        .collect()
}

/// An http, https or mailto URL (the only links the inbox lists).
fn linkable(u: &str) -> bool {
    let l = u.to_ascii_lowercase();
    l.starts_with("http://") || l.starts_with("https://") || l.starts_with("mailto:")
}

/// `http://`, `https://` and `mailto:` URLs in plain text, up to white space or a closing
/// bracket, without trailing punctuation.
fn urls_in(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let lower = text.to_ascii_lowercase();
    let mut i = 0;
    while i < text.len() {
        let rest = &lower[i..];
        let start = ["https://", "http://", "mailto:"]
            .iter()
            .filter_map(|p| rest.find(p))
            .min();
        let Some(s) = start else { break };
        let from = i + s;
        let end = text[from..]
            .find(|c: char| c.is_whitespace() || matches!(c, '<' | '>' | '"' | '\'' | ')' | ']'))
            .map_or(text.len(), |e| from + e);
        let url = text[from..end].trim_end_matches(['.', ',', ';', ':', '!', '?']);
        if url.len() > "mailto:".len() {
            out.push(url.to_string());
        }
        i = end.max(from + 1);
    }
    out
}

/// The `href` values of an HTML document, entity-decoded (`&amp;` and numeric forms).
fn hrefs_in(html: &str) -> Vec<String> {
    let lower = html.to_ascii_lowercase();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(p) = lower[i..].find("href") {
        let mut j = i + p + 4;
        i = j;
        let rest = lower[j..].trim_start();
        j += lower[j..].len() - rest.len();
        if !rest.starts_with('=') {
            continue;
        }
        j += 1;
        let rest = &lower[j..];
        j += rest.len() - rest.trim_start().len();
        let (value, next) = match html[j..].chars().next() {
            Some(q @ ('"' | '\'')) => match html[j + 1..].find(q) {
                Some(e) => (&html[j + 1..j + 1 + e], j + 2 + e),
                None => break,
            },
            _ => {
                let e = html[j..]
                    .find(|c: char| c.is_whitespace() || c == '>')
                    .map_or(html.len(), |e| j + e);
                (&html[j..e], e)
            }
        };
        i = next;
        let v = decode_entities(value.trim());
        if linkable(&v) {
            out.push(v);
        }
    }
    out
}

fn decode_entities(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(p) = rest.find('&') {
        out.push_str(&rest[..p]);
        rest = &rest[p..];
        let Some(end) = rest.find(';').filter(|e| *e <= 10) else {
            out.push('&');
            rest = &rest[1..];
            continue;
        };
        let ent = &rest[1..end];
        let c = match ent {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => ent
                .strip_prefix("#x")
                .or_else(|| ent.strip_prefix("#X"))
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .or_else(|| ent.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        };
        match c {
            Some(c) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// What an SMTP transaction becomes in the journal: a new delivery (SMTP has no idempotency
/// key), listed under its first recipient, with the subject, sender and text read from the
/// message and the job id from `X-Sendonce-Job` (empty when the sender is not sendonce).
pub(crate) fn request_from_smtp(envelope: Envelope, raw: Vec<u8>) -> Request {
    let parsed = mail_parser::MessageParser::default().parse(&raw);
    let header = |name: &str| parsed.as_ref().and_then(|p| p.header_raw(name)).map(unfold);
    let from = parsed
        .as_ref()
        .and_then(|p| p.from())
        .and_then(|a| a.first())
        .and_then(|a| a.address())
        .map(str::to_string)
        .or_else(|| Some(envelope.from.clone()).filter(|f| !f.is_empty()));
    let subject = parsed
        .as_ref()
        .and_then(|p| p.subject())
        .map(str::to_string);
    let body = parsed
        .as_ref()
        .and_then(|p| p.body_text(0))
        .map(|t| t.into_owned())
        .unwrap_or_default();
    let (job_id, tenant) = (header("X-Sendonce-Job"), header("X-Fake-Tenant"));
    drop(parsed);
    Request {
        job_id: job_id.unwrap_or_default(),
        idempotency_key: String::new(),
        channel: "email".into(),
        from,
        to: envelope.to.first().cloned().unwrap_or_default(),
        subject,
        body,
        html: None,
        metadata: None,
        api: None,
        headers: None,
        id_style: IdStyle::Fake,
        raw: Some(raw),
        envelope: Some(envelope),
        attachments: Vec::new(),
        tenant,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(to: &str, subject: &str, replay: bool) -> DeliveryLine {
        DeliveryLine {
            job_id: "j".into(),
            idempotency_key: "k".into(),
            channel: "email".into(),
            from: Some("shop@example.org".into()),
            to: to.into(),
            subject: Some(subject.into()),
            body: "Hello https://x.example/u/1.".into(),
            html: Some(r#"<a href="https://x.example/c?a=1&amp;b=2">c</a>"#.into()),
            reply_to: None,
            at: 1_000,
            replay,
            message_id: "fake-1".into(),
            metadata: None,
            api: None,
            headers: None,
            raw_base64: None,
            envelope: None,
            attachments: Vec::new(),
            tenant: None,
        }
    }

    #[test]
    fn filters_parse_and_match() {
        let f = Filter::parse(Some("to=KIM%40example.org&subject=welc&since=1000")).unwrap();
        assert!(f.matches(&line("kim@example.org", "Welcome!", false)));
        assert!(!f.matches(&line("kim@example.org", "Welcome!", true)));
        assert!(!f.matches(&line("lee@example.org", "Welcome!", false)));
        let f = Filter::parse(Some("replays=true&to=%2B14155550100")).unwrap();
        assert!(f.matches(&line("+14155550100", "x", true)));
        let f = Filter::parse(Some("to=+14155550100&subject=Confirm+your%2Baddress")).unwrap();
        assert_eq!(f.to.as_deref(), Some("+14155550100"));
        assert_eq!(f.subject.as_deref(), Some("Confirm your+address"));
        assert!(Filter::parse(Some("channel=fax"))
            .unwrap_err()
            .contains("channel"));
        assert!(Filter::parse(Some("since=yesterday"))
            .unwrap_err()
            .contains("since"));
        assert!(Filter::parse(Some("replays=maybe"))
            .unwrap_err()
            .contains("replays"));
        let f = Filter::parse(Some("since=1970-01-01T00:00:02Z")).unwrap();
        assert_eq!(f.since, Some(2000));
    }

    #[test]
    fn links_come_from_header_text_and_html() {
        let headers = vec![Header {
            name: "List-Unsubscribe".into(),
            value: "<mailto:u@x.example>, <https://x.example/u/1>, <javascript:alert(1)>".into(),
        }];
        let l = links(
            "See https://x.example/u/1. Or (https://x.example/p).",
            Some(
                r#"<a class=x HREF='https://x.example/c?a=1&amp;b=2'>c</a> <a href=javascript:x>"#,
            ),
            &headers,
        );
        assert_eq!(
            l,
            [
                "mailto:u@x.example",
                "https://x.example/u/1",
                "https://x.example/p",
                "https://x.example/c?a=1&b=2"
            ]
        );
    }

    #[test]
    fn smtp_requests_read_the_message() {
        let raw = b"From: Shop <shop@example.org>\r\nTo: kim@example.org\r\nSubject: =?UTF-8?B?T2zDoQ==?=\r\nX-Sendonce-Job: campaign:1:sub:2\r\n\r\nHi\r\n".to_vec();
        let env = Envelope {
            from: "bounce@example.org".into(),
            to: vec!["kim@example.org".into(), "lee@example.org".into()],
        };
        let r = request_from_smtp(env, raw.clone());
        assert_eq!(r.job_id, "campaign:1:sub:2");
        assert_eq!(r.subject.as_deref(), Some("Olá"));
        assert_eq!(r.from.as_deref(), Some("shop@example.org"));
        assert_eq!(r.to, "kim@example.org");
        assert_eq!(r.body.trim_end(), "Hi");
        assert_eq!(r.raw.as_deref(), Some(&raw[..]));
    }

    #[test]
    fn http_emails_get_a_synthesized_source_and_sms_a_segment_count() {
        let m = Message::of(&line("kim@example.org", "Olá", false));
        assert!(!m.raw_received);
        let parsed = mail_parser::MessageParser::default().parse(&m.raw).unwrap();
        assert_eq!(parsed.subject(), Some("Olá"));
        assert!(parsed.body_html(0).unwrap().contains("href"));
        assert_eq!(m.links.len(), 2);
        let mut sms = line("+14155550100", "", false);
        sms.channel = "sms".into();
        sms.body = "ж".repeat(80);
        let m = Message::of(&sms);
        assert_eq!(m.sms.as_ref().map(|s| s.segments), Some(2));
    }
}

//! Delivery status notifications (RFC 3464), pure: the MIME structure read with mail-parser,
//! then the `message/delivery-status` part's field groups (one per message, one per
//! recipient), the job id from the returned headers (`X-Sendonce-Job`, in a `message/rfc822`
//! or `text/rfc822-headers` part), and the addresses the DSN itself was delivered to (where
//! the VERP tag is: `Delivered-To`, `X-Original-To`, `To`). No I/O and no trust: whether the
//! DSN is believed is `verp`'s check, made by the use case.

use crate::address::{normalize_for, Channel};
use mail_parser::{Message, MessageParser, MimeHeaders, PartType};

/// Longest DSN read (bytes): a DSN that returns the whole message carries its attachments.
pub const MAX_BYTES: usize = 25 * 1024 * 1024;
/// Most recipients one DSN may report on.
pub const MAX_RECIPIENTS: usize = 1000;
/// Longest job id or status text kept.
const MAX_FIELD: usize = 512;
/// The header that carries our job id in every email sendonce sends.
pub const JOB_HEADER: &str = "X-Sendonce-Job";

/// What the reporting MTA did for one recipient (`Action:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Failed,
    Delayed,
    Delivered,
    Relayed,
    Expanded,
}

impl Action {
    /// An `Action:` value: its first word (MTAs add a comment after it), with the spellings
    /// of older MTAs (`failure`, `error`) read as `failed`.
    fn parse(s: &str) -> Option<Action> {
        let word = s.split_whitespace().next()?.to_ascii_lowercase();
        Some(match word.as_str() {
            "failed" | "failure" | "error" => Action::Failed,
            "delayed" => Action::Delayed,
            "delivered" => Action::Delivered,
            "relayed" => Action::Relayed,
            "expanded" => Action::Expanded,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Failed => "failed",
            Action::Delayed => "delayed",
            Action::Delivered => "delivered",
            Action::Relayed => "relayed",
            Action::Expanded => "expanded",
        }
    }
}

/// One per-recipient field group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recipient {
    /// `Original-Recipient: rfc822;...` (the address as the sender gave it), normalised.
    pub original: Option<String>,
    /// `Final-Recipient: rfc822;...`, normalised.
    pub final_recipient: Option<String>,
    pub action: Action,
    /// `Status:` (`5.1.1`).
    pub status: String,
    /// `Diagnostic-Code:`, when given (cut to a few hundred bytes).
    pub diagnostic: Option<String>,
}

impl Recipient {
    /// A hard bounce: the MTA gave up (`failed`) because the address is bad: an address-class
    /// status ([`address_failure`]), or the unspecific `5.0.0` with an address-class code in
    /// the diagnostic (`smtp; 550 5.1.1 ...`). A policy, spam, size or routing refusal (5.7.x,
    /// 5.3.4, 5.4.x...) and a 4.x.x failure say nothing about the address: recorded only.
    pub fn permanent(&self) -> bool {
        if self.action != Action::Failed {
            return false;
        }
        match enhanced_status(&self.status) {
            Some(e) if address_failure(e) => true,
            Some((5, 0, 0)) => self.diagnostic.as_deref().is_some_and(|d| {
                let reply = d.split_once(';').map_or(d, |(_, r)| r);
                reply
                    .split_whitespace()
                    .take(2)
                    .filter_map(enhanced_status)
                    .any(address_failure)
            }),
            _ => false,
        }
    }

    /// The addresses the group names: the original, then the final one.
    pub fn addresses(&self) -> impl Iterator<Item = &str> {
        self.original
            .iter()
            .chain(self.final_recipient.iter())
            .map(String::as_str)
    }
}

/// The RFC 3463 enhanced status code at the start of a text (`5.1.1 ...`).
pub fn enhanced_status(text: &str) -> Option<(u16, u16, u16)> {
    let first = text.split_whitespace().next()?;
    let mut it = first.split('.');
    let (a, b, c) = (it.next()?, it.next()?, it.next()?);
    if it.next().is_some() {
        return None;
    }
    let n = |s: &str| {
        (!s.is_empty() && s.len() <= 3 && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u16>().ok())
            .flatten()
    };
    Some((n(a)?, n(b)?, n(c)?))
}

/// An enhanced status that says the address itself is bad (RFC 3463): bad mailbox (5.1.1),
/// bad system (5.1.2), bad syntax (5.1.3), moved (5.1.6), null MX (5.1.10), disabled (5.2.1).
/// What a sender suppresses on; every other permanent status is about the message or a policy.
pub fn address_failure(e: (u16, u16, u16)) -> bool {
    matches!(
        e,
        (5, 1, 1) | (5, 1, 2) | (5, 1, 3) | (5, 1, 6) | (5, 1, 10) | (5, 2, 1)
    )
}

/// A parsed DSN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dsn {
    /// The DSN's own `Message-ID`, when it has one.
    pub message_id: Option<String>,
    /// The addresses it was delivered to, in the order looked at: `Delivered-To`,
    /// `X-Original-To`, `To` (raw; the VERP tag is looked for in each).
    pub delivered_to: Vec<String>,
    /// `X-Sendonce-Job` of the returned headers, when they are returned.
    pub job_id: Option<String>,
    /// Recipients with an `rfc822` address and a known action.
    pub recipients: Vec<Recipient>,
    /// The `message/delivery-status` part as it came (what a replay is compared by).
    pub status_part: Vec<u8>,
}

/// Parse `raw` as an RFC 3464 DSN. The error says what is missing without quoting the input.
pub fn parse(raw: &[u8]) -> Result<Dsn, String> {
    if raw.len() > MAX_BYTES {
        return Err(format!(
            "the message is larger than {} MB",
            MAX_BYTES / 1024 / 1024
        ));
    }
    let msg = MessageParser::new()
        .parse(raw)
        .ok_or("not an email message (no headers)")?;
    // RFC 3464 puts the part in a `multipart/report; report-type=delivery-status`; real MTAs
    // also omit the report type, wrap the report in a `multipart/mixed` or forward it whole:
    // any `message/delivery-status` part is read (whether it is believed is VERP's question).
    let (report, status_part) = report(&msg, 0).ok_or(
        "not a delivery status notification (RFC 3464): it has no message/delivery-status part",
    )?;
    let recipients = recipients(&status_part)?;
    Ok(Dsn {
        message_id: msg.message_id().map(str::to_string),
        delivered_to: delivered_to(&msg),
        job_id: returned_job(report),
        recipients,
        status_part,
    })
}

/// The message that holds the report, with its `message/delivery-status` part: `msg` when it
/// has one, else a message it carries (a forwarded DSN), at most a few levels down.
fn report<'a>(msg: &'a Message<'a>, depth: usize) -> Option<(&'a Message<'a>, Vec<u8>)> {
    if let Some(part) = part_of(msg, "message", "delivery-status") {
        return Some((msg, part));
    }
    if depth >= 3 {
        return None;
    }
    msg.parts.iter().find_map(|p| match &p.body {
        PartType::Message(m) => report(m, depth + 1),
        _ => None,
    })
}

/// The bytes of the first part of type `ctype/subtype`.
fn part_of(msg: &Message<'_>, ctype: &str, subtype: &str) -> Option<Vec<u8>> {
    msg.parts.iter().find_map(|p| {
        let ct = p.content_type()?;
        let hit = ct.ctype().eq_ignore_ascii_case(ctype)
            && ct
                .subtype()
                .is_some_and(|s| s.eq_ignore_ascii_case(subtype));
        hit.then(|| p.contents().to_vec())
    })
}

fn delivered_to(msg: &Message<'_>) -> Vec<String> {
    let mut out = Vec::new();
    for name in ["Delivered-To", "X-Original-To"] {
        for h in msg.header_values(name) {
            if let Some(t) = h.as_text() {
                out.push(t.trim().to_string());
            }
        }
    }
    if let Some(to) = msg.to() {
        out.extend(to.iter().filter_map(|a| a.address()).map(str::to_string));
    }
    out
}

/// `X-Sendonce-Job` of the returned message (`message/rfc822`) or headers
/// (`text/rfc822-headers`), trimmed; `None` when neither part carries it.
fn returned_job(msg: &Message<'_>) -> Option<String> {
    let nested = msg.parts.iter().find_map(|p| match &p.body {
        PartType::Message(m) => job_header(m),
        _ => None,
    });
    nested.or_else(|| {
        let headers = part_of(msg, "text", "rfc822-headers")?;
        let mut with_body = headers;
        with_body.extend_from_slice(b"\r\n\r\n");
        let m = MessageParser::new().parse_headers(&with_body)?;
        job_header(&m)
    })
}

fn job_header(m: &Message<'_>) -> Option<String> {
    let raw = m.header_raw(JOB_HEADER)?.trim();
    let ok = !raw.is_empty() && raw.len() <= MAX_FIELD && raw.bytes().all(|b| b.is_ascii_graphic());
    ok.then(|| raw.to_string())
}

/// The field groups of a `message/delivery-status` body: blank-line separated, each a list of
/// (lower-case name, unfolded value).
fn groups(body: &str) -> Vec<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut group: Vec<(String, String)> = Vec::new();
    for line in body.lines() {
        if line.trim().is_empty() {
            if !group.is_empty() {
                out.push(std::mem::take(&mut group));
            }
            continue;
        }
        if line.starts_with([' ', '\t']) {
            if let Some((_, v)) = group.last_mut() {
                v.push(' ');
                v.push_str(line.trim());
            }
            continue;
        }
        if let Some((name, value)) = line.split_once(':') {
            group.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }
    if !group.is_empty() {
        out.push(group);
    }
    out
}

/// An `rfc822;address` field's address, normalised (or, from MTAs that leave out the type, a
/// bare `<address>`); `None` for another address type or an address that is not one.
fn rfc822(value: &str) -> Option<String> {
    let addr = match value.split_once(';') {
        Some((kind, addr)) if kind.trim().eq_ignore_ascii_case("rfc822") => addr,
        Some(_) => return None,
        None if value.trim().starts_with('<') => value,
        None => return None,
    };
    let addr = addr.trim();
    let addr = addr.split_whitespace().next().unwrap_or(addr);
    let addr = addr.trim_start_matches('<').trim_end_matches('>');
    normalize_for(Channel::Email, addr).ok()
}

fn recipients(part: &[u8]) -> Result<Vec<Recipient>, String> {
    let text = String::from_utf8_lossy(part);
    let mut out = Vec::new();
    // The per-message group has no `Action`: only per-recipient groups are kept.
    for g in groups(&text) {
        let field = |name: &str| g.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
        let Some(action) = field("action").and_then(Action::parse) else {
            continue;
        };
        let r = Recipient {
            original: field("original-recipient").and_then(rfc822),
            final_recipient: field("final-recipient").and_then(rfc822),
            action,
            status: field("status")
                .and_then(|s| s.split_whitespace().next())
                .unwrap_or("")
                .chars()
                .take(16)
                .collect(),
            diagnostic: field("diagnostic-code").map(|d| cut(d, 300)),
        };
        if r.addresses().next().is_none() {
            continue;
        }
        if out.len() == MAX_RECIPIENTS {
            return Err(format!(
                "the DSN reports on more than {MAX_RECIPIENTS} recipients"
            ));
        }
        out.push(r);
    }
    if out.is_empty() {
        return Err(
            "the DSN's delivery-status part names no recipient (Final-Recipient: rfc822;... \
             with an Action)"
                .into(),
        );
    }
    Ok(out)
}

fn cut(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A DSN shaped as Postfix writes one (headers returned as text/rfc822-headers).
    fn postfix(final_rcpt: &str, action: &str, status: &str) -> String {
        format!(
            "Return-Path: <>\r\nDelivered-To: bounces+abcdefghabcdefgh@bounce.example.com\r\n\
             From: MAILER-DAEMON@mx.example.com (Mail Delivery System)\r\n\
             Subject: Undelivered Mail Returned to Sender\r\n\
             To: bounces+abcdefghabcdefgh@bounce.example.com\r\n\
             Message-Id: <20261207.ABC@mx.example.com>\r\nMIME-Version: 1.0\r\n\
             Content-Type: multipart/report; report-type=delivery-status;\r\n\
             \tboundary=\"B1\"\r\n\r\nThis is a MIME-encapsulated message.\r\n\r\n--B1\r\n\
             Content-Type: text/plain; charset=us-ascii\r\n\r\nI'm sorry to have to inform you\
             \r\n\r\n--B1\r\nContent-Type: message/delivery-status\r\n\r\n\
             Reporting-MTA: dns; mx.example.com\r\nX-Postfix-Queue-ID: ABC\r\n\r\n\
             Final-Recipient: {final_rcpt}\r\nOriginal-Recipient: rfc822;Ann@Example.org\r\n\
             Action: {action}\r\nStatus: {status}\r\nRemote-MTA: dns; mx.example.org\r\n\
             Diagnostic-Code: smtp; 550 5.1.1 <ann@example.org>: Recipient address\r\n\
             \x20   rejected: User unknown\r\n\r\n--B1\r\n\
             Content-Type: text/rfc822-headers\r\n\r\nFrom: news@example.com\r\n\
             To: ann@example.org\r\nX-Sendonce-Job: campaign:1:sub:2@0011223344556677\r\n\
             Subject: Hello\r\n\r\n--B1--\r\n"
        )
    }

    #[test]
    fn a_postfix_hard_bounce() {
        let d = parse(postfix("rfc822; ann@example.org", "failed", "5.1.1").as_bytes()).unwrap();
        assert_eq!(d.message_id.as_deref(), Some("20261207.ABC@mx.example.com"));
        assert_eq!(
            d.job_id.as_deref(),
            Some("campaign:1:sub:2@0011223344556677")
        );
        assert_eq!(d.recipients.len(), 1);
        let r = &d.recipients[0];
        assert!(r.permanent());
        assert_eq!(r.original.as_deref(), Some("ann@example.org"));
        assert!(r.diagnostic.as_deref().unwrap().contains("User unknown"));
        assert!(d.delivered_to[0].starts_with("bounces+abcdefghabcdefgh@"));
    }

    #[test]
    fn transient_and_other_types() {
        let d = parse(postfix("rfc822;ann@example.org", "delayed", "4.4.1").as_bytes()).unwrap();
        assert!(!d.recipients[0].permanent());
        let d = parse(postfix("rfc822;ann@example.org", "failed", "4.4.7").as_bytes()).unwrap();
        assert!(
            !d.recipients[0].permanent(),
            "a 4.x.x failure is not a hard bounce"
        );
        // An x-local final recipient: the original (rfc822) still names it.
        let d = parse(postfix("x-local; ann", "failed", "5.1.1").as_bytes()).unwrap();
        assert_eq!(d.recipients[0].final_recipient, None);
        assert_eq!(d.recipients[0].addresses().count(), 1);
    }

    #[test]
    fn a_forwarded_dsn_is_read_with_its_returned_headers() {
        let inner = postfix("rfc822;ann@example.org", "failed", "5.1.1");
        let outer = format!(
            "From: postmaster@example.com\r\nTo: bounces+abcdefghabcdefgh@bounce.example.com\r\n\
             Subject: Fwd: bounce\r\nMIME-Version: 1.0\r\n\
             Content-Type: multipart/mixed; boundary=\"F1\"\r\n\r\n--F1\r\n\
             Content-Type: text/plain\r\n\r\nforwarded\r\n--F1\r\n\
             Content-Type: message/rfc822\r\n\r\n{inner}\r\n--F1--\r\n"
        );
        let d = parse(outer.as_bytes()).unwrap();
        assert_eq!(
            d.job_id.as_deref(),
            Some("campaign:1:sub:2@0011223344556677")
        );
        assert!(d.recipients[0].permanent());
    }

    #[test]
    fn what_is_not_a_dsn_is_refused() {
        let plain = "From: a@b.c\r\nTo: d@e.f\r\nSubject: hi\r\n\r\nhello\r\n";
        assert!(parse(plain.as_bytes()).unwrap_err().contains("RFC 3464"));
        let other = postfix("rfc822;a@b.c", "failed", "5.1.1").replace(
            "message/delivery-status",
            "message/disposition-notification",
        );
        assert!(parse(other.as_bytes())
            .unwrap_err()
            .contains("no message/delivery-status part"));
        let no_action = postfix("rfc822;a@b.c", "bogus", "5.1.1")
            .replace("Original-Recipient: rfc822;Ann@Example.org\r\n", "");
        assert!(parse(no_action.as_bytes())
            .unwrap_err()
            .contains("names no recipient"));
        assert!(parse(b"").is_err());
        assert!(parse(&vec![b'a'; MAX_BYTES + 1]).is_err());
    }
}

//! Builds the RFC 5322 message the SMTP provider sends, and refuses every input that could
//! smuggle a header in (CR, LF, NUL, Unicode line separators, encoded words, `%0d%0a`).
//!
//! What goes out: `Date`, `From` (the campaign sender, `addr` or `Name <addr>`), optional
//! `Reply-To`, `To`,
//! `Subject` (RFC 2047-encoded by lettre when not ASCII), `Message-ID: <{key}@{domain}>` (the
//! idempotency key, so a retry carries the same id), `X-Sendonce-Job`, optional
//! `List-Unsubscribe` (+ `List-Unsubscribe-Post` for an https link, RFC 8058), `MIME-Version`,
//! and either one quoted-printable `text/plain` part or a `multipart/alternative` of text and
//! HTML; inline images (an attachment with a content id) wrap that in `multipart/related`, and
//! attachments wrap the whole in `multipart/mixed`, each file base64. Boundaries are derived
//! from the key (retries are byte-identical apart from `Date`) and start with `=_`, which
//! neither quoted-printable nor base64 output can contain, so no body can forge a MIME part. After building, the header block is checked once more line by line.

use super::Message;
use lettre::message::header::{ContentTransferEncoding, ContentType, HeaderName, HeaderValue};
use lettre::message::{Body, Mailbox, MessageBuilder, MultiPart, MultiPartBuilder, SinglePart};
use lettre::Address;
use sendonce_domain::attachment::Attachment;
use sendonce_domain::headers::{
    check_domain, check_text, parse_address, parse_mailbox, squeeze_spaces, MAX_SUBJECT_BYTES,
};

use std::time::SystemTime;

/// Longest job id accepted in `X-Sendonce-Job`, in bytes.
pub const MAX_JOB_ID_BYTES: usize = 256;

/// Every header name the builder can emit (lower case). Anything else in the output is a bug.
pub const EXPECTED_HEADERS: &[&str] = &[
    "date",
    "from",
    "reply-to",
    "to",
    "subject",
    "message-id",
    "mime-version",
    "content-type",
    "content-transfer-encoding",
    "x-sendonce-job",
    "list-unsubscribe",
    "list-unsubscribe-post",
];

/// Per-provider settings for the message (from the `smtp://` spec).
#[derive(Debug, Clone, Default)]
pub struct EmailSettings {
    /// Right-hand side of the `Message-ID`; default: the sender's domain.
    pub message_id_domain: Option<String>,
    pub unsubscribe: Option<UnsubscribeSettings>,
}

/// A mailbox that receives unsubscribe mails, written into `List-Unsubscribe` beside the
/// recipient's https link (which the worker puts in `Message::unsubscribe`).
#[derive(Debug, Clone)]
pub struct UnsubscribeSettings {
    pub mailto: Option<Address>,
}

/// A message ready for the SMTP transaction.
#[derive(Debug, Clone)]
pub struct BuiltEmail {
    /// The whole message, CRLF line endings, 7-bit ASCII.
    pub bytes: Vec<u8>,
    /// Envelope sender (MAIL FROM) and recipient (RCPT TO).
    pub from: Address,
    pub to: Address,
    /// `<key@domain>`, as in the header.
    pub message_id: String,
}

/// Build the message for `msg`. `date` goes into the `Date` header (the only part of the
/// output that may differ between two attempts). The error says which input was refused
/// and why, without quoting it (it may be hostile or very long).
pub fn build_email(
    msg: &Message,
    settings: &EmailSettings,
    date: SystemTime,
) -> Result<BuiltEmail, String> {
    let from_spec = msg
        .from
        .as_deref()
        .ok_or("email needs a sender: create the campaign with --from")?;
    let from = parse_mailbox("sender (From)", from_spec)?;
    let to_addr = parse_address("recipient (To)", &msg.to)?;
    let to = Mailbox::new(None, to_addr.clone());

    let key = &msg.idempotency_key;
    let message_id = message_id(msg, settings, &from)?;

    let mut b = lettre::Message::builder()
        .from(from.clone())
        .to(to)
        .date(date)
        .message_id(Some(message_id.clone()))
        .raw_header(HeaderValue::new(
            HeaderName::new_from_ascii_str("X-Sendonce-Job"),
            msg.job_id.clone(),
        ));
    if let Some(r) = &msg.reply_to {
        b = b.reply_to(parse_mailbox("reply-to (Reply-To)", r)?);
    }
    if let Some(subject) = &msg.subject {
        check_text("subject", subject, MAX_SUBJECT_BYTES)?;
        b = b.subject(squeeze_spaces(subject));
    }
    if settings.unsubscribe.is_some() || msg.unsubscribe.is_some() {
        b = unsubscribe_headers(b, settings.unsubscribe.as_ref(), msg)?;
    }

    let text = qp_part(ContentType::TEXT_PLAIN, &msg.body)?;
    let boundary = |kind: &str| format!("=_sendonce{kind}_{}", key.replace('-', ""));
    let body = match &msg.html {
        None => Part::Single(text),
        Some(html) => Part::Multi(
            MultiPart::alternative()
                .boundary(boundary(""))
                .singlepart(text)
                .singlepart(qp_part(ContentType::TEXT_HTML, html)?),
        ),
    };
    let (inline, attached): (Vec<_>, Vec<_>) =
        msg.attachments.iter().partition(|a| a.content_id.is_some());
    let body = wrap(body, MultiPart::related().boundary(boundary("_r")), &inline)?;
    let body = wrap(body, MultiPart::mixed().boundary(boundary("_m")), &attached)?;
    let built = match body {
        Part::Single(p) => b.singlepart(p),
        Part::Multi(m) => b.multipart(m),
    }
    .map_err(|e| format!("could not build the message: {e}"))?;
    let bytes = built.formatted();
    check_output(&bytes)?;
    Ok(BuiltEmail {
        bytes,
        from: from.email,
        to: to_addr,
        message_id,
    })
}

/// `<key@domain>` for the `Message-ID` header, after checking the key, the domain and the job
/// id (which goes into `X-Sendonce-Job`).
fn message_id(msg: &Message, settings: &EmailSettings, from: &Mailbox) -> Result<String, String> {
    let key = &msg.idempotency_key;
    if key.is_empty()
        || key.len() > 64
        || !key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        return Err("the idempotency key is not a UUID-like token".into());
    }
    let domain = match &settings.message_id_domain {
        Some(d) => d.clone(),
        None => from.email.domain().to_ascii_lowercase(),
    };
    check_domain("message_id_domain", &domain)?;
    let message_id = format!("<{key}@{domain}>");

    check_text("job id", &msg.job_id, MAX_JOB_ID_BYTES)?;
    if !msg.job_id.bytes().all(|b| (0x21..0x7f).contains(&b)) {
        return Err("the job id must be printable ASCII without spaces".into());
    }
    Ok(message_id)
}

/// `List-Unsubscribe`, and `List-Unsubscribe-Post` when there is an https link (one click).
fn unsubscribe_headers(
    b: MessageBuilder,
    u: Option<&UnsubscribeSettings>,
    msg: &Message,
) -> Result<MessageBuilder, String> {
    let (list, one_click) = list_unsubscribe(u, msg.unsubscribe.as_deref())?;
    if list.is_empty() {
        return Ok(b);
    }
    let mut b = b.raw_header(HeaderValue::new(
        HeaderName::new_from_ascii_str("List-Unsubscribe"),
        list,
    ));
    if one_click {
        b = b.raw_header(HeaderValue::new(
            HeaderName::new_from_ascii_str("List-Unsubscribe-Post"),
            "List-Unsubscribe=One-Click".to_string(),
        ));
    }
    Ok(b)
}

/// `List-Unsubscribe` (and `List-Unsubscribe-Post` for an https link) as (name, value) pairs,
/// for the HTTP APIs that take custom headers (Resend, Postmark): the values the SMTP builder
/// writes. None when there is no link, or a link that could not go into a header (logged).
pub fn unsubscribe_header_pairs(link: Option<&str>) -> Vec<(&'static str, String)> {
    let Some(link) = link else { return Vec::new() };
    match list_unsubscribe(None, Some(link)) {
        Ok((list, one_click)) => {
            let mut out = vec![("List-Unsubscribe", list)];
            if one_click {
                out.push(("List-Unsubscribe-Post", "List-Unsubscribe=One-Click".into()));
            }
            out
        }
        Err(e) => {
            tracing::warn!(error = %e, "List-Unsubscribe left out");
            Vec::new()
        }
    }
}

/// A message body: one part, or several.
enum Part {
    Single(SinglePart),
    Multi(MultiPart),
}

/// `body` followed by `files` inside `outer` (multipart/related for inline images,
/// multipart/mixed for attachments); `body` alone when there are no files.
fn wrap(body: Part, outer: MultiPartBuilder, files: &[&Attachment]) -> Result<Part, String> {
    if files.is_empty() {
        return Ok(body);
    }
    let mut m = match body {
        Part::Single(p) => outer.singlepart(p),
        Part::Multi(p) => outer.multipart(p),
    };
    for a in files {
        m = m.singlepart(file_part(a)?);
    }
    Ok(Part::Multi(m))
}

/// One file, base64 whatever its type, so that it arrives byte for byte (a text file in 7bit
/// would have its line ends rewritten on the way).
fn file_part(a: &Attachment) -> Result<SinglePart, String> {
    let ct = ContentType::parse(&a.content_type)
        .map_err(|_| "an attachment's content type does not parse".to_string())?;
    let body = Body::new_with_encoding(a.data.to_vec(), ContentTransferEncoding::Base64)
        .map_err(|_| "could not encode an attachment as base64".to_string())?;
    let file = match &a.content_id {
        Some(cid) => {
            lettre::message::Attachment::new_inline_with_name(cid.clone(), a.filename.clone())
        }
        None => lettre::message::Attachment::new(a.filename.clone()),
    };
    Ok(file.body(body, ct))
}

/// A quoted-printable text part: its output is ASCII, has short lines and never contains `=_`.
fn qp_part(ct: ContentType, text: &str) -> Result<SinglePart, String> {
    let body = Body::new_with_encoding(text.to_string(), ContentTransferEncoding::QuotedPrintable)
        .map_err(|_| "could not encode the body as quoted-printable".to_string())?;
    Ok(SinglePart::builder().header(ct).body(body))
}

/// The `List-Unsubscribe` value (mailto first, then the recipient's link), and whether the link
/// is https (RFC 8058 one-click `POST` is only promised for https).
fn list_unsubscribe(
    u: Option<&UnsubscribeSettings>,
    link: Option<&str>,
) -> Result<(String, bool), String> {
    // The link's token in the mailto subject tells who asked even through a forwarder.
    let token = link.and_then(|l| l.rsplit('/').next());
    let mut items = Vec::new();
    if let Some(m) = u.and_then(|u| u.mailto.as_ref()) {
        items.push(match token {
            Some(t) => format!("<mailto:{m}?subject=unsubscribe%20{t}>"),
            None => format!("<mailto:{m}?subject=unsubscribe>"),
        });
    }
    if let Some(l) = link {
        items.push(format!("<{l}>"));
    }
    let value = items.join(", ");
    let bad_link = link.is_some_and(|l| l.contains(['<', '>', ',', ' ']));
    if bad_link || !value.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err("the List-Unsubscribe value is not printable ASCII".into());
    }
    Ok((value, link.is_some_and(|l| l.starts_with("https://"))))
}

/// Defence in depth: the header block is ASCII, has only CRLF line ends, lines of at most 998
/// bytes, and only names from `EXPECTED_HEADERS`, each once.
fn check_output(bytes: &[u8]) -> Result<(), String> {
    let bad = |why: &str| Err(format!("the built message failed its header check: {why}"));
    let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else {
        return bad("no end of headers");
    };
    if !bytes.is_ascii() {
        return bad("not 7-bit ASCII");
    }
    // Up to and including the last header's CRLF.
    let head = &bytes[..end + 2];
    let mut seen: Vec<String> = Vec::new();
    for line in head[..head.len() - 1].split(|&b| b == b'\n') {
        let Some(line) = line.strip_suffix(b"\r") else {
            return bad("bare LF");
        };
        if line.contains(&b'\r') || line.contains(&0) {
            return bad("bare CR or NUL");
        }
        if line.len() > 998 {
            return bad("line longer than 998 bytes");
        }
        if line.first().is_some_and(|&b| b == b' ' || b == b'\t') {
            if seen.is_empty() {
                return bad("continuation before the first header");
            }
            continue;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return bad("a line that is neither a header nor a continuation");
        };
        let name = String::from_utf8_lossy(&line[..colon]).to_ascii_lowercase();
        if !EXPECTED_HEADERS.contains(&name.as_str()) {
            return bad("unexpected header");
        }
        if seen.contains(&name) {
            return bad("repeated header");
        }
        seen.push(name);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sendonce_domain::address::Channel;

    fn msg() -> Message {
        Message {
            status_callback: None,
            reply_to: None,
            job_id: "campaign:1:sub:2".into(),
            idempotency_key: "6f1c1f2e-8d2a-5b7e-9c1d-0a1b2c3d4e5f".into(),
            channel: Channel::Email,
            from: Some("News <news@example.org>".into()),
            to: "ana@example.com".into(),
            subject: Some("Hello".into()),
            body: "Hi Ana\n".into(),
            html: None,
            unsubscribe: None,
            attachments: Vec::new(),
        }
    }

    #[test]
    fn files_wrap_the_body_in_related_then_mixed_with_key_derived_boundaries() {
        let file = |name: &str, cid: Option<&str>| {
            sendonce_domain::attachment::decode(name, None, "AAEC/w==", cid).unwrap()
        };
        let mut m = msg();
        m.html = Some("<img src=\"cid:logo\">".into());
        m.attachments = vec![file("logo.png", Some("logo")), file("r.pdf", None)];
        let a = build_email(&m, &EmailSettings::default(), SystemTime::UNIX_EPOCH).unwrap();
        let b = build_email(&m, &EmailSettings::default(), SystemTime::UNIX_EPOCH).unwrap();
        assert_eq!(a.bytes, b.bytes, "a retry is byte-identical");
        let s = String::from_utf8(a.bytes).unwrap();
        let at = |needle: &str| s.find(needle).unwrap_or_else(|| panic!("{needle} in {s}"));
        assert!(at("multipart/mixed") < at("multipart/related"));
        assert!(at("multipart/related") < at("multipart/alternative"));
        assert!(at("multipart/alternative") < at("Content-ID: <logo>"));
        assert!(at("Content-ID: <logo>") < at("filename=\"r.pdf\""));
        assert!(s.contains("=_sendonce_m_6f1c1f2e8d2a5b7e9c1d0a1b2c3d4e5f"));
        assert_eq!(s.matches("AAEC/w==").count(), 2, "each file base64 once");
    }

    #[test]
    fn hostile_text_is_refused() {
        for s in [
            "a\r\nBcc: x@y.z",
            "a\nb",
            "a\rb",
            "a\0b",
            "a\u{85}b",
            "a\u{2028}b",
            "a\u{2029}b",
            "=?utf-8?q?x=0D=0ABcc:_evil@x?=",
            "x =?ISO-8859-1?B?SGk=?= y",
            "=? utf-8 ?q?x=0ABcc:e?=",
            "=?utf-8? q ?x=0A?=",
            "=?\tutf-8\t?B?SGk=?=",
        ] {
            assert!(check_text("subject", s, 900).is_err(), "{s:?}");
        }
        for s in ["Is 1+1=?", "a =? b", "plain", "Olá, Zoë — ünïcödé"] {
            assert!(check_text("subject", s, 900).is_ok(), "{s:?}");
        }
        for a in [
            "a%0d%0abcc@example.com",
            "a%0A@example.com",
            "a%00@example.com",
            "a@example.com\r\nBcc: b@example.com",
            "zoë@example.com",
            " a@example.com",
        ] {
            assert!(parse_address("To", a).is_err(), "{a:?}");
        }
        assert!(parse_address("To", "a%41@example.com").is_ok());
    }

    #[test]
    fn mailboxes_are_parsed() {
        let m = parse_mailbox("From", "Zoë Ñandú <news@example.org>").unwrap();
        assert_eq!(m.name.as_deref(), Some("Zoë Ñandú"));
        assert_eq!(m.email.to_string(), "news@example.org");
        let m = parse_mailbox("From", "\"Acme, Inc.\" <a@example.org>").unwrap();
        assert_eq!(m.name.as_deref(), Some("Acme, Inc."));
        assert!(parse_mailbox("From", "news@example.org")
            .unwrap()
            .name
            .is_none());
        assert!(parse_mailbox("From", "Bad <a@example.org").is_err());
        assert!(parse_mailbox("From", "Bad\r\nBcc: x <a@example.org>").is_err());
    }

    #[test]
    fn message_has_the_expected_headers_and_is_deterministic() {
        let m = msg();
        let s = EmailSettings::default();
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        let a = build_email(&m, &s, t).unwrap();
        let b = build_email(&m, &s, t).unwrap();
        assert_eq!(a.bytes, b.bytes);
        assert_eq!(
            a.message_id,
            "<6f1c1f2e-8d2a-5b7e-9c1d-0a1b2c3d4e5f@example.org>"
        );
        let text = String::from_utf8(a.bytes).unwrap();
        assert!(
            text.contains("X-Sendonce-Job: campaign:1:sub:2\r\n"),
            "{text}"
        );
        assert!(
            text.contains("Message-ID: <6f1c1f2e-8d2a-5b7e-9c1d-0a1b2c3d4e5f@example.org>\r\n"),
            "{text}"
        );
        assert!(!text.contains("List-Unsubscribe"));
        // Without a sender: a clear error.
        let mut m2 = msg();
        m2.from = None;
        let e = build_email(&m2, &s, t).unwrap_err();
        assert!(e.contains("--from"), "{e}");
    }

    #[test]
    fn unsubscribe_headers() {
        let mut m = msg();
        m.html = Some("<p>Hi</p>".into());
        m.unsubscribe = Some("https://example.org/u/2TOKEN_x-y".into());
        let s = EmailSettings {
            message_id_domain: Some("mail.example.net".into()),
            unsubscribe: Some(UnsubscribeSettings {
                mailto: Some("unsub@example.org".parse().unwrap()),
            }),
        };
        let built = build_email(&m, &s, SystemTime::now()).unwrap();
        let text = String::from_utf8(built.bytes).unwrap();
        let unfolded = text.replace("\r\n ", " ");
        assert!(
            unfolded.contains(
                "List-Unsubscribe: <mailto:unsub@example.org?subject=unsubscribe%202TOKEN_x-y>, \
                 <https://example.org/u/2TOKEN_x-y>\r\n"
            ),
            "{text}"
        );
        assert!(text.contains("List-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n"));
        assert!(text.contains("@mail.example.net>"));
        assert!(text.contains("multipart/alternative"));
        // An http link (a test server): listed, but no one-click promise.
        m.unsubscribe = Some("http://127.0.0.1:8025/u/2abc".into());
        let text = String::from_utf8(
            build_email(&m, &EmailSettings::default(), SystemTime::now())
                .unwrap()
                .bytes,
        )
        .unwrap();
        assert!(
            text.contains("List-Unsubscribe: <http://127.0.0.1:8025/u/2abc>\r\n"),
            "{text}"
        );
        assert!(!text.contains("List-Unsubscribe-Post"), "{text}");
    }
}

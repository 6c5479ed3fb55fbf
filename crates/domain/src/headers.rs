//! What a header value may hold, checked before any message is built and again by the email
//! builder: no character that could end a header line or be decoded into one (CR, LF, NUL,
//! Unicode line separators, RFC 2047 encoded words, percent-encoded controls), bounded
//! lengths, and addresses, mailboxes and host names that parse. Pure: no I/O.

use lettre::message::Mailbox;
use lettre::Address;

/// Longest subject accepted, in bytes (before encoding).
pub const MAX_SUBJECT_BYTES: usize = 900;
/// Longest display name accepted, in bytes.
pub const MAX_NAME_BYTES: usize = 256;

/// Refuse what could end a header line or be decoded into one (see [`refused_char`] and
/// [`has_encoded_word`]), and a value longer than `max_bytes`.
pub fn check_text(what: &str, s: &str, max_bytes: usize) -> Result<(), String> {
    if s.len() > max_bytes {
        return Err(format!(
            "the {what} is too long ({} bytes; at most {max_bytes})",
            s.len()
        ));
    }
    if let Some(c) = first_refused(s) {
        return Err(format!(
            "the {what} contains {c}, a line break, control character or bidirectional \
             override; refused to keep headers from being injected"
        ));
    }
    if has_encoded_word(s) {
        return Err(format!(
            "the {what} contains an RFC 2047 encoded word (=?charset?q|b?...); refused, \
             since a reader would decode it"
        ));
    }
    Ok(())
}

/// What `c` is, when it may not appear in a header value nor in subscriber data a template may
/// print into one: C0 controls (tab included), DEL, C1 controls (NEL included), the Unicode
/// line and paragraph separators (the only characters of classes Zl and Zp), and the explicit
/// bidirectional embeddings, overrides and isolates (U+202A..U+202E, U+2066..U+2069), which
/// make a subject display in another order than it reads. The marks U+200E, U+200F and U+061C
/// stay allowed: they reorder nothing beyond themselves.
pub fn refused_char(c: char) -> Option<&'static str> {
    Some(match c {
        '\r' => "carriage return",
        '\n' => "line feed",
        '\0' => "NUL",
        '\t' => "tab",
        '\u{85}' => "next line",
        c if c.is_control() => "control character",
        '\u{2028}' => "line separator",
        '\u{2029}' => "paragraph separator",
        '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' => "bidirectional override",
        _ => return None,
    })
}

/// The first character of `s` that [`refused_char`] refuses, written `U+000D (carriage
/// return)`: what an error may say about a hostile value without quoting it.
pub fn first_refused(s: &str) -> Option<String> {
    s.chars()
        .find_map(|c| refused_char(c).map(|what| format!("U+{:04X} ({what})", c as u32)))
}

/// A subscriber's name or attribute value, at input (form, API, CSV, CLI): templates may print
/// it into a subject, so it holds nothing a header value may not ([`refused_char`], RFC 2047
/// encoded words). Refused, not rewritten: the error names `what` and the character only.
pub fn check_data(what: &str, s: &str) -> Result<(), String> {
    if let Some(c) = first_refused(s) {
        return Err(format!(
            "{what} contains {c}; names and attribute values may not contain control \
             characters, line or paragraph separators or bidirectional overrides"
        ));
    }
    if has_encoded_word(s) {
        return Err(format!(
            "{what} contains an RFC 2047 encoded word (=?charset?b|q?...?=), which a mail \
             reader would decode into other text; refused"
        ));
    }
    Ok(())
}

/// The header values of one rendered message, as the worker is about to hand it to a
/// provider (any provider: SMTP, the HTTP APIs, the webhook, the outbox, SMS).
#[derive(Debug, Clone, Copy)]
pub struct Rendered<'a> {
    pub subject: Option<&'a str>,
    /// `From` as given (`addr`, `Name <addr>`, or an SMS sender).
    pub from: Option<&'a str>,
    pub reply_to: Option<&'a str>,
    pub to: &'a str,
    /// The `List-Unsubscribe` link.
    pub unsubscribe: Option<&'a str>,
    /// `X-Sendonce-Job` (and the providers' metadata or tag).
    pub job_id: &'a str,
}

/// Longest `From` or `Reply-To` value: a display name, an address and `"" <>`.
const MAX_MAILBOX_BYTES: usize = MAX_NAME_BYTES + 254 + 5;
/// Longest link or job id in a header.
const MAX_TOKEN_BYTES: usize = 2048;

/// Every header value of a rendered message, for every provider: the one check between
/// rendering and a provider call (`worker::single::dispatch`). The error names the header and
/// the refused character, never the value (subscriber data, possibly hostile).
pub fn check_rendered(h: &Rendered<'_>) -> Result<(), String> {
    let values = [
        ("Subject", h.subject, MAX_SUBJECT_BYTES),
        ("From", h.from, MAX_MAILBOX_BYTES),
        ("Reply-To", h.reply_to, MAX_MAILBOX_BYTES),
        ("To", Some(h.to), 254),
        ("List-Unsubscribe", h.unsubscribe, MAX_TOKEN_BYTES),
        ("X-Sendonce-Job", Some(h.job_id), MAX_TOKEN_BYTES),
    ];
    for (name, value, max) in values {
        if let Some(v) = value {
            check_text(&format!("{name} header"), v, max)?;
        }
    }
    Ok(())
}

/// `=?charset?B?` or `=?charset?Q?` anywhere in `s`. Lenient decoders accept spaces inside
/// an encoded word (`=? utf-8 ?q?...?=`): it is looked for with every space and tab removed.
pub fn has_encoded_word(s: &str) -> bool {
    let packed: String = s.split_whitespace().collect();
    let s = packed.as_str();
    let b = s.as_bytes();
    let mut i = 0;
    while let Some(pos) = s[i..].find("=?") {
        let start = i + pos + 2;
        let mut j = start;
        while j < b.len() && b[j] != b'?' && !b[j].is_ascii_whitespace() {
            j += 1;
        }
        if j > start
            && j + 2 < b.len()
            && b[j] == b'?'
            && matches!(b[j + 1], b'b' | b'B' | b'q' | b'Q')
            && b[j + 2] == b'?'
        {
            return true;
        }
        i = start;
    }
    false
}

/// `%` followed by two hex digits that encode a control character (`%0d`, `%0A`, `%00`...).
fn has_encoded_control(s: &str) -> bool {
    let b = s.as_bytes();
    b.windows(3).any(|w| {
        w[0] == b'%'
            && std::str::from_utf8(&w[1..])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .is_some_and(|v| v < 0x20 || v == 0x7f)
    })
}

/// A plain address: ASCII, the project's conservative syntax, and lettre's.
pub fn parse_address(what: &str, s: &str) -> Result<Address, String> {
    check_text(what, s, 254)?;
    if !s.is_ascii() {
        return Err(format!(
            "the {what} address is not ASCII (SMTPUTF8 addresses are not supported)"
        ));
    }
    if has_encoded_control(s) {
        return Err(format!(
            "the {what} address contains a percent-encoded control character (%0d, %0a...)"
        ));
    }
    if s.trim() != s {
        return Err(format!("the {what} address has surrounding spaces"));
    }
    crate::address::normalize_email(s).map_err(|e| format!("{what}: {}", e.message))?;
    s.parse::<Address>()
        .map_err(|e| format!("the {what} address is not valid: {e}"))
}

/// `addr`, `Name <addr>` or `"Name" <addr>`. Only spaces around the parts are dropped: a line
/// break, tab or other control character at either end is refused like one inside.
pub fn parse_mailbox(what: &str, s: &str) -> Result<Mailbox, String> {
    let s = s.trim_matches(' ');
    let Some(lt) = s.rfind('<') else {
        return Ok(Mailbox::new(None, parse_address(what, s)?));
    };
    let Some(addr) = s[lt + 1..].strip_suffix('>') else {
        return Err(format!("the {what} must be `address` or `Name <address>`"));
    };
    let address = parse_address(what, addr)?;
    let mut name = s[..lt].trim_matches(' ');
    if name.len() >= 2 && name.starts_with('"') && name.ends_with('"') {
        name = &name[1..name.len() - 1];
    }
    check_text(&format!("{what} display name"), name, MAX_NAME_BYTES)?;
    if name.contains(['"', '\\', '<', '>']) {
        return Err(format!(
            "the {what} display name contains a quote, backslash or angle bracket"
        ));
    }
    let name = squeeze_spaces(name);
    Ok(Mailbox::new((!name.is_empty()).then_some(name), address))
}

/// Trim, and turn runs of spaces into one. lettre's RFC 2047 encoder writes a run of spaces
/// between two non-ASCII words as bare whitespace between two encoded words, which every
/// decoder drops (RFC 2047 6.2): "Olá  Zoë" would be read as "OláZoë". With single spaces the
/// space goes inside the encoded word and survives.
pub fn squeeze_spaces(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for w in s.split(' ').filter(|w| !w.is_empty()) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(w);
    }
    out
}

/// A host name for the `Message-ID`: dot-separated letters, digits and hyphens.
pub fn check_domain(what: &str, d: &str) -> Result<(), String> {
    let ok = !d.is_empty()
        && d.len() <= 253
        && d.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    if ok {
        Ok(())
    } else {
        Err(format!("{what} is not a valid host name"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered(subject: &str) -> Rendered<'_> {
        Rendered {
            subject: Some(subject),
            from: Some("News <news@example.org>"),
            reply_to: None,
            to: "ann@example.com",
            unsubscribe: Some("https://example.org/u/TOKEN"),
            job_id: "campaign:1:sub:2",
        }
    }

    #[test]
    fn a_rendered_header_is_refused_naming_header_and_character_only() {
        assert!(check_rendered(&rendered("Hi Zoë \u{200f}שלום 🙂")).is_ok());
        for (subject, what) in [
            (
                "Evil Eve\r\nBcc: victim@x.example",
                "U+000D (carriage return)",
            ),
            ("Eve\nBcc: victim@x.example", "U+000A (line feed)"),
            ("Eve\0", "U+0000 (NUL)"),
            ("Eve\u{2028}Bcc", "U+2028 (line separator)"),
            ("Eve\u{85}Bcc", "U+0085 (next line)"),
            ("Eve\u{202E}gpj.exe", "U+202E (bidirectional override)"),
            ("Eve\u{2067}x", "U+2067 (bidirectional override)"),
            ("=?utf-8?b?RXZlDQpCY2M6?=", "RFC 2047 encoded word"),
            ("= ? utf-8 ? q ? x ?=", "RFC 2047 encoded word"),
        ] {
            let e = check_rendered(&rendered(subject)).unwrap_err();
            assert!(e.contains("Subject header") && e.contains(what), "{e}");
            assert!(!e.contains("Bcc") && !e.contains("gpj"), "{e}");
        }
        let mut h = rendered("Hi");
        h.from = Some("Eve\r\n <news@example.org>");
        let e = check_rendered(&h).unwrap_err();
        assert!(e.contains("From header") && e.contains("U+000D"), "{e}");
        let long = "x".repeat(MAX_SUBJECT_BYTES + 1);
        assert!(check_rendered(&rendered(&long)).is_err());
    }

    #[test]
    fn subscriber_data_is_refused_as_header_values_are() {
        assert!(check_data("the name", "Zoë O'Brien, \"Acme\" <x> 日本 =? ?=").is_ok());
        let e = check_data("the name", "a\tb").unwrap_err();
        assert!(e.contains("the name contains U+0009 (tab)"), "{e}");
        let e = check_data("attribute \"city\"", "=?UTF-8?Q?x?=").unwrap_err();
        assert!(e.contains("encoded word"), "{e}");
    }
}

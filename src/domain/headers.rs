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

/// Refuse what could end a header line or be decoded into one: control characters (C0, DEL,
/// C1 including NEL), Unicode line and paragraph separators, RFC 2047 encoded words.
pub fn check_text(what: &str, s: &str, max_bytes: usize) -> Result<(), String> {
    if s.len() > max_bytes {
        return Err(format!(
            "the {what} is too long ({} bytes; at most {max_bytes})",
            s.len()
        ));
    }
    if let Some(c) = s
        .chars()
        .find(|&c| c.is_control() || c == '\u{2028}' || c == '\u{2029}')
    {
        return Err(format!(
            "the {what} contains a line break or control character (U+{:04X}); refused \
             to keep headers from being injected",
            c as u32
        ));
    }
    // Lenient decoders accept spaces inside an encoded word (`=? utf-8 ?q?...?=`): look for
    // one with every space and tab removed.
    let packed: String = s.split_whitespace().collect();
    if has_encoded_word(&packed) {
        return Err(format!(
            "the {what} contains an RFC 2047 encoded word (=?charset?q|b?...); refused, \
             since a reader would decode it"
        ));
    }
    Ok(())
}

/// `=?charset?B?` or `=?charset?Q?` anywhere in `s`.
fn has_encoded_word(s: &str) -> bool {
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
    crate::domain::address::normalize_email(s).map_err(|e| format!("{what}: {}", e.message))?;
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

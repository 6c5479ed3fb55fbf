//! Scrubbing known secrets (provider tokens, the SMTP password, the database password) out of
//! text that came back from a provider or a server (HTTP error bodies, SMTP replies, driver and
//! transport messages) before it is cut to length, stored, logged or printed.
//!
//! A server that echoes a request can carry a credential in many forms, so each secret is
//! looked for:
//! - as an *echo*: each character literal or in another case (`TOKEN`, `token`: case-folded),
//!   percent-encoded (`%2D`, `%2d`, twice as `%252D`), `+` for a space, JSON-escaped (`\u002D`,
//!   `\/`), an HTML character reference (`&#45;`, `&amp;`), or as the hex of its UTF-8 bytes
//!   (`2D`, `2d`, `\x2d`), in any mix;
//! - as a *piece*: any run of at least [`PIECE_CHARS`] consecutive characters of a secret,
//!   echoed as above (a secret cut in half, or cut by a server's own excerpt); a secret shorter
//!   than that is looked for whole;
//! - inside *base64*: any run of base64 characters (standard or URL-safe alphabet; `%2B`,
//!   `%2F`, `\/`, `\u002B` allowed; padding optional) that decodes, at any of its four
//!   alignments, to bytes that carry an echo of a secret or of a piece (or, one level down,
//!   another such run). That covers the secret alone, HTTP Basic `user:secret`, SMTP AUTH
//!   PLAIN `\0user\0secret` and AUTH LOGIN, wherever they sit inside a longer blob.
//!
//! - as its base64 *altered*: the characters of the secret's base64 (at each of the three
//!   places it can start in a blob, both alphabets) are searched like the secret itself, so
//!   base64 upper-cased, hex-encoded or cut in half (which no longer decodes) is found too.
//!
//! Each echo, and each whole base64 run that hides one, becomes `[redacted]`. Redact first, cut
//! after: a cut can split a secret so that no whole copy is left to find.
//!
//! Why pieces of 8: a random token's 8 characters (about 48 bits over 62 symbols) do not turn up
//! by chance in a provider's few hundred characters of error text, while a fragment shorter
//! than 8 of a provider token (32 to 40 characters) still leaves the rest of it unknown. A
//! shorter piece would redact ordinary words in the text that happen to be part of a password
//! ("pass", "2024") and, by where `[redacted]` lands, tell a reader which words those are. The
//! price: a password shorter than 16 characters cut in half leaves halves under 8 characters,
//! which are not looked for.

use std::collections::HashMap;
use std::fmt;

/// What a credential is replaced with.
pub const REDACTED: &str = "[redacted]";
/// Secrets shorter than this (in characters) are not searched for: they would match ordinary
/// text. API tokens are far longer; an SMTP password this short is not scrubbed.
const MIN_CHARS: usize = 4;
/// The shortest run of a secret's characters that is redacted on its own (see the module
/// documentation for why 8).
pub const PIECE_CHARS: usize = 8;
/// How many base64 layers are looked through (a base64 blob inside a base64 blob).
const BASE64_DEPTH: u8 = 2;

/// A credential. Its `Debug` never shows it, and `redact` scrubs it from any text that might
/// echo it back (an error body, a server reply, a transport message).
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
    /// `text` with every form of the secret replaced (see the module documentation).
    pub fn redact(&self, text: String) -> String {
        redact(&text, std::slice::from_ref(self))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// `text` with every form of every secret, and of every piece of one, replaced by `[redacted]`.
pub fn redact(text: &str, secrets: &[Secret]) -> String {
    redact_with(text, &needles(secrets, true))
}

/// `text` with every form of every whole secret replaced (pieces are left): for identifiers
/// that must not lose characters they share with a secret by chance.
pub fn redact_whole(text: &str, secrets: &[Secret]) -> String {
    redact_with(text, &needles(secrets, false))
}

fn redact_with(text: &str, needles: &[Needle]) -> String {
    if needles.is_empty() {
        return text.to_string();
    }
    // Replacements start and end on ASCII bytes or whole echoes of valid UTF-8, so the result
    // is valid UTF-8; the lossy conversion is only a guard.
    String::from_utf8_lossy(&scrub(text.as_bytes(), needles)).into_owned()
}

/// `bytes` (an HTTP body, not necessarily UTF-8) with every form of every secret replaced.
pub fn redact_bytes(bytes: &[u8], secrets: &[Secret]) -> Vec<u8> {
    let needles = needles(secrets, true);
    if needles.is_empty() {
        return bytes.to_vec();
    }
    scrub(bytes, &needles)
}

/// One secret as searched: its characters case-folded, where each character occurs, and how
/// many consecutive characters make a match.
struct Needle {
    chars: Vec<char>,
    at: HashMap<char, Vec<usize>>,
    min: usize,
}

fn needles(secrets: &[Secret], pieces: bool) -> Vec<Needle> {
    let mut out = Vec::new();
    for s in secrets.iter().filter(|s| s.0.chars().count() >= MIN_CHARS) {
        out.push(needle(s.0.chars(), pieces));
        for core in base64_cores(s.0.as_bytes()) {
            out.push(needle(core.chars(), pieces));
        }
    }
    out
}

fn needle(chars: impl Iterator<Item = char>, pieces: bool) -> Needle {
    let chars: Vec<char> = chars.map(fold).collect();
    let mut at: HashMap<char, Vec<usize>> = HashMap::new();
    for (i, &c) in chars.iter().enumerate() {
        at.entry(c).or_default().push(i);
    }
    let min = match pieces {
        true => chars.len().min(PIECE_CHARS),
        false => chars.len(),
    };
    Needle { chars, at, min }
}

/// The base64 characters that depend on the secret's bytes alone, at each of the three places
/// it can start inside a longer blob (`user:secret`), in both alphabets: searched as needles of
/// their own, so that base64 that no longer decodes to the secret (upper-cased, hex-encoded, cut
/// in half) is still found. Whole base64 that does decode is found by `scrub_base64`.
fn base64_cores(secret: &[u8]) -> Vec<String> {
    use base64::engine::general_purpose::{STANDARD, URL_SAFE};
    use base64::Engine;
    let mut out = Vec::new();
    for k in 0..3usize {
        let mut data = vec![0u8; k];
        data.extend_from_slice(secret);
        let enc = STANDARD.encode(&data);
        let (start, end) = (if k == 0 { 0 } else { 4 }, 4 * (data.len() / 3));
        let core = enc.get(start..end).unwrap_or("");
        if core.chars().count() >= MIN_CHARS {
            out.push(core.to_string());
            let url = URL_SAFE.encode(&data);
            let url = url.get(start..end).unwrap_or("");
            if url != core {
                out.push(url.to_string());
            }
        }
    }
    out
}

/// A character in one case (its lower case when that is one character).
fn fold(c: char) -> char {
    let mut lower = c.to_lowercase();
    match (lower.next(), lower.next()) {
        (Some(l), None) => l,
        _ => c,
    }
}

/// Whole base64 runs first (so that a run is replaced whole, not only the characters of it that
/// an echo of the secret's base64 matches), then echoes.
fn scrub(text: &[u8], needles: &[Needle]) -> Vec<u8> {
    let base64_gone = scrub_base64(text, needles, BASE64_DEPTH);
    scrub_echoes(&base64_gone, needles)
}

// ---------------------------------------------------------------------------------------------
// Echoes: the secret's characters, each in any of the encodings an echo may use

/// `text` with every echo replaced, longest first at each position.
fn scrub_echoes(text: &[u8], needles: &[Needle]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut units = Vec::new();
    let mut i = 0;
    while i < text.len() {
        match echo_end(text, i, needles, &mut units) {
            Some(end) if end > i => {
                out.extend_from_slice(REDACTED.as_bytes());
                i = end;
            }
            _ => {
                out.push(text[i]);
                i += 1;
            }
        }
    }
    out
}

fn contains_echo(text: &[u8], needles: &[Needle]) -> bool {
    let mut units = Vec::new();
    (0..text.len()).any(|i| echo_end(text, i, needles, &mut units).is_some())
}

/// The end of the longest echo, of any needle or of a long enough piece of one, that starts at
/// `at`.
fn echo_end(
    text: &[u8],
    at: usize,
    needles: &[Needle],
    units: &mut Vec<(char, usize)>,
) -> Option<usize> {
    units.clear();
    decode_units(text, at, units);
    let first: Vec<(char, usize)> = units.iter().map(|&(c, e)| (fold(c), e)).collect();
    let mut best = None;
    for n in needles {
        for &(c, end) in &first {
            let Some(starts) = n.at.get(&c) else { continue };
            for &j in starts.iter().filter(|&&j| n.chars.len() - j >= n.min) {
                best = best.max(piece_end(text, end, &n.chars[j..], n.min, units));
            }
        }
    }
    best
}

/// Given that `chars[0]` was echoed ending at `end`, the furthest end of an echo of
/// `chars[..k]` for some `k >= min`.
fn piece_end(
    text: &[u8],
    end: usize,
    chars: &[char],
    min: usize,
    units: &mut Vec<(char, usize)>,
) -> Option<usize> {
    let mut ends = vec![end];
    let mut next = Vec::new();
    let mut best = (min <= 1).then_some(end);
    for (k, &c) in chars.iter().enumerate().skip(1) {
        next.clear();
        for &p in &ends {
            units.clear();
            decode_units(text, p, units);
            next.extend(units.iter().filter(|u| fold(u.0) == c).map(|u| u.1));
        }
        if next.is_empty() {
            break;
        }
        next.sort_unstable();
        next.dedup();
        std::mem::swap(&mut ends, &mut next);
        if k + 1 >= min {
            best = ends.last().copied();
        }
    }
    best
}

/// Push every character that one encoding starting at `p` stands for, with where it ends.
fn decode_units(text: &[u8], p: usize, out: &mut Vec<(char, usize)>) {
    let Some(rest) = text.get(p..) else { return };
    let Some(&first) = rest.first() else { return };
    if let Some((c, len)) = utf8_char(rest) {
        out.push((c, p + len));
    }
    let mut escaped = |prefix: &[u8]| {
        if let Some((c, len)) = byte_escaped_char(rest, prefix) {
            out.push((c, p + len));
        }
    };
    match first {
        b'%' => {
            escaped(b"%");
            escaped(b"%25");
        }
        b'\\' => {
            escaped(b"\\x");
            escaped(b"\\X");
        }
        b if b.is_ascii_hexdigit() => escaped(b""),
        _ => {}
    }
    match first {
        b'+' => out.push((' ', p + 1)),
        b'\\' => {
            if let Some((c, len)) = json_escape(rest) {
                out.push((c, p + len));
            }
        }
        b'&' => {
            if let Some((c, len)) = html_reference(rest) {
                out.push((c, p + len));
            }
        }
        _ => {}
    }
}

/// The UTF-8 character at the start of `s` and its length.
fn utf8_char(s: &[u8]) -> Option<(char, usize)> {
    let len = utf8_len(*s.first()?)?;
    let c = std::str::from_utf8(s.get(..len)?).ok()?.chars().next()?;
    Some((c, len))
}

/// The length of a UTF-8 sequence from its first byte.
fn utf8_len(b: u8) -> Option<usize> {
    match b {
        0x00..=0x7f => Some(1),
        0xc2..=0xdf => Some(2),
        0xe0..=0xef => Some(3),
        0xf0..=0xf4 => Some(4),
        _ => None,
    }
}

/// A character whose UTF-8 bytes are each written as `prefix` and two hex digits (`%2D`,
/// `%252D`, `\x2d`, bare `2d`), and the length of that text.
fn byte_escaped_char(s: &[u8], prefix: &[u8]) -> Option<(char, usize)> {
    let byte_at = |q: usize| -> Option<u8> { hex_byte(s.get(q..)?.strip_prefix(prefix)?) };
    let step = prefix.len() + 2;
    let mut bytes = [0u8; 4];
    bytes[0] = byte_at(0)?;
    let len = utf8_len(bytes[0])?;
    for (i, b) in bytes.iter_mut().enumerate().take(len).skip(1) {
        *b = byte_at(i * step)?;
    }
    let c = std::str::from_utf8(&bytes[..len]).ok()?.chars().next()?;
    Some((c, len * step))
}

/// `\u002D` (a surrogate pair for an astral character) or a backslash before ASCII punctuation
/// (`\/`), at the start of `s`.
fn json_escape(s: &[u8]) -> Option<(char, usize)> {
    match s.get(1)? {
        b'u' => {
            let hi = hex4(s.get(2..)?)?;
            if let Some(c) = char::from_u32(hi) {
                return Some((c, 6));
            }
            if !(0xD800..0xDC00).contains(&hi) || !s.get(6..)?.starts_with(b"\\u") {
                return None;
            }
            let lo = hex4(s.get(8..)?).filter(|lo| (0xDC00..0xE000).contains(lo))?;
            let c = char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))?;
            Some((c, 12))
        }
        &b if b.is_ascii_punctuation() => Some((char::from(b), 2)),
        _ => None,
    }
}

fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn hex_byte(s: &[u8]) -> Option<u8> {
    Some(hex_digit(*s.first()?)? << 4 | hex_digit(*s.get(1)?)?)
}

fn hex4(s: &[u8]) -> Option<u32> {
    let mut v = 0u32;
    for &b in s.get(..4)? {
        v = v << 4 | u32::from(hex_digit(b)?);
    }
    Some(v)
}

/// `&amp;`, `&#45;`, `&#x2D;`... at the start of `s`: the character and the reference's length.
fn html_reference(s: &[u8]) -> Option<(char, usize)> {
    let semi = s.iter().take(12).position(|&b| b == b';')?;
    let name = std::str::from_utf8(&s[1..semi]).ok()?;
    let c = match name {
        "amp" => '&',
        "lt" => '<',
        "gt" => '>',
        "quot" => '"',
        "apos" => '\'',
        _ => {
            let n = name.strip_prefix('#')?;
            let v = match n.strip_prefix(['x', 'X']) {
                Some(h) => u32::from_str_radix(h, 16).ok()?,
                None => n.parse().ok()?,
            };
            char::from_u32(v)?
        }
    };
    Some((c, semi + 1))
}

// ---------------------------------------------------------------------------------------------
// Base64 runs that hide the secret

/// One base64 character at the start of `s`: its 6-bit value and its length in `s`
/// (`%2B` / `%2F` in a URL-encoded blob, `\/`, `\u002B` / `\u002F` in a JSON string).
fn base64_unit(s: &[u8]) -> Option<(u8, usize)> {
    let b = *s.first()?;
    let v = match b {
        b'A'..=b'Z' => b - b'A',
        b'a'..=b'z' => b - b'a' + 26,
        b'0'..=b'9' => b - b'0' + 52,
        b'+' | b'-' => 62,
        b'/' | b'_' => 63,
        b'%' => {
            return match s.get(1..3)? {
                b"2B" | b"2b" => Some((62, 3)),
                b"2F" | b"2f" => Some((63, 3)),
                _ => None,
            }
        }
        b'\\' => {
            return match (s.get(1), s.get(2..).and_then(hex4)) {
                (Some(b'/'), _) => Some((63, 2)),
                (Some(b'u'), Some(0x2B)) => Some((62, 6)),
                (Some(b'u'), Some(0x2F)) => Some((63, 6)),
                _ => None,
            }
        }
        _ => return None,
    };
    Some((v, 1))
}

/// Padding at the start of `s`: its length.
fn padding(s: &[u8]) -> Option<usize> {
    match s {
        [b'=', ..] => Some(1),
        [b'%', b'3', b'D' | b'd', ..] => Some(3),
        _ => None,
    }
}

/// `text` with every base64 run that hides an echo of a needle replaced (its padding too).
fn scrub_base64(text: &[u8], needles: &[Needle], depth: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    let mut values = Vec::new();
    while i < text.len() {
        values.clear();
        let start = i;
        while let Some((v, len)) = base64_unit(&text[i..]) {
            values.push(v);
            i += len;
        }
        if values.is_empty() {
            out.push(text[i]);
            i += 1;
            continue;
        }
        if hides_secret(&values, needles, depth) {
            let mut pads = 0;
            while pads < 2 {
                let Some(len) = padding(&text[i..]) else {
                    break;
                };
                i += len;
                pads += 1;
            }
            out.extend_from_slice(REDACTED.as_bytes());
        } else {
            out.extend_from_slice(&text[start..i]);
        }
    }
    out
}

/// Whether the run of 6-bit `values` decodes, at one of its four alignments, to bytes that carry
/// an echo of a needle (or, `depth` permitting, another base64 run that does).
fn hides_secret(values: &[u8], needles: &[Needle], depth: u8) -> bool {
    let shortest = needles.iter().map(|n| n.min).min().unwrap_or(0);
    // Even the literal echo of the shortest piece needs `shortest` bytes, that is 4/3 as many
    // characters.
    if depth == 0 || values.len() * 3 / 4 < shortest {
        return false;
    }
    (0..4.min(values.len())).any(|k| {
        let bytes = decode(&values[k..]);
        contains_echo(&bytes, needles) || contains_base64_secret(&bytes, needles, depth - 1)
    })
}

fn contains_base64_secret(bytes: &[u8], needles: &[Needle], depth: u8) -> bool {
    if depth == 0 {
        return false;
    }
    let mut values = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        values.clear();
        while let Some((v, len)) = base64_unit(&bytes[i..]) {
            values.push(v);
            i += len;
        }
        if values.is_empty() {
            i += 1;
        } else if hides_secret(&values, needles, depth) {
            return true;
        }
    }
    false
}

/// Lenient base64 decoding of 6-bit values: a trailing partial group gives what bytes it can.
fn decode(values: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * 3 / 4 + 2);
    for group in values.chunks(4) {
        let mut acc = 0u32;
        for (i, &v) in group.iter().enumerate() {
            acc |= u32::from(v) << (18 - 6 * i);
        }
        let [_, a, b, c] = acc.to_be_bytes();
        out.extend_from_slice(&[a, b, c][..group.len().saturating_sub(1)]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    use base64::Engine;

    const TOKEN: &str = "CANARY-s3cr3t-7fq9Zk";

    fn r(text: &str) -> String {
        Secret::new(TOKEN).redact(text.to_string())
    }

    /// Nothing of the token is left: no 6-character piece of it, as is or decoded.
    fn assert_gone(out: &str) {
        let chars: Vec<char> = TOKEN.chars().collect();
        for w in chars.windows(6) {
            let piece: String = w.iter().collect();
            assert!(!out.contains(&piece), "{piece:?} left in {out:?}");
        }
    }

    #[test]
    fn debug_never_shows_the_secret() {
        assert_eq!(format!("{:?}", Secret::new(TOKEN)), "Secret([redacted])");
    }

    #[test]
    fn literal() {
        assert_eq!(
            r(&format!("bad token {TOKEN} given")),
            "bad token [redacted] given"
        );
        assert_eq!(r(&format!("{TOKEN}{TOKEN}")), "[redacted][redacted]");
        assert_eq!(r("nothing here"), "nothing here");
    }

    #[test]
    fn percent_and_form_encoded_any_case_and_twice() {
        let upper =
            percent_encoding::utf8_percent_encode(TOKEN, percent_encoding::NON_ALPHANUMERIC)
                .to_string();
        assert!(upper.contains("%2D"));
        let lower = upper.replace("%2D", "%2d");
        let twice = upper.replace('%', "%25");
        let mixed = "CANARY%2ds3cr3t-7fq9Zk";
        for enc in [&upper, &lower, &twice, &mixed.to_string()] {
            assert_eq!(
                r(&format!("token={enc}&x=1")),
                "token=[redacted]&x=1",
                "{enc}"
            );
        }
        let spaced = Secret::new("pass word!");
        let form: String = form_urlencoded::byte_serialize(b"pass word!").collect();
        assert_eq!(form, "pass+word%21");
        assert_eq!(spaced.redact(format!("p={form}")), "p=[redacted]");
    }

    #[test]
    fn json_and_html_escapes() {
        let json = serde_json::to_string(&TOKEN.replace('-', "/")).unwrap();
        let s = Secret::new(TOKEN.replace('-', "/"));
        // serde_json does not escape '/', so escape it the PHP way.
        let php = json.replace('/', "\\/");
        assert_eq!(s.redact(php), "\"[redacted]\"");
        assert_eq!(r("x \\u0043ANARY\\u002ds3cr3t-7fq9Zk y"), "x [redacted] y");
        assert_eq!(r("x CANARY&#45;s3cr3t&#x2d;7fq9Zk y"), "x [redacted] y");
        let amp = Secret::new("a&b<c>d\"e");
        assert_eq!(
            amp.redact("v=a&amp;b&lt;c&gt;d&quot;e".into()),
            "v=[redacted]"
        );
        let astral = Secret::new("key-\u{1F511}-1234");
        assert_eq!(
            astral.redact("\"key-\\ud83d\\udd11-1234\"".into()),
            "\"[redacted]\""
        );
    }

    #[test]
    fn base64_of_the_secret_alone_every_alphabet() {
        for e in [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD] {
            let enc = e.encode(TOKEN);
            assert_eq!(
                r(&format!("trace {enc} end")),
                "trace [redacted] end",
                "{enc}"
            );
        }
    }

    #[test]
    fn base64_of_basic_auth_and_smtp_auth() {
        // HTTP Basic (Twilio): base64 of "sid:token".
        let basic = STANDARD.encode(format!("AC0123456789abcdef:{TOKEN}"));
        assert_eq!(r(&format!("auth=Basic {basic}")), "auth=Basic [redacted]");
        // SMTP AUTH PLAIN: base64 of "\0user\0password"; AUTH LOGIN: the password alone.
        let plain = STANDARD.encode(format!("\0mailer\0{TOKEN}"));
        assert_eq!(
            r(&format!("535 5.7.8 AUTH PLAIN {plain}")),
            "535 5.7.8 AUTH PLAIN [redacted]"
        );
        // URL-encoded blob (%2B, %2F, %3D) and a JSON-escaped slash.
        let blob = STANDARD.encode(format!("??>>{TOKEN}??>>"));
        assert!(blob.contains('/') || blob.contains('+'), "{blob}");
        let url: String = form_urlencoded::byte_serialize(blob.as_bytes()).collect();
        assert!(url.contains('%'), "{url}");
        assert_eq!(r(&format!("h={url}&n=1")), "h=[redacted]&n=1");
        assert_eq!(r(&blob.replace('/', "\\/")), "[redacted]");
    }

    #[test]
    fn base64_inside_a_longer_blob_at_every_alignment() {
        for k in 0..6 {
            let data = format!("{}{TOKEN}{}", "p".repeat(k), "s".repeat(k));
            let enc = STANDARD.encode(&data);
            // Preceded by base64 characters that are not part of the blob: the run's own start
            // is not the blob's start.
            for prefix in ["", "a", "ab", "abc"] {
                let out = r(&format!("x {prefix}{enc} y"));
                assert_eq!(out, "x [redacted] y", "k={k} prefix={prefix:?}");
            }
        }
    }

    #[test]
    fn base64_of_an_encoded_or_nested_secret() {
        let form: String =
            form_urlencoded::byte_serialize(format!("{TOKEN}!").as_bytes()).collect();
        let enc = STANDARD.encode(format!("AuthToken={form}&To=%2B1"));
        assert_eq!(r(&format!("body {enc}")), "body [redacted]");
        let nested = STANDARD.encode(format!(
            "{{\"authorization\":\"Basic {}\"}}",
            STANDARD.encode(format!("u:{TOKEN}"))
        ));
        assert_eq!(r(&format!("ctx={nested}")), "ctx=[redacted]");
    }

    #[test]
    fn redaction_comes_before_the_cut() {
        // The old order cut at 200 characters, then looked for the whole token.
        let text = format!("{}{TOKEN} tail", "x".repeat(195));
        let out: String = r(&text).chars().take(200).collect();
        assert_gone(&out);
        assert!(out.ends_with("[reda"), "{out}");
    }

    #[test]
    fn innocent_text_is_left_alone() {
        let text = "twilio: HTTP 500, error 20500: Internal Server Error (see \
                    https://www.twilio.com/docs/errors/20500) id=SM0123456789abcdef QUJDREVGRw==";
        assert_eq!(r(text), text);
        // Too short to look for.
        assert_eq!(Secret::new("pw").redact("pw pw".into()), "pw pw");
        // Not UTF-8: bytes pass through.
        let bytes = [0xff, 0xfe, b'o', b'k'];
        assert_eq!(redact_bytes(&bytes, &[Secret::new(TOKEN)]), bytes);
    }

    #[test]
    fn case_folded() {
        let upper = TOKEN.to_uppercase();
        let lower = TOKEN.to_lowercase();
        assert_eq!(
            r(&format!("a {upper} b {lower} c")),
            "a [redacted] b [redacted] c"
        );
        // Case-folded and percent-encoded together.
        assert_eq!(r("k=canary%2DS3CR3T-7FQ9ZK"), "k=[redacted]");
        // Non-ASCII letters fold too.
        let s = Secret::new("Grüße-Ärger-Öl-99");
        assert_eq!(s.redact("x GRÜSSE".into()), "x GRÜSSE");
        assert_eq!(s.redact("x grüße-ärger-öl-99 y".into()), "x [redacted] y");
    }

    #[test]
    fn hex_upper_lower_and_escaped() {
        let hex: String = TOKEN.bytes().map(|b| format!("{b:02x}")).collect();
        for enc in [
            hex.clone(),
            hex.to_uppercase(),
            TOKEN.bytes().map(|b| format!("\\x{b:02X}")).collect(),
            // The hex of the upper-cased token.
            TOKEN
                .to_uppercase()
                .bytes()
                .map(|b| format!("{b:02x}"))
                .collect(),
        ] {
            assert_eq!(r(&format!("key=<{enc}>")), "key=<[redacted]>", "{enc}");
        }
        // A non-ASCII secret's UTF-8 bytes in hex.
        let s = Secret::new("clé-secrète-42");
        let hex: String = "clé-secrète-42"
            .bytes()
            .map(|b| format!("{b:02X}"))
            .collect();
        assert_eq!(s.redact(format!("[{hex}]")), "[[redacted]]");
        // Base64 of the hex, and the hex inside a percent-encoded echo.
        let b64 = STANDARD.encode(
            TOKEN
                .bytes()
                .map(|b| format!("{b:02x}"))
                .collect::<String>(),
        );
        assert_eq!(r(&format!("t {b64} e")), "t [redacted] e");
    }

    #[test]
    fn altered_base64_upper_cased_hex_encoded_or_halved() {
        // Twilio's header, as a gateway might echo it back altered.
        let header = format!(
            "Basic {}",
            STANDARD.encode(format!("AC0123456789abcdef:{TOKEN}"))
        );
        let hex: String = header.bytes().map(|b| format!("{b:02x}")).collect();
        // The first half holds only the SID: cut where a part of the token is left.
        let (first, second) = (&header[..header.len() * 3 / 4], &header[header.len() / 2..]);
        for (what, echo) in [
            ("upper", header.to_uppercase()),
            ("lower", header.to_lowercase()),
            ("hex", hex.clone()),
            ("HEX", hex.to_uppercase()),
            ("three quarters", first.to_string()),
            ("second half", second.to_string()),
            ("second half upper", second.to_uppercase()),
        ] {
            let out = r(&format!("auth=<{echo}>"));
            assert!(out.contains(REDACTED), "{what}: {out}");
            assert_gone(&out);
            // What is left of the base64 no longer holds 6 bytes of the token in any case.
            let b64 = STANDARD
                .encode(format!("AC0123456789abcdef:{TOKEN}"))
                .to_lowercase();
            let chars: Vec<char> = b64.chars().collect();
            let skip = "ac0123456789abcdef:".len() * 4 / 3 + 4;
            for w in chars[skip..chars.len() - 4].windows(PIECE_CHARS) {
                let piece: String = w.iter().collect();
                assert!(
                    !out.to_lowercase().contains(&piece),
                    "{what}: {piece} in {out}"
                );
            }
        }
    }

    #[test]
    fn halves_and_pieces_of_eight() {
        let (a, b) = TOKEN.split_at(TOKEN.len() / 2);
        assert_eq!(
            r(&format!("first {a} then {b}.")),
            "first [redacted] then [redacted]."
        );
        // Any 8 consecutive characters, in any of the forms.
        let chars: Vec<char> = TOKEN.chars().collect();
        for w in chars.windows(PIECE_CHARS) {
            let piece: String = w.iter().collect();
            assert_eq!(r(&format!("<{piece}>")), "<[redacted]>", "{piece}");
            let hex: String = piece.bytes().map(|b| format!("{b:02X}")).collect();
            assert_eq!(r(&format!("<{hex}>")), "<[redacted]>", "{hex}");
            let low = piece.to_lowercase();
            assert_eq!(r(&format!("<{low}>")), "<[redacted]>", "{low}");
            let b64 = STANDARD.encode(&piece);
            assert_eq!(r(&format!("<{b64}>")), "<[redacted]>", "{b64}");
        }
        // 7 characters are not a piece: ordinary text that shares them stays.
        assert_eq!(r("CANARY- s3cr3t- 7fq9Zk"), "CANARY- s3cr3t- 7fq9Zk");
    }

    #[test]
    fn short_secrets_only_whole() {
        // A 6-character password: only all of it, never "hunt" inside "hunting".
        let s = Secret::new("hunt3r");
        assert_eq!(
            s.redact("hunting hunt3r HUNT3R".into()),
            "hunting [redacted] [redacted]"
        );
        let hex: String = "hunt3r".bytes().map(|b| format!("{b:02x}")).collect();
        assert_eq!(s.redact(hex), "[redacted]");
        // Whole-only matching leaves pieces of a long one alone.
        let id = "xx-s3cr3t-7f-yy";
        assert_eq!(redact_whole(id, &[Secret::new(TOKEN)]), id);
        assert_eq!(
            redact_whole(&TOKEN.to_lowercase(), &[Secret::new(TOKEN)]),
            REDACTED
        );
    }

    #[test]
    fn a_megabyte_of_hostile_text_is_scrubbed_in_reasonable_time() {
        // Hex digits, base64 characters and percent signs: every position decodes several ways.
        let mut text = String::new();
        while text.len() < 1024 * 1024 {
            text.push_str("4341%4e%2541CaNaRy-S3cr3aGVsbG8+/=");
        }
        let started = std::time::Instant::now();
        let out = r(&text);
        assert!(!out.is_empty());
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn several_secrets_and_random_text() {
        let s = [Secret::new(TOKEN), Secret::new("second-secret-99")];
        let text = format!(
            "a {TOKEN} b {} c {}",
            URL_SAFE_NO_PAD.encode("second-secret-99"),
            "second%2Dsecret-99"
        );
        let out = redact(&text, &s);
        assert_eq!(out, "a [redacted] b [redacted] c [redacted]");
        // A deterministic pseudo-random text with the token's base64 planted at random offsets.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..200 {
            let mut noise = String::new();
            for _ in 0..((x >> 7) % 40) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                noise.push(char::from(b"ABCxyz019+/=-_ :%\"\\"[(x % 19) as usize]));
            }
            let blob = STANDARD.encode(format!("{noise}{TOKEN}{noise}"));
            let out = redact(&format!("{noise}{blob}{noise}"), &s);
            assert!(out.contains(REDACTED), "{out}");
            let decoded_views: Vec<String> = (0..4)
                .map(|k| {
                    let v: Vec<u8> = out
                        .bytes()
                        .skip(k)
                        .filter_map(|b| base64_unit(&[b]).map(|u| u.0))
                        .collect();
                    String::from_utf8_lossy(&decode(&v)).into_owned()
                })
                .collect();
            assert_gone(&out);
            for d in decoded_views {
                assert!(!d.contains(TOKEN), "{out}");
            }
        }
    }
}

//! Scrubbing credentials out of text that came back from a provider or a server (HTTP error
//! bodies, SMTP replies, transport messages) before it is cut to length, stored in the ledger,
//! logged or printed.
//!
//! A server that echoes a request can carry a credential in many forms, so each secret is
//! looked for:
//! - as an *echo*: each character literal, percent-encoded (`%2D`, `%2d`, twice as `%252D`),
//!   `+` for a space, JSON-escaped (`\u002D`, `\/`) or an HTML character reference (`&#45;`,
//!   `&amp;`), in any mix;
//! - inside *base64*: any run of base64 characters (standard or URL-safe alphabet; `%2B`,
//!   `%2F`, `\/`, `\u002B` allowed; padding optional) that decodes, at any of its four
//!   alignments, to bytes that carry an echo of the secret (or, one level down, another such
//!   run). That covers the secret alone, HTTP Basic `user:secret`, SMTP AUTH PLAIN
//!   `\0user\0secret` and AUTH LOGIN, wherever they sit inside a longer blob.
//!
//! Each echo, and each whole base64 run that hides one, becomes `[redacted]`. Redact first, cut
//! after: a cut can split a secret so that no whole copy is left to find.

use super::CallResult;
use std::fmt;

/// What a credential is replaced with.
pub(crate) const REDACTED: &str = "[redacted]";
/// Secrets shorter than this (in characters) are not searched for: they would match ordinary
/// text. API tokens are far longer; an SMTP password this short is not scrubbed.
const MIN_CHARS: usize = 4;
/// How many base64 layers are looked through (a base64 blob inside a base64 blob).
const BASE64_DEPTH: u8 = 2;

/// A credential. Its `Debug` never shows it, and `redact` scrubs it from any text that might
/// echo it back (an error body, a server reply, a transport message).
#[derive(Clone)]
pub(crate) struct Secret(String);

impl Secret {
    pub(crate) fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
    /// `text` with every form of the secret replaced (see the module documentation).
    pub(crate) fn redact(&self, text: String) -> String {
        redact(&text, std::slice::from_ref(self))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// `text` with every form of every secret replaced by `[redacted]`.
pub(crate) fn redact(text: &str, secrets: &[Secret]) -> String {
    let needles = needles(secrets);
    if needles.is_empty() {
        return text.to_string();
    }
    // Replacements start and end on ASCII bytes or whole echoes of valid UTF-8, so the result
    // is valid UTF-8; the lossy conversion is only a guard.
    String::from_utf8_lossy(&scrub(text.as_bytes(), &needles)).into_owned()
}

/// `bytes` (an HTTP body, not necessarily UTF-8) with every form of every secret replaced.
pub(crate) fn redact_bytes(bytes: &[u8], secrets: &[Secret]) -> Vec<u8> {
    let needles = needles(secrets);
    if needles.is_empty() {
        return bytes.to_vec();
    }
    scrub(bytes, &needles)
}

/// Every text a call result carries, redacted.
pub(crate) fn redact_result(r: CallResult, secrets: &[Secret]) -> CallResult {
    let r_ = |s: String| redact(&s, secrets);
    match r {
        CallResult::AlreadyAccepted { detail } => {
            CallResult::AlreadyAccepted { detail: r_(detail) }
        }
        CallResult::Permanent { error, suppress } => CallResult::Permanent {
            error: r_(error),
            suppress: suppress.map(r_),
        },
        CallResult::NotSent { error, retry_after } => CallResult::NotSent {
            error: r_(error),
            retry_after,
        },
        CallResult::Ambiguous { error } => CallResult::Ambiguous { error: r_(error) },
        CallResult::Accepted {
            provider_id,
            replay,
        } => CallResult::Accepted {
            provider_id: r_(provider_id),
            replay,
        },
    }
}

fn needles(secrets: &[Secret]) -> Vec<Vec<char>> {
    secrets
        .iter()
        .map(|s| s.0.chars().collect::<Vec<char>>())
        .filter(|c| c.len() >= MIN_CHARS)
        .collect()
}

fn scrub(text: &[u8], needles: &[Vec<char>]) -> Vec<u8> {
    let echoes_gone = scrub_echoes(text, needles);
    scrub_base64(&echoes_gone, needles, BASE64_DEPTH)
}

// ---------------------------------------------------------------------------------------------
// Echoes: the secret's characters, each in any of the encodings an echo may use

/// `text` with every echo replaced, longest first at each position.
fn scrub_echoes(text: &[u8], needles: &[Vec<char>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        match needles.iter().filter_map(|n| echo_end(text, i, n)).max() {
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

fn contains_echo(text: &[u8], needles: &[Vec<char>]) -> bool {
    (0..text.len()).any(|i| needles.iter().any(|n| echo_end(text, i, n).is_some()))
}

/// The end of the longest echo of `needle` that starts at `at`, if there is one.
fn echo_end(text: &[u8], at: usize, needle: &[char]) -> Option<usize> {
    let mut ends = vec![at];
    let mut next = Vec::new();
    for &c in needle {
        next.clear();
        for &p in &ends {
            char_ends(text, p, c, &mut next);
        }
        if next.is_empty() {
            return None;
        }
        next.sort_unstable();
        next.dedup();
        std::mem::swap(&mut ends, &mut next);
    }
    ends.last().copied()
}

/// Push every position where one encoding of `c` starting at `p` ends.
fn char_ends(text: &[u8], p: usize, c: char, out: &mut Vec<usize>) {
    let Some(rest) = text.get(p..) else { return };
    let Some(&first) = rest.first() else { return };
    let mut buf = [0u8; 4];
    let utf8 = c.encode_utf8(&mut buf).as_bytes();
    if rest.starts_with(utf8) {
        out.push(p + utf8.len());
    }
    match first {
        b'%' => {
            // Each UTF-8 byte as %HH, or double-encoded as %25HH.
            for prefix in [&b"%"[..], b"%25"] {
                let mut q = 0;
                let all = utf8.iter().all(|&b| {
                    let hit = rest[q..].starts_with(prefix)
                        && hex_byte(&rest[q + prefix.len()..]) == Some(b);
                    q += prefix.len() + 2;
                    hit
                });
                if all {
                    out.push(p + q);
                }
            }
        }
        b'+' if c == ' ' => out.push(p + 1),
        b'\\' => {
            if rest.get(1) == Some(&b'u') {
                if let Some(hi) = hex4(&rest[2..]) {
                    if hi == u32::from(c) {
                        out.push(p + 6);
                    } else if (0xD800..0xDC00).contains(&hi) && rest[6..].starts_with(b"\\u") {
                        let lo = hex4(&rest[8..]).filter(|lo| (0xDC00..0xE000).contains(lo));
                        if lo.is_some_and(|lo| {
                            0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00) == u32::from(c)
                        }) {
                            out.push(p + 12);
                        }
                    }
                }
            } else if rest
                .get(1)
                .is_some_and(|&b| u32::from(b) == u32::from(c) && b.is_ascii_punctuation())
            {
                out.push(p + 2);
            }
        }
        b'&' => {
            if let Some((decoded, len)) = html_reference(rest) {
                if decoded == c {
                    out.push(p + len);
                }
            }
        }
        _ => {}
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
fn scrub_base64(text: &[u8], needles: &[Vec<char>], depth: u8) -> Vec<u8> {
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
fn hides_secret(values: &[u8], needles: &[Vec<char>], depth: u8) -> bool {
    let shortest = needles.iter().map(Vec::len).min().unwrap_or(0);
    // Even the literal echo needs `shortest` bytes, that is 4/3 as many characters.
    if depth == 0 || values.len() * 3 / 4 < shortest {
        return false;
    }
    (0..4.min(values.len())).any(|k| {
        let bytes = decode(&values[k..]);
        contains_echo(&bytes, needles) || contains_base64_secret(&bytes, needles, depth - 1)
    })
}

fn contains_base64_secret(bytes: &[u8], needles: &[Vec<char>], depth: u8) -> bool {
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
    fn results_are_redacted_everywhere() {
        let s = [Secret::new(TOKEN)];
        let got = redact_result(
            CallResult::Permanent {
                error: format!("e {TOKEN}"),
                suppress: Some(format!("hard bounce: 550 {TOKEN}")),
            },
            &s,
        );
        assert_eq!(
            got,
            CallResult::Permanent {
                error: "e [redacted]".into(),
                suppress: Some("hard bounce: 550 [redacted]".into()),
            }
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

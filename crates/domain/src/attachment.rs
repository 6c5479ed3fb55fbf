//! Attachments of API messages: decoded from base64 once, checked against the limits, carried
//! to the provider as bytes shared by every retry, and never printed (`Debug` shows the name,
//! type and size only).
//!
//! The limits are the strictest of the providers sendonce speaks, so that a message accepted
//! here is not refused by any of them later: Postmark takes at most 10 MB per message, counted
//! with its files in base64 (Resend 40 MB, SES 40 MB; Gmail and most receivers cap incoming
//! mail at 25 MB), and Resend a content id under 128 characters. [`MAX_COUNT`] keeps one request
//! from carrying thousands of tiny parts.

use crate::error::{Error, Result};
use crate::headers::check_text;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use std::sync::Arc;

/// Most attachments on one message.
pub const MAX_COUNT: usize = 20;
/// Most bytes of one message as Postmark counts them: its files in base64 (4 characters for
/// every 3 bytes) plus its text and HTML.
pub const MAX_MESSAGE_BYTES: usize = 10 * 1000 * 1000;
/// Longest content id (Resend's bound).
pub const MAX_CONTENT_ID_BYTES: usize = 127;
/// Longest file name, in bytes.
pub const MAX_NAME_BYTES: usize = 255;

/// One attachment (or inline image, when it has a `content_id`).
#[derive(Clone, PartialEq, Eq)]
pub struct Attachment {
    pub filename: String,
    /// `type/subtype`, e.g. `application/pdf`.
    pub content_type: String,
    /// Set for an inline part the HTML refers to as `cid:…`.
    pub content_id: Option<String>,
    pub data: Arc<[u8]>,
}

impl std::fmt::Debug for Attachment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Attachment({:?}, {}, {} bytes)",
            self.filename,
            self.content_type,
            self.data.len()
        )
    }
}

impl Attachment {
    /// The content as base64 (standard alphabet, padded), as the HTTP providers take it.
    pub fn base64(&self) -> String {
        STANDARD.encode(&self.data)
    }
}

/// An attachment as a client sends it, decoded and checked; the error names the field.
pub fn decode(
    filename: &str,
    content_type: Option<&str>,
    content_b64: &str,
    content_id: Option<&str>,
) -> Result<Attachment> {
    check_text("attachment file name", filename, MAX_NAME_BYTES).map_err(Error::invalid)?;
    if filename.trim().is_empty() || filename.contains(['/', '\\', '"']) {
        return Err(Error::invalid(
            "filename: give a file name without '/', '\\' or '\"' (e.g. receipt.pdf)",
        ));
    }
    let content_type = match content_type {
        Some(t) => checked_type(t)?,
        None => guess_type(filename).to_string(),
    };
    let content_id = content_id
        .map(|c| {
            let ok = !c.is_empty()
                && c.len() <= MAX_CONTENT_ID_BYTES
                && c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-@$+".contains(&b));
            match ok {
                true => Ok(c.to_string()),
                false => Err(Error::invalid(
                    "content_id: 1 to 127 letters, digits or . _ - @ $ + (the HTML refers to \
                     it as cid:…)",
                )),
            }
        })
        .transpose()?;
    let compact: String = content_b64
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    let data = STANDARD.decode(compact.as_bytes()).map_err(|e| {
        Error::invalid(format!(
            "content of {filename:?} is not base64 (standard alphabet, padded): {e}"
        ))
    })?;
    if data.is_empty() {
        return Err(Error::invalid(format!(
            "the attachment {filename:?} is empty"
        )));
    }
    Ok(Attachment {
        filename: filename.to_string(),
        content_type,
        content_id,
        data: data.into(),
    })
}

/// The limits of one message's attachments; `bodies`: the bytes of its text and HTML.
pub fn check_all(all: &[Attachment], bodies: usize) -> Result<()> {
    if all.len() > MAX_COUNT {
        return Err(Error::invalid(format!(
            "attachments: at most {MAX_COUNT} per message, not {}",
            all.len()
        )));
    }
    let encoded: usize = all.iter().map(|a| a.data.len().div_ceil(3) * 4).sum();
    if !all.is_empty() && encoded + bodies > MAX_MESSAGE_BYTES {
        return Err(Error::invalid(format!(
            "attachments: the message is {} bytes with its files in base64, over the limit of \
             {MAX_MESSAGE_BYTES} (Postmark's, the strictest provider's)",
            encoded + bodies
        )));
    }
    Ok(())
}

/// `type/subtype` with an optional parameter, in the characters RFC 2045 allows.
fn checked_type(t: &str) -> Result<String> {
    let t = t.trim();
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&^_.+-".contains(&b))
    };
    let essence = t.split(';').next().unwrap_or("");
    let ok = t.len() <= 255
        && essence
            .split_once('/')
            .is_some_and(|(a, b)| token(a) && token(b))
        && check_text("content type", t, 255).is_ok();
    if ok {
        Ok(t.to_string())
    } else {
        Err(Error::invalid(format!(
            "content_type {t:?} is not a MIME type (type/subtype, e.g. application/pdf)"
        )))
    }
}

/// The MIME type of a file name's extension, for the common attachment kinds;
/// `application/octet-stream` otherwise.
pub fn guess_type(filename: &str) -> &'static str {
    let ext = filename
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "pdf" => "application/pdf",
        "txt" => "text/plain",
        "csv" => "text/csv",
        "html" | "htm" => "text/html",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "svg" => "image/svg+xml",
        "ics" => "text/calendar",
        "zip" => "application/zip",
        "json" => "application/json",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_and_guesses_the_type() {
        let a = decode("r.pdf", None, "JVBE\nRi0x", None).unwrap();
        assert_eq!(&*a.data, b"%PDF-1");
        assert_eq!(a.content_type, "application/pdf");
        assert_eq!(
            format!("{a:?}"),
            "Attachment(\"r.pdf\", application/pdf, 6 bytes)"
        );
        assert_eq!(a.base64(), "JVBERi0x");
    }

    #[test]
    fn refuses_what_would_break_a_header_or_is_not_base64() {
        for (name, ty, content, cid) in [
            ("a\r\nBcc: x@y.z", None, "YQ==", None),
            ("../etc/passwd", None, "YQ==", None),
            ("a.txt", Some("text"), "YQ==", None),
            ("a.txt", Some("text/plain\r\nX: y"), "YQ==", None),
            ("a.txt", None, "not base64!", None),
            ("a.txt", None, "", None),
            ("a.png", None, "YQ==", Some("<x>")),
        ] {
            assert!(
                decode(name, ty, content, cid).is_err(),
                "{name:?} {ty:?} {cid:?}"
            );
        }
        assert!(decode("a.png", Some("image/png"), "YQ==", Some("logo@x")).is_ok());
    }

    #[test]
    fn the_limits_hold() {
        let one = decode("a.bin", None, "YQ==", None).unwrap();
        assert!(check_all(&vec![one.clone(); MAX_COUNT], 0).is_ok());
        assert!(check_all(&vec![one; MAX_COUNT + 1], 0).is_err());
        // 7,499,997 bytes are 9,999,996 in base64: with 4 bytes of text it fits, with 5 not.
        let big = Attachment {
            data: vec![0u8; 7_499_997].into(),
            ..decode("b.bin", None, "YQ==", None).unwrap()
        };
        assert!(check_all(std::slice::from_ref(&big), 4).is_ok());
        let e = check_all(&[big], 5).unwrap_err();
        assert!(e.message.contains("10000001"), "{}", e.message);
        assert!(decode("a.png", None, "YQ==", Some(&"x".repeat(128))).is_err());
    }
}

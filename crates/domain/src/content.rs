//! What a campaign's content must satisfy before any recipient is called: checked when the
//! campaign is created and again when it is approved (content is frozen after approval, so a
//! problem found at send time would fail every recipient with no way to fix it).

use crate::address::Channel;
use crate::error::{Error, Result};
use crate::headers;

/// Largest email body (the template, before variables), in bytes.
pub const MAX_EMAIL_BODY_BYTES: usize = 1024 * 1024;
/// Largest SMS body (the template, before variables), in characters: Twilio's limit for one
/// message (10 or 11 segments, depending on the encoding).
pub const MAX_SMS_BODY_CHARS: usize = 1600;

/// Longest SMS opt-out footer, in characters.
pub const MAX_SMS_FOOTER_CHARS: usize = 160;

/// The content of one campaign.
#[derive(Debug, Clone, Copy, Default)]
pub struct Content<'a> {
    pub channel: Channel,
    pub sender: Option<&'a str>,
    pub subject: Option<&'a str>,
    /// The text template; empty when an email's text part is generated from `html`.
    pub body: &'a str,
    /// The HTML template (email only).
    pub html: Option<&'a str>,
    /// `Reply-To` (email only): `addr` or `Name <addr>`.
    pub reply_to: Option<&'a str>,
    /// Appended to every SMS on a line of its own.
    pub sms_footer: Option<&'a str>,
}

/// Everything a send needs from the content, checked as the sending side would check it: the
/// sender, the reply-to address and the subject go through the same header checks as the
/// email builder.
pub fn check(c: &Content<'_>) -> Result<()> {
    let html = c.html.filter(|h| !h.trim().is_empty());
    if c.body.trim().is_empty() && html.is_none() {
        return Err(Error::invalid(match c.channel {
            Channel::Email => "the message body is empty (give --body-file, --html-file or both)",
            Channel::Sms => "the message body is empty",
        }));
    }
    match c.channel {
        Channel::Email => check_email(c),
        Channel::Sms => check_sms(c),
    }
}

/// A footer as an account stores it: one line of at most [`MAX_SMS_FOOTER_CHARS`] characters,
/// no control characters; blank means none.
pub fn check_sms_footer(footer: &str) -> Result<Option<String>> {
    let f = footer.trim();
    if f.is_empty() {
        return Ok(None);
    }
    if f.chars().any(char::is_control) {
        return Err(Error::invalid(
            "the SMS footer contains a control character (a line break, a tab...): it is one line",
        ));
    }
    let n = f.chars().count();
    if n > MAX_SMS_FOOTER_CHARS {
        return Err(Error::invalid(format!(
            "the SMS footer has {n} characters; at most {MAX_SMS_FOOTER_CHARS}"
        )));
    }
    Ok(Some(f.to_string()))
}

/// An SMS body as it goes out before variables: the body, then the footer on its own line.
pub fn sms_with_footer(body: &str, footer: Option<&str>) -> String {
    match footer.filter(|f| !f.trim().is_empty()) {
        Some(f) if body.ends_with('\n') || body.is_empty() => format!("{body}{f}"),
        Some(f) => format!("{body}\n{f}"),
        None => body.to_string(),
    }
}

fn check_email(c: &Content<'_>) -> Result<()> {
    let sender = c.sender.filter(|s| !s.trim().is_empty()).ok_or_else(|| {
        Error::invalid(
            "an email campaign needs --from (the sender: `news@example.org` or \
             `Example News <news@example.org>`)",
        )
    })?;
    headers::parse_mailbox("--from", sender).map_err(|e| Error::invalid(format!("--from: {e}")))?;
    let subject = c
        .subject
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| Error::invalid("an email campaign needs --subject"))?;
    headers::check_text("subject", subject, headers::MAX_SUBJECT_BYTES)
        .map_err(|e| Error::invalid(format!("--subject: {e}")))?;
    if let Some(r) = c.reply_to {
        headers::parse_mailbox("--reply-to", r)
            .map_err(|e| Error::invalid(format!("--reply-to: {e}")))?;
    }
    for (which, body) in [("text body", Some(c.body)), ("HTML body", c.html)] {
        let len = body.map_or(0, str::len);
        if len > MAX_EMAIL_BODY_BYTES {
            return Err(Error::invalid(format!(
                "the email {which} is {len} bytes; at most {MAX_EMAIL_BODY_BYTES} (1 MiB)"
            )));
        }
    }
    if c.sms_footer.is_some() {
        return Err(Error::invalid("an email campaign has no SMS footer"));
    }
    Ok(())
}

fn check_sms(c: &Content<'_>) -> Result<()> {
    if c.subject.is_some() {
        return Err(Error::invalid("an sms campaign has no subject"));
    }
    if c.html.is_some() {
        return Err(Error::invalid(
            "an sms campaign has no HTML body (--html-file is for email)",
        ));
    }
    if c.reply_to.is_some() {
        return Err(Error::invalid("an sms campaign has no reply-to address"));
    }
    if let Some(f) = c.sender {
        if f.chars().any(|ch| ch.is_control()) {
            return Err(Error::invalid(
                "--from contains a control character (CR, LF, NUL...)",
            ));
        }
        crate::address::normalize_for(Channel::Sms, f).map_err(|e| e.context("--from"))?;
    }
    let body = sms_with_footer(c.body, c.sms_footer);
    let chars = body.chars().count();
    if chars > MAX_SMS_BODY_CHARS {
        let seg = crate::sms::segments(&body);
        let with = if c.sms_footer.is_some() {
            " with the account's footer"
        } else {
            ""
        };
        return Err(Error::invalid(format!(
            "the sms body{with} has {chars} characters ({seg}); at most {MAX_SMS_BODY_CHARS} \
             characters, the most one SMS can carry"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn email(sender: Option<&str>, subject: &str) -> Result<()> {
        check(&Content {
            channel: Channel::Email,
            sender,
            subject: Some(subject),
            body: "hi",
            ..Default::default()
        })
    }

    #[test]
    fn email_needs_a_clean_sender_and_subject() {
        assert!(email(Some("News <news@example.org>"), "Hello {{ name }}").is_ok());
        assert!(email(None, "s").unwrap_err().message.contains("--from"));
        for hostile in [
            "a\r\nBcc: x@y.z",
            "=?utf-8?q?x=0ABcc:e?=",
            "=? utf-8 ?q?x=0ABcc:e?=",
            "x\u{2028}y",
            &"s".repeat(1000),
        ] {
            assert!(
                email(Some("a@example.org"), hostile).is_err(),
                "{hostile:?}"
            );
        }
        assert!(email(Some("a@example.org\r\nBcc: b@x.org"), "s").is_err());
    }

    #[test]
    fn sms_body_is_bounded() {
        let long = "x".repeat(MAX_SMS_BODY_CHARS + 1);
        let c = Content {
            channel: Channel::Sms,
            body: &long,
            ..Default::default()
        };
        assert!(check(&c).unwrap_err().message.contains("1600"));
        let body = "x".repeat(MAX_SMS_BODY_CHARS - 5);
        let mut c = Content {
            channel: Channel::Sms,
            body: &body,
            ..Default::default()
        };
        assert!(check(&c).is_ok());
        c.sms_footer = Some("Reply STOP to opt out");
        let e = check(&c).unwrap_err().message;
        assert!(e.contains("with the account's footer"), "{e}");
    }

    #[test]
    fn html_and_reply_to_are_email_only_and_checked() {
        let mut c = Content {
            channel: Channel::Email,
            sender: Some("News <news@example.org>"),
            subject: Some("s"),
            body: "",
            html: Some("<p>Hi</p>"),
            reply_to: Some("Desk <desk@example.org>"),
            sms_footer: None,
        };
        assert!(check(&c).is_ok());
        c.html = None;
        assert!(check(&c).unwrap_err().message.contains("--html-file"));
        c.html = Some("<p>Hi</p>");
        c.reply_to = Some("desk@example.org\r\nBcc: x@y.z");
        assert!(check(&c).unwrap_err().message.contains("--reply-to"));
        let sms = Content {
            channel: Channel::Sms,
            body: "hi",
            html: Some("<p>hi</p>"),
            ..Default::default()
        };
        assert!(check(&sms).is_err());
    }

    #[test]
    fn footers_are_one_short_line() {
        assert_eq!(check_sms_footer("  ").unwrap(), None);
        assert_eq!(
            check_sms_footer(" Reply STOP to opt out ")
                .unwrap()
                .as_deref(),
            Some("Reply STOP to opt out")
        );
        assert!(check_sms_footer("a\nb").is_err());
        assert!(check_sms_footer(&"x".repeat(161)).is_err());
        assert_eq!(sms_with_footer("Hi", Some("STOP")), "Hi\nSTOP");
        assert_eq!(sms_with_footer("Hi\n", Some("STOP")), "Hi\nSTOP");
        assert_eq!(sms_with_footer("Hi", None), "Hi");
    }
}

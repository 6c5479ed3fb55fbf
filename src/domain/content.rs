//! What a campaign's content must satisfy before any recipient is called: checked when the
//! campaign is created and again when it is approved (content is frozen after approval, so a
//! problem found at send time would fail every recipient with no way to fix it).

use crate::domain::address::Channel;
use crate::domain::headers;
use crate::error::{Error, Result};

/// Largest email body (the template, before variables), in bytes.
pub const MAX_EMAIL_BODY_BYTES: usize = 1024 * 1024;
/// Largest SMS body (the template, before variables), in characters: Twilio's limit for one
/// message (10 or 11 segments, depending on the encoding).
pub const MAX_SMS_BODY_CHARS: usize = 1600;

/// The content of one campaign.
pub struct Content<'a> {
    pub channel: Channel,
    pub sender: Option<&'a str>,
    pub subject: Option<&'a str>,
    pub body: &'a str,
}

/// Everything a send needs from the content, checked as the sending side would check it: the
/// sender and the subject go through the same header checks as the email builder.
pub fn check(c: &Content<'_>) -> Result<()> {
    if c.body.trim().is_empty() {
        return Err(Error::invalid("the message body is empty"));
    }
    match c.channel {
        Channel::Email => check_email(c),
        Channel::Sms => check_sms(c),
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
    if c.body.len() > MAX_EMAIL_BODY_BYTES {
        return Err(Error::invalid(format!(
            "the email body is {} bytes; at most {MAX_EMAIL_BODY_BYTES} (1 MiB)",
            c.body.len()
        )));
    }
    Ok(())
}

fn check_sms(c: &Content<'_>) -> Result<()> {
    if c.subject.is_some() {
        return Err(Error::invalid("an sms campaign has no subject"));
    }
    if let Some(f) = c.sender {
        if f.chars().any(|ch| ch.is_control()) {
            return Err(Error::invalid(
                "--from contains a control character (CR, LF, NUL...)",
            ));
        }
        crate::domain::address::normalize_for(Channel::Sms, f).map_err(|e| e.context("--from"))?;
    }
    let chars = c.body.chars().count();
    if chars > MAX_SMS_BODY_CHARS {
        let seg = crate::domain::sms::segments(c.body);
        return Err(Error::invalid(format!(
            "the sms body has {chars} characters ({seg}); at most {MAX_SMS_BODY_CHARS} \
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
            sender: None,
            subject: None,
            body: &long,
        };
        assert!(check(&c).unwrap_err().message.contains("1600"));
    }
}

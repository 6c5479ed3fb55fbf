//! Double opt-in confirmation messages: the default subject and body, the variables a
//! confirmation's templates read (`confirm_url`, `list.name`, the subscriber's `name` and
//! `email`), and the check a list's confirmation content passes when it is set. No I/O.

use crate::address::Channel;
use crate::content::{self, Content};
use crate::error::{Error, Result};
use crate::template::{Compiled, Sources};

/// Subject of a confirmation message when the list sets none.
pub const DEFAULT_SUBJECT: &str = "Confirm your subscription to {{ list.name }}";

/// Text of a confirmation message when the list sets none.
pub const DEFAULT_BODY: &str = "Hello,\n\
\n\
Please confirm that you want to receive {{ list.name }} at this address by opening this \
link:\n\
\n\
{{ confirm_url }}\n\
\n\
If you did not ask for this, ignore this message: you will not be subscribed and will not \
hear from us again about it.\n";

/// The variables a confirmation's templates read, as the send row captures them (JSON):
/// `confirm_url`, `list.name`, and the subscriber's `email` and `name` (empty when unknown).
pub fn vars(confirm_url: &str, list_name: &str, email: &str, name: Option<&str>) -> String {
    serde_json::json!({
        "confirm_url": confirm_url,
        "list": { "name": list_name },
        "email": email,
        "name": name.unwrap_or(""),
    })
    .to_string()
}

/// Check a list's confirmation content as it would be sent: the sender and subject pass the
/// email checks, the templates parse and render with the confirmation variables only, and the
/// body prints `{{ confirm_url }}` (a confirmation without its link confirms nothing).
/// `None` subject or body: the default.
pub fn check(from: &str, subject: Option<&str>, body: Option<&str>) -> Result<()> {
    let subject = subject.unwrap_or(DEFAULT_SUBJECT);
    let body = body.unwrap_or(DEFAULT_BODY);
    let src = Sources {
        subject: Some(subject),
        text: Some(body),
        html: None,
    };
    let compiled = Compiled::campaign(&src, &Default::default(), None)
        .map_err(|e| e.context("the confirmation message"))?;
    if !compiled.reads("confirm_url") {
        return Err(Error::invalid(
            "the confirmation body does not print {{ confirm_url }}, the link that confirms",
        ));
    }
    let sample = vars(
        "https://example.org/c/TOKEN",
        "News",
        "ana@example.com",
        Some("Ana"),
    );
    let r = compiled.render_json(&sample, None).map_err(|e| {
        e.context("the confirmation message (it may read confirm_url, list.name, email and name)")
    })?;
    content::check(&Content {
        channel: Channel::Email,
        sender: Some(from),
        subject: r.subject.as_deref(),
        body: &r.text,
        html: None,
        reply_to: None,
        sms_footer: None,
    })
    .map_err(confirm_words)
}

/// A content error in the words of `list create`'s flags.
fn confirm_words(mut e: Error) -> Error {
    for (flag, ours) in [
        ("--from", "--confirm-from"),
        ("--subject", "--confirm-subject"),
        ("--body-file, --html-file or both", "--confirm-body-file"),
    ] {
        e.message = e.message.replace(flag, ours);
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_pass_and_render_the_link() {
        check("news@example.org", None, None).unwrap();
        let c = Compiled::campaign(
            &Sources {
                subject: Some(DEFAULT_SUBJECT),
                text: Some(DEFAULT_BODY),
                html: None,
            },
            &Default::default(),
            None,
        )
        .unwrap();
        let r = c
            .render_json(&vars("https://x.org/c/T", "Weekly", "a@b.org", None), None)
            .unwrap();
        assert_eq!(
            r.subject.as_deref(),
            Some("Confirm your subscription to Weekly")
        );
        assert!(r.text.contains("https://x.org/c/T"), "{}", r.text);
    }

    #[test]
    fn refuses_a_body_without_the_link_and_unknown_variables() {
        let e = check("news@example.org", None, Some("Welcome to {{ list.name }}")).unwrap_err();
        assert!(e.message.contains("confirm_url"), "{}", e.message);
        let e = check(
            "news@example.org",
            None,
            Some("{{ confirm_url }} {{ city }}"),
        )
        .unwrap_err();
        assert!(e.message.contains("confirmation message"), "{}", e.message);
        let e = check("not an address", None, None).unwrap_err();
        assert!(e.message.contains("--confirm-from"), "{}", e.message);
    }
}

//! The bounce webhooks of issue 45, parsed into the neutral [`Event`] of `domain::webhook`:
//! Mailgun, SendGrid's Event Webhook, Brevo and Amazon SES notifications (the `Message` of an
//! SNS notification). Pure functions of a verified request's body; the signature checks are
//! `domain::bounce_auth`'s, called by `app::webhooks` before these.
//!
//! What each event does (an address is always normalised; "report" means a delivery report for
//! our job, which settles a row in doubt):
//! - Mailgun (`event-data`): `delivered` reports sent; `failed` with `severity: permanent`,
//!   `complained` and `unsubscribed` suppress the recipient; a temporary failure changes
//!   nothing (Mailgun retries it). Our job is the user variable `sendonce_job`
//!   (`v:sendonce_job` / `X-Mailgun-Variables` when sending). The event id is the signature's
//!   token (one per request Mailgun makes): a token seen before with another body is refused.
//! - SendGrid (an array): `delivered` reports sent; `bounce` of type `bounce`, `dropped`,
//!   `spamreport`, `unsubscribe` and `group_unsubscribe` suppress; `bounce` of type `blocked`
//!   (a temporary refusal) and the rest change nothing. Our job is the custom argument
//!   `sendonce_job`; each event's id is its `sg_event_id`, the provider's id `sg_message_id`.
//! - Brevo: `delivered` reports sent; `hard_bounce`, `spam`, `unsubscribed`, `blocked` and
//!   `invalid_email` suppress; `soft_bounce`, `deferred` and the rest change nothing. Our job
//!   is the `X-Mailin-custom` header's `sendonce_job:<job>`. Brevo sends no event id: the
//!   event, its message id, the address and its time identify one.
//! - SES (`notificationType` or `eventType`): a `Permanent` bounce suppresses each bounced
//!   recipient, a complaint each complained recipient; a `Transient` or `Undetermined` bounce
//!   changes nothing; a `Delivery` reports sent, `mail.messageId` the provider's id. Our job is
//!   the `X-Sendonce-Job` header of `mail.headers` or the `sendonce_job` message tag
//!   (`domain::webhook::job_tag`, as Resend's). One event per recipient, `<SNS MessageId>:<n>`.

use sendonce_domain::address::{normalize_for, Channel};
use sendonce_domain::error::{Error, Result};
use sendonce_domain::webhook::{body_sha256, job_from_tag, provider_id, Effect, Event};
use serde_json::Value;

/// The name of our job in Mailgun user variables, SendGrid custom arguments and SES tags.
pub const JOB_VARIABLE: &str = "sendonce_job";
/// The prefix of our job in Brevo's `X-Mailin-custom` header.
pub const BREVO_JOB_PREFIX: &str = "sendonce_job:";
/// The header that carries our job id in every email sendonce sends (one name, `domain::dsn`'s).
pub use sendonce_domain::dsn::JOB_HEADER;
/// Most events one request may carry (a SendGrid batch, an SES bounce's recipients).
pub const MAX_EVENTS: usize = 1000;

fn text<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

fn need<'a>(v: &'a Value, key: &str, what: &str) -> Result<&'a str> {
    text(v, key).ok_or_else(|| Error::invalid(format!("{what}: the field {key} is missing")))
}

fn json(body: &[u8], what: &str) -> Result<Value> {
    serde_json::from_slice(body)
        .map_err(|e| Error::invalid(format!("{what}: the body is not JSON: {e}")))
}

fn email(raw: &str, what: &str) -> Result<String> {
    normalize_for(Channel::Email, raw).map_err(|e| e.context(what))
}

fn suppress(address: &str, reason: String) -> Effect {
    Effect::Suppress {
        channel: Channel::Email,
        address: address.to_string(),
        reason,
    }
}

/// A delivery report for `job` (sent), with the provider's id of the message, checked; no job:
/// nothing to settle.
fn delivered(job: &Option<String>, id: Option<&str>, what: &str) -> Result<Effect> {
    let Some(j) = job else {
        return Ok(Effect::Nothing);
    };
    Ok(Effect::Delivery {
        job_id: j.clone(),
        sent: true,
        provider_id: provider_id(id).map_err(|e| Error::invalid(format!("{what}: {e}")))?,
    })
}

/// The `signature` object of a Mailgun webhook body: (timestamp, token, signature).
pub fn mailgun_signature(body: &[u8]) -> Result<(String, String, String)> {
    const W: &str = "mailgun webhook";
    let v = json(body, W)?;
    let sig = v.get("signature").unwrap_or(&Value::Null);
    let ts = match sig.get("timestamp") {
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(s)) => s.clone(),
        _ => String::new(),
    };
    let token = text(sig, "token").unwrap_or("").to_string();
    let signature = text(sig, "signature").unwrap_or("").to_string();
    if ts.is_empty() || token.is_empty() || signature.is_empty() {
        return Err(Error::unauthorized(
            "the Mailgun signature (timestamp, token, signature) is missing",
        ));
    }
    Ok((ts, token, signature))
}

/// A verified Mailgun webhook (`token`: its signature's token, the event id).
pub fn mailgun(body: &[u8], token: &str) -> Result<Event> {
    const W: &str = "mailgun webhook";
    let v = json(body, W)?;
    let data = v
        .get("event-data")
        .filter(|d| d.is_object())
        .ok_or_else(|| Error::invalid(format!("{W}: event-data is missing")))?;
    let event = need(data, "event", W)?;
    let job = data
        .get("user-variables")
        .and_then(|u| text(u, JOB_VARIABLE))
        .map(str::to_string);
    let address = text(data, "recipient").map(|r| email(r, W)).transpose()?;
    let severity = text(data, "severity").unwrap_or("");
    let message_id = data
        .get("message")
        .and_then(|m| m.get("headers"))
        .and_then(|h| text(h, "message-id"));
    let effect = match (event, severity, &address) {
        ("delivered", _, _) => delivered(&job, message_id, "mailgun webhook: message-id")?,
        ("failed", "permanent", Some(a)) => suppress(a, "mailgun: permanent failure".into()),
        ("complained" | "unsubscribed", _, Some(a)) => suppress(a, format!("mailgun: {event}")),
        ("failed" | "complained" | "unsubscribed", _, None) if severity != "temporary" => {
            return Err(Error::invalid(format!("{W}: {event} needs a recipient")))
        }
        _ => Effect::Nothing,
    };
    let kind = match severity {
        "" => event.to_string(),
        s => format!("{event}:{s}"),
    };
    Ok(Event {
        event_id: token.to_string(),
        kind,
        job_id: job,
        address,
        effect,
    })
}

/// A verified SendGrid Event Webhook batch: each event with the hash of its own JSON.
pub fn sendgrid(body: &[u8]) -> Result<Vec<(Event, String)>> {
    const W: &str = "sendgrid webhook";
    let v = json(body, W)?;
    let list = v
        .as_array()
        .ok_or_else(|| Error::invalid(format!("{W}: the body is not a JSON array")))?;
    if list.is_empty() || list.len() > MAX_EVENTS {
        return Err(Error::invalid(format!(
            "{W}: {} events (1 to {MAX_EVENTS})",
            list.len()
        )));
    }
    list.iter()
        .map(|e| Ok((sendgrid_event(e)?, body_sha256(e.to_string().as_bytes()))))
        .collect()
}

fn sendgrid_event(e: &Value) -> Result<Event> {
    const W: &str = "sendgrid webhook";
    let id = need(e, "sg_event_id", W)?;
    let event = need(e, "event", W)?;
    let job = text(e, JOB_VARIABLE).map(str::to_string);
    let address = text(e, "email").map(|r| email(r, W)).transpose()?;
    let typ = text(e, "type").unwrap_or("bounce");
    let kind = match event {
        "bounce" => format!("bounce:{typ}"),
        _ => event.to_string(),
    };
    let suppresses = match event {
        "bounce" => typ != "blocked",
        "dropped" | "spamreport" | "unsubscribe" | "group_unsubscribe" => true,
        _ => false,
    };
    let effect = match (event, suppresses, &address) {
        ("delivered", _, _) => {
            delivered(&job, text(e, "sg_message_id"), "sendgrid: sg_message_id")?
        }
        (_, true, Some(a)) => {
            let why = text(e, "reason")
                .map(|r| format!(" ({r})"))
                .unwrap_or_default();
            suppress(a, format!("sendgrid: {kind}{}", truncate(&why, 200)))
        }
        (_, true, None) => return Err(Error::invalid(format!("{W}: {event} needs an email"))),
        _ => Effect::Nothing,
    };
    Ok(Event {
        event_id: id.to_string(),
        kind,
        job_id: job,
        address,
        effect,
    })
}

/// At most `n` bytes of `s`, cut on a character boundary.
fn truncate(s: &str, n: usize) -> &str {
    let mut end = s.len().min(n);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A Brevo transactional webhook (authenticated by the URL's credential).
pub fn brevo(body: &[u8]) -> Result<Event> {
    const W: &str = "brevo webhook";
    let v = json(body, W)?;
    if !v.is_object() {
        return Err(Error::invalid(format!(
            "{W}: the body is not a JSON object"
        )));
    }
    let event = need(&v, "event", W)?;
    let address = email(need(&v, "email", W)?, W)?;
    let message = text(&v, "message-id").unwrap_or("-");
    let at = match v.get("ts_event").or_else(|| v.get("ts")) {
        Some(Value::Number(n)) => n.to_string(),
        _ => text(&v, "date").unwrap_or("").to_string(),
    };
    let job = text(&v, "X-Mailin-custom")
        .and_then(|c| c.trim().strip_prefix(BREVO_JOB_PREFIX))
        .filter(|j| !j.is_empty())
        .map(str::to_string);
    let effect = match event {
        "delivered" => delivered(&job, text(&v, "message-id"), "brevo webhook: message-id")?,
        "hard_bounce" | "spam" | "unsubscribed" | "blocked" | "invalid_email" => {
            suppress(&address, format!("brevo: {event}"))
        }
        _ => Effect::Nothing,
    };
    Ok(Event {
        event_id: format!("{event}:{message}:{address}:{at}"),
        kind: event.to_string(),
        job_id: job,
        address: Some(address),
        effect,
    })
}

/// Our job in an SES notification's `mail`: the `X-Sendonce-Job` header, or the
/// `sendonce_job` tag.
fn ses_job(mail: &Value) -> Option<String> {
    let header = mail
        .get("headers")
        .and_then(Value::as_array)
        .and_then(|hs| {
            hs.iter()
                .find(|h| text(h, "name").is_some_and(|n| n.eq_ignore_ascii_case(JOB_HEADER)))
        })
        .and_then(|h| text(h, "value"))
        .map(str::to_string);
    header.or_else(|| {
        let tag = mail
            .get("tags")?
            .get(JOB_VARIABLE)?
            .as_array()?
            .first()?
            .as_str()?;
        job_from_tag(tag)
    })
}

/// The addresses of `list` (objects with `emailAddress`, or strings).
fn ses_recipients(list: Option<&Value>, what: &str) -> Result<Vec<String>> {
    let Some(items) = list.and_then(Value::as_array) else {
        return Ok(Vec::new());
    };
    if items.len() > MAX_EVENTS {
        return Err(Error::invalid(format!(
            "{what}: more than {MAX_EVENTS} recipients"
        )));
    }
    items
        .iter()
        .filter_map(|r| r.as_str().or_else(|| text(r, "emailAddress")))
        .map(|a| email(a, what))
        .collect()
}

/// The SES notification in an SNS notification's `Message` (`sns_id`: the SNS MessageId):
/// one event per recipient it names, each with the hash of the whole `Message` and its number.
pub fn ses(message: &str, sns_id: &str) -> Result<Vec<(Event, String)>> {
    const W: &str = "ses notification";
    let v = json(message.as_bytes(), W)?;
    let kind = text(&v, "notificationType")
        .or_else(|| text(&v, "eventType"))
        .ok_or_else(|| Error::invalid(format!("{W}: notificationType is missing")))?;
    let mail = v.get("mail").unwrap_or(&Value::Null);
    let job = ses_job(mail);
    let ses_id = text(mail, "messageId");
    let per: Vec<(String, Option<String>, Effect)> = match kind {
        "Bounce" => {
            let b = v.get("bounce").unwrap_or(&Value::Null);
            let typ = text(b, "bounceType").unwrap_or("Undetermined");
            let to = ses_recipients(b.get("bouncedRecipients"), W)?;
            to.into_iter()
                .map(|a| {
                    let effect = match typ {
                        "Permanent" => suppress(&a, "ses: permanent bounce".into()),
                        _ => Effect::Nothing,
                    };
                    (format!("Bounce:{typ}"), Some(a), effect)
                })
                .collect()
        }
        "Complaint" => {
            let c = v.get("complaint").unwrap_or(&Value::Null);
            let to = ses_recipients(c.get("complainedRecipients"), W)?;
            to.into_iter()
                .map(|a| {
                    let effect = suppress(&a, "ses: complaint".into());
                    ("Complaint".to_string(), Some(a), effect)
                })
                .collect()
        }
        "Delivery" => {
            let d = v.get("delivery").unwrap_or(&Value::Null);
            let effect = delivered(&job, ses_id, "ses notification: mail.messageId")?;
            let to = ses_recipients(d.get("recipients"), W)?;
            vec![("Delivery".to_string(), to.into_iter().next(), effect)]
        }
        other => vec![(other.to_string(), None, Effect::Nothing)],
    };
    let hash = body_sha256(message.as_bytes());
    Ok(per
        .into_iter()
        .enumerate()
        .map(|(i, (kind, address, effect))| {
            let event = Event {
                event_id: format!("{sns_id}:{i}"),
                kind,
                job_id: job.clone(),
                address,
                effect,
            };
            (event, hash.clone())
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mailgun_events() {
        let body = |event: &str, severity: &str| {
            format!(
                r#"{{"signature":{{"timestamp":"1","token":"t","signature":"s"}},
                "event-data":{{"event":"{event}","severity":"{severity}","recipient":"A@x.com",
                "user-variables":{{"sendonce_job":"campaign:1:sub:2@a"}},
                "message":{{"headers":{{"message-id":"m1@mg"}}}}}}}}"#
            )
        };
        let e = mailgun(body("failed", "permanent").as_bytes(), "tok").unwrap();
        assert_eq!(e.event_id, "tok");
        assert!(matches!(&e.effect, Effect::Suppress { address, .. } if address == "a@x.com"));
        let e = mailgun(body("failed", "temporary").as_bytes(), "tok").unwrap();
        assert_eq!(e.effect, Effect::Nothing);
        let e = mailgun(body("delivered", "").as_bytes(), "tok").unwrap();
        assert!(matches!(e.effect, Effect::Delivery { sent: true, .. }));
        for ev in ["complained", "unsubscribed"] {
            let e = mailgun(body(ev, "").as_bytes(), "tok").unwrap();
            assert!(matches!(e.effect, Effect::Suppress { .. }), "{ev}");
        }
        assert_eq!(
            mailgun_signature(body("x", "").as_bytes()).unwrap(),
            ("1".into(), "t".into(), "s".into())
        );
        assert!(mailgun_signature(b"{}").is_err());
    }

    #[test]
    fn sendgrid_events() {
        let b = br#"[{"sg_event_id":"a","event":"bounce","type":"bounce","email":"a@x.com"},
            {"sg_event_id":"b","event":"bounce","type":"blocked","email":"b@x.com"},
            {"sg_event_id":"c","event":"delivered","email":"c@x.com","sendonce_job":"j","sg_message_id":"m"},
            {"sg_event_id":"d","event":"spamreport","email":"d@x.com"},
            {"sg_event_id":"e","event":"open","email":"e@x.com"}]"#;
        let v = sendgrid(b).unwrap();
        let effects: Vec<&Effect> = v.iter().map(|(e, _)| &e.effect).collect();
        assert!(matches!(effects[0], Effect::Suppress { .. }));
        assert_eq!(effects[1], &Effect::Nothing);
        assert!(matches!(effects[2], Effect::Delivery { sent: true, .. }));
        assert!(matches!(effects[3], Effect::Suppress { .. }));
        assert_eq!(effects[4], &Effect::Nothing);
        assert_ne!(v[0].1, v[1].1, "each event has its own hash");
        assert!(sendgrid(b"[]").is_err());
        assert!(sendgrid(br#"[{"event":"bounce"}]"#).is_err());
    }

    #[test]
    fn brevo_and_ses_events() {
        let b = br#"{"event":"hard_bounce","email":"A@x.com","message-id":"<m@b>","ts_event":5}"#;
        let e = brevo(b).unwrap();
        assert_eq!(e.event_id, "hard_bounce:<m@b>:a@x.com:5");
        assert!(matches!(e.effect, Effect::Suppress { .. }));
        let b = br#"{"event":"delivered","email":"a@x.com","message-id":"<m@b>","X-Mailin-custom":"sendonce_job:j1"}"#;
        assert!(matches!(brevo(b).unwrap().effect, Effect::Delivery { .. }));
        let b = br#"{"event":"soft_bounce","email":"a@x.com"}"#;
        assert_eq!(brevo(b).unwrap().effect, Effect::Nothing);
        let m = r#"{"notificationType":"Bounce","bounce":{"bounceType":"Permanent",
            "bouncedRecipients":[{"emailAddress":"a@x.com"},{"emailAddress":"b@x.com"}]},
            "mail":{"messageId":"ses-1","headers":[{"name":"X-Sendonce-Job","value":"j9"}]}}"#;
        let v = ses(m, "sns-1").unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[1].0.event_id, "sns-1:1");
        assert_eq!(v[0].0.job_id.as_deref(), Some("j9"));
        let m = r#"{"notificationType":"Bounce","bounce":{"bounceType":"Transient",
            "bouncedRecipients":[{"emailAddress":"a@x.com"}]},"mail":{}}"#;
        assert_eq!(ses(m, "s").unwrap()[0].0.effect, Effect::Nothing);
        let tag = sendonce_domain::webhook::job_tag("j7");
        let m = format!(
            r#"{{"eventType":"Delivery","delivery":{{"recipients":["a@x.com"]}},
            "mail":{{"messageId":"ses-2","tags":{{"sendonce_job":["{tag}"]}}}}}}"#
        );
        let v = ses(&m, "s").unwrap();
        assert!(matches!(&v[0].0.effect, Effect::Delivery { job_id, .. } if job_id == "j7"));
    }
}

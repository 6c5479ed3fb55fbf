//! Inbound webhooks of the providers, parsed into the neutral [`Event`] of
//! `domain::webhook` (what the event changes here). Pure functions of the verified request's
//! body; the signature checks happen before (`domain::webhook`, `twilio::validate_twilio_signature`).
//!
//! - Twilio (form-encoded): an inbound message (`Body`, no `MessageStatus`) with an opt-out
//!   keyword suppresses `From`, an opt-in keyword removes it; a status callback
//!   (`MessageStatus`, our job in the `job_id` query parameter of the `StatusCallback` URL)
//!   reports delivered / sent (settles sent) or failed / undelivered (settles failed).
//! - Postmark (JSON, `RecordType`): permanent bounces, spam complaints and
//!   `SubscriptionChange` with `SuppressSending` suppress (or, false, unsuppress); `Delivery`
//!   reports our job (`Metadata.sendonce_job`).
//! - Resend (JSON, Svix): `email.bounced` / `email.complained` suppress; `email.delivered` /
//!   `email.sent` report sent, `email.failed` failed; our job is the `sendonce_job` tag.
//! - Standard (our schema, for the generic `webhook:` provider): `{"type":
//!   "message.bounced"|"message.complained"|"message.delivered"|"message.failed", "data":
//!   {"job_id", "to", "channel"}}`.

use crate::domain::address::{normalize_for, Channel};
use crate::domain::webhook::{job_from_tag, sms_keyword, Effect, Event, Keyword};
use crate::error::{Error, Result};
use serde_json::Value;

/// The Resend tag that names our job (its value: `domain::webhook::job_tag(job_id)`).
pub const RESEND_JOB_TAG: &str = "sendonce_job";

/// Postmark bounce types that mean the address must not be mailed again.
pub const POSTMARK_PERMANENT: &[&str] = &[
    "HardBounce",
    "BadEmailAddress",
    "ManuallyDeactivated",
    "SpamNotification",
    "SpamComplaint",
    "Unsubscribe",
    "Blocked",
    "DMARCPolicy",
];

fn text<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

fn need<'a>(v: &'a Value, key: &str, what: &str) -> Result<&'a str> {
    text(v, key).ok_or_else(|| Error::invalid(format!("{what}: the field {key} is missing")))
}

/// A form field by name (the first one).
fn field<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty())
}

/// A Twilio webhook: its form parameters and the `job_id` query parameter of our URL.
pub fn twilio(params: &[(String, String)], job_id: Option<&str>) -> Result<Event> {
    let sid = field(params, "MessageSid")
        .or_else(|| field(params, "SmsSid"))
        .ok_or_else(|| Error::invalid("twilio webhook: MessageSid is missing"))?;
    if let Some(status) = field(params, "MessageStatus") {
        let status = status.to_ascii_lowercase();
        let job = job_id.filter(|j| !j.is_empty()).map(str::to_string);
        let effect = match (&job, status.as_str()) {
            (Some(j), "delivered" | "sent") => Effect::Delivery {
                job_id: j.clone(),
                sent: true,
            },
            (Some(j), "failed" | "undelivered") => Effect::Delivery {
                job_id: j.clone(),
                sent: false,
            },
            _ => Effect::Nothing,
        };
        let address = field(params, "To").and_then(|t| normalize_for(Channel::Sms, t).ok());
        return Ok(Event {
            event_id: format!("{sid}:{status}"),
            kind: format!("status:{status}"),
            job_id: job,
            address,
            effect,
        });
    }
    let body = field(params, "Body")
        .ok_or_else(|| Error::invalid("twilio webhook: neither Body nor MessageStatus"))?;
    let from =
        field(params, "From").ok_or_else(|| Error::invalid("twilio webhook: From is missing"))?;
    let from = normalize_for(Channel::Sms, from).map_err(|e| e.context("twilio webhook: From"))?;
    let effect = match sms_keyword(body) {
        Some(Keyword::Stop) => Effect::Suppress {
            channel: Channel::Sms,
            address: from.clone(),
            reason: format!("replied {}", body.trim().to_ascii_uppercase()),
        },
        Some(Keyword::Start) => Effect::Unsuppress {
            channel: Channel::Sms,
            address: from.clone(),
        },
        None => Effect::Nothing,
    };
    Ok(Event {
        event_id: sid.to_string(),
        kind: "inbound".into(),
        job_id: None,
        address: Some(from),
        effect,
    })
}

fn parse_json(body: &[u8], what: &str) -> Result<Value> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| Error::invalid(format!("{what}: the body is not JSON: {e}")))?;
    if !v.is_object() {
        return Err(Error::invalid(format!(
            "{what}: the body is not a JSON object"
        )));
    }
    Ok(v)
}

fn email(v: &Value, key: &str, what: &str) -> Result<String> {
    normalize_for(Channel::Email, need(v, key, what)?).map_err(|e| e.context(what))
}

/// A Postmark webhook (JSON, `RecordType`).
pub fn postmark(body: &[u8]) -> Result<Event> {
    const W: &str = "postmark webhook";
    let v = parse_json(body, W)?;
    let record = need(&v, "RecordType", W)?.to_string();
    let message = text(&v, "MessageID").unwrap_or("-");
    let job = v
        .get("Metadata")
        .and_then(|m| m.get(super::postmark::JOB_METADATA))
        .and_then(Value::as_str)
        .map(str::to_string);
    let (kind, at, address, effect) = postmark_record(&v, &record, &job)?;
    Ok(Event {
        // Postmark sends no event id: the message, the record type (with its bounce type or
        // subscription choice) and its time identify one event across its retries.
        event_id: format!("{kind}:{message}:{at}"),
        kind,
        job_id: job,
        address,
        effect,
    })
}

/// What one Postmark record is: (kind, its time, the address, the effect).
fn postmark_record<'v>(
    v: &'v Value,
    record: &str,
    job: &Option<String>,
) -> Result<(String, &'v str, Option<String>, Effect)> {
    const W: &str = "postmark webhook";
    Ok(match record {
        "Bounce" => {
            let typ = need(v, "Type", W)?;
            let addr = email(v, "Email", W)?;
            let effect = match POSTMARK_PERMANENT.contains(&typ) {
                true => Effect::Suppress {
                    channel: Channel::Email,
                    address: addr.clone(),
                    reason: format!("postmark bounce: {typ}"),
                },
                false => Effect::Nothing,
            };
            let at = text(v, "BouncedAt").unwrap_or("");
            (format!("Bounce:{typ}"), at, Some(addr), effect)
        }
        "SpamComplaint" => {
            let addr = email(v, "Email", W)?;
            let effect = Effect::Suppress {
                channel: Channel::Email,
                address: addr.clone(),
                reason: "postmark spam complaint".into(),
            };
            let at = text(v, "BouncedAt").unwrap_or("");
            (record.to_string(), at, Some(addr), effect)
        }
        "SubscriptionChange" => {
            let addr = email(v, "Recipient", W)?;
            let suppress = v
                .get("SuppressSending")
                .and_then(Value::as_bool)
                .ok_or_else(|| Error::invalid(format!("{W}: SuppressSending is missing")))?;
            let effect = match suppress {
                true => Effect::Suppress {
                    channel: Channel::Email,
                    address: addr.clone(),
                    reason: format!(
                        "postmark subscription change: {}",
                        text(v, "SuppressionReason").unwrap_or("suppressed")
                    ),
                },
                false => Effect::Unsuppress {
                    channel: Channel::Email,
                    address: addr.clone(),
                },
            };
            let at = text(v, "ChangedAt").unwrap_or("");
            let kind = format!("SubscriptionChange:{suppress}");
            (kind, at, Some(addr), effect)
        }
        "Delivery" => {
            let addr = email(v, "Recipient", W)?;
            let effect = match job {
                Some(j) => Effect::Delivery {
                    job_id: j.clone(),
                    sent: true,
                },
                None => Effect::Nothing,
            };
            let at = text(v, "DeliveredAt").unwrap_or("");
            (record.to_string(), at, Some(addr), effect)
        }
        _ => (record.to_string(), "", None, Effect::Nothing),
    })
}

/// Our job from Resend's `tags` (an object `{name: value}` or a list of `{name, value}`).
fn resend_job(data: &Value) -> Option<String> {
    let tags = data.get("tags")?;
    let value = match tags {
        Value::Object(m) => m.get(RESEND_JOB_TAG).and_then(Value::as_str),
        Value::Array(a) => a
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some(RESEND_JOB_TAG))
            .and_then(|t| t.get("value"))
            .and_then(Value::as_str),
        _ => None,
    }?;
    job_from_tag(value)
}

/// The first recipient of `data.to` (a list or one string).
fn first_to(data: &Value) -> Option<&str> {
    match data.get("to")? {
        Value::String(s) => Some(s.as_str()),
        Value::Array(a) => a.first().and_then(Value::as_str),
        _ => None,
    }
}

/// A Resend webhook (JSON, Svix-signed; `event_id` is the `svix-id` header).
pub fn resend(body: &[u8], event_id: &str) -> Result<Event> {
    const W: &str = "resend webhook";
    let v = parse_json(body, W)?;
    let kind = need(&v, "type", W)?.to_string();
    let data = v.get("data").cloned().unwrap_or(Value::Null);
    let job = resend_job(&data);
    let address = first_to(&data).and_then(|t| normalize_for(Channel::Email, t).ok());
    let effect = event_effect(&kind, "email.", &job, &address, Channel::Email, "resend");
    Ok(Event {
        event_id: event_id.to_string(),
        kind,
        job_id: job,
        address,
        effect,
    })
}

/// The effect of `{prefix}bounced|complained|delivered|sent|failed`.
fn event_effect(
    kind: &str,
    prefix: &str,
    job: &Option<String>,
    address: &Option<String>,
    channel: Channel,
    who: &str,
) -> Effect {
    let what = kind.strip_prefix(prefix).unwrap_or("");
    match (what, job, address) {
        ("bounced" | "complained", _, Some(a)) => Effect::Suppress {
            channel,
            address: a.clone(),
            reason: format!("{who}: {kind}"),
        },
        ("delivered" | "sent", Some(j), _) => Effect::Delivery {
            job_id: j.clone(),
            sent: true,
        },
        ("failed", Some(j), _) => Effect::Delivery {
            job_id: j.clone(),
            sent: false,
        },
        _ => Effect::Nothing,
    }
}

/// A Standard Webhooks event of our schema (`event_id` is the `webhook-id` header).
pub fn standard(body: &[u8], event_id: &str) -> Result<Event> {
    const W: &str = "standard webhook";
    let v = parse_json(body, W)?;
    let kind = need(&v, "type", W)?.to_string();
    if !matches!(
        kind.as_str(),
        "message.bounced" | "message.complained" | "message.delivered" | "message.failed"
    ) {
        return Err(Error::invalid(format!(
            "{W}: unknown type {kind:?} (message.bounced, message.complained, \
             message.delivered, message.failed)"
        )));
    }
    let data = v
        .get("data")
        .filter(|d| d.is_object())
        .ok_or_else(|| Error::invalid(format!("{W}: data is missing")))?;
    let job = text(data, "job_id").map(str::to_string);
    let to = text(data, "to");
    let channel = match text(data, "channel") {
        Some(c) => c.parse().map_err(|e: Error| e.context(W))?,
        None if to.is_some_and(|t| t.starts_with('+')) => Channel::Sms,
        None => Channel::Email,
    };
    let address = to
        .map(|t| normalize_for(channel, t))
        .transpose()
        .map_err(|e| e.context(W))?;
    if matches!(kind.as_str(), "message.bounced" | "message.complained") && address.is_none() {
        return Err(Error::invalid(format!("{W}: {kind} needs data.to")));
    }
    let effect = event_effect(&kind, "message.", &job, &address, channel, "webhook");
    Ok(Event {
        event_id: event_id.to_string(),
        kind,
        job_id: job,
        address,
        effect,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn twilio_inbound_and_status() {
        let e = twilio(
            &form(&[
                ("MessageSid", "SM1"),
                ("From", "+14155550100"),
                ("Body", " Stop "),
            ]),
            None,
        )
        .unwrap();
        assert!(matches!(
            e.effect,
            Effect::Suppress {
                channel: Channel::Sms,
                ..
            }
        ));
        let e = twilio(
            &form(&[
                ("MessageSid", "SM2"),
                ("From", "+14155550100"),
                ("Body", "start"),
            ]),
            None,
        )
        .unwrap();
        assert!(matches!(e.effect, Effect::Unsuppress { .. }));
        let e = twilio(
            &form(&[("MessageSid", "SM3"), ("MessageStatus", "delivered")]),
            Some("campaign:1:sub:2@x"),
        )
        .unwrap();
        assert_eq!(e.event_id, "SM3:delivered");
        assert!(matches!(e.effect, Effect::Delivery { sent: true, .. }));
        let e = twilio(
            &form(&[("MessageSid", "SM3"), ("MessageStatus", "queued")]),
            Some("j"),
        )
        .unwrap();
        assert_eq!(e.effect, Effect::Nothing);
        assert!(twilio(&form(&[("MessageSid", "SM4")]), None).is_err());
    }

    #[test]
    fn postmark_records() {
        let b = br#"{"RecordType":"Bounce","Type":"HardBounce","MessageID":"m1","Email":"A@X.com","BouncedAt":"t"}"#;
        let e = postmark(b).unwrap();
        assert_eq!(e.event_id, "Bounce:HardBounce:m1:t");
        assert!(matches!(&e.effect, Effect::Suppress { address, .. } if address == "a@x.com"));
        let b =
            br#"{"RecordType":"Bounce","Type":"SoftBounce","MessageID":"m1","Email":"a@x.com"}"#;
        assert_eq!(postmark(b).unwrap().effect, Effect::Nothing);
        let b = br#"{"RecordType":"Delivery","MessageID":"m2","Recipient":"a@x.com","Metadata":{"sendonce_job":"j1"}}"#;
        assert!(matches!(
            postmark(b).unwrap().effect,
            Effect::Delivery { sent: true, .. }
        ));
        let b = br#"{"RecordType":"SubscriptionChange","MessageID":"m3","Recipient":"a@x.com","SuppressSending":false}"#;
        assert!(matches!(
            postmark(b).unwrap().effect,
            Effect::Unsuppress { .. }
        ));
    }

    #[test]
    fn resend_and_standard() {
        let tag = crate::domain::webhook::job_tag("campaign:1:sub:1@a");
        let b = format!(
            r#"{{"type":"email.delivered","data":{{"to":["a@x.com"],"tags":{{"sendonce_job":"{tag}"}}}}}}"#
        );
        let e = resend(b.as_bytes(), "msg_1").unwrap();
        assert_eq!(e.job_id.as_deref(), Some("campaign:1:sub:1@a"));
        assert!(matches!(e.effect, Effect::Delivery { sent: true, .. }));
        let b = br#"{"type":"message.bounced","data":{"to":"+14155550100"}}"#;
        let e = standard(b, "id").unwrap();
        assert!(matches!(
            e.effect,
            Effect::Suppress {
                channel: Channel::Sms,
                ..
            }
        ));
        assert!(standard(br#"{"type":"message.opened","data":{}}"#, "id").is_err());
    }
}

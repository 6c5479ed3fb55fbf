//! Inbound webhooks of the providers, parsed into the neutral [`Event`] of
//! `domain::webhook` (what the event changes here). Pure functions of the verified request's
//! body; the signature checks happen before (`domain::webhook`, `twilio::validate_twilio_signature`).
//!
//! - Twilio (form-encoded): an inbound message (`Body`, no `MessageStatus`) with an opt-out
//!   keyword suppresses `From`, an opt-in keyword removes it; a status callback
//!   (`MessageStatus`, our job in the `job_id` query parameter of the `StatusCallback` URL)
//!   reports delivered / sent (settles sent) or failed / undelivered (settles failed); the
//!   provider's id of the message is its `MessageSid`.
//! - Postmark (JSON, `RecordType`): permanent bounces, spam complaints and
//!   `SubscriptionChange` with `SuppressSending` suppress (or, false, unsuppress); `Delivery`
//!   reports our job (`Metadata.sendonce_job`), its `MessageID` the provider's id.
//! - Resend (JSON, Svix): `email.bounced` / `email.complained` suppress; `email.delivered` /
//!   `email.sent` report sent, `email.failed` failed; our job is the `sendonce_job` tag, the
//!   provider's id `data.email_id`.
//! - Standard (our schema, for the generic `webhook:` provider): `{"type":
//!   "message.bounced"|"message.complained"|"message.delivered"|"message.failed", "data":
//!   {"job_id", "to", "channel", "message_id"}}` (`message_id`: the id the provider answered the
//!   send with, optional).
//!
//! A delivery report's provider id is checked by `domain::webhook::provider_id` (at most
//! 512 bytes, no control character): a report with a malformed one is refused (400).

use sendonce_domain::address::{normalize_for, Channel};
use sendonce_domain::error::{Error, Result};
use sendonce_domain::webhook::{job_from_tag, provider_id, sms_keyword, Effect, Event, Keyword};
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

/// The provider's message id of a delivery report (`raw`, absent or empty: None), checked.
fn report_id(raw: Option<&str>, what: &str) -> Result<Option<String>> {
    provider_id(raw).map_err(|e| Error::invalid(format!("{what}: {e}")))
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
        let sent = match status.as_str() {
            "delivered" | "sent" => Some(true),
            "failed" | "undelivered" => Some(false),
            _ => None,
        };
        let effect = match (&job, sent) {
            (Some(j), Some(sent)) => Effect::Delivery {
                job_id: j.clone(),
                sent,
                provider_id: report_id(Some(sid), "twilio webhook: MessageSid")?,
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
                    provider_id: report_id(text(v, "MessageID"), "postmark webhook: MessageID")?,
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
    let report = Report {
        job: &job,
        provider_id: text(&data, "email_id"),
        what: "resend webhook: data.email_id",
    };
    let effect = event_effect(&kind, "email.", &report, &address, Channel::Email, "resend")?;
    Ok(Event {
        event_id: event_id.to_string(),
        kind,
        job_id: job,
        address,
        effect,
    })
}

/// What a JSON event says about our message: the job, the provider's id of the message (as
/// received, checked only when the event is a delivery report) and where that id came from.
struct Report<'a> {
    job: &'a Option<String>,
    provider_id: Option<&'a str>,
    what: &'a str,
}

/// The effect of `{prefix}bounced|complained|delivered|sent|failed`.
fn event_effect(
    kind: &str,
    prefix: &str,
    report: &Report<'_>,
    address: &Option<String>,
    channel: Channel,
    who: &str,
) -> Result<Effect> {
    let what = kind.strip_prefix(prefix).unwrap_or("");
    let sent = match what {
        "delivered" | "sent" => Some(true),
        "failed" => Some(false),
        _ => None,
    };
    Ok(match (what, report.job, address, sent) {
        ("bounced" | "complained", _, Some(a), _) => Effect::Suppress {
            channel,
            address: a.clone(),
            reason: format!("{who}: {kind}"),
        },
        (_, Some(j), _, Some(sent)) => Effect::Delivery {
            job_id: j.clone(),
            sent,
            provider_id: report_id(report.provider_id, report.what)?,
        },
        _ => Effect::Nothing,
    })
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
    let report = Report {
        job: &job,
        provider_id: text(data, "message_id"),
        what: "standard webhook: data.message_id",
    };
    let effect = event_effect(&kind, "message.", &report, &address, channel, "webhook")?;
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
        let tag = sendonce_domain::webhook::job_tag("campaign:1:sub:1@a");
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

    /// The provider id of a delivery report, or what the effect is instead.
    fn reported(e: &Event) -> (bool, Option<&str>) {
        match &e.effect {
            Effect::Delivery {
                sent, provider_id, ..
            } => (*sent, provider_id.as_deref()),
            other => panic!("not a delivery report: {other:?}"),
        }
    }

    #[test]
    fn twilio_status_reports_carry_the_message_sid() {
        let status = |sid: &str, st: &str| {
            twilio(
                &form(&[("MessageSid", sid), ("MessageStatus", st)]),
                Some("j"),
            )
        };
        let e = status("SM0123456789abcdef0123456789abcdef", "delivered").unwrap();
        assert_eq!(
            reported(&e),
            (true, Some("SM0123456789abcdef0123456789abcdef"))
        );
        assert_eq!(
            reported(&status("SM9", "undelivered").unwrap()),
            (false, Some("SM9"))
        );
        // The older SmsSid names the message too.
        let e = twilio(
            &form(&[("SmsSid", "SM7"), ("MessageStatus", "sent")]),
            Some("j"),
        )
        .unwrap();
        assert_eq!(reported(&e), (true, Some("SM7")));
        let long = format!("SM{}", "0".repeat(600));
        assert!(status(&long, "delivered").is_err());
        assert!(status("SM1\u{1b}[2J", "delivered").is_err());
        // Not a delivery report: the sid is the event's, nothing is checked.
        assert_eq!(status(&long, "queued").unwrap().effect, Effect::Nothing);
    }

    #[test]
    fn postmark_deliveries_carry_the_message_id() {
        let b = br#"{"RecordType":"Delivery","MessageID":"883953f4-6105-42a2-a16a-77a8eac79483","Recipient":"a@x.com","Metadata":{"sendonce_job":"j1"}}"#;
        let e = postmark(b).unwrap();
        assert_eq!(
            reported(&e),
            (true, Some("883953f4-6105-42a2-a16a-77a8eac79483"))
        );
        let b =
            br#"{"RecordType":"Delivery","Recipient":"a@x.com","Metadata":{"sendonce_job":"j1"}}"#;
        assert_eq!(reported(&postmark(b).unwrap()), (true, None));
        let long = "m".repeat(513);
        let b = format!(
            r#"{{"RecordType":"Delivery","MessageID":"{long}","Recipient":"a@x.com","Metadata":{{"sendonce_job":"j1"}}}}"#
        );
        assert!(postmark(b.as_bytes()).is_err());
        // A bounce is no delivery report: its MessageID is only part of the event id.
        let b = format!(
            r#"{{"RecordType":"Bounce","Type":"HardBounce","MessageID":"{}","Email":"a@x.com"}}"#,
            "m".repeat(100)
        );
        assert!(matches!(
            postmark(b.as_bytes()).unwrap().effect,
            Effect::Suppress { .. }
        ));
    }

    #[test]
    fn resend_reports_carry_the_email_id() {
        let tag = sendonce_domain::webhook::job_tag("campaign:1:sub:1@a");
        let body = |typ: &str, id: &str| {
            format!(
                r#"{{"type":"{typ}","data":{{"email_id":"{id}","to":["a@x.com"],"tags":[{{"name":"sendonce_job","value":"{tag}"}}]}}}}"#
            )
        };
        let e = resend(
            body("email.delivered", "4ef9a417-02e9-4d39-ad75-9611e0fcc33c").as_bytes(),
            "msg_1",
        )
        .unwrap();
        assert_eq!(
            reported(&e),
            (true, Some("4ef9a417-02e9-4d39-ad75-9611e0fcc33c"))
        );
        let e = resend(body("email.failed", "re_2").as_bytes(), "msg_2").unwrap();
        assert_eq!(reported(&e), (false, Some("re_2")));
        let e = resend(body("email.sent", "").as_bytes(), "msg_3").unwrap();
        assert_eq!(reported(&e), (true, None));
        let long = "r".repeat(513);
        assert!(resend(body("email.delivered", &long).as_bytes(), "msg_4").is_err());
        // A bounce suppresses whatever its email_id looks like.
        let e = resend(body("email.bounced", &long).as_bytes(), "msg_5").unwrap();
        assert!(matches!(e.effect, Effect::Suppress { .. }));
    }

    #[test]
    fn standard_reports_carry_the_message_id() {
        let b = br#"{"type":"message.delivered","data":{"job_id":"j","to":"a@x.com","message_id":"m-42"}}"#;
        assert_eq!(reported(&standard(b, "id").unwrap()), (true, Some("m-42")));
        let b = br#"{"type":"message.failed","data":{"job_id":"j"}}"#;
        assert_eq!(reported(&standard(b, "id").unwrap()), (false, None));
        let b = br#"{"type":"message.delivered","data":{"job_id":"j","message_id":"a\tb"}}"#;
        assert!(standard(b, "id").is_err());
        let b = format!(
            r#"{{"type":"message.delivered","data":{{"job_id":"j","message_id":"{}"}}}}"#,
            "x".repeat(513)
        );
        assert!(standard(b.as_bytes(), "id").is_err());
    }
}

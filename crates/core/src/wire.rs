//! The wire format of an event out, the same in the feed (`app::events`) and in a webhook
//! delivery (`worker::hooks`): `{id, type, timestamp, subject, data}`, Standard Webhooks'
//! payload shape with our id and subject, the data merged from the event's own fields and the
//! facts of its send or subscriber.

use sendonce_domain::clock;
use sendonce_store::EventRow;
use serde_json::{json, Map, Value};

/// The id an event has on the wire (`webhook-id`, the feed's `id`): stable across retries.
pub fn wire_id(id: i64) -> String {
    format!("evt_{id}")
}

/// The event as the feed and the webhooks send it: `{id, type, timestamp, subject, data}`
/// (Standard Webhooks' payload shape with our id and subject).
pub fn payload(e: &EventRow) -> Value {
    let mut data: Map<String, Value> = match serde_json::from_str(&e.data) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    };
    if let Some(s) = &e.send {
        data.insert("job_id".into(), json!(s.job_id));
        data.insert("address".into(), json!(s.address));
        data.insert("channel".into(), json!(s.channel));
        data.insert("origin".into(), json!(s.origin));
        if s.origin == "campaign" {
            data.insert("campaign_id".into(), json!(s.campaign_id));
        }
        if let Some(k) = &s.idempotency_key {
            data.insert("idempotency_key".into(), json!(k));
        }
        if let Some(m) = &s.metadata {
            let v = serde_json::from_str(m).unwrap_or(Value::Null);
            data.insert("metadata".into(), v);
        }
    }
    if let Some((email, phone)) = &e.subscriber {
        data.insert("email".into(), json!(email));
        data.insert("phone".into(), json!(phone));
    }
    json!({
        "id": wire_id(e.id),
        "type": e.kind,
        "timestamp": clock::format_ms(e.at),
        "subject": e.subject,
        "data": data,
    })
}

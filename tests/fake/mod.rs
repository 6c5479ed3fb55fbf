//! The fake provider (`crates/fake`): hostile clients, the assertions and Mailpit APIs, the
//! inbox index, per-tenant inboxes, --chaos, the provider endpoints (and the SES, SendGrid,
//! Mailgun and Brevo shapes with their SDKs), SMTP, the web inbox.

pub(crate) mod fake_chaos;
pub(crate) mod fake_clouds;
pub(crate) mod fake_hostile;
#[cfg(feature = "tier1")]
pub(crate) mod fake_inbox_api;
pub(crate) mod fake_inbox_index;
#[cfg(feature = "tier1")]
pub(crate) mod fake_mailpit;
pub(crate) mod fake_provider;
pub(crate) mod fake_smtp;
pub(crate) mod fake_tenants;
#[cfg(feature = "tier1")]
pub(crate) mod fake_web;

use crate::common::Fake;
use serde_json::Value;

/// `POST /send` with an Idempotency-Key, which must answer 200: the message id.
pub(crate) async fn send(c: &reqwest::Client, fake: &Fake, key: &str, body: Value) -> String {
    let r = c
        .post(fake.url("/send"))
        .header("Idempotency-Key", key)
        .json(&body)
        .send()
        .await
        .expect("POST /send");
    assert_eq!(r.status(), 200);
    r.json::<Value>().await.unwrap()["id"]
        .as_str()
        .expect("an id")
        .to_string()
}

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

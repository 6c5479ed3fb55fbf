//! The fake provider (`crates/fake`): hostile clients, the assertions and Mailpit APIs, the
//! inbox index, the provider endpoints, SMTP, the web inbox.

pub(crate) mod fake_hostile;
#[cfg(feature = "tier1")]
pub(crate) mod fake_inbox_api;
pub(crate) mod fake_inbox_index;
#[cfg(feature = "tier1")]
pub(crate) mod fake_mailpit;
pub(crate) mod fake_provider;
pub(crate) mod fake_smtp;
#[cfg(feature = "tier1")]
pub(crate) mod fake_web;

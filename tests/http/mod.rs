//! `sendonce serve` (`crates/http`): the API, floods, the dashboard, provider webhooks, operations,
//! opt-in and unsubscribe pages, the transactional stream, stored templates and attachments.

pub(crate) mod api;
pub(crate) mod bounces;
pub(crate) mod dashboard;
pub(crate) mod dashboard_audience;
pub(crate) mod dashboard_campaigns;
pub(crate) mod dashboard_isolation;
pub(crate) mod dashboard_messages;
pub(crate) mod dashboard_ops;
pub(crate) mod dashboard_privacy;
#[cfg(feature = "tier1")]
pub(crate) mod dashboard_tour;
pub(crate) mod dashboard_webhooks;
pub(crate) mod events_out;
pub(crate) mod hooks;
pub(crate) mod ops_http;
pub(crate) mod optin;
pub(crate) mod privacy;
pub(crate) mod serve;
pub(crate) mod serve_flood;
pub(crate) mod stream;
pub(crate) mod templates;
pub(crate) mod unsubscribe;

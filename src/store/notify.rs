//! Ledger rows of one-off notifications (`Notifications`, `sendonce notify`): one hidden
//! campaign per key and channel, one send row per recipient.

use crate::domain::address::Channel;
use crate::error::Result;

/// One recipient's row of a notification.
#[derive(Debug, Clone)]
pub struct NotifyRow {
    pub job_id: String,
    pub address: String,
    pub channel: Channel,
    pub status: String,
    pub attempts: i64,
    pub sent_at: Option<i64>,
    pub provider_message_id: Option<String>,
    pub reason: Option<String>,
}

/// One-off notifications.
pub trait Notifications: Send + Sync {
    /// Create (or find) the rows of a notification; returns its campaign id.
    fn prepare_notification(
        &self,
        key: &str,
        channel: Channel,
        from: Option<&str>,
        subject: Option<&str>,
        body: &str,
        addresses: &[String],
    ) -> Result<i64>;
    /// The rows of a notification for these addresses.
    fn notification_rows(
        &self,
        key: &str,
        channel: Channel,
        addresses: &[String],
    ) -> Result<Vec<NotifyRow>>;
}

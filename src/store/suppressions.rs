//! Suppression lists, backend-neutral (`Suppressions`): from the moment a suppression commits, no
//! claim leases that address.

use crate::domain::address::Channel;
use crate::error::Result;

/// A suppression-list entry.
#[derive(Debug, Clone)]
pub struct Suppression {
    pub channel: Channel,
    pub address: String,
    pub reason: String,
    pub source: String,
    pub created_at: i64,
}

/// A keyset page of an account's suppressions: in (channel, address) order after `after`, or
/// with `search`, the addresses of one channel that start with a (normalised) prefix.
#[derive(Debug, Clone, Copy)]
pub struct SuppressionPage<'a> {
    pub account_id: i64,
    pub search: Option<(Channel, &'a str)>,
    pub after: Option<(Channel, &'a str)>,
    pub limit: usize,
}

/// An account's suppression list.
pub trait Suppressions: Send + Sync {
    /// Add an address; returns false if it was already there.
    fn suppress(
        &self,
        account_id: i64,
        channel: Channel,
        address: &str,
        reason: &str,
        source: &str,
    ) -> Result<bool>;
    fn unsuppress(&self, account_id: i64, channel: Channel, address: &str) -> Result<()>;
    fn suppressions(&self, account_id: i64) -> Result<Vec<Suppression>>;
    /// One page of the account's suppressions (see [`SuppressionPage`]), through the primary
    /// key.
    fn suppressions_page(&self, q: &SuppressionPage<'_>) -> Result<Vec<Suppression>>;
    /// Whether `address` is on the account's suppression list for `channel`.
    fn is_suppressed(&self, account_id: i64, channel: Channel, address: &str) -> Result<bool>;
}

//! Looking things up and listing them (`Directory`): accounts by id or name, campaigns, the
//! subscribers of an account, and the few edits a subscriber needs (update, remove).

use crate::domain::model::CampaignStatus;
use crate::error::Result;

/// An account with how many subscribers and campaigns it has.
#[derive(Debug, Clone)]
pub struct AccountRow {
    pub id: i64,
    pub name: String,
    pub subscribers: i64,
    pub campaigns: i64,
    /// Appended to the account's new SMS campaigns.
    pub sms_footer: Option<String>,
    pub created_at: i64,
}

/// A campaign as `campaign list` shows it.
#[derive(Debug, Clone)]
pub struct CampaignRow {
    pub id: i64,
    pub account_id: i64,
    pub account: String,
    pub name: String,
    pub channel: String,
    pub status: String,
    pub scheduled_for: Option<i64>,
    pub created_at: i64,
}

/// A subscriber as `subscriber list|show` shows it.
#[derive(Debug, Clone)]
pub struct SubscriberRow {
    pub id: i64,
    pub account_id: i64,
    pub email: Option<String>,
    pub phone: Option<String>,
    pub name: Option<String>,
    pub status: String,
    /// JSON object text.
    pub attrs: String,
    pub created_at: i64,
}

/// What `subscriber update` changes (None: unchanged). Validated by the caller.
#[derive(Debug, Clone, Default)]
pub struct SubscriberChanges {
    pub name: Option<String>,
    pub status: Option<String>,
    /// Attributes to set (JSON object text, merged into the existing ones).
    pub attrs: Option<String>,
}

/// Finding and listing accounts, campaigns and subscribers.
pub trait Directory: Send + Sync {
    /// An account given as an id (`3`) or a name (`acme`); an unknown one is a usage error.
    fn resolve_account(&self, key: &str) -> Result<i64>;
    fn account_id_by_name(&self, name: &str) -> Result<i64>;
    fn accounts(&self) -> Result<Vec<AccountRow>>;
    /// How many accounts the store holds (one indexed count; `accounts` counts each one's
    /// subscribers).
    fn account_count(&self) -> Result<u64>;
    /// The name of account `id`; an unknown id is `NotFound`.
    fn account_name(&self, id: i64) -> Result<String>;
    /// The SMS opt-out footer of an account (None: none).
    fn sms_footer(&self, account: i64) -> Result<Option<String>>;
    /// Set (or, with None, clear) the footer the account's new SMS campaigns get.
    fn set_sms_footer(&self, account: i64, footer: Option<&str>) -> Result<()>;
    fn list_campaigns(
        &self,
        account: Option<i64>,
        status: Option<CampaignStatus>,
    ) -> Result<Vec<CampaignRow>>;
    /// One page of an account's subscribers in id order, after `after_id`, optionally in one
    /// status. Removed subscribers are not listed.
    fn list_subscribers(
        &self,
        account: i64,
        status: Option<&str>,
        after_id: i64,
        limit: usize,
    ) -> Result<Vec<SubscriberRow>>;
    /// A subscriber by id, or by email address / phone number within an account.
    fn find_subscriber(&self, account: i64, key: &str) -> Result<SubscriberRow>;
    fn update_subscriber(
        &self,
        account: i64,
        id: i64,
        ch: &SubscriberChanges,
    ) -> Result<SubscriberRow>;
    /// Remove a subscriber: never sent to again (its addresses are suppressed); past sends
    /// keep naming it, and adding the same address again brings it back.
    fn remove_subscriber(&self, account: i64, id: i64) -> Result<()>;
}

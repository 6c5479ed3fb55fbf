//! Double opt-in and public signups (`Optin`), backend-neutral: what a confirm link finds
//! (the list and the membership's state), confirming a pending membership, and the lists that
//! take signups from the public form. The confirmation message itself is queued by
//! `Audience::add_subscriber_with` / `import_subscribers_with`, in the transaction that makes
//! the pending membership.

use crate::domain::address::Channel;
use crate::error::Result;

/// One pending membership of a double opt-in list that has never had a confirmation: what
/// queueing its confirmation needs (both stores read it in the transaction that makes it).
pub(crate) struct Pending {
    pub(crate) list_id: i64,
    pub(crate) account_id: i64,
    pub(crate) list_name: String,
    /// The list's confirmation sender, subject and body (the defaults where it has none).
    pub(crate) from: String,
    pub(crate) subject: String,
    pub(crate) body: String,
    pub(crate) email: String,
    pub(crate) name: Option<String>,
}

/// A membership's state, as a confirm link sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    Pending,
    Subscribed,
    Unsubscribed,
}

/// Who a confirm link names: the list of an account and an address on a channel.
#[derive(Debug, Clone)]
pub struct MemberKey<'a> {
    pub account_id: i64,
    pub list_id: i64,
    pub channel: Channel,
    /// Normalised address.
    pub address: &'a str,
}

/// What a confirm link finds: the list's name, and the membership's state (`None`: the
/// address is no member of the list any more, e.g. the subscriber was removed).
#[derive(Debug, Clone)]
pub struct Confirmation {
    pub list_name: String,
    pub state: Option<MemberState>,
}

/// Double opt-in confirmations.
pub trait Optin: Send + Sync {
    /// The list and membership a confirm link names, read only (`None`: no such list in the
    /// account).
    fn confirmation(&self, key: &MemberKey<'_>) -> Result<Option<Confirmation>>;
    /// Move the membership from pending to subscribed (a `pending` subscriber becomes
    /// `confirmed`), in one transaction; any other state is left as it is. Returns what the
    /// link found before the change (`None`: no such list in the account).
    fn confirm(&self, key: &MemberKey<'_>, now: i64) -> Result<Option<Confirmation>>;
    /// Public list `list_id` (its `public` flag set), whatever the account; `None` otherwise.
    fn public_list(&self, list_id: i64) -> Result<Option<crate::store::ListRow>>;
}

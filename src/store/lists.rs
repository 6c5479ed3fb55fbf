//! Subscriber lists (`Lists`), backend-neutral: lists per account with their opt-in mode,
//! memberships with a status of their own, and the audience counts of a campaign's targets.

use crate::domain::address::Channel;
use crate::domain::segment::Filter;
use crate::error::{Error, Result};

/// How a list takes new members: `single` subscribes them at once, `double` leaves them
/// `pending` until they confirm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptIn {
    Single,
    Double,
}

impl OptIn {
    pub fn as_str(self) -> &'static str {
        match self {
            OptIn::Single => "single",
            OptIn::Double => "double",
        }
    }

    /// `single` or `double`.
    pub fn parse(s: &str) -> Result<OptIn> {
        match s {
            "single" => Ok(OptIn::Single),
            "double" => Ok(OptIn::Double),
            other => Err(Error::invalid(format!(
                "unknown opt-in mode {other:?} (single or double)"
            ))),
        }
    }
}

/// A list to create.
#[derive(Debug, Clone)]
pub struct NewList<'a> {
    pub account_id: i64,
    pub name: &'a str,
    pub description: Option<&'a str>,
    pub optin: OptIn,
    /// Takes signups from the public form (`/subscribe`).
    pub public: bool,
    /// The confirmation message of a double opt-in list (checked by the caller).
    pub confirm: ConfirmContent<'a>,
}

/// A double opt-in list's confirmation message: sender, and subject and text templates
/// (`None`: the defaults of `domain::optin`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ConfirmContent<'a> {
    pub from: Option<&'a str>,
    pub subject: Option<&'a str>,
    pub body: Option<&'a str>,
}

/// A change to a list: each `Some` field is set, `None` is kept.
#[derive(Debug, Clone, Default)]
pub struct ListChange<'a> {
    pub public: Option<bool>,
    pub confirm: ConfirmContent<'a>,
}

/// A list as stored, with its members counted per membership status.
#[derive(Debug, Clone)]
pub struct ListRow {
    pub id: i64,
    pub account_id: i64,
    pub name: String,
    pub description: Option<String>,
    pub optin: OptIn,
    /// Takes signups from the public form.
    pub public: bool,
    pub confirm_from: Option<String>,
    pub confirm_subject: Option<String>,
    pub confirm_body: Option<String>,
    pub created_at: i64,
    pub subscribed: u64,
    pub unsubscribed: u64,
    pub pending: u64,
}

/// What a campaign's targets (its lists, or the whole account) hold for its channel, each
/// targeted subscriber counted once, in the first bucket that applies in this order:
/// `unsubscribed`, `unconfirmed`, `no_address`, `filtered_out` (reachable, but the audience
/// filter excludes it); the rest are one row per normalised address (`duplicates` the
/// subscribers beyond the first of an address), `suppressed` or `would_receive`. The buckets
/// are disjoint and add up to the targeted subscribers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AudienceCounts {
    pub would_receive: u64,
    pub duplicates: u64,
    pub suppressed: u64,
    pub unsubscribed: u64,
    pub unconfirmed: u64,
    pub no_address: u64,
    pub filtered_out: u64,
}

/// The audience to count: a campaign's targets, or a draft's before it exists
/// (`campaign create --dry-run`).
#[derive(Debug, Clone, Copy)]
pub struct AudienceQuery<'a> {
    pub account_id: i64,
    pub channel: Channel,
    /// The targeted lists (ids); empty: every subscriber of the account. An id that is no
    /// list (a removed one) targets nobody, never the whole account.
    pub lists: &'a [i64],
    /// The audience filter, parsed.
    pub filter: Option<&'a Filter>,
}

/// One list an unsubscribe link names, as the page shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkList {
    pub id: i64,
    pub name: String,
    /// The membership of the address's subscriber: `subscribed`, `unsubscribed`, `pending`,
    /// or None when it is not a member (any more).
    pub status: Option<String>,
}

/// What an unsubscribe link covers now: its lists that still exist (a removed list is left
/// out; a list of another account refuses the whole link) and whether the address is on the
/// account's suppression list for the channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkState {
    pub lists: Vec<LinkList>,
    pub suppressed: bool,
}

/// An unsubscribe to apply, in one transaction.
#[derive(Debug, Clone, Copy)]
pub struct UnsubscribeRequest<'a> {
    pub account_id: i64,
    pub channel: Channel,
    /// Normalised (lower-case email, E.164 phone).
    pub address: &'a str,
    /// Memberships of the address's subscriber on these lists become `unsubscribed`.
    pub lists: &'a [i64],
    /// Everything from this sender: the address is suppressed for the channel and every
    /// membership of its subscriber in the account becomes `unsubscribed`.
    pub everything: bool,
    /// Recorded on the suppression row (`unsubscribe-link`).
    pub source: &'a str,
}

/// What an unsubscribe changed (all zero / false: it had been done before).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnsubscribeChange {
    /// Memberships that became `unsubscribed`.
    pub memberships: u64,
    /// A suppression row was written.
    pub suppressed: bool,
}

/// The order and search of a page of a list's members ([`Lists::list_members`]).
#[derive(Debug, Clone, Copy)]
pub enum MemberOrder<'a> {
    /// Every member in subscriber id order, the ids after `after`.
    Id { after: i64 },
    /// Members whose normalised email address starts with `prefix` (lower case), in address
    /// order, the addresses after `after`.
    Email {
        prefix: &'a str,
        after: Option<&'a str>,
    },
    /// Members whose phone number (E.164) starts with `prefix`, in number order, after `after`.
    Phone {
        prefix: &'a str,
        after: Option<&'a str>,
    },
}

/// A page of a list's members to read: a keyset page of at most `limit` rows, optionally of
/// one membership status (`subscribed`, `unsubscribed`, `pending`).
#[derive(Debug, Clone, Copy)]
pub struct MemberPage<'a> {
    pub account_id: i64,
    pub list_id: i64,
    pub membership: Option<&'a str>,
    pub order: MemberOrder<'a>,
    pub limit: usize,
}

/// One member of a list: the subscriber (never a removed one), its normalised email address
/// (the keyset of an email search) and the membership's status.
#[derive(Debug, Clone)]
pub struct MemberRow {
    pub subscriber: crate::store::SubscriberRow,
    pub email_norm: Option<String>,
    pub membership: String,
}

/// The bounds of a keyset page over the values that start with `prefix`, after `after`:
/// `(low, high)`, a value `v` is in the page when `low <= v < high` and `v != after`. `high`
/// is `prefix` with its last character moved up by one, so the range is every value that
/// starts with `prefix` in byte order (SQLite's BINARY, PostgreSQL's "C" collation).
pub fn prefix_bounds(prefix: &str, after: Option<&str>) -> (String, String) {
    let low = match after {
        Some(a) if a > prefix => a.to_string(),
        _ => prefix.to_string(),
    };
    let mut high: Vec<char> = prefix.chars().collect();
    loop {
        match high.pop() {
            None => return (low, char::MAX.to_string()),
            Some(c) => {
                let next = (u32::from(c) + 1..=u32::from(char::MAX)).find_map(char::from_u32);
                if let Some(n) = next {
                    high.push(n);
                    return (low, high.into_iter().collect());
                }
            }
        }
    }
}

/// Lists and memberships.
pub trait Lists: Send + Sync {
    /// A keyset page of a list's members (`q.list_id` must be a list of `q.account_id`: the
    /// caller checked it), read through an index: the list's memberships in id order, or the
    /// account's address index over the search prefix.
    fn list_members(&self, q: &MemberPage<'_>) -> Result<Vec<MemberRow>>;
    /// What an unsubscribe link of `account_id` for `address` on `channel` and `lists` covers
    /// now. `NotFound` when the account does not exist or a list belongs to another account.
    fn link_state(
        &self,
        account_id: i64,
        channel: Channel,
        address: &str,
        lists: &[i64],
    ) -> Result<LinkState>;
    /// Apply an unsubscribe (one `BEGIN IMMEDIATE` transaction, the checks of
    /// [`Lists::link_state`] inside it). Idempotent: a second call changes nothing.
    fn unsubscribe(&self, r: &UnsubscribeRequest<'_>) -> Result<UnsubscribeChange>;
    /// Create a list; a name already used in the account is a `Conflict`.
    fn create_list(&self, l: &NewList<'_>) -> Result<i64>;
    /// Change a list's public flag or confirmation message.
    fn update_list(&self, account_id: i64, list_id: i64, change: &ListChange<'_>) -> Result<()>;
    /// The account's lists by name, with member counts.
    fn lists(&self, account_id: i64) -> Result<Vec<ListRow>>;
    /// One list of the account, by id or name (`NotFound` otherwise).
    fn find_list(&self, account_id: i64, key: &str) -> Result<ListRow>;
    /// Remove a list and its memberships (never a send). `Conflict` while a campaign that is
    /// approved, sending or paused targets it. Returns how many memberships went.
    fn remove_list(&self, account_id: i64, list_id: i64) -> Result<u64>;
    /// The lists a campaign targets (empty: the whole account).
    fn campaign_lists(&self, campaign_id: i64) -> Result<Vec<i64>>;
    /// The audience counts of a campaign's targets now, its filter applied (a stored filter
    /// that no longer parses is `Damaged`).
    fn audience_counts(&self, campaign_id: i64) -> Result<AudienceCounts>;
    /// The audience counts of `q` now, in one statement (one snapshot): the same numbers list
    /// building would produce for a campaign with these targets and this filter.
    /// How many of the subscribers `q` would send to (confirmed, with an address for the
    /// channel, subscribed to a targeted list, matching the filter) have each template
    /// variable: what `template::check` needs for this campaign's audience, not the whole
    /// account's.
    fn variable_counts_for(
        &self,
        q: &AudienceQuery<'_>,
    ) -> Result<crate::domain::template::VarCounts>;
    fn audience_counts_for(&self, q: &AudienceQuery<'_>) -> Result<AudienceCounts>;
}

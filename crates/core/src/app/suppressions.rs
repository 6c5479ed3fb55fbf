//! Per-account suppression lists: an address, normalised for its channel, that no new claim
//! sends to. Add, remove, list.

use sendonce_domain::address::{normalize_for, Channel};
use sendonce_domain::error::Result;
use sendonce_store::prelude::*;
use sendonce_store::Store;
use serde::Serialize;

/// An address on one channel's list, in the normalised form the claim compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub channel: Channel,
    pub address: String,
}

impl Entry {
    /// Normalise `address` for `channel` (lower-cased email, E.164 phone); refuses what is
    /// neither.
    pub fn new(channel: Channel, address: &str) -> Result<Entry> {
        Ok(Entry {
            channel,
            address: normalize_for(channel, address)?,
        })
    }
}

/// The result of `add`: `added` is false when the address was already suppressed.
#[derive(Debug, Clone, Serialize)]
pub struct Added {
    pub address: String,
    pub channel: Channel,
    pub added: bool,
}

/// Suppress `entry` for `account` (id or name); from the moment this returns, no new claim
/// sends to it.
pub fn add(store: &Store, account: &str, entry: &Entry, reason: &str) -> Result<Added> {
    let account = store.resolve_account(account)?;
    let added = store.suppress(account, entry.channel, &entry.address, reason, "manual")?;
    Ok(Added {
        address: entry.address.clone(),
        channel: entry.channel,
        added,
    })
}

/// The result of `remove`.
#[derive(Debug, Clone, Serialize)]
pub struct Removed {
    pub address: String,
    pub channel: Channel,
    pub removed: bool,
}

/// Take `entry` off `account`'s list (an error if it is not on it).
pub fn remove(store: &Store, account: &str, entry: &Entry) -> Result<Removed> {
    let account = store.resolve_account(account)?;
    store.unsuppress(account, entry.channel, &entry.address)?;
    Ok(Removed {
        address: entry.address.clone(),
        channel: entry.channel,
        removed: true,
    })
}

/// One suppressed address, why, by what, and since when.
#[derive(Debug, Clone, Serialize)]
pub struct Suppression {
    pub channel: Channel,
    pub address: String,
    pub reason: String,
    pub source: String,
    #[serde(serialize_with = "sendonce_domain::clock::ser_ms")]
    pub created_at: i64,
}

/// An account's suppression list.
#[derive(Debug, Clone, Serialize)]
pub struct Suppressions {
    pub suppressions: Vec<Suppression>,
}

/// List `account`'s suppressions.
pub fn list(store: &Store, account: &str) -> Result<Suppressions> {
    let account = store.resolve_account(account)?;
    let suppressions = store
        .suppressions(account)?
        .into_iter()
        .map(|s| Suppression {
            channel: s.channel,
            address: s.address,
            reason: s.reason,
            source: s.source,
            created_at: s.created_at,
        })
        .collect();
    Ok(Suppressions { suppressions })
}

/// The most suppressions one page of [`page`] shows.
pub const PAGE: usize = 100;

/// A page of suppressions and the cursor of the next (`None`: the last page).
#[derive(Debug, Clone, Serialize)]
pub struct Page {
    pub suppressions: Vec<Suppression>,
    pub next: Option<String>,
}

/// The channel a search or an address typed in a form is for: text with an `@` or a letter
/// is (the start of) an email address, anything else a phone number.
pub fn channel_of(text: &str) -> Channel {
    if text.contains('@') || text.chars().any(char::is_alphabetic) {
        Channel::Email
    } else {
        Channel::Sms
    }
}

/// One page ([`PAGE`] at most) of `account`'s suppressions through the primary key: all in
/// (channel, address) order, or with `search` the addresses that start with it (lower-cased
/// for email). `after` is the cursor a previous page gave (`channel:address`).
pub fn page(
    store: &Store,
    account: &str,
    search: Option<&str>,
    after: Option<&str>,
) -> Result<Page> {
    let account_id = store.resolve_account(account)?;
    let search = search.map(str::trim).filter(|s| !s.is_empty());
    let lowered = search.map(|s| match channel_of(s) {
        Channel::Email => (Channel::Email, s.to_lowercase()),
        Channel::Sms => (Channel::Sms, s.to_string()),
    });
    let after = match after.filter(|a| !a.is_empty()) {
        None => None,
        Some(a) => {
            let (c, addr) = a.split_once(':').ok_or_else(|| {
                sendonce_domain::error::Error::invalid(format!(
                    "the page cursor {a:?} is not channel:address"
                ))
            })?;
            Some((c.parse::<Channel>()?, addr))
        }
    };
    let rows = store.suppressions_page(&sendonce_store::SuppressionPage {
        account_id,
        search: lowered.as_ref().map(|(c, s)| (*c, s.as_str())),
        after,
        limit: PAGE,
    })?;
    let next = (rows.len() == PAGE)
        .then(|| rows.last())
        .flatten()
        .map(|r| format!("{}:{}", r.channel, r.address));
    let suppressions = rows
        .into_iter()
        .map(|s| Suppression {
            channel: s.channel,
            address: s.address,
            reason: s.reason,
            source: s.source,
            created_at: s.created_at,
        })
        .collect();
    Ok(Page { suppressions, next })
}

/// [`remove`] with the reason someone gave and who they are (`Session::decided_by`). The
/// store keeps no removed rows, so the reason goes to the log, with the account, channel and
/// who decided. An empty reason is refused.
pub fn remove_with_reason(
    store: &Store,
    account: &str,
    entry: &Entry,
    reason: &str,
    by: &str,
) -> Result<Removed> {
    let reason = reason.trim();
    if reason.is_empty() {
        return Err(sendonce_domain::error::Error::invalid(
            "give a reason for taking the address off the suppression list",
        ));
    }
    if reason.len() > 1024 {
        return Err(sendonce_domain::error::Error::invalid(
            "the reason is longer than the 1 KiB limit",
        ));
    }
    let removed = remove(store, account, entry)?;
    tracing::info!(
        account = account,
        channel = %entry.channel,
        reason = reason,
        by = by,
        "suppression removed"
    );
    Ok(removed)
}

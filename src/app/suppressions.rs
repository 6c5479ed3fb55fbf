//! Per-account suppression lists: an address, normalised for its channel, that no new claim
//! sends to. Add, remove, list.

use crate::domain::address::{normalize_for, Channel};
use crate::error::Result;
use crate::store::Storage;
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
pub fn add(store: &dyn Storage, account: &str, entry: &Entry, reason: &str) -> Result<Added> {
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
pub fn remove(store: &dyn Storage, account: &str, entry: &Entry) -> Result<Removed> {
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
    #[serde(serialize_with = "crate::domain::clock::ser_ms")]
    pub created_at: i64,
}

/// An account's suppression list.
#[derive(Debug, Clone, Serialize)]
pub struct Suppressions {
    pub suppressions: Vec<Suppression>,
}

/// List `account`'s suppressions.
pub fn list(store: &dyn Storage, account: &str) -> Result<Suppressions> {
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

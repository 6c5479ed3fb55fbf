//! The store (`crates/store`): the contract on every backend, its shape, the ledger on real files,
//! the SQL edge, upgrades, moving to PostgreSQL, one form per address, the clone guard, durable
//! rate limits, group commit.

pub(crate) mod events;
pub(crate) mod group;
pub(crate) mod guard;
pub(crate) mod ledger;
#[cfg(feature = "tier1")]
pub(crate) mod lock_loss;
pub(crate) mod migrate_store;
pub(crate) mod normalise;
#[cfg(feature = "tier1")]
pub(crate) mod pg;
pub(crate) mod ratelimit;
pub(crate) mod sql_edge;
pub(crate) mod store_contract;
pub(crate) mod store_shape;
pub(crate) mod stream_fold;
pub(crate) mod upgrades;

//! The one integration test binary (as ripgrep's `tests/tests.rs`): every file of `tests/` is a
//! module of it, so the suite links the library and starts `cargo test` once, not once per
//! file. Run one module with a filter: `tests/run.sh smtp::`, or
//! `tests/run.sh --test integration crash::`. Modules and tests that need tools outside Rust
//! are compiled only with `--features tier1`, the crash, damage, power-loss and PostgreSQL-kill
//! suites only with `--features tier2` (docs/testing.md: the tiers); `tests/run.sh` passes
//! `tier2`.

// Shared helpers: a temp dir with a database, the real binary, the fake provider process.
mod common;

mod api;
mod audience;
mod bench;
mod canary;
mod cli;
mod config;
mod content;
// Damaged files (truncated, flipped bytes, a lost -wal): needs the `crash-points` feature.
#[cfg(feature = "tier2")]
mod damage;
// Real processes killed at named crash points: only with the `crash-points` feature.
#[cfg(feature = "tier2")]
mod crash;
mod dashboard;
mod dashboard_audience;
mod dashboard_campaigns;
mod dashboard_isolation;
mod dashboard_ops;
#[cfg(feature = "tier1")]
mod dashboard_tour;
mod defects;
mod fake_hostile;
#[cfg(feature = "tier1")]
mod fake_inbox_api;
#[cfg(feature = "tier1")]
mod fake_mailpit;
mod fake_provider;
// The fake provider's web inbox in headless Chromium.
mod fake_smtp;
#[cfg(feature = "tier1")]
mod fake_web;
mod file_modes;
mod first_contact;
mod generate;
mod guard;
mod header_injection;
mod hooks;
mod input_errors;
mod layers;
mod ledger;
mod limits;
mod lists;
#[cfg(feature = "tier1")]
mod lock_loss;
mod manual;
mod migrate_store;
mod normalise;
mod notify;
mod ops_http;
mod optin;
#[cfg(feature = "tier1")]
mod pg;
// Power cuts on a FUSE filesystem that drops unsynced writes: needs the `crash-points` feature.
#[cfg(feature = "tier2")]
mod powerloss;
mod providers_http;
mod ratelimit;
mod readme;
#[cfg(feature = "tier1")]
mod readme_examples;
mod render_bounds;
mod routing;
mod secrets;
mod segments;
mod serve;
mod serve_flood;
mod smtp;
mod sql_edge;
mod store_contract;
mod store_shape;
mod tokens;
mod unsubscribe;
mod upgrades;
// The crash suite on PostgreSQL, workers in network namespaces: root and `crash-points`.
#[cfg(feature = "tier2")]
mod pg_crash;

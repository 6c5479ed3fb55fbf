//! The one integration test binary (as ripgrep's `tests/tests.rs`). Its folders mirror the
//! crates: `store/`, `core/` (use cases, worker, providers), `http/`, `fake/`, `cli/`, `bench.rs`;
//! `docs/` keeps the documents honest, `crash/` holds the tier-2 suites, `layers.rs` the shape of
//! the workspace. Every file is a module, so the suite links once. Run one module with a filter:
//! `tests/run.sh smtp::` (both `core::smtp` and `fake::fake_smtp`), `tests/run.sh --test
//! integration crash::workers::`. Modules and tests that need tools outside Rust are compiled only
//! with `--features tier1`, the `crash/` suites only with `--features tier2` (docs/testing.md:
//! the tiers); `tests/run.sh` passes `tier2`.

// Shared helpers: a temp dir with a database, the real binary, the fake provider process.
mod common;

mod bench;
mod cli;
mod core;
// Tier 2: crash points, power loss, PostgreSQL killed (docs/testing.md).
#[cfg(feature = "tier2")]
mod crash;
mod docs;
mod fake;
mod http;
mod layers;
mod store;

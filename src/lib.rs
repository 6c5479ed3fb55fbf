//! sendonce: an email and SMS sender whose SQLite send ledger delivers each message exactly once.
//!
//! The root crate of the workspace: the command line (`cli`), `demo`, and the binary
//! (`main.rs`). It re-exports the crates below under their old module names, so
//! `sendonce::store`, `sendonce::app`, `sendonce::domain`… read as one library.
//!
//! # Tour (calls go one way, down this list; ARCHITECTURE.md has the whole map)
//! - `cli`: the command line — parses arguments into the typed inputs of `app`, prints its
//!   outputs as text or one JSON document. No rule of its own. `demo`: the main job end to end.
//! - `sendonce-bench` (`sendonce bench`) and `sendonce-fake` (`sendonce fake-provider`): tools
//!   that ship in the binary; no product crate depends on them.
//! - `http` (`sendonce-http`): `serve` — the API, public pages, dashboard, provider webhooks.
//! - `app`, `worker`, `provider`, `config`, `metrics` (`sendonce-core`): the use cases, the
//!   worker (the only caller of providers), the outbound adapters, the config file, the
//!   counters.
//! - `store` (`sendonce-store`): the only code with SQL. Each operation written once over a
//!   small seam (`store::sql`) as concern traits implemented for `store::Store`, the SQLite or
//!   PostgreSQL backend that `store::open` picks from a typed `Target`.
//! - `domain`, `error`, `exit`, `files`, `redact`, `busy`, `shutdown`, `logs`, `crash`
//!   (`sendonce-domain`): pure rules, the typed error and every exit code, and what every layer
//!   shares, crash points included (feature `crash-points`).

pub mod cli;
pub mod demo;

pub use sendonce_core::{app, config, metrics, provider, worker};
pub use sendonce_domain as domain;
pub use sendonce_domain::{busy, crash, error, exit, files, logs, redact, shutdown};
pub use sendonce_http as http;
pub use sendonce_store as store;

//! sendonce: an email and SMS sender whose SQLite send ledger delivers each message exactly once.
//!
//! # Layout
//! - `store`: the only module with SQL. Opening the file, migrations, the `Ledger` trait the
//!   worker uses (claim, dispatch marker, record, complete) and the management queries.
//! - `worker`: claims rows, renders them, calls the provider with bounded concurrency, and
//!   group-commits the outcomes. The only caller of providers.
//! - `provider`: the `Provider` trait, its capabilities (idempotency window) and the outbox.
//! - `template`, `address`, `model`, `clock`: pure helpers (rendering, normalisation, states,
//!   job ids and keys, time).
//! - `deliverylog`: the JSONL line format shared by the outbox and the fake provider's log.
//! - `fake`: `sendonce fake-provider`, an offline HTTP provider (idempotency keys, injected
//!   faults) that logs every accepted request; the webhook provider's test partner.
//! - `cli`: argument parsing and output; `exit`: every exit code; `error`: the typed error.
//! - `checker`: compares a provider delivery log with the ledger (`sendonce check`).
//! - `bench`: `sendonce bench`, throughput/memory/WAL/restart figures against the SQLite limit.
//! - `crash`: named crash points for the crash suite (feature `crash-points`).

pub mod address;
pub mod bench;
pub mod checker;
pub mod cli;
pub mod clock;
pub mod crash;
pub mod deliverylog;
pub mod demo;
pub mod error;
pub mod exit;
pub mod fake;
pub mod import;
pub mod model;
pub mod provider;
pub mod store;
pub mod template;
pub mod worker;

//! sendonce: an email and SMS sender whose SQLite send ledger delivers each message exactly once.
//!
//! # Layout
//! - `store`: the only module with SQL. Opening the file, migrations, the `Ledger` trait the
//!   worker uses (claim, dispatch marker, record, complete) and the management queries.
//! - `worker`: claims rows, renders them, calls the provider with bounded concurrency, and
//!   group-commits the outcomes. The only caller of providers.
//! - `provider`: the `Provider` trait, its capabilities (idempotency window), the outbox, the
//!   webhook and SMTP providers (the SMTP message builder lives in `provider::email`).
//! - `unsubscribe`: signing and verifying the per-recipient one-click unsubscribe tokens.
//! - `template`, `address`, `model`, `clock`: pure helpers (rendering, normalisation, states,
//!   job ids and keys, time).
//! - `deliverylog`: the JSONL line format shared by the outbox and the fake provider's log.
//! - `fake`: `sendonce fake-provider`, an offline HTTP provider (idempotency keys, injected
//!   faults) that logs every accepted request; the webhook provider's test partner.
//! - `cli`: argument parsing and output; `exit`: every exit code; `error`: the typed error.
//! - `checker`: compares a provider delivery log with the ledger (`sendonce check`).
//! - `crash`: named crash points for the crash suite (feature `crash-points`).

pub mod address;
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
pub mod unsubscribe;
pub mod worker;

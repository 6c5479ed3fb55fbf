//! sendonce: an email and SMS sender whose SQLite send ledger delivers each message exactly once.
//!
//! # Layout
//! - `store`: the only module with SQL. Opening the file, migrations, the `Ledger` trait the
//!   worker uses (claim, dispatch marker, record, complete) and the management queries.
//! - `worker`: claims rows, renders them, calls the provider with bounded concurrency, and
//!   group-commits the outcomes. The only caller of providers.
//! - `provider`: the `Provider` trait, its capabilities (idempotency window, lookup), the
//!   outbox, the webhook, SMTP (message builder in `provider::email`), and the Twilio, Resend
//!   and Postmark HTTP APIs.
//! - `sms`: SMS text helpers (E.164 check, GSM-7/UCS-2 detection, segment count).
//! - `unsubscribe`: signing and verifying the per-recipient one-click unsubscribe tokens.
//! - `template`, `address`, `model`, `clock`: pure helpers (rendering, normalisation, states,
//!   job ids and keys, time).
//! - `deliverylog`: the JSONL line format shared by the outbox and the fake provider's log.
//! - `fake`: `sendonce fake-provider`, an offline HTTP provider (idempotency keys, injected
//!   faults) that logs every accepted request; the webhook provider's test partner.
//! - `cli`: argument parsing and output; `exit`: every exit code; `error`: the typed error.
//! - `checker`: compares a provider delivery log with the ledger (`sendonce check`).
//! - `notify`: one-off CI notifications keyed on the CI job (`sendonce notify`).
//! - `config`: the TOML file routing accounts and channels to providers; `ratelimit`: durable
//!   token buckets shared by all workers.
//! - `bench`: `sendonce bench`, throughput/memory/WAL/restart figures against the SQLite limit.
//! - `crash`: named crash points for the crash suite (feature `crash-points`).

pub mod app;
pub mod cli;
pub mod config;
pub mod domain;
pub mod error;
pub mod exit;
pub mod provider;
pub mod shutdown;
pub mod store;
pub mod tools;
pub mod worker;

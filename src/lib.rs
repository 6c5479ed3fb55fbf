//! sendonce: an email and SMS sender whose SQLite send ledger delivers each message exactly once.
//!
//! # Tour (calls go one way, down this list; ARCHITECTURE.md has the whole map)
//! - `cli`: the command line — parses arguments into the typed inputs of `app`, prints its
//!   outputs as text or one JSON document. No rule of its own. `exit`: every exit code.
//! - `app`: the use cases (accounts, campaigns, subscribers and import, lists, suppressions, doubts,
//!   run, notify, check), each one function with typed input and an output struct of its own;
//!   what the CLI calls today and the HTTP server next.
//! - `worker`: the `Worker` that claims rows, renders them, calls providers with bounded
//!   concurrency and group-commits the outcomes — the only caller of providers; its routes and
//!   rate limiter.
//! - `store`: the only code with SQL. Each operation written once over a small seam
//!   (`store::sql`: a transaction with `exec`/`each`) as concern traits (`Ledger` for the
//!   worker, the others for the app layer), implemented for `store::Store`, the SQLite or
//!   PostgreSQL backend that `store::open` picks from a typed `Target`.
//! - `provider`: outbound adapters (outbox, webhook, SMTP, Twilio, Resend, Postmark), their
//!   capabilities (idempotency window, lookup) and the classification of their answers.
//! - `domain`: pure rules with no I/O — addresses and channels, states, job ids and keys,
//!   templates, content and header checks, SMS segments, unsubscribe tokens, time, retry.
//! - `config`: the TOML file routing accounts and channels to providers.
//! - `metrics`: the process's counters, written in the Prometheus text format by `/metrics`.
//! - `error`: the typed error; `redact`: known secrets scrubbed from text that leaves the
//!   process; `shutdown`: the stop signal and the one runtime.
//! - `tools`: `demo`, `bench`, the offline `fake` provider, and `crash` points (feature
//!   `crash-points`).

pub mod cli;
pub mod demo;

pub use sendonce_core::{app, config, metrics, provider, worker};
pub use sendonce_domain as domain;
pub use sendonce_domain::{busy, crash, error, exit, files, logs, redact, shutdown};
pub use sendonce_http as http;
pub use sendonce_store as store;

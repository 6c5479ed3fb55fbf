//! The core of sendonce: what the program does, above the store and below the HTTP side and the
//! command line, which both call `app`.
//!
//! - `app`: the use cases (accounts, campaigns, subscribers and import, lists, suppressions,
//!   doubts, run, notify, check), each one function with typed input and an output struct of its
//!   own.
//! - `worker`: claims rows, renders them, calls providers with bounded concurrency and
//!   group-commits the outcomes — the only caller of providers; its routes and rate limiter.
//! - `provider`: outbound adapters (outbox, webhook, SMTP, Twilio, Resend, Postmark), their
//!   capabilities and the classification of their answers.
//! - `config`: the TOML file routing accounts and channels to providers.
//! - `metrics`: the process's counters, written in the Prometheus text format by `/metrics`.
//! - `wire`: an event out as the feed and the webhooks send it (the worker may not call `app`).

pub mod app;
pub mod config;
pub mod metrics;
pub mod provider;
pub mod wire;
pub mod worker;

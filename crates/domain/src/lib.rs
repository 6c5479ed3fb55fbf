//! The floor of sendonce, which every other crate may use and which uses none of them.
//!
//! Pure rules with no I/O: addresses and channels, attachments, states, job ids and keys, templates, content
//! checks, audience filters (segments), SMS segments, signed links (unsubscribe, confirm), API
//! tokens and their scopes, time, the retry policy. Beside them, what every layer shares: the
//! typed `error` and the `exit` codes it maps to, `files` (atomic writes, modes), `redact`
//! (secrets scrubbed from text that leaves the process), `busy` (refusing when full), `shutdown`
//! (the stop signal and the one runtime), `logs`, and named `crash` points (feature
//! `crash-points`).

pub mod address;
pub mod attachment;
pub mod bounce_auth;
pub mod busy;
pub mod clock;
pub mod content;
pub mod crash;
pub mod dsn;
pub mod error;
pub mod exit;
pub mod files;
pub mod headers;
pub mod links;
pub mod login;
pub mod logs;
pub mod model;
pub mod optin;
pub mod outhooks;
pub mod redact;
pub mod retry;
pub mod segment;
pub mod shutdown;
pub mod sms;
pub mod template;
pub mod token;
pub mod verp;
pub mod webhook;
pub mod window;

//! Pure rules with no I/O: addresses and channels, states, job ids and keys, templates, content
//! checks, audience filters (segments), SMS segments, signed links (unsubscribe, confirm), API tokens and their
//! scopes, time, the retry policy.

pub mod address;
pub mod clock;
pub mod content;
pub mod headers;
pub mod links;
pub mod login;
pub mod model;
pub mod optin;
pub mod retry;
pub mod segment;
pub mod sms;
pub mod template;
pub mod token;
pub mod webhook;

//! The core (`crates/core`: use cases, worker, providers) through the real binary: audiences,
//! content, lists, segments, notify, limits, routing, the providers against real servers, secrets,
//! tokens, regressions.

pub(crate) mod audience;
pub(crate) mod canary;
pub(crate) mod content;
pub(crate) mod defects;
pub(crate) mod dsn;
pub(crate) mod header_injection;
pub(crate) mod limits;
pub(crate) mod lists;
pub(crate) mod notify;
pub(crate) mod providers_http;
pub(crate) mod render_bounds;
pub(crate) mod routing;
pub(crate) mod secrets;
pub(crate) mod segments;
pub(crate) mod smtp;
pub(crate) mod tokens;
pub(crate) mod windows;

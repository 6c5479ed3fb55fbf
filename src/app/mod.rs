//! The use cases: what the CLI calls today and the HTTP server will call next. Each takes typed
//! input, reaches storage only through the store, and returns typed output.

pub mod check;
pub mod import;
pub mod notify;

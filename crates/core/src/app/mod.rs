//! The use cases: what the CLI calls today and the HTTP server will call next. Each takes typed
//! input, reaches storage only through the store, and returns typed output: structs of its own
//! (serde `Serialize`, the future API's wire format), never the store's rows.

pub mod accounts;
pub mod admins;
pub mod campaigns;
pub mod check;
pub mod config;
pub mod doctor;
pub mod doubts;
pub mod dsn;
pub mod events;
pub mod guard;
pub mod import;
pub mod limits;
pub mod lists;
pub mod messages;
pub mod migrate_store;
pub mod notify;
pub mod optin;
pub mod preview;
pub mod privacy;
pub mod run;
pub mod subscribers;
pub mod suppressions;
pub mod templates;
pub mod tokens;
pub mod unsubscribe;
pub mod webhooks;

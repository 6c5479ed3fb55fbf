//! Storage: the backend-neutral traits (grouped by concern), their input and row types, and
//! `open`, which picks the backend from the target. Today's backend is SQLite (`sqlite/`); a
//! second one (PostgreSQL) implements the same traits and passes `tests/store_contract.rs`.

mod addresses;
mod admin;
mod audience;
mod audit;
mod bench;
mod campaigns;
pub mod copy;
mod directory;
pub mod doctor;
mod ledger;
mod lists;
mod logins;
mod messages;
mod normalise;
mod notify;
mod optin;
mod pages;
mod ratelimit;
mod segment;
mod shared;
pub mod sql;
mod suppressions;
mod tokens;
mod unsubscribe;
mod webhooks;

pub mod postgres;
pub mod sqlite;

pub use admin::{
    Admin, Adopted, GuardState, Installation, LedgerCounts, OpenOptions, Place, Synchronous,
    Watermark,
};
pub use audience::{Audience, ImportReport, NewSubscriber, SkippedRow};
pub use audit::{Audit, AuditRow, AuditSnapshot};
pub use bench::Bench;
pub use campaigns::{
    AccountDoubtRow, Campaign, Campaigns, DoubtRow, NewCampaign, RecipientRow, ReportRow,
    ReportSearch, StatusCounts,
};
pub use directory::{AccountRow, CampaignRow, Directory, SubscriberChanges, SubscriberRow};
pub use ledger::{
    ActiveCampaign, ClaimRequest, Claimed, ClaimedRow, Ledger, Outcome, Record, RecordStats,
};
pub use lists::{
    prefix_bounds, AudienceCounts, AudienceQuery, ConfirmContent, LinkList, LinkState, ListChange,
    ListRow, Lists, MemberOrder, MemberPage, MemberRow, NewList, OptIn, UnsubscribeChange,
    UnsubscribeRequest,
};
pub use logins::{role, LoginRow, Logins, NewLogin, SessionRow, OPERATOR};
pub use messages::{MessageRow, Messages, NewMessage, Submitted};
pub use notify::{notify_job_id, Notifications, NotifyRow};
pub use optin::{Confirmation, MemberKey, MemberState, Optin};
pub use ratelimit::{refill, Grant, RateLimits};
pub use sqlite::{APPLICATION_ID, SCHEMA_VERSION};
pub use suppressions::{Suppression, SuppressionPage, Suppressions};
pub use tokens::{NewToken, TokenRow, Tokens};
pub use webhooks::{Applied, DeliveryEvent, WebhookAction, Webhooks};

use crate::error::Result;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Everything a store offers: one object the commands hold (`Arc<dyn Storage>`). Implemented
/// for every type that implements all the concerns.
pub trait Storage:
    Ledger
    + Installation
    + Campaigns
    + Audience
    + Lists
    + Directory
    + Suppressions
    + Audit
    + Notifications
    + Messages
    + Optin
    + RateLimits
    + Admin
    + Tokens
    + Logins
    + Webhooks
    + Send
    + std::marker::Sync
{
}

impl<T> Storage for T where
    T: Ledger
        + Installation
        + Campaigns
        + Audience
        + Lists
        + Directory
        + Suppressions
        + Audit
        + Notifications
        + Messages
        + Optin
        + RateLimits
        + Admin
        + Tokens
        + Logins
        + Webhooks
        + Send
        + std::marker::Sync
        + ?Sized
{
}

/// Which database `--db` (or `SENDONCE_DB`, a config file's `db`) names, decided once from its
/// text: the one place that looks at a URL scheme.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A SQLite database file.
    File(PathBuf),
    /// A PostgreSQL database (`postgres://…` or `postgresql://…`; the URL may hold a password,
    /// so it is only shown through [`Target::shown`]).
    Postgres(String),
}

impl Target {
    /// The target `text` names: a `postgres://` / `postgresql://` URL, else a file path.
    pub fn parse(text: &Path) -> Target {
        match text.to_str() {
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Target::Postgres(url.to_string())
            }
            _ => Target::File(text.to_path_buf()),
        }
    }

    /// `"sqlite"` or `"postgres"` (what `--json` output and `doctor` tell the user).
    pub fn kind(&self) -> &'static str {
        match self {
            Target::File(_) => "sqlite",
            Target::Postgres(_) => "postgres",
        }
    }

    /// The file, for a SQLite target.
    pub fn file(&self) -> Option<&Path> {
        match self {
            Target::File(p) => Some(p),
            Target::Postgres(_) => None,
        }
    }

    /// The URL, for a PostgreSQL target.
    pub fn url(&self) -> Option<&str> {
        match self {
            Target::File(_) => None,
            Target::Postgres(u) => Some(u),
        }
    }

    /// The target as it may be shown (messages, output): a URL without its password.
    pub fn shown(&self) -> String {
        match self {
            Target::File(p) => p.display().to_string(),
            Target::Postgres(u) => postgres::redact(u),
        }
    }

    /// The schema version this binary writes for this backend. The two backends number their
    /// migrations apart (SQLite's file has had more of them), so a version is shown with its
    /// backend.
    pub fn schema_version(&self) -> i64 {
        match self {
            Target::File(_) => sqlite::SCHEMA_VERSION,
            Target::Postgres(_) => i64::from(postgres::SCHEMA_VERSION),
        }
    }
}

/// Open the store `target` names.
pub fn open(target: &Target, opts: &OpenOptions) -> Result<Arc<dyn Storage>> {
    match target {
        Target::Postgres(url) => Ok(Arc::new(postgres::PgStore::open(url, opts)?)),
        Target::File(path) => Ok(Arc::new(open_file(path, opts)?)),
    }
}

/// Open the SQLite file at `path` (finishing schema 0017's address step, which SQL cannot do
/// on SQLite, when the open may write).
pub fn open_file(path: &Path, opts: &OpenOptions) -> Result<sqlite::SqliteStore> {
    let store = sqlite::SqliteStore::open(path, opts)?;
    if !opts.read_only {
        store.finish_address_step()?;
    }
    Ok(store)
}

//! Storage: the backend-neutral traits (grouped by concern), their input and row types, and
//! `open`, which picks the backend from the target. Today's backend is SQLite (`sqlite/`); a
//! second one (PostgreSQL) implements the same traits and passes `tests/store_contract.rs`.

mod admin;
mod audience;
mod audit;
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
mod ratelimit;
mod segment;
mod shared;
pub mod sql;
mod suppressions;
mod tokens;
mod webhooks;

pub mod postgres;
pub mod sqlite;

pub use admin::{Admin, Adopted, GuardState, LedgerCounts, OpenOptions, Place, Sync, Watermark};
pub use audience::{Audience, ImportReport, NewSubscriber, SkippedRow};
pub use audit::{Audit, AuditRow, AuditSnapshot};
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
pub use notify::{Notifications, NotifyRow};
pub use optin::{Confirmation, MemberKey, MemberState, Optin};
pub use ratelimit::{Grant, RateLimits};
pub use sqlite::{notify_job_id, refill, APPLICATION_ID, SCHEMA_VERSION};
pub use suppressions::{Suppression, SuppressionPage, Suppressions};
pub use tokens::{NewToken, TokenRow, Tokens};
pub use webhooks::{Applied, DeliveryEvent, WebhookAction, Webhooks};

use crate::error::Result;
use std::path::Path;
use std::sync::Arc;

/// Everything a store offers: one object the commands hold (`Arc<dyn Storage>`). Implemented
/// for every type that implements all the concerns.
pub trait Storage:
    Ledger
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

/// Open the store at `target`: a SQLite database file, or a `postgres://` /
/// `postgresql://` URL (`postgres/`).
pub fn open(target: &Path, opts: &OpenOptions) -> Result<Arc<dyn Storage>> {
    let text = target.to_string_lossy();
    if postgres::is_url(&text) {
        return Ok(Arc::new(postgres::PgStore::open(&text, opts)?));
    }
    let store = sqlite::SqliteStore::open(target, opts)?;
    if !opts.read_only {
        // Schema 0017's address step (SQL cannot normalise Unicode); PostgreSQL runs its twin
        // inside its migration transaction.
        store.finish_address_step()?;
    }
    Ok(Arc::new(store))
}

/// Which backend `target` names: `"postgres"` for a `postgres://` URL, else `"sqlite"` (what
/// `--json` output and `doctor` tell the user).
pub fn kind_of(target: &Path) -> &'static str {
    if postgres::is_url(&target.to_string_lossy()) {
        "postgres"
    } else {
        "sqlite"
    }
}

/// The schema version this binary writes for the backend `target` names. The two backends
/// number their migrations apart (SQLite's file has had more of them), so a version is shown
/// with its backend.
pub fn schema_version_of(target: &Path) -> i64 {
    if postgres::is_url(&target.to_string_lossy()) {
        i64::from(postgres::SCHEMA_VERSION)
    } else {
        sqlite::SCHEMA_VERSION
    }
}

/// `target` as it may be shown (messages, output): a URL without its password.
pub fn shown(target: &Path) -> String {
    let text = target.to_string_lossy();
    if postgres::is_url(&text) {
        postgres::redact(&text)
    } else {
        text.into_owned()
    }
}

//! The store: the concern traits (each written once over the seam of `sql.rs`, in its own file),
//! their input and row types, [`Store`] (the SQLite or PostgreSQL backend the commands hold) and
//! [`open`], which picks the backend from a [`Target`] parsed once. Both backends pass
//! `tests/store/store_contract.rs`.

mod addresses;
mod admin;
mod audience;
mod audit;
mod campaigns;
pub mod copy;
mod directory;
pub mod doctor;
pub mod driver;
mod endpoints;
mod events;
pub mod group;
mod ledger;
mod lists;
mod logins;
mod messages;
mod normalise;
mod notify;
mod optin;
mod pages;
mod privacy;
mod ratelimit;
mod segment;
mod shared;
pub mod sql;
mod suppressions;
mod templates;
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
pub use campaigns::{
    AccountDoubtRow, Campaign, Campaigns, DoubtRow, NewCampaign, RecipientRow, ReportRow,
    ReportSearch, SendWindows, StatusCounts,
};
pub use directory::{AccountRow, CampaignRow, Directory, SubscriberChanges, SubscriberRow};
pub use endpoints::{
    Attempt, DeliveryRow, DeliveryTurn, DueDelivery, EndpointChange, EndpointRow, Endpoints,
    NewEndpoint, NextStep, Replay,
};
pub use events::{type_matches, Cursor, EventRow, Events, FeedQuery, SendFacts};
pub use ledger::{
    ActiveCampaign, ClaimRequest, Claimed, ClaimedRow, Ledger, MessageContent, Outcome, Record,
    RecordStats,
};
pub use lists::{
    prefix_bounds, AudienceCounts, AudienceQuery, ConfirmContent, LinkList, LinkState, ListChange,
    ListRow, Lists, MemberOrder, MemberPage, MemberRow, NewList, OptIn, UnsubscribeChange,
    UnsubscribeRequest,
};
pub use logins::{role, LoginRow, Logins, NewLogin, SessionRow, OPERATOR};
pub use messages::{Answer, MessageRow, MessageSearch, Messages, NewMessage, Submitted};
pub use notify::{notify_job_id, Notifications, NotifyRow};
pub use optin::{Confirmation, MemberKey, MemberState, Optin};
pub use privacy::{
    ApiMessageRow, Consent, ConsentRow, Erased, EventRecord, MembershipRow, PersonData, PersonRow,
    Privacy, Seen, SendRow,
};
pub use ratelimit::{refill, Grant, RateLimits};
pub use sqlite::{APPLICATION_ID, SCHEMA_VERSION};
pub use suppressions::{Suppression, SuppressionPage, Suppressions};
pub use templates::{NewTemplate, TemplateRow, Templates};
pub use tokens::{NewToken, TokenRow, Tokens};
pub use webhooks::{Applied, DeliveryEvent, WebhookAction, Webhooks};

use sendonce_domain::error::Result;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The store the commands hold: one of the two backends, chosen once by [`open`]. Every
/// concern (the traits above, written once over [`sql::Db`]) is implemented for it through its
/// [`Db`](sql::Db) and [`LedgerStore`](ledger::LedgerStore); what only a SQLite file has is
/// reached through [`Store::file`], on no trait PostgreSQL implements.
pub enum Store {
    Sqlite(sqlite::SqliteStore),
    Postgres(postgres::PgStore),
}

/// Every concern trait in scope (unnamed, so nothing is shadowed), for code that holds a
/// [`Store`]: `use crate::prelude::*`.
pub mod prelude {
    pub use super::Admin as _;
    pub use super::Audience as _;
    pub use super::Audit as _;
    pub use super::Campaigns as _;
    pub use super::Directory as _;
    pub use super::Endpoints as _;
    pub use super::Events as _;
    pub use super::Installation as _;
    pub use super::Ledger as _;
    pub use super::Lists as _;
    pub use super::Logins as _;
    pub use super::Messages as _;
    pub use super::Notifications as _;
    pub use super::Optin as _;
    pub use super::Privacy as _;
    pub use super::RateLimits as _;
    pub use super::Suppressions as _;
    pub use super::Templates as _;
    pub use super::Tokens as _;
    pub use super::Webhooks as _;
}

/// `$e` on whichever backend `$s` holds.
macro_rules! each_backend {
    ($s:expr, $b:ident => $e:expr) => {
        match $s {
            Store::Sqlite($b) => $e,
            Store::Postgres($b) => $e,
        }
    };
}

impl Store {
    /// The SQLite file behind this store, for what only a file has (a snapshot open, the WAL,
    /// an owner to adopt, an online backup); None on PostgreSQL.
    pub fn file(&self) -> Option<&sqlite::SqliteStore> {
        match self {
            Store::Sqlite(s) => Some(s),
            Store::Postgres(_) => None,
        }
    }
}

impl sql::Db for Store {
    fn write<T>(&self, f: impl FnMut(&mut dyn sql::Tx) -> Result<T>) -> Result<T> {
        each_backend!(self, s => s.write(f))
    }

    fn read<T>(&self, f: impl FnOnce(&mut dyn sql::Tx) -> Result<T>) -> Result<T> {
        each_backend!(self, s => s.read(f))
    }
}

impl ledger::LedgerStore for Store {
    fn count_claim(&self, tx: &mut dyn sql::Tx, claimed_at: i64) -> Result<Option<i64>> {
        each_backend!(self, s => s.count_claim(tx, claimed_at))
    }

    fn claim_committed(&self, generation: Option<i64>, now: i64) -> Result<()> {
        each_backend!(self, s => s.claim_committed(generation, now))
    }

    fn checkpoint_wal_if_large(&self) -> Result<bool> {
        each_backend!(self, s => s.checkpoint_wal_if_large())
    }
}

impl Admin for Store {
    fn path(&self) -> &Path {
        each_backend!(self, s => s.path())
    }

    fn integrity_check(&self) -> Result<String> {
        each_backend!(self, s => s.integrity_check())
    }

    fn journal_mode(&self) -> Result<String> {
        each_backend!(self, s => s.journal_mode())
    }

    fn check_writable(&self) -> Result<()> {
        each_backend!(self, s => s.check_writable())
    }

    fn guard_state(&self) -> Result<GuardState> {
        each_backend!(self, s => s.guard_state())
    }

    fn quick_check(&self, full: bool) -> Result<Vec<String>> {
        each_backend!(self, s => s.quick_check(full))
    }
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
pub fn open(target: &Target, opts: &OpenOptions) -> Result<Arc<Store>> {
    Ok(Arc::new(match target {
        Target::Postgres(url) => Store::Postgres(postgres::PgStore::open(url, opts)?),
        Target::File(path) => Store::Sqlite(open_file(path, opts)?),
    }))
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

//! Accounts (tenants) and the database they live in: `init`, add an account, list them with
//! their sizes. Outputs are this module's own structs, the wire format of the future API.

use sendonce_domain::error::Result;
use sendonce_store::prelude::*;
use sendonce_store::Store;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// A database just created or upgraded.
#[derive(Debug, Clone, Serialize)]
pub struct Database {
    pub db: PathBuf,
    pub schema_version: i64,
    pub journal_mode: String,
    pub installation_id: String,
}

/// What `init` reports about the database at `db`, opened (and created) as `store`.
pub fn init(store: &Store, db: &Path) -> Result<Database> {
    Ok(Database {
        db: db.to_path_buf(),
        schema_version: sendonce_store::SCHEMA_VERSION,
        journal_mode: store.journal_mode()?,
        installation_id: store.installation_id()?,
    })
}

/// A new account: its id and the name as given.
#[derive(Debug, Clone, Serialize)]
pub struct Added {
    pub id: i64,
    pub name: String,
}

/// Add an account (the name must be non-empty and unique).
pub fn add(store: &Store, name: &str) -> Result<Added> {
    let id = store.add_account(name)?;
    Ok(Added {
        id,
        name: name.to_string(),
    })
}

/// One account with how many subscribers and campaigns it has.
#[derive(Debug, Clone, Serialize)]
pub struct Account {
    pub id: i64,
    pub name: String,
    pub subscribers: i64,
    pub campaigns: i64,
    /// Appended to every SMS of the account's new campaigns.
    pub sms_footer: Option<String>,
    #[serde(serialize_with = "sendonce_domain::clock::ser_ms")]
    pub created_at: i64,
}

/// Every account.
#[derive(Debug, Clone, Serialize)]
pub struct Accounts {
    pub accounts: Vec<Account>,
}

/// List the accounts.
pub fn list(store: &Store) -> Result<Accounts> {
    let accounts = store
        .accounts()?
        .into_iter()
        .map(|a| Account {
            id: a.id,
            name: a.name,
            subscribers: a.subscribers,
            campaigns: a.campaigns,
            sms_footer: a.sms_footer,
            created_at: a.created_at,
        })
        .collect();
    Ok(Accounts { accounts })
}

/// How many accounts this server holds.
pub fn count(store: &Store) -> Result<u64> {
    store.account_count()
}

/// An account's settings after `update`.
#[derive(Debug, Clone, Serialize)]
pub struct Updated {
    pub id: i64,
    pub sms_footer: Option<String>,
}

/// Change an account's settings: `sms_footer` (None: unchanged; blank: removed). Campaigns
/// already created keep the footer they were created with.
pub fn update(store: &Store, account: &str, sms_footer: Option<&str>) -> Result<Updated> {
    let id = store.resolve_account(account)?;
    if let Some(f) = sms_footer {
        let f = sendonce_domain::content::check_sms_footer(f)?;
        store.set_sms_footer(id, f.as_deref())?;
    }
    Ok(Updated {
        id,
        sms_footer: store.sms_footer(id)?,
    })
}

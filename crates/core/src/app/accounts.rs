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
    #[serde(flatten)]
    pub windows: Windows,
    #[serde(serialize_with = "sendonce_domain::clock::ser_ms")]
    pub created_at: i64,
}

/// An account's zone, default send window and SMS quiet hours: what its new campaigns copy
/// (`domain::window`; docs/campaigns.md, "Send windows").
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Windows {
    pub tz: String,
    pub send_window: Option<String>,
    pub sms_hours: Option<String>,
}

impl From<sendonce_store::SendWindows> for Windows {
    fn from(w: sendonce_store::SendWindows) -> Self {
        Windows {
            tz: w.tz.unwrap_or_else(|| "UTC".into()),
            send_window: w.window,
            sms_hours: w.sms_hours,
        }
    }
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
            windows: a.windows.into(),
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
    #[serde(flatten)]
    pub windows: Windows,
}

/// What `update` changes; None leaves a setting as it is.
#[derive(Debug, Clone, Default)]
pub struct Changes {
    /// Blank: removed.
    pub sms_footer: Option<String>,
    /// An IANA zone name.
    pub tz: Option<String>,
    /// `HH:MM-HH:MM`, or `any`: no default window.
    pub send_window: Option<String>,
    /// `HH:MM-HH:MM`, or `off`: no quiet hours.
    pub sms_hours: Option<String>,
}

/// Change an account's settings. Campaigns already created keep the footer, zone, window and
/// quiet hours they were created with. Every value is checked before anything is written.
pub fn update(store: &Store, account: &str, ch: &Changes) -> Result<Updated> {
    let id = store.resolve_account(account)?;
    let footer = ch
        .sms_footer
        .as_deref()
        .map(sendonce_domain::content::check_sms_footer)
        .transpose()?;
    let mut w = store.send_defaults(id)?;
    if let Some(tz) = &ch.tz {
        w.tz = Some(
            sendonce_domain::window::zone(tz)?
                .iana_name()
                .unwrap_or(tz)
                .to_string(),
        );
    }
    if let Some(v) = &ch.send_window {
        w.window = window_choice(v, "any", "--send-window")?;
    }
    if let Some(v) = &ch.sms_hours {
        w.sms_hours = window_choice(v, "off", "--sms-hours")?;
    }
    check_overlap(w.window.as_deref(), w.sms_hours.as_deref())?;
    if let Some(f) = footer {
        store.set_sms_footer(id, f.as_deref())?;
    }
    if ch.tz.is_some() || ch.send_window.is_some() || ch.sms_hours.is_some() {
        store.set_send_defaults(id, &w)?;
    }
    Ok(Updated {
        id,
        sms_footer: store.sms_footer(id)?,
        windows: store.send_defaults(id)?.into(),
    })
}

/// A send window and SMS quiet hours must share some time, or no SMS could ever go out.
pub fn check_overlap(window: Option<&str>, sms_hours: Option<&str>) -> Result<()> {
    use sendonce_domain::window::Window;
    let (Some(a), Some(b)) = (window, sms_hours) else {
        return Ok(());
    };
    if Window::parse(a)?.overlaps(&Window::parse(b)?) {
        return Ok(());
    }
    Err(sendonce_domain::error::Error::invalid(format!(
        "send window {a} and SMS quiet hours {b} share no time: no SMS could go out"
    )))
}

/// A window as given to `flag` (`--send-window`, or the API's `send_window`): `HH:MM-HH:MM`
/// (printed back in one form), or the word that means none (`any`, `off`).
pub fn window_choice(v: &str, none: &str, flag: &str) -> Result<Option<String>> {
    if v.trim().eq_ignore_ascii_case(none) {
        return Ok(None);
    }
    let w = sendonce_domain::window::Window::parse(v).map_err(|e| e.context(flag))?;
    Ok(Some(w.to_string()))
}

//! Looking things up and listing them (`Directory`): accounts by id or name, campaigns, the
//! subscribers of an account, and the few edits a subscriber needs (update, remove). Written
//! once for both stores over `sql::Tx`.

use crate::campaigns::SendWindows;
use crate::shared::{get_at, require_account};
use crate::sql::{args, Db, Row, Tx};
use sendonce_domain::address::{normalize_email, normalize_phone, Channel};
use sendonce_domain::error::{Error, Result};
use sendonce_domain::model::CampaignStatus;

/// An account with how many subscribers and campaigns it has.
#[derive(Debug, Clone)]
pub struct AccountRow {
    pub id: i64,
    pub name: String,
    pub subscribers: i64,
    pub campaigns: i64,
    /// Appended to the account's new SMS campaigns.
    pub sms_footer: Option<String>,
    /// The zone, send window and SMS quiet hours its new campaigns copy.
    pub windows: SendWindows,
    pub created_at: i64,
}

/// A campaign as `campaign list` shows it.
#[derive(Debug, Clone)]
pub struct CampaignRow {
    pub id: i64,
    pub account_id: i64,
    pub account: String,
    pub name: String,
    pub channel: String,
    pub status: String,
    pub scheduled_for: Option<i64>,
    pub created_at: i64,
}

/// A subscriber as `subscriber list|show` shows it.
#[derive(Debug, Clone)]
pub struct SubscriberRow {
    pub id: i64,
    pub account_id: i64,
    pub email: Option<String>,
    pub phone: Option<String>,
    pub name: Option<String>,
    pub status: String,
    /// JSON object text.
    pub attrs: String,
    pub created_at: i64,
}

/// What `subscriber update` changes (None: unchanged). Validated by the caller.
#[derive(Debug, Clone, Default)]
pub struct SubscriberChanges {
    pub name: Option<String>,
    pub status: Option<String>,
    /// Attributes to set (JSON object text, merged into the existing ones).
    pub attrs: Option<String>,
}

/// Finding and listing accounts, campaigns and subscribers.
pub trait Directory: Send + Sync {
    /// An account given as an id (`3`) or a name (`acme`); an unknown one is a usage error.
    fn resolve_account(&self, key: &str) -> Result<i64>;
    fn account_id_by_name(&self, name: &str) -> Result<i64>;
    fn accounts(&self) -> Result<Vec<AccountRow>>;
    /// How many accounts the store holds (one indexed count; `accounts` counts each one's
    /// subscribers).
    fn account_count(&self) -> Result<u64>;
    /// The name of account `id`; an unknown id is `NotFound`.
    fn account_name(&self, id: i64) -> Result<String>;
    /// The SMS opt-out footer of an account (None: none).
    fn sms_footer(&self, account: i64) -> Result<Option<String>>;
    /// Set (or, with None, clear) the footer the account's new SMS campaigns get.
    fn set_sms_footer(&self, account: i64, footer: Option<&str>) -> Result<()>;
    /// The account's zone, default send window and SMS quiet hours (its tz is always set).
    fn send_defaults(&self, account: i64) -> Result<SendWindows>;
    /// Replace them (validated by the caller; a None tz leaves the zone as it is).
    fn set_send_defaults(&self, account: i64, w: &SendWindows) -> Result<()>;
    fn list_campaigns(
        &self,
        account: Option<i64>,
        status: Option<CampaignStatus>,
    ) -> Result<Vec<CampaignRow>>;
    /// One page of an account's subscribers in id order, after `after_id`, optionally in one
    /// status. Removed subscribers are not listed.
    fn list_subscribers(
        &self,
        account: i64,
        status: Option<&str>,
        after_id: i64,
        limit: usize,
    ) -> Result<Vec<SubscriberRow>>;
    /// A subscriber by id, or by email address / phone number within an account.
    fn find_subscriber(&self, account: i64, key: &str) -> Result<SubscriberRow>;
    fn update_subscriber(
        &self,
        account: i64,
        id: i64,
        ch: &SubscriberChanges,
    ) -> Result<SubscriberRow>;
    /// Remove a subscriber: never sent to again (its addresses are suppressed); past sends
    /// keep naming it, and adding the same address again brings it back.
    fn remove_subscriber(&self, account: i64, id: i64) -> Result<()>;
}

const SUBSCRIBER_COLS: &str = "id, account_id, email, phone, name, status, attrs, created_at";

fn subscriber_from_row(r: Row<'_>) -> Result<SubscriberRow> {
    Ok(SubscriberRow {
        id: r.get(0)?,
        account_id: r.get(1)?,
        email: r.get(2)?,
        phone: r.get(3)?,
        name: r.get(4)?,
        status: r.get(5)?,
        attrs: r.get(6)?,
        created_at: r.get(7)?,
    })
}

fn campaign_from_row(r: Row<'_>) -> Result<CampaignRow> {
    Ok(CampaignRow {
        id: r.get(0)?,
        account_id: r.get(1)?,
        account: r.get(2)?,
        name: r.get(3)?,
        channel: get_at::<Channel>(r, 4, "campaigns.channel")?.to_string(),
        status: get_at::<CampaignStatus>(r, 5, "campaigns.status")?.to_string(),
        scheduled_for: r.get(6)?,
        created_at: r.get(7)?,
    })
}

/// A subscriber key (id, email or phone) as (id, normalised email, E.164), else as given.
pub(crate) fn key_forms(key: &str) -> (Option<i64>, String, String) {
    let by_id = key.parse::<i64>().ok();
    let email = normalize_email(key).map_or_else(|_| key.to_lowercase(), |(_, n)| n);
    let phone = normalize_phone(key).unwrap_or_else(|_| key.to_string());
    (by_id, email, phone)
}

/// The usage error of an unknown account key, listing the accounts there are.
fn unknown_account<S: Db>(store: &S, key: &str) -> Error {
    let names: Vec<String> = store
        .accounts()
        .map(|a| {
            a.into_iter()
                .map(|a| format!("{} ({})", a.name, a.id))
                .collect()
        })
        .unwrap_or_default();
    let there = if names.is_empty() {
        "there are none yet: `sendonce account add NAME`".to_string()
    } else {
        format!("accounts: {}", names.join(", "))
    };
    match key.parse::<i64>() {
        Ok(id) => Error::not_found(format!("unknown account id {id}; {there}")),
        Err(_) => Error::not_found(format!("unknown account {key:?}; {there}")),
    }
}

/// Change a subscriber's name, status or attributes (merged as SQLite's `json_patch` does),
/// its row locked; the new row.
fn update_subscriber(
    tx: &mut dyn Tx,
    account: i64,
    id: i64,
    ch: &SubscriberChanges,
) -> Result<SubscriberRow> {
    let d = tx.dialect();
    let current: Option<String> = tx.scalar_opt(
        &format!(
            "SELECT attrs FROM subscribers
             WHERE id = ?1 AND account_id = ?2 AND removed_at IS NULL{}",
            d.for_update
        ),
        &args![id, account],
    )?;
    let Some(current) = current else {
        return Err(Error::not_found(format!(
            "no subscriber {id} in account {account}"
        )));
    };
    let attrs = match &ch.attrs {
        Some(patch) => d.json_patch(tx, &current, patch)?,
        None => current,
    };
    tx.query_opt(
        &format!(
            "UPDATE subscribers SET name = coalesce(?3, name), status = coalesce(?4, status),
                    attrs = ?5
             WHERE id = ?1 AND account_id = ?2
             RETURNING {SUBSCRIBER_COLS}"
        ),
        &args![id, account, &ch.name, &ch.status, &attrs],
        subscriber_from_row,
    )?
    .ok_or_else(|| Error::not_found(format!("no subscriber {id} in account {account}")))
}

/// Remove a subscriber under the account's opt-out lock: blanked, and its addresses
/// suppressed.
fn remove_subscriber(tx: &mut dyn Tx, account: i64, id: i64, now: i64) -> Result<()> {
    let now = now.max(tx.dialect().lock_opt_outs(tx, account)?);
    let n = tx.exec(
        "UPDATE subscribers SET name = NULL, attrs = '{}', status = 'unsubscribed',
                removed_at = ?3
         WHERE id = ?1 AND account_id = ?2 AND removed_at IS NULL",
        &args![id, account, now],
    )?;
    if n != 1 {
        return Err(Error::not_found(format!(
            "no subscriber {id} in account {account}"
        )));
    }
    // Rows already queued for this subscriber must not go out either: the claim checks
    // suppressions, so its addresses are suppressed (undone if it is re-added).
    tx.exec(
        "INSERT INTO suppressions (account_id, channel, address, reason, source, created_at)
         SELECT account_id, 'email', email_norm, 'subscriber removed', 'removal',
                CAST(?2 AS BIGINT)
         FROM subscribers WHERE id = ?1 AND email_norm IS NOT NULL
         UNION ALL
         SELECT account_id, 'sms', phone, 'subscriber removed', 'removal', ?2
         FROM subscribers WHERE id = ?1 AND phone IS NOT NULL
         ON CONFLICT DO NOTHING",
        &args![id, now],
    )?;
    Ok(())
}

impl<S: Db> Directory for S {
    /// An account given as an id (`3`) or a name (`acme`); an unknown one is a usage error
    /// that lists the accounts there are.
    fn resolve_account(&self, key: &str) -> Result<i64> {
        let key = key.trim();
        let by_id = key.parse::<i64>().ok();
        let found: Option<i64> = self.read(|tx| {
            tx.scalar_opt(
                "SELECT id FROM accounts WHERE id = ?1 OR name = ?2
                 ORDER BY coalesce(id = ?1, FALSE) DESC LIMIT 1",
                &args![by_id, key],
            )
        })?;
        found.ok_or_else(|| unknown_account(self, key))
    }

    /// An account by its exact name.
    fn account_id_by_name(&self, name: &str) -> Result<i64> {
        let found: Option<i64> =
            self.read(|tx| tx.scalar_opt("SELECT id FROM accounts WHERE name = ?1", &args![name]))?;
        found.ok_or_else(|| Error::not_found(format!("unknown account name {name:?}")))
    }

    fn account_name(&self, id: i64) -> Result<String> {
        let found: Option<String> =
            self.read(|tx| tx.scalar_opt("SELECT name FROM accounts WHERE id = ?1", &args![id]))?;
        found.ok_or_else(|| Error::not_found(format!("unknown account id {id}")))
    }

    fn account_count(&self) -> Result<u64> {
        self.read(|tx| tx.scalar("SELECT count(*) FROM accounts", &[]))
    }

    fn accounts(&self) -> Result<Vec<AccountRow>> {
        self.read(|tx| {
            let sql = format!(
                "SELECT a.id, a.name, a.created_at,
                        (SELECT count(*) FROM subscribers s
                         WHERE s.account_id = a.id AND s.removed_at IS NULL),
                        (SELECT count(*) FROM campaigns k
                         WHERE k.account_id = a.id AND k.kind = 'campaign'
                           AND k.name NOT {} 'notify:%'),
                        a.sms_footer, a.tz, a.send_window, a.sms_hours
                 FROM accounts a ORDER BY a.id",
                tx.dialect().like_ci
            );
            tx.query(&sql, &[], |r| {
                Ok(AccountRow {
                    id: r.get(0)?,
                    name: r.get(1)?,
                    created_at: r.get(2)?,
                    subscribers: r.get(3)?,
                    campaigns: r.get(4)?,
                    sms_footer: r.get(5)?,
                    windows: SendWindows {
                        tz: r.get(6)?,
                        window: r.get(7)?,
                        sms_hours: r.get(8)?,
                    },
                })
            })
        })
    }

    fn sms_footer(&self, account: i64) -> Result<Option<String>> {
        let found: Option<Option<String>> = self.read(|tx| {
            tx.query_opt(
                "SELECT sms_footer FROM accounts WHERE id = ?1",
                &args![account],
                |r| r.get(0),
            )
        })?;
        found.ok_or_else(|| Error::not_found(format!("unknown account id {account}")))
    }

    fn set_sms_footer(&self, account: i64, footer: Option<&str>) -> Result<()> {
        self.write(|tx| {
            require_account(tx, account)?;
            tx.exec(
                "UPDATE accounts SET sms_footer = ?2 WHERE id = ?1",
                &args![account, footer],
            )?;
            Ok(())
        })
    }

    fn send_defaults(&self, account: i64) -> Result<SendWindows> {
        let found = self.read(|tx| {
            tx.query_opt(
                "SELECT tz, send_window, sms_hours FROM accounts WHERE id = ?1",
                &args![account],
                |r| {
                    Ok(SendWindows {
                        tz: r.get(0)?,
                        window: r.get(1)?,
                        sms_hours: r.get(2)?,
                    })
                },
            )
        })?;
        found.ok_or_else(|| Error::not_found(format!("unknown account id {account}")))
    }

    fn set_send_defaults(&self, account: i64, w: &SendWindows) -> Result<()> {
        self.write(|tx| {
            require_account(tx, account)?;
            tx.exec(
                "UPDATE accounts SET tz = coalesce(?2, tz), send_window = ?3, sms_hours = ?4
                 WHERE id = ?1",
                &args![
                    account,
                    w.tz.as_deref(),
                    w.window.as_deref(),
                    w.sms_hours.as_deref()
                ],
            )?;
            Ok(())
        })
    }

    /// Campaigns, newest first, optionally of one account and in one state.
    fn list_campaigns(
        &self,
        account: Option<i64>,
        status: Option<CampaignStatus>,
    ) -> Result<Vec<CampaignRow>> {
        self.read(|tx| {
            tx.query(
                "SELECT k.id, k.account_id, a.name, k.name, k.channel, k.status,
                        k.scheduled_for, k.created_at
                 FROM campaigns k JOIN accounts a ON a.id = k.account_id
                 WHERE (CAST(?1 AS BIGINT) IS NULL OR k.account_id = ?1)
                   AND (CAST(?2 AS TEXT) IS NULL OR k.status = ?2)
                   AND k.kind = 'campaign'
                 ORDER BY k.id DESC",
                &args![account, status],
                campaign_from_row,
            )
        })
    }

    /// One page of an account's subscribers in id order, after `after_id`, optionally in one
    /// status. Removed subscribers are not listed.
    fn list_subscribers(
        &self,
        account: i64,
        status: Option<&str>,
        after_id: i64,
        limit: usize,
    ) -> Result<Vec<SubscriberRow>> {
        // A usize above i64::MAX is no limit.
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(|tx| {
            tx.query(
                &format!(
                    "SELECT {SUBSCRIBER_COLS} FROM subscribers
                     WHERE account_id = ?1 AND removed_at IS NULL AND id > ?2
                       AND (CAST(?3 AS TEXT) IS NULL OR status = ?3)
                     ORDER BY id LIMIT ?4"
                ),
                &args![account, after_id, status, limit],
                subscriber_from_row,
            )
        })
    }

    /// A subscriber by id, or by email address / phone number within an account.
    fn find_subscriber(&self, account: i64, key: &str) -> Result<SubscriberRow> {
        let key = key.trim();
        let (by_id, email, phone) = key_forms(key);
        let row = self.read(|tx| {
            tx.query_opt(
                &format!(
                    "SELECT {SUBSCRIBER_COLS} FROM subscribers
                     WHERE account_id = ?1 AND removed_at IS NULL
                       AND (id = ?2 OR email_norm = ?3 OR phone = ?4)
                     ORDER BY coalesce(id = ?2, FALSE) DESC, id LIMIT 1"
                ),
                &args![account, by_id, &email, &phone],
                subscriber_from_row,
            )
        })?;
        row.ok_or_else(|| {
            Error::not_found(format!(
                "no subscriber {key:?} in account {account} (give its id, email or phone)"
            ))
        })
    }

    /// Change a subscriber's name, status or attributes (merged). Returns the new row.
    fn update_subscriber(
        &self,
        account: i64,
        id: i64,
        ch: &SubscriberChanges,
    ) -> Result<SubscriberRow> {
        self.write(|tx| update_subscriber(tx, account, id, ch))
    }

    /// Remove a subscriber: blanked (no name, no attributes, `unsubscribed`), listed nowhere
    /// and never sent to (its addresses are suppressed, so rows already queued for it are not
    /// sent either); the ledger rows of past sends keep naming it. The row itself stays
    /// (deleting it would have to search the whole ledger for rows that name it); adding the
    /// same address again brings it back.
    fn remove_subscriber(&self, account: i64, id: i64) -> Result<()> {
        let now = sendonce_domain::clock::now_ms();
        self.write(|tx| remove_subscriber(tx, account, id, now))
    }
}

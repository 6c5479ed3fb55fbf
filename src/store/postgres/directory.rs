//! `Directory` on PostgreSQL: the same lookups and listings as `sqlite/directory.rs`, the same
//! errors. Two details kept from SQLite on purpose: `campaign list` leaves out the
//! `notify:` campaigns case-insensitively (SQLite's `LIKE`), and `subscriber update` merges
//! attributes with SQLite's own `json_patch` (run on an in-memory SQLite connection), so the
//! stored JSON text is byte for byte what SQLite would store (jsonb would reorder the keys).

use super::ledger::transaction;
use super::PgStore;
use crate::domain::address::Channel;
use crate::domain::model::CampaignStatus;
use crate::error::{Error, Result};
use crate::store::{AccountRow, CampaignRow, Directory, SubscriberChanges, SubscriberRow};
use tokio_postgres::Row;

const SUBSCRIBER_COLS: &str =
    "id, account_id, email, phone, name, status, attrs, created_at FROM subscribers";

fn subscriber_from_row(r: &Row) -> SubscriberRow {
    SubscriberRow {
        id: r.get(0),
        account_id: r.get(1),
        email: r.get(2),
        phone: r.get(3),
        name: r.get(4),
        status: r.get(5),
        attrs: r.get(6),
        created_at: r.get(7),
    }
}

impl Directory for PgStore {
    fn resolve_account(&self, key: &str) -> Result<i64> {
        let key = key.trim().to_string();
        let by_id = key.parse::<i64>().ok();
        let lookup = key.clone();
        let found: Option<i64> = self.run(move |pool| async move {
            let c = pool.get().await?;
            Ok(c.query_opt(
                "SELECT id FROM accounts WHERE id = $1 OR name = $2
                 ORDER BY coalesce(id = $1, FALSE) DESC LIMIT 1",
                &[&by_id, &lookup],
            )
            .await?
            .map(|r| r.get(0)))
        })?;
        found.ok_or_else(|| {
            let names: Vec<String> = self
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
            match by_id {
                Some(id) => Error::not_found(format!("unknown account id {id}; {there}")),
                None => Error::not_found(format!("unknown account {key:?}; {there}")),
            }
        })
    }

    fn account_id_by_name(&self, name: &str) -> Result<i64> {
        let lookup = name.to_string();
        let found: Option<i64> = self.run(move |pool| async move {
            let c = pool.get().await?;
            Ok(
                c.query_opt("SELECT id FROM accounts WHERE name = $1", &[&lookup])
                    .await?
                    .map(|r| r.get(0)),
            )
        })?;
        found.ok_or_else(|| Error::not_found(format!("unknown account name {name:?}")))
    }

    fn account_name(&self, id: i64) -> Result<String> {
        let found: Option<String> = self.run(move |pool| async move {
            let c = pool.get().await?;
            Ok(
                c.query_opt("SELECT name FROM accounts WHERE id = $1", &[&id])
                    .await?
                    .map(|r| r.get(0)),
            )
        })?;
        found.ok_or_else(|| Error::not_found(format!("unknown account id {id}")))
    }

    fn account_count(&self) -> Result<u64> {
        self.run(|pool| async move {
            let c = pool.get().await?;
            let n: i64 = c
                .query_one("SELECT count(*) FROM accounts", &[])
                .await?
                .get(0);
            Ok(n as u64)
        })
    }

    fn accounts(&self) -> Result<Vec<AccountRow>> {
        self.run(|pool| async move {
            let c = pool.get().await?;
            let rows = c
                .query(
                    "SELECT a.id, a.name, a.created_at,
                            (SELECT count(*) FROM subscribers s
                             WHERE s.account_id = a.id AND s.removed_at IS NULL),
                            (SELECT count(*) FROM campaigns k
                             WHERE k.account_id = a.id AND k.kind = 'campaign'
                               AND k.name NOT ILIKE 'notify:%'),
                            a.sms_footer
                     FROM accounts a ORDER BY a.id",
                    &[],
                )
                .await?;
            Ok(rows
                .iter()
                .map(|r| AccountRow {
                    id: r.get(0),
                    name: r.get(1),
                    created_at: r.get(2),
                    subscribers: r.get(3),
                    campaigns: r.get(4),
                    sms_footer: r.get(5),
                })
                .collect())
        })
    }

    fn sms_footer(&self, account: i64) -> Result<Option<String>> {
        self.run(move |pool| async move {
            let c = pool.get().await?;
            match c
                .query_opt("SELECT sms_footer FROM accounts WHERE id = $1", &[&account])
                .await?
            {
                Some(r) => Ok(r.get(0)),
                None => Err(Error::not_found(format!("unknown account id {account}"))),
            }
        })
    }

    fn set_sms_footer(&self, account: i64, footer: Option<&str>) -> Result<()> {
        let footer = footer.map(str::to_string);
        self.run(move |pool| async move {
            let c = pool.get().await?;
            let n = c
                .execute(
                    "UPDATE accounts SET sms_footer = $2 WHERE id = $1",
                    &[&account, &footer],
                )
                .await?;
            if n == 0 {
                return Err(Error::not_found(format!("unknown account id {account}")));
            }
            Ok(())
        })
    }

    fn list_campaigns(
        &self,
        account: Option<i64>,
        status: Option<CampaignStatus>,
    ) -> Result<Vec<CampaignRow>> {
        let status = status.map(|s| s.as_str());
        self.run(move |pool| async move {
            let c = pool.get().await?;
            let rows = c
                .query(
                    "SELECT k.id, k.account_id, a.name, k.name, k.channel, k.status,
                            k.scheduled_for, k.created_at
                     FROM campaigns k JOIN accounts a ON a.id = k.account_id
                     WHERE ($1::bigint IS NULL OR k.account_id = $1)
                       AND ($2::text IS NULL OR k.status = $2)
                       AND k.kind = 'campaign'
                     ORDER BY k.id DESC",
                    &[&account, &status],
                )
                .await?;
            rows.iter()
                .map(|r| {
                    let channel: String = r.get(4);
                    let status: String = r.get(5);
                    Ok(CampaignRow {
                        id: r.get(0),
                        account_id: r.get(1),
                        account: r.get(2),
                        name: r.get(3),
                        channel: channel
                            .parse::<Channel>()
                            .map_err(|_| {
                                Error::damaged(format!(
                                    "campaigns.channel holds {channel:?}, which is not a channel"
                                ))
                            })?
                            .to_string(),
                        status: CampaignStatus::parse(&status)
                            .ok_or_else(|| {
                                Error::damaged(format!(
                                    "campaigns.status holds {status:?}, which is not a \
                                     campaign status"
                                ))
                            })?
                            .to_string(),
                        scheduled_for: r.get(6),
                        created_at: r.get(7),
                    })
                })
                .collect()
        })
    }

    fn list_subscribers(
        &self,
        account: i64,
        status: Option<&str>,
        after_id: i64,
        limit: usize,
    ) -> Result<Vec<SubscriberRow>> {
        let status = status.map(str::to_string);
        // SQLite reads a negative LIMIT as no limit; a usize above i64::MAX is that too.
        let limit = i64::try_from(limit).ok();
        self.run(move |pool| async move {
            let c = pool.get().await?;
            let rows = c
                .query(
                    &format!(
                        "SELECT {SUBSCRIBER_COLS}
                         WHERE account_id = $1 AND removed_at IS NULL AND id > $2
                           AND ($3::text IS NULL OR status = $3)
                         ORDER BY id LIMIT $4"
                    ),
                    &[&account, &after_id, &status, &limit],
                )
                .await?;
            Ok(rows.iter().map(subscriber_from_row).collect())
        })
    }

    fn find_subscriber(&self, account: i64, key: &str) -> Result<SubscriberRow> {
        let key = key.trim().to_string();
        let by_id = key.parse::<i64>().ok();
        // The forms rows are stored in; a key that is neither is matched as given.
        let email = crate::domain::address::normalize_email(&key)
            .map_or_else(|_| key.to_lowercase(), |(_, n)| n);
        let phone = crate::domain::address::normalize_phone(&key).unwrap_or_else(|_| key.clone());
        let row = self.run(move |pool| async move {
            let c = pool.get().await?;
            Ok(c.query_opt(
                &format!(
                    "SELECT {SUBSCRIBER_COLS}
                     WHERE account_id = $1 AND removed_at IS NULL
                       AND (id = $2 OR email_norm = $3 OR phone = $4)
                     ORDER BY coalesce(id = $2, FALSE) DESC, id LIMIT 1"
                ),
                &[&account, &by_id, &email, &phone],
            )
            .await?
            .map(|r| subscriber_from_row(&r)))
        })?;
        row.ok_or_else(|| {
            Error::not_found(format!(
                "no subscriber {key:?} in account {account} (give its id, email or phone)"
            ))
        })
    }

    fn update_subscriber(
        &self,
        account: i64,
        id: i64,
        ch: &SubscriberChanges,
    ) -> Result<SubscriberRow> {
        let ch = ch.clone();
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                let Some(current) = tx
                    .query_opt(
                        "SELECT attrs FROM subscribers
                         WHERE id = $1 AND account_id = $2 AND removed_at IS NULL FOR UPDATE",
                        &[&id, &account],
                    )
                    .await?
                else {
                    return Err(Error::not_found(format!(
                        "no subscriber {id} in account {account}"
                    ))
                    .into());
                };
                let attrs: String = match &ch.attrs {
                    Some(patch) => crate::store::sqlite::json_patch(&current.get::<_, String>(0), patch)?,
                    None => current.get(0),
                };
                let row = tx
                    .query_one(
                        &format!(
                            "UPDATE subscribers SET name = coalesce($3, name),
                                    status = coalesce($4, status), attrs = $5
                             WHERE id = $1 AND account_id = $2
                             RETURNING {}",
                            SUBSCRIBER_COLS.trim_end_matches(" FROM subscribers")
                        ),
                        &[&id, &account, &ch.name, &ch.status, &attrs],
                    )
                    .await?;
                Ok(subscriber_from_row(&row))
            })
        })
    }

    fn remove_subscriber(&self, account: i64, id: i64) -> Result<()> {
        let now = crate::domain::clock::now_ms();
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                let now = now.max(super::ledger::lock_opt_outs(&tx, account).await?);
                let n = tx
                    .execute(
                        "UPDATE subscribers SET name = NULL, attrs = '{}',
                                status = 'unsubscribed', removed_at = $3
                         WHERE id = $1 AND account_id = $2 AND removed_at IS NULL",
                        &[&id, &account, &now],
                    )
                    .await?;
                if n != 1 {
                    return Err(Error::not_found(format!(
                        "no subscriber {id} in account {account}"
                    ))
                    .into());
                }
                // Rows already queued for this subscriber must not go out either: the claim
                // checks suppressions, so its addresses are suppressed (undone if it is
                // re-added).
                tx.execute(
                    "INSERT INTO suppressions (account_id, channel, address, reason, source,
                                               created_at)
                     SELECT account_id, 'email', email_norm, 'subscriber removed', 'removal', $2::bigint
                     FROM subscribers WHERE id = $1 AND email_norm IS NOT NULL
                     UNION ALL
                     SELECT account_id, 'sms', phone, 'subscriber removed', 'removal', $2
                     FROM subscribers WHERE id = $1 AND phone IS NOT NULL
                     ON CONFLICT DO NOTHING",
                    &[&id, &now],
                )
                .await?;
                Ok(())
            })
        })
    }
}

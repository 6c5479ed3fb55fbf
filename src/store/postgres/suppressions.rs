//! `Suppressions` on PostgreSQL: the same rules as `sqlite/admin.rs` (an unknown account is an
//! error, removing an address not on the list is "not found"), listed in byte order
//! (`COLLATE "C"`, as SQLite compares text) whatever the database's collation.

use super::ledger::transaction;
use super::PgStore;
use crate::domain::address::Channel;
use crate::error::{Error, Result};
use crate::store::Suppression;

impl crate::store::Suppressions for PgStore {
    fn suppress(
        &self,
        account_id: i64,
        channel: Channel,
        address: &str,
        reason: &str,
        source: &str,
    ) -> Result<bool> {
        let (address, reason, source) =
            (address.to_string(), reason.to_string(), source.to_string());
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                if tx.query_opt("SELECT 1 FROM accounts WHERE id = $1", &[&account_id]).await?.is_none() {
                    return Err(Error::not_found(format!("unknown account id {account_id}")).into());
                }
                super::ledger::lock_opt_outs(&tx, account_id).await?;
                let n = tx
                    .execute(
                        "INSERT INTO suppressions (account_id, channel, address, reason, source,
                                                   created_at)
                         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
                        &[&account_id, &channel.as_str(), &address, &reason, &source,
                          &crate::domain::clock::now_ms()],
                    )
                    .await?;
                Ok(n == 1)
            })
        })
    }

    fn unsuppress(&self, account_id: i64, channel: Channel, address: &str) -> Result<()> {
        let address = address.to_string();
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                if tx.query_opt("SELECT 1 FROM accounts WHERE id = $1", &[&account_id]).await?.is_none() {
                    return Err(Error::not_found(format!("unknown account id {account_id}")).into());
                }
                let n = tx
                    .execute(
                        "DELETE FROM suppressions
                         WHERE account_id = $1 AND channel = $2 AND address = $3",
                        &[&account_id, &channel.as_str(), &address],
                    )
                    .await?;
                if n == 0 {
                    return Err(Error::not_found(format!(
                        "{address} is not on the {channel} suppression list of account {account_id}"
                    ))
                    .into());
                }
                Ok(())
            })
        })
    }

    fn suppressions_page(&self, q: &crate::store::SuppressionPage<'_>) -> Result<Vec<Suppression>> {
        self.suppression_page(q)
    }

    fn suppressions(&self, account_id: i64) -> Result<Vec<Suppression>> {
        self.run(move |pool| async move {
            let c = pool.get().await?;
            if c.query_opt("SELECT 1 FROM accounts WHERE id = $1", &[&account_id])
                .await?
                .is_none()
            {
                return Err(Error::not_found(format!("unknown account id {account_id}")));
            }
            let rows = c
                .query(
                    "SELECT channel, address, reason, source, created_at FROM suppressions
                     WHERE account_id = $1
                     ORDER BY channel COLLATE \"C\", address COLLATE \"C\"",
                    &[&account_id],
                )
                .await?;
            rows.iter()
                .map(|r| {
                    let channel: String = r.get(0);
                    Ok(Suppression {
                        channel: channel.parse().map_err(|_| {
                            Error::damaged(format!(
                                "suppressions.channel holds {channel:?}, which is not a channel"
                            ))
                        })?,
                        address: r.get(1),
                        reason: r.get(2),
                        source: r.get(3),
                        created_at: r.get(4),
                    })
                })
                .collect()
        })
    }

    fn is_suppressed(&self, account_id: i64, channel: Channel, address: &str) -> Result<bool> {
        let address = address.to_string();
        self.run(move |pool| async move {
            let c = pool.get().await?;
            Ok(c.query_one(
                "SELECT EXISTS (SELECT 1 FROM suppressions
                 WHERE account_id = $1 AND channel = $2 AND address = $3)",
                &[&account_id, &channel.as_str(), &address],
            )
            .await?
            .get(0))
        })
    }
}

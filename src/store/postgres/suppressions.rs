//! `Suppressions` on PostgreSQL: `suppress` (what the claim's suppression check is tested
//! with); the rest answer "not yet on PostgreSQL".
#![allow(unused_variables)]

use super::ledger::transaction;
use super::{not_yet, PgStore};
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
        Err(not_yet("Suppressions::unsuppress"))
    }
    fn suppressions(&self, account_id: i64) -> Result<Vec<Suppression>> {
        Err(not_yet("Suppressions::suppressions"))
    }
    fn is_suppressed(&self, account_id: i64, channel: Channel, address: &str) -> Result<bool> {
        Err(not_yet("Suppressions::is_suppressed"))
    }
}

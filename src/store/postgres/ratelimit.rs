//! `RateLimits` on PostgreSQL: the same token buckets as `sqlite/ratelimit.rs` (table
//! `rate_buckets`, the same refill and wait). A bucket's row is made first (full, `ON CONFLICT
//! DO NOTHING`) and then read `FOR UPDATE`, so two hosts taking from a new bucket at once queue
//! on its row instead of both finding it missing and both starting full.

use super::ledger::transaction;
use super::PgStore;
use crate::error::Result;
use crate::store::{refill, Grant, RateLimits};

impl RateLimits for PgStore {
    fn take_tokens(
        &self,
        name: &str,
        want: u32,
        rate_per_sec: f64,
        burst: u32,
        now: i64,
    ) -> Result<Grant> {
        let name = name.to_string();
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                let burst = burst.max(1) as f64;
                // A new bucket starts full: as a row refilled for no time, it is exactly that.
                tx.execute(
                    "INSERT INTO rate_buckets (name, tokens, updated_at) VALUES ($1, $2, $3)
                     ON CONFLICT (name) DO NOTHING",
                    &[&name, &burst, &now],
                )
                .await?;
                let row = tx
                    .query_one(
                        "SELECT tokens, updated_at FROM rate_buckets WHERE name = $1 FOR UPDATE",
                        &[&name],
                    )
                    .await?;
                let tokens = refill(row.get(0), row.get(1), now, rate_per_sec, burst);
                let granted = (want as f64).min(tokens.floor()).max(0.0) as u32;
                let left = tokens - granted as f64;
                tx.execute(
                    "UPDATE rate_buckets SET tokens = $2, updated_at = $3 WHERE name = $1",
                    &[&name, &left, &now],
                )
                .await?;
                let wait_ms = if granted < want && rate_per_sec > 0.0 {
                    (((1.0 - left.fract()).max(0.0) / rate_per_sec) * 1000.0).ceil() as i64
                } else {
                    0
                };
                Ok(Grant {
                    granted,
                    wait_ms: wait_ms.max(if granted < want { 1 } else { 0 }),
                })
            })
        })
    }
}

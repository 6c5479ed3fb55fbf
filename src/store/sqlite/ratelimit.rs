//! Durable token buckets (table `rate_buckets`): one immediate transaction takes tokens for all
//! processes sharing the file.

use super::SqliteStore;
use crate::error::Result;
use crate::store::{Grant, RateLimits};
use rusqlite::{params, OptionalExtension};

/// Refill a bucket holding `tokens` at `updated_at` up to `now`, capped at `burst`.
pub fn refill(tokens: f64, updated_at: i64, now: i64, rate_per_sec: f64, burst: f64) -> f64 {
    let elapsed = (now - updated_at).max(0) as f64 / 1000.0;
    (tokens + elapsed * rate_per_sec).min(burst)
}

impl RateLimits for SqliteStore {
    /// Take up to `want` tokens from bucket `name` (rate per second, burst capacity). A new
    /// bucket starts full.
    fn take_tokens(
        &self,
        name: &str,
        want: u32,
        rate_per_sec: f64,
        burst: u32,
        now: i64,
    ) -> Result<Grant> {
        self.write(|tx| {
            let row: Option<(f64, i64)> = tx
                .prepare_cached("SELECT tokens, updated_at FROM rate_buckets WHERE name = ?1")?
                .query_row([name], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            let burst = burst.max(1) as f64;
            let tokens = match row {
                Some((t, at)) => refill(t, at, now, rate_per_sec, burst),
                None => burst,
            };
            let granted = (want as f64).min(tokens.floor()).max(0.0) as u32;
            let left = tokens - granted as f64;
            tx.prepare_cached(
                "INSERT INTO rate_buckets (name, tokens, updated_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (name) DO UPDATE SET tokens = ?2, updated_at = ?3",
            )?
            .execute(params![name, left, now])?;
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
    }
}

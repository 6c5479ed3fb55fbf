//! Durable token buckets shared by every process using the store (`RateLimits`, table
//! `rate_buckets`), written once for both stores over `sql::Tx`. A bucket's row is made first
//! (full, `ON CONFLICT DO NOTHING`) and then read locked (`FOR UPDATE` on PostgreSQL; SQLite's
//! one writer already excludes every other), so two processes taking from a new bucket at once
//! queue on its row instead of both finding it missing and both starting full.

use crate::shared::locking;
use crate::sql::{args, Db};
use sendonce_domain::error::{Error, Result};

/// What one `take_tokens` call got.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Grant {
    /// Tokens granted now (0..=want).
    pub granted: u32,
    /// When fewer than `want` were granted: milliseconds until the next token.
    pub wait_ms: i64,
}

/// Token buckets.
pub trait RateLimits: Send + Sync {
    /// Take up to `want` tokens from bucket `name` (rate per second, burst capacity). A new
    /// bucket starts full.
    fn take_tokens(
        &self,
        name: &str,
        want: u32,
        rate_per_sec: f64,
        burst: u32,
        now: i64,
    ) -> Result<Grant>;
}

/// Refill a bucket holding `tokens` at `updated_at` up to `now`, capped at `burst`.
pub fn refill(tokens: f64, updated_at: i64, now: i64, rate_per_sec: f64, burst: f64) -> f64 {
    let elapsed = (now - updated_at).max(0) as f64 / 1000.0;
    (tokens + elapsed * rate_per_sec).min(burst)
}

/// What taking `want` from a bucket that holds `tokens` grants, and the tokens left.
fn grant(tokens: f64, want: u32, rate_per_sec: f64) -> (Grant, f64) {
    let granted = (want as f64).min(tokens.floor()).max(0.0) as u32;
    let left = tokens - granted as f64;
    let wait_ms = if granted < want && rate_per_sec > 0.0 {
        (((1.0 - left.fract()).max(0.0) / rate_per_sec) * 1000.0).ceil() as i64
    } else {
        0
    };
    let grant = Grant {
        granted,
        wait_ms: wait_ms.max(if granted < want { 1 } else { 0 }),
    };
    (grant, left)
}

/// A bucket's row (locked on PostgreSQL: `Dialect::for_update`).
const READ_BUCKET: &str = "SELECT tokens, updated_at FROM rate_buckets WHERE name = ?1";

impl<S: Db> RateLimits for S {
    fn take_tokens(
        &self,
        name: &str,
        want: u32,
        rate_per_sec: f64,
        burst: u32,
        now: i64,
    ) -> Result<Grant> {
        let burst = burst.max(1) as f64;
        self.write(|tx| {
            // A new bucket starts full: as a row refilled for no time, it is exactly that.
            tx.exec(
                "INSERT INTO rate_buckets (name, tokens, updated_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (name) DO NOTHING",
                &args![name, burst, now],
            )?;
            let read = locking(READ_BUCKET, tx.dialect().for_update);
            let (tokens, at): (f64, i64) = tx
                .query_opt(&read, &args![name], |r| Ok((r.get(0)?, r.get(1)?)))?
                .ok_or_else(|| Error::internal(format!("rate bucket {name:?} vanished")))?;
            let (grant, left) = grant(
                refill(tokens, at, now, rate_per_sec, burst),
                want,
                rate_per_sec,
            );
            tx.exec(
                "UPDATE rate_buckets SET tokens = ?2, updated_at = ?3 WHERE name = ?1",
                &args![name, left, now],
            )?;
            Ok(grant)
        })
    }
}

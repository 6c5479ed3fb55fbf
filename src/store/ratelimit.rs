//! Durable token buckets shared by every process using the store (`RateLimits`).

use crate::error::Result;

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

//! Provider rate limits: an async limiter over the durable token bucket in the database, taking
//! tokens in small chunks so most messages cost no transaction.

use sendonce_domain::error::{Error, Result};
use sendonce_store::RateLimits;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;

/// `10/s`, `600/m`, `5000/h`: a rate per second.
pub fn parse_rate(s: &str) -> Result<f64> {
    let bad = || {
        Error::invalid(format!(
            "invalid rate {s:?} (write it like 10/s, 600/m or 5000/h)"
        ))
    };
    let (n, unit) = s.trim().split_once('/').ok_or_else(bad)?;
    let n: f64 = n.trim().parse().map_err(|_| bad())?;
    let per = match unit.trim() {
        "s" | "sec" | "second" => 1.0,
        "m" | "min" | "minute" => 60.0,
        "h" | "hour" => 3600.0,
        _ => return Err(bad()),
    };
    if !(n > 0.0 && n.is_finite()) {
        return Err(bad());
    }
    Ok(n / per)
}

/// A rate limit shared by every process on the database: tokens live in `rate_buckets`.
pub struct Limiter {
    store: Arc<dyn RateLimits>,
    name: String,
    rate: f64,
    burst: u32,
    /// Tokens already taken from the bucket and not used yet.
    local: Mutex<u32>,
}

impl Limiter {
    pub fn new(
        store: Arc<dyn RateLimits>,
        name: impl Into<String>,
        rate_per_sec: f64,
        burst: u32,
    ) -> Arc<Self> {
        Arc::new(Limiter {
            store,
            name: name.into(),
            rate: rate_per_sec,
            burst: burst.max(1),
            local: Mutex::new(0),
        })
    }

    /// Wait until `n` tokens are ours. Tokens taken but unused when the process dies are lost,
    /// which can only make the limit stricter.
    pub async fn acquire(&self, n: u32) -> Result<()> {
        let mut need = n;
        let mut local = self.local.lock().await;
        loop {
            let from_local = need.min(*local);
            *local -= from_local;
            need -= from_local;
            if need == 0 {
                return Ok(());
            }
            // Ask for what is needed plus a small chunk for the next calls.
            let chunk = ((self.rate / 10.0).ceil() as u32).clamp(1, self.burst);
            let want = (need + chunk).min(self.burst.max(need));
            let (store, name, rate, burst) =
                (self.store.clone(), self.name.clone(), self.rate, self.burst);
            let now = sendonce_domain::clock::now_ms();
            let g = tokio::task::spawn_blocking(move || {
                store.take_tokens(&name, want, rate, burst, now)
            })
            .await
            .map_err(|e| Error::internal(format!("rate limiter task failed: {e}")))??;
            *local += g.granted;
            if g.granted == 0 {
                tokio::time::sleep(Duration::from_millis(g.wait_ms.clamp(1, 60_000) as u64)).await;
            }
        }
    }
}

impl Limiter {
    /// Take up to `n` tokens without waiting: returns how many were granted and, if fewer than
    /// `n`, how long until the next one (milliseconds). At most one database transaction.
    pub async fn try_take(&self, n: u32) -> Result<(u32, i64)> {
        let mut local = self.local.lock().await;
        if *local >= n {
            *local -= n;
            return Ok((n, 0));
        }
        let need = n - *local;
        let chunk = self.chunk();
        let want = (need + chunk).min(self.burst.max(need));
        let (store, name, rate, burst) =
            (self.store.clone(), self.name.clone(), self.rate, self.burst);
        let now = sendonce_domain::clock::now_ms();
        let g =
            tokio::task::spawn_blocking(move || store.take_tokens(&name, want, rate, burst, now))
                .await
                .map_err(|e| Error::internal(format!("rate limiter task failed: {e}")))??;
        *local += g.granted;
        let granted = n.min(*local);
        *local -= granted;
        Ok((granted, if granted < n { g.wait_ms.max(1) } else { 0 }))
    }

    /// Keep `n` tokens taken by `try_take` and not used (a claim found fewer rows than it had
    /// tokens for) for the next call of this process. They were taken from the shared bucket,
    /// so no other process can spend them twice.
    ///
    /// At most one prefetch chunk is kept: tokens kept without limit would let a process that
    /// keeps finding nothing due hoard them and later send a burst over the rate. The rest is
    /// dropped, which only makes the limit stricter.
    pub async fn give_back(&self, n: u32) {
        if n > 0 {
            let mut local = self.local.lock().await;
            *local = (*local + n).min(self.chunk().max(*local));
        }
    }

    /// Tokens taken from the bucket beyond the current need, for the next calls.
    fn chunk(&self) -> u32 {
        ((self.rate / 10.0).ceil() as u32).clamp(1, self.burst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate("10/s").unwrap(), 10.0);
        assert_eq!(parse_rate("600/m").unwrap(), 10.0);
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("0/s").is_err());
    }
}

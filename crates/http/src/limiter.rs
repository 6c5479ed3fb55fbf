//! Per-client-address token buckets in memory (IPv6 by /64): the public signup form's and the
//! dashboard login's limit on top of what the store counts. Bounded: past 10,000 addresses the
//! full buckets are forgotten, and if that is not enough, all of them.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Client addresses remembered before full buckets are forgotten.
const MAX_TRACKED: usize = 10_000;

/// Token buckets by client address (IPv6 by /64, what one host usually holds).
pub struct Limiter {
    buckets: Mutex<HashMap<IpAddr, (f64, Instant)>>,
    burst: f64,
    per_sec: f64,
}

impl Limiter {
    pub fn new(burst: u32, per_minute: u32) -> Limiter {
        Limiter {
            buckets: Mutex::new(HashMap::new()),
            burst: f64::from(burst),
            per_sec: f64::from(per_minute) / 60.0,
        }
    }

    /// Take one token for `ip` at `now`: `Ok` or how long until the next one.
    pub fn take(&self, ip: IpAddr, now: Instant) -> Result<(), Duration> {
        let key = match ip {
            IpAddr::V6(v6) if v6.to_ipv4_mapped().is_none() => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        // A poisoned lock only means another request panicked mid-update: the map is usable.
        let mut map = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_TRACKED {
            let (burst, rate) = (self.burst, self.per_sec);
            map.retain(|_, (t, at)| *t + now.duration_since(*at).as_secs_f64() * rate < burst);
            if map.len() >= MAX_TRACKED {
                // Over MAX_TRACKED addresses within minutes: memory stays bounded,
                // and everyone starts again from a full bucket.
                tracing::warn!("rate limit: too many client addresses, buckets reset");
                map.clear();
            }
        }
        let (tokens, at) = map.entry(key).or_insert((self.burst, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * self.per_sec).min(self.burst);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            return Ok(());
        }
        Err(Duration::from_secs_f64((1.0 - *tokens) / self.per_sec))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_allows_the_burst_then_refills() {
        let l = Limiter::new(5, 5);
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        let t0 = Instant::now();
        for _ in 0..5 {
            assert!(l.take(ip, t0).is_ok());
        }
        let wait = l.take(ip, t0).unwrap_err();
        assert!(wait <= Duration::from_secs(12), "{wait:?}");
        // Another address has its own bucket; the same /64 shares one.
        assert!(l.take("192.0.2.8".parse().unwrap(), t0).is_ok());
        let a: IpAddr = "2001:db8::1".parse().unwrap();
        let b: IpAddr = "2001:db8::2".parse().unwrap();
        for _ in 0..5 {
            assert!(l.take(a, t0).is_ok());
        }
        assert!(l.take(b, t0).is_err());
        // 12 s later one token is back.
        assert!(l.take(ip, t0 + Duration::from_secs(12)).is_ok());
        assert!(l.take(ip, t0 + Duration::from_secs(12)).is_err());
    }
}

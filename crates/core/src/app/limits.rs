//! The bounds of the numbers and durations a caller chooses (command-line flags today, API
//! fields next): each bound is written once here, and one helper per kind checks it.

use sendonce_domain::clock;
use sendonce_domain::error::{Error, Result};
use std::time::Duration;

const HOUR: Duration = Duration::from_secs(3600);

/// An inclusive range of durations.
#[derive(Debug, Clone, Copy)]
pub struct Span {
    pub min: Duration,
    pub max: Duration,
}

impl Span {
    /// Parse the duration given to `name` (`30s`, `100ms`, `5m`) and check it lies in the span;
    /// the error names `name`, the range and the text given.
    pub fn parse(&self, name: &str, text: &str) -> Result<Duration> {
        clock::parse_duration_in(name, text, self.min, self.max)
    }
}

/// How long to wait for another process's write lock.
pub const BUSY_TIMEOUT: Span = Span {
    min: Duration::ZERO,
    max: HOUR,
};
/// A worker's lease on the rows it claimed.
pub const LEASE: Span = Span {
    min: Duration::from_millis(200),
    max: Duration::from_secs(24 * 3600),
};
/// How often an idle worker looks for due campaigns.
pub const TICK: Span = Span {
    min: Duration::from_millis(10),
    max: HOUR,
};
/// The first retry delay.
pub const RETRY_BASE: Span = Span {
    min: Duration::from_millis(1),
    max: HOUR,
};
/// How long in-flight calls may take after a stop signal.
pub const DRAIN: Span = Span {
    min: Duration::ZERO,
    max: HOUR,
};

/// How long one HTTP request may take (`serve --request-timeout`).
pub const REQUEST_TIMEOUT: Span = Span {
    min: Duration::from_secs(1),
    max: HOUR,
};
/// How long an HTTP request's body may take after its head (`serve --body-timeout`).
pub const BODY_TIMEOUT: Span = Span {
    min: Duration::from_millis(100),
    max: HOUR,
};
/// Client connections `serve` keeps open at once (`serve --max-connections`).
pub const MAX_CONNECTIONS: (usize, usize) = (1, 1_000_000);
/// Largest HTTP request body (`serve --body-limit`), in bytes.
pub const BODY_LIMIT: (usize, usize) = (1024, 64 * 1024 * 1024);

/// Rows per claim (worker and bench).
pub const BATCH: (usize, usize) = (1, 10_000);
/// Provider calls in flight (worker and bench).
pub const CONCURRENCY: (usize, usize) = (1, 10_000);

/// Items per page of an API listing (`?limit=`), and the page size when none is given.
pub const PAGE: (usize, usize) = (1, 1000);
pub const DEFAULT_PAGE: usize = 100;

/// The `limit` of a page (`PAGE`, `DEFAULT_PAGE` when absent).
pub fn page(limit: Option<usize>) -> Result<usize> {
    count_in("limit", limit.unwrap_or(DEFAULT_PAGE), PAGE)
}

/// The cursor of the page after one that held `len` items of at most `limit`, the last with
/// id `last`: `None` when this page was the last one.
pub fn next_after(len: usize, limit: usize, last: Option<i64>) -> Option<i64> {
    if len < limit {
        return None;
    }
    last
}

/// `n` given to `name` lies in `min..=max` (`(min, max)`, e.g. [`BATCH`]).
pub fn count_in(name: &str, n: usize, (min, max): (usize, usize)) -> Result<usize> {
    if n < min || n > max {
        return Err(Error::invalid(format!(
            "{name} must be between {min} and {max}"
        )));
    }
    Ok(n)
}

/// `n` given to `name` is at least `min`.
pub fn at_least<T: PartialOrd + std::fmt::Display>(name: &str, n: T, min: T) -> Result<T> {
    if n < min {
        return Err(Error::invalid(format!("{name} must be at least {min}")));
    }
    Ok(n)
}

/// The bench's simulated provider latency: more than zero, at most 10s.
pub fn bench_latency(text: &str) -> Result<Duration> {
    let latency = clock::parse_duration(text)?;
    if latency.is_zero() || latency > Duration::from_secs(10) {
        return Err(Error::invalid("--latency must be between 1ms and 10s"));
    }
    Ok(latency)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_spans_name_the_flag_and_the_range() {
        assert!(count_in("--batch", 0, BATCH).is_err());
        assert_eq!(count_in("--batch", 10_000, BATCH).unwrap(), 10_000);
        let e = count_in("--concurrency", 10_001, CONCURRENCY).unwrap_err();
        assert_eq!(e.message, "--concurrency must be between 1 and 10000");
        let e = at_least("--max-attempts", 0, 1).unwrap_err();
        assert_eq!(e.message, "--max-attempts must be at least 1");
        assert!(LEASE.parse("--lease", "100ms").is_err());
        assert_eq!(TICK.parse("--tick", "1s").unwrap(), Duration::from_secs(1));
    }

    #[test]
    fn pages_are_bounded_and_the_last_one_has_no_cursor() {
        assert_eq!(page(None).unwrap(), DEFAULT_PAGE);
        assert!(page(Some(0)).is_err() && page(Some(1001)).is_err());
        assert_eq!(page(Some(1000)).unwrap(), 1000);
        assert_eq!(next_after(2, 2, Some(7)), Some(7));
        assert_eq!(next_after(1, 2, Some(7)), None);
        assert_eq!(next_after(0, 2, None), None);
    }
}

//! Wall-clock time as Unix milliseconds, and the duration syntax of the CLI (`30s`, `100ms`, `5m`).

use crate::error::{Error, Result};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Now, in Unix milliseconds (UTC). Leases are wall-clock because several processes share a file.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
        .saturating_add(test_offset_ms())
}

/// The crash suite's injectable clock: with the `crash-points` feature (test builds only),
/// `SENDONCE_TEST_CLOCK_OFFSET_MS` moves this process's "now" by that many milliseconds, so a
/// test can start each worker at the simulated time it chooses (send windows across days and
/// DST changes). Always 0 in a normal build.
#[cfg(feature = "crash-points")]
fn test_offset_ms() -> i64 {
    static OFFSET: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *OFFSET.get_or_init(|| {
        std::env::var("SENDONCE_TEST_CLOCK_OFFSET_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    })
}

#[cfg(not(feature = "crash-points"))]
fn test_offset_ms() -> i64 {
    0
}

/// The longest duration anything in sendonce accepts: past it, time arithmetic could overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(30 * 24 * 3600);

/// Parse `30s`, `100ms`, `5m`, `1h`, `2h30m` (at most [`MAX_DURATION`]).
pub fn parse_duration(s: &str) -> Result<Duration> {
    let d = humantime::parse_duration(s.trim()).map_err(|e| {
        Error::invalid(format!(
            "invalid duration {s:?}: {e} (write it like 30s, 100ms or 5m)"
        ))
    })?;
    if d > MAX_DURATION {
        return Err(Error::invalid(format!(
            "duration {s:?} is too long (at most 30 days)"
        )));
    }
    Ok(d)
}

/// Parse the duration given to `flag` and check it lies in `min..=max`; the error names the
/// flag and the range.
pub fn parse_duration_in(flag: &str, s: &str, min: Duration, max: Duration) -> Result<Duration> {
    let d = parse_duration(s).map_err(|e| e.context(flag))?;
    if d < min || d > max {
        return Err(Error::invalid(format!(
            "{flag} must be between {} and {} (got {s:?})",
            humantime::format_duration(min),
            humantime::format_duration(max)
        )));
    }
    Ok(d)
}

/// Parse an RFC 3339 timestamp (`2026-12-24T09:00:00Z`) into Unix milliseconds.
pub fn parse_rfc3339_ms(s: &str) -> Result<i64> {
    let t = humantime::parse_rfc3339_weak(s.trim()).map_err(|e| {
        Error::invalid(format!(
            "invalid time {s:?}: {e} (write it like 2026-12-24T09:00:00Z)"
        ))
    })?;
    let d = t
        .duration_since(UNIX_EPOCH)
        .map_err(|_| Error::invalid(format!("time {s:?} is before 1970")))?;
    Ok(d.as_millis() as i64)
}

/// Unix milliseconds as RFC 3339 (UTC, second precision) for people and reports.
pub fn format_ms(ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// Serde: Unix milliseconds written as RFC 3339, so JSON shows the same times as text and CSV.
pub fn ser_ms<S: serde::Serializer>(ms: &i64, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&format_ms(*ms))
}

/// [`ser_ms`] for an optional time (`null` when absent).
pub fn ser_opt_ms<S: serde::Serializer>(
    ms: &Option<i64>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    match ms {
        Some(ms) => s.serialize_str(&format_ms(*ms)),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("100ms").unwrap(), Duration::from_millis(100));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        let e = parse_duration("soon").unwrap_err();
        assert!(e.message.contains("invalid duration"), "{}", e.message);
        assert!(parse_duration("999999999h").is_err());
        let e = parse_duration_in(
            "--tick",
            "0s",
            Duration::from_millis(10),
            Duration::from_secs(3600),
        )
        .unwrap_err();
        assert!(
            e.message.contains("--tick must be between 10ms and 1h"),
            "{}",
            e.message
        );
    }

    #[test]
    fn rfc3339_roundtrip() {
        let ms = parse_rfc3339_ms("2026-12-24T09:00:00Z").unwrap();
        assert_eq!(format_ms(ms), "2026-12-24T09:00:00Z");
        assert!(parse_rfc3339_ms("tomorrow").is_err());
    }
}

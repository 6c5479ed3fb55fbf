//! The retry policy: what becomes of a row whose provider call did not confirm a delivery
//! (retry later, give up, or park in doubt), the backoff between attempts, the attempt limit
//! and the idempotency-key window. Pure: no I/O and no clock (the caller passes `now`).

use std::time::Duration;

/// The policy's settings (the worker's configuration holds them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Dispatches before a definitely-not-sent row is given up.
    pub max_attempts: i64,
    /// First retry delay; doubles per attempt, capped at `max_delay`.
    pub base_delay: Duration,
    pub max_delay: Duration,
}

/// How a call ended without a confirmed delivery (acceptances and permanent refusals need no
/// policy: they are recorded as they are).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Definitely not sent; `retry_after` when the provider said when to come back.
    NotSent { retry_after: Option<Duration> },
    /// Unknown: it may or may not have been delivered.
    Ambiguous,
}

/// The row the call was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// Dispatches of this row so far, the call that just ended included.
    pub attempts: i64,
    /// An earlier attempt may have delivered it.
    pub maybe_delivered: bool,
    /// The provider honours idempotency keys: an ambiguous attempt may be retried with the key.
    pub idempotent: bool,
}

/// What the ledger should do with the row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Back to the queue, ready at `at` (Unix ms). `maybe_delivered`: the retry must reuse the
    /// key, and is safe only inside the key window (see [`same_key_retry_safe`]).
    Retry { at: i64, maybe_delivered: bool },
    /// The attempt limit is reached: failed, or in doubt when an earlier attempt may have
    /// delivered it (then it is not a failure, it is a doubt).
    GiveUp { in_doubt: bool },
    /// The outcome is unknown and a retry is not safe.
    InDoubt,
}

/// Apply the policy to a call that did not confirm a delivery.
pub fn decide(failure: Failure, a: Attempt, p: &Policy, now: i64) -> Next {
    match failure {
        Failure::NotSent { .. } if a.attempts >= p.max_attempts => Next::GiveUp {
            in_doubt: a.maybe_delivered,
        },
        Failure::NotSent { retry_after } => Next::Retry {
            at: retry_at(p, a.attempts, retry_after, now),
            maybe_delivered: false,
        },
        // Same key on the retry; the claim checks that the key window still holds.
        Failure::Ambiguous if a.idempotent && a.attempts < p.max_attempts => Next::Retry {
            at: retry_at(p, a.attempts, None, now),
            maybe_delivered: true,
        },
        Failure::Ambiguous => Next::InDoubt,
    }
}

/// The delay before the next attempt after `attempts` dispatches: `base_delay` doubled per
/// attempt after the first, capped at `max_delay`.
pub fn backoff(p: &Policy, attempts: i64) -> Duration {
    p.base_delay
        .saturating_mul(1u32 << (attempts.clamp(1, 20) - 1) as u32)
        .min(p.max_delay)
}

/// When the row is ready again: after the provider's `retry_after` if it gave one, else after
/// the backoff.
pub fn retry_at(p: &Policy, attempts: i64, retry_after: Option<Duration>, now: i64) -> i64 {
    now + retry_after
        .unwrap_or_else(|| backoff(p, attempts))
        .as_millis() as i64
}

/// A row that may already have been delivered (first such dispatch at `since`) can be called
/// again only with the same key, at a provider that has a key window, inside that window.
pub fn same_key_retry_safe(since: i64, now: i64, key_window_ms: Option<i64>) -> bool {
    key_window_ms.is_some_and(|w| now.saturating_sub(since) < w)
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: Policy = Policy {
        max_attempts: 8,
        base_delay: Duration::from_secs(1),
        max_delay: Duration::from_secs(300),
    };

    fn attempt(attempts: i64, maybe_delivered: bool, idempotent: bool) -> Attempt {
        Attempt {
            attempts,
            maybe_delivered,
            idempotent,
        }
    }

    fn not_sent(retry_after: Option<Duration>) -> Failure {
        Failure::NotSent { retry_after }
    }

    #[test]
    fn ambiguous_retries_only_with_a_key() {
        let amb = Failure::Ambiguous;
        assert_eq!(
            decide(amb, attempt(1, false, false), &POLICY, 0),
            Next::InDoubt
        );
        assert!(matches!(
            decide(amb, attempt(1, false, true), &POLICY, 0),
            Next::Retry {
                maybe_delivered: true,
                ..
            }
        ));
        assert_eq!(
            decide(amb, attempt(8, false, true), &POLICY, 0),
            Next::InDoubt
        );
    }

    #[test]
    fn not_sent_backs_off_then_gives_up() {
        let secs = Some(Duration::from_secs(7));
        assert_eq!(
            decide(not_sent(secs), attempt(1, false, false), &POLICY, 1000),
            Next::Retry {
                at: 8000,
                maybe_delivered: false
            }
        );
        assert_eq!(
            decide(not_sent(None), attempt(3, false, false), &POLICY, 0),
            Next::Retry {
                at: 4000,
                maybe_delivered: false
            }
        );
        assert_eq!(
            decide(not_sent(None), attempt(8, false, false), &POLICY, 0),
            Next::GiveUp { in_doubt: false }
        );
        assert_eq!(
            decide(not_sent(None), attempt(8, true, true), &POLICY, 0),
            Next::GiveUp { in_doubt: true }
        );
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        assert_eq!(backoff(&POLICY, 0), Duration::from_secs(1));
        assert_eq!(backoff(&POLICY, 1), Duration::from_secs(1));
        assert_eq!(backoff(&POLICY, 2), Duration::from_secs(2));
        assert_eq!(backoff(&POLICY, 9), Duration::from_secs(256));
        assert_eq!(backoff(&POLICY, 10), Duration::from_secs(300));
        assert_eq!(backoff(&POLICY, 1000), Duration::from_secs(300));
    }

    #[test]
    fn key_window() {
        assert!(!same_key_retry_safe(0, 10, None));
        assert!(same_key_retry_safe(0, 10, Some(11)));
        assert!(!same_key_retry_safe(0, 10, Some(10)));
    }
}

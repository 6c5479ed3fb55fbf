//! Named crash points for the crash suite: `SENDONCE_CRASH_AT=name:k` SIGKILLs the process at the
//! k-th hit of `name`. Compiled only with the `crash-points` feature; a no-op otherwise.

/// Every crash point the code defines (the crash suite iterates over these).
pub const POINTS: &[&str] = &[
    "campaign_cas", // inside the approved -> sending compare-and-set, before commit
    "list_build",   // after a list-building chunk was inserted, before its commit
    "list_build_committed", // after a list-building chunk committed
    "before_claim_commit", // claim transaction written, not committed
    "after_claim_commit", // rows leased, nothing dispatched
    "after_dispatch_mark", // dispatch marker committed, provider not called yet
    "after_provider_accept", // provider accepted, confirmation not written
    "mid_confirm_group", // inside a confirmation group, some rows updated, not committed
    "after_confirm_commit", // confirmation group committed
    "suppression_insert", // inside a suppression insert, before commit
];

#[cfg(feature = "crash-points")]
mod imp {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;

    static TARGET: OnceLock<Option<(String, u64)>> = OnceLock::new();
    static HITS: AtomicU64 = AtomicU64::new(0);

    fn target() -> &'static Option<(String, u64)> {
        TARGET.get_or_init(|| {
            let v = std::env::var("SENDONCE_CRASH_AT").ok()?;
            let (name, k) = v.rsplit_once(':')?;
            Some((name.to_string(), k.parse().ok()?))
        })
    }

    pub fn point(name: &str) {
        if let Some((t, k)) = target() {
            if t == name && HITS.fetch_add(1, Ordering::SeqCst) + 1 == *k {
                // SIGKILL: no destructors, no flush, exactly like `kill -9` from outside.
                unsafe {
                    libc::kill(libc::getpid(), libc::SIGKILL);
                }
            }
        }
    }
}

/// Mark a crash point. With the `crash-points` feature and a matching `SENDONCE_CRASH_AT`,
/// the process dies here; otherwise this does nothing.
#[inline(always)]
pub fn point(_name: &'static str) {
    #[cfg(feature = "crash-points")]
    imp::point(_name);
}

//! Durable token buckets: shared by processes on one file, refilled for the time nobody ran.

use sendonce::store::prelude::*;
use sendonce::store::{OpenOptions, Store};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn store(dir: &std::path::Path) -> Arc<Store> {
    sendonce::store::open(
        &sendonce::store::Target::File(dir.join("r.db")),
        &OpenOptions {
            create: true,
            ..Default::default()
        },
    )
    .unwrap()
}

#[test]
fn a_bucket_starts_full_and_refills_for_the_downtime() {
    let d = tempfile::tempdir().unwrap();
    let s = store(d.path());
    let t0 = 1_000_000;
    assert_eq!(s.take_tokens("smtp", 5, 1.0, 5, t0).unwrap().granted, 5);
    let g = s.take_tokens("smtp", 1, 1.0, 5, t0).unwrap();
    assert_eq!(g.granted, 0);
    assert!(g.wait_ms > 0 && g.wait_ms <= 1000, "{g:?}");
    drop(s);
    // The process was down for 3 seconds: 3 tokens came back, not more than the burst later.
    let s = store(d.path());
    assert_eq!(
        s.take_tokens("smtp", 10, 1.0, 5, t0 + 3_000)
            .unwrap()
            .granted,
        3
    );
    assert_eq!(
        s.take_tokens("smtp", 10, 1.0, 5, t0 + 3_600_000)
            .unwrap()
            .granted,
        5
    );
}

#[test]
fn two_handles_share_one_bucket() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (store(d.path()), store(d.path()));
    let t0 = 5_000;
    let mut total = 0;
    for i in 0..20 {
        let s = if i % 2 == 0 { &a } else { &b };
        total += s
            .take_tokens("api", 3, 10.0, 10, t0 + i * 50)
            .unwrap()
            .granted;
    }
    // 10 at the start plus 10/s over 950 ms.
    assert!(total <= 10 + 10, "granted {total}");
    assert!(total >= 18, "granted {total}");
}

#[test]
fn the_limiter_waits_for_tokens() {
    let d = tempfile::tempdir().unwrap();
    let s = store(d.path());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let lim = sendonce::worker::ratelimit::Limiter::new(s, "web", 50.0, 5);
    let t = Instant::now();
    rt.block_on(async {
        for _ in 0..20 {
            lim.acquire(1).await.unwrap();
        }
    });
    // 5 from the burst, 15 at 50/s: at least 300 ms (only a lower bound; slow machines are fine).
    assert!(
        t.elapsed() >= Duration::from_millis(280),
        "{:?}",
        t.elapsed()
    );
}

/// Tokens a claim could not use stay with the process only up to one prefetch chunk: a worker
/// that keeps finding nothing due cannot hoard them and later send a burst over the rate.
#[tokio::test]
async fn unused_tokens_are_not_hoarded() {
    let d = tempfile::tempdir().unwrap();
    // 100/s with a burst of 1: the bucket holds one token at most, refilled every 10 ms.
    let limiter = sendonce::worker::ratelimit::Limiter::new(store(d.path()), "sms", 100.0, 1);
    // Eight idle turns: each takes what it can for 8 free slots, claims nothing, gives it back.
    for _ in 0..8 {
        let (granted, _) = limiter.try_take(8).await.unwrap();
        limiter.give_back(granted).await;
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    // Rows are due now: the burst allows one call, plus at most the one token kept back.
    let (granted, _) = limiter.try_take(8).await.unwrap();
    assert!(granted <= 2, "{granted} calls at once against a burst of 1");
}

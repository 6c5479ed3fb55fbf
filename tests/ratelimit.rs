//! Durable token buckets: shared by processes on one file, refilled for the time nobody ran.

use sendonce::store::{OpenOptions, Store};
use std::time::{Duration, Instant};

fn store(dir: &std::path::Path) -> Store {
    Store::open(
        &dir.join("r.db"),
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
    let lim = sendonce::ratelimit::Limiter::new(s, "web", 50.0, 5);
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

//! The process-wide metrics registry: counters and one latency histogram kept in memory (no
//! I/O), written in the Prometheus text format (0.0.4) by `render`. Hand-written rather than a
//! crate: a handful of series, no dependency, and the gauges read from the ledger are passed in
//! by the scrape (`http::metrics`), each read cheaply there.

use crate::provider::CallResult;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds (seconds) of the provider latency histogram's buckets (`+Inf` is added).
const BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// One route's latency histogram: counts per bucket (not cumulative; the last is `+Inf`).
#[derive(Default, Clone)]
struct Histogram {
    counts: [u64; BUCKETS.len() + 1],
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, secs: f64) {
        let i = BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(BUCKETS.len());
        self.counts[i] += 1;
        self.sum += secs;
        self.count += 1;
    }
}

/// HTTP requests: (method, route, status).
static HTTP: Mutex<BTreeMap<(String, String, u16), u64>> = Mutex::new(BTreeMap::new());
/// Provider calls: (route, outcome).
static CALLS: Mutex<BTreeMap<(String, &'static str), u64>> = Mutex::new(BTreeMap::new());
/// Provider call latency per route.
static LATENCY: Mutex<BTreeMap<String, Histogram>> = Mutex::new(BTreeMap::new());
/// Sends this process's worker recorded, by the state it moved them to.
static SENDS: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());
static CLAIMED: AtomicU64 = AtomicU64::new(0);
static RATE_WAITS: AtomicU64 = AtomicU64::new(0);

/// A poisoned lock still holds counts worth showing (a panic elsewhere does not reset them).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One HTTP request answered. `route` is the matched route pattern (or `unmatched`), so the
/// series stay few whatever paths clients ask for.
pub fn http_request(method: &str, route: &str, status: u16) {
    *lock(&HTTP)
        .entry((method.to_string(), route.to_string(), status))
        .or_default() += 1;
}

/// The label of a provider's answer.
pub fn outcome_label(r: &CallResult) -> &'static str {
    match r {
        CallResult::Accepted { .. } => "accepted",
        CallResult::AlreadyAccepted { .. } => "already_accepted",
        CallResult::Permanent { .. } => "permanent",
        CallResult::NotSent { .. } => "not_sent",
        CallResult::Ambiguous { .. } => "ambiguous",
    }
}

/// One provider call ended on `route` with `outcome` after `took`.
pub fn provider_call(route: &str, outcome: &'static str, took: Duration) {
    *lock(&CALLS)
        .entry((route.to_string(), outcome))
        .or_default() += 1;
    lock(&LATENCY)
        .entry(route.to_string())
        .or_default()
        .observe(took.as_secs_f64());
}

/// `n` sends recorded as `state` (`sent`, `failed`, `retried`, `in_doubt`, `suppressed`) by
/// this process's worker, counted in the same place as its summary.
pub fn sends(state: &'static str, n: u64) {
    if n > 0 {
        *lock(&SENDS).entry(state).or_default() += n;
    }
}

/// Rows claimed by this process's worker.
pub fn claimed(rows: u64) {
    CLAIMED.fetch_add(rows, Ordering::Relaxed);
}

/// A claim got fewer rate-limit tokens than it had slots (the worker waits for the bucket).
pub fn rate_limit_wait() {
    RATE_WAITS.fetch_add(1, Ordering::Relaxed);
}

/// What the scrape reads from the database, each cheaply (see `http::metrics`).
pub struct Gauges {
    /// Rows in doubt (None: the read failed; the series is left out).
    pub in_doubt: Option<u64>,
    /// Bytes of the write-ahead log file.
    pub wal_bytes: Option<u64>,
}

/// A label value as the text format writes it.
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn head(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// The worker's plain counters: sends by state, rows claimed, rate-limit waits.
fn totals(out: &mut String) {
    head(
        out,
        "sendonce_sends_total",
        "counter",
        "Sends this process's worker recorded, by the state it moved them to.",
    );
    for (state, n) in lock(&SENDS).iter() {
        let _ = writeln!(out, "sendonce_sends_total{{state=\"{state}\"}} {n}");
    }
    head(
        out,
        "sendonce_claimed_rows_total",
        "counter",
        "Rows claimed by this process's worker.",
    );
    let _ = writeln!(
        out,
        "sendonce_claimed_rows_total {}",
        CLAIMED.load(Ordering::Relaxed)
    );
    head(
        out,
        "sendonce_rate_limit_waits_total",
        "counter",
        "Claims that got fewer rate-limit tokens than free slots.",
    );
    let _ = writeln!(
        out,
        "sendonce_rate_limit_waits_total {}",
        RATE_WAITS.load(Ordering::Relaxed)
    );
}

/// Every metric in the Prometheus text format.
pub fn render(g: &Gauges) -> String {
    let mut out = String::new();
    head(
        &mut out,
        "sendonce_http_requests_total",
        "counter",
        "HTTP requests answered, by method, route and status.",
    );
    for ((m, r, s), n) in lock(&HTTP).iter() {
        let _ = writeln!(
            out,
            "sendonce_http_requests_total{{method=\"{}\",route=\"{}\",status=\"{s}\"}} {n}",
            esc(m),
            esc(r)
        );
    }
    head(
        &mut out,
        "sendonce_provider_calls_total",
        "counter",
        "Provider calls ended by this process's worker, by route and outcome.",
    );
    for ((r, o), n) in lock(&CALLS).iter() {
        let _ = writeln!(
            out,
            "sendonce_provider_calls_total{{route=\"{}\",outcome=\"{o}\"}} {n}",
            esc(r)
        );
    }
    latency(&mut out);
    totals(&mut out);
    if let Some(n) = g.in_doubt {
        head(
            &mut out,
            "sendonce_sends_in_doubt",
            "gauge",
            "Sends whose outcome is unknown, waiting for an operator (whole database).",
        );
        let _ = writeln!(out, "sendonce_sends_in_doubt {n}");
    }
    if let Some(n) = g.wal_bytes {
        head(
            &mut out,
            "sendonce_wal_bytes",
            "gauge",
            "Size of the database's WAL file.",
        );
        let _ = writeln!(out, "sendonce_wal_bytes {n}");
    }
    out
}

fn latency(out: &mut String) {
    let name = "sendonce_provider_call_duration_seconds";
    head(out, name, "histogram", "Provider call latency, by route.");
    for (r, h) in lock(&LATENCY).iter() {
        let r = esc(r);
        let mut cum = 0;
        for (i, b) in BUCKETS.iter().enumerate() {
            cum += h.counts[i];
            let _ = writeln!(out, "{name}_bucket{{route=\"{r}\",le=\"{b}\"}} {cum}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{route=\"{r}\",le=\"+Inf\"}} {}",
            h.count
        );
        let _ = writeln!(out, "{name}_sum{{route=\"{r}\"}} {}", h.sum);
        let _ = writeln!(out, "{name}_count{{route=\"{r}\"}} {}", h.count);
    }
}

/// The process's peak resident set (VmHWM in /proc/self/status), in KiB.
pub fn peak_rss_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_and_labels_escaped() {
        provider_call("a\"b", "accepted", Duration::from_millis(3));
        provider_call("a\"b", "accepted", Duration::from_millis(70));
        let text = render(&Gauges {
            in_doubt: Some(2),
            wal_bytes: None,
        });
        let b = "sendonce_provider_call_duration_seconds_bucket{route=\"a\\\"b\"";
        assert!(text.contains(&format!("{b},le=\"0.005\"}} 1")), "{text}");
        assert!(text.contains(&format!("{b},le=\"0.1\"}} 2")), "{text}");
        assert!(text.contains(&format!("{b},le=\"+Inf\"}} 2")), "{text}");
        assert!(text.contains("sendonce_sends_in_doubt 2"));
        assert!(!text.contains("sendonce_wal_bytes"));
    }
}

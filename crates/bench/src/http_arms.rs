//! Two more arms of `sendonce bench --only http`, run against the same `serve --worker` after the
//! closed-loop load: an open-loop arm that posts at a fixed rate whatever the answers (half the
//! accepted rate), timing each message from its request to the provider's acceptance, and a
//! batch arm that posts batches of 500 one after another. Figures only, never asserted here.

use sendonce_domain::error::{Error, Result};
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// What the open-loop arm measured.
#[derive(Debug, Default, Serialize)]
pub struct Paced {
    /// Requests per second asked for.
    pub rate: f64,
    pub requests: u64,
    pub accepted: u64,
    /// From the request leaving the client to the fake provider's durable acceptance (its log
    /// line's time), for the messages it accepted.
    pub to_provider_p50_ms: f64,
    pub to_provider_p99_ms: f64,
    pub to_provider_max_ms: f64,
    /// Messages the arm timed (accepted and delivered).
    pub timed: u64,
}

/// What the batch arm measured.
#[derive(Debug, Default, Serialize)]
pub struct Batches {
    pub batches: u64,
    /// Messages accepted across the batches.
    pub accepted: u64,
    /// Milliseconds per batch of 500, as answered.
    pub median_ms: f64,
    pub max_ms: f64,
}

fn client(concurrency: usize) -> Result<reqwest::Client> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(concurrency)
        .build()
        .map_err(|e| Error::internal(format!("cannot build the HTTP client: {e}")))
}

/// One request of the open-loop arm: its job id and when it left (Unix ms), if accepted.
async fn one(client: reqwest::Client, url: String, token: String, i: u64) -> Option<(String, f64)> {
    let body = serde_json::json!({"to": format!("paced-{i}@bench.example"),
        "from": "bench@example.org", "subject": "Bench", "text": "A paced message."});
    let sent = unix_ms();
    let r = client
        .post(&url)
        .bearer_auth(&token)
        .header("Idempotency-Key", format!("paced-{i}"))
        .json(&body)
        .send()
        .await
        .ok()?;
    if !(r.status() == 200 || r.status() == 202) {
        return None;
    }
    let v: serde_json::Value = r.json().await.ok()?;
    Some((v["job_id"].as_str()?.to_string(), sent))
}

/// Post at `rate` per second for `dur`, each request in its own task at its scheduled time;
/// returns the accepted messages' (job id, sent at) and the number of requests.
pub async fn paced(
    base: &str,
    token: &str,
    rate: f64,
    dur: Duration,
) -> Result<(Vec<(String, f64)>, u64)> {
    let client = client(256)?;
    let url = format!("{base}/v1/messages");
    let every = Duration::from_secs_f64(1.0 / rate.max(1.0));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let deadline = Instant::now() + dur;
    let mut set = tokio::task::JoinSet::new();
    let mut i = 0u64;
    while Instant::now() < deadline {
        tick.tick().await;
        set.spawn(one(client.clone(), url.clone(), token.to_string(), i));
        i += 1;
    }
    let mut sent = Vec::new();
    while let Some(r) = set.join_next().await {
        if let Some(s) = r.map_err(|e| Error::internal(format!("a paced request failed: {e}")))? {
            sent.push(s);
        }
    }
    Ok((sent, i))
}

/// The open-loop arm's figures, once its messages are in the fake provider's `log`.
pub fn paced_report(log: &Path, rate: f64, requests: u64, sent: &[(String, f64)]) -> Result<Paced> {
    let mut at: HashMap<String, i64> = HashMap::new();
    for l in sendonce_core::provider::deliverylog::read_lines(log)? {
        if !l.replay {
            at.entry(l.job_id).or_insert(l.at);
        }
    }
    let mut lat: Vec<f64> = sent
        .iter()
        .filter_map(|(job, t)| at.get(job).map(|&a| (a as f64 - t).max(0.0)))
        .collect();
    lat.sort_by(|a, b| a.total_cmp(b));
    Ok(Paced {
        rate,
        requests,
        accepted: sent.len() as u64,
        to_provider_p50_ms: super::bench_http::percentile(&lat, 0.50),
        to_provider_p99_ms: super::bench_http::percentile(&lat, 0.99),
        to_provider_max_ms: lat.last().copied().unwrap_or(0.0),
        timed: lat.len() as u64,
    })
}

/// Post `n` batches of 500 one after another, each message under `batch-{b}#{i}`.
pub async fn batches(base: &str, token: &str, n: usize) -> Result<Batches> {
    let client = client(1)?;
    let url = format!("{base}/v1/messages/batch");
    let mut ms = Vec::with_capacity(n);
    let mut accepted = 0;
    for b in 0..n {
        let messages: Vec<serde_json::Value> = (0..500)
            .map(|i| {
                serde_json::json!({"to": format!("batch-{b}-{i}@bench.example"),
                    "from": "bench@example.org", "subject": "Bench", "text": "A batched message."})
            })
            .collect();
        let t = Instant::now();
        let r = client
            .post(&url)
            .bearer_auth(token)
            .header("Idempotency-Key", format!("batch-{b}"))
            .json(&serde_json::json!({ "messages": messages }))
            .send()
            .await
            .map_err(|e| Error::internal(format!("batch {b}: {e}")))?;
        let v: serde_json::Value = r
            .json()
            .await
            .map_err(|e| Error::internal(format!("batch {b}'s answer: {e}")))?;
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
        accepted += v["accepted"].as_u64().unwrap_or(0);
    }
    let mut sorted = ms.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    Ok(Batches {
        batches: n as u64,
        accepted,
        median_ms: super::bench_http::percentile(&sorted, 0.50),
        max_ms: sorted.last().copied().unwrap_or(0.0),
    })
}

fn unix_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0)
}

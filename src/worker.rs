//! The worker: claim due rows, render, call the provider with bounded concurrency, and record
//! outcomes in group commits. The only place that calls providers.
//!
//! Per row the order is fixed: lease and dispatch marker (one claim commit, only for rows about
//! to be called) -> provider call -> confirmation commit (shared with the next claim). No
//! database statement or transaction is open across a provider call or an `.await`: every store
//! call runs to completion on a blocking thread.

use crate::error::{Error, Result};
use crate::model::idempotency_key;
use crate::provider::{CallResult, Message, Provider};
use crate::store::{ActiveCampaign, ClaimRequest, Ledger, Outcome, Record};
use crate::template::Compiled;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// How a worker behaves. Built by the CLI from flags; validated there.
#[derive(Debug, Clone)]
pub struct Config {
    /// Rows per claim transaction.
    pub batch: usize,
    /// Provider calls in flight at most.
    pub concurrency: usize,
    /// Lease length; renewed by the dispatch marker, so a call gets a whole lease.
    pub lease: Duration,
    /// How often to look for due campaigns when idle.
    pub tick: Duration,
    pub worker_id: String,
    /// Exit when the sending campaigns have nothing queued or leased left.
    pub once: bool,
    /// Dispatches before a definitely-not-sent row is given up as failed.
    pub max_attempts: i64,
    /// First retry delay; doubles per attempt, capped at `retry_max`.
    pub retry_base: Duration,
    pub retry_max: Duration,
    /// After a stop signal, how long in-flight calls may take before they are abandoned.
    pub drain_deadline: Duration,
    /// Subscribers per list-building transaction.
    pub list_chunk: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            batch: 100,
            concurrency: 32,
            lease: Duration::from_secs(60),
            tick: Duration::from_secs(1),
            worker_id: default_worker_id(),
            once: false,
            max_attempts: 8,
            retry_base: Duration::from_secs(1),
            retry_max: Duration::from_secs(300),
            drain_deadline: Duration::from_secs(30),
            list_chunk: 50_000,
        }
    }
}

pub fn default_worker_id() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "host".into());
    format!("{host}-{}", std::process::id())
}

/// What one `run` did.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Summary {
    pub claimed: u64,
    pub sent: u64,
    pub failed: u64,
    pub retried: u64,
    pub suppressed: u64,
    /// Rows this run moved to in doubt.
    pub moved_in_doubt: u64,
    pub late_confirmations: u64,
    pub released: u64,
    pub campaigns_started: Vec<i64>,
    pub campaigns_completed: Vec<i64>,
    /// Campaigns this run worked on.
    pub campaigns_touched: Vec<i64>,
    /// True when a stop signal ended the run.
    pub interrupted: bool,
}

impl Summary {
    fn add(&mut self, s: &crate::store::RecordStats) {
        self.sent += s.sent + s.late_confirmations;
        self.late_confirmations += s.late_confirmations;
        self.failed += s.failed;
        self.retried += s.retried;
        self.moved_in_doubt += s.in_doubt;
    }
}

/// A call in flight.
struct Flight {
    token: i64,
    attempts: i64,
    maybe_delivered: bool,
}

async fn blocking<T: Send + 'static>(
    ledger: &Arc<dyn Ledger>,
    f: impl FnOnce(&dyn Ledger) -> Result<T> + Send + 'static,
) -> Result<T> {
    let l = ledger.clone();
    tokio::task::spawn_blocking(move || f(l.as_ref()))
        .await
        .map_err(|e| Error::db(format!("a database task failed: {e}")))?
}

fn random_token() -> i64 {
    (uuid::Uuid::new_v4().as_u128() as i64) & i64::MAX
}

/// Turn a provider's answer into what the ledger records, applying the retry policy.
fn decide(
    result: CallResult,
    attempts: i64,
    maybe_delivered: bool,
    idempotent: bool,
    cfg: &Config,
    now: i64,
) -> Outcome {
    let backoff = |after: Option<Duration>| {
        let exp = cfg
            .retry_base
            .saturating_mul(1u32 << (attempts.clamp(1, 20) - 1) as u32)
            .min(cfg.retry_max);
        now + after.unwrap_or(exp).as_millis() as i64
    };
    match result {
        CallResult::Accepted {
            provider_id,
            replay,
        } => Outcome::Accepted {
            provider_id: Some(provider_id),
            note: replay.then(|| "provider replayed the idempotency key".to_string()),
        },
        CallResult::AlreadyAccepted { detail } => Outcome::Accepted {
            provider_id: None,
            note: Some(format!(
                "provider reports the key was already accepted: {detail}"
            )),
        },
        CallResult::Permanent { error, suppress } => Outcome::Failed { error, suppress },
        CallResult::NotSent { error, retry_after } => {
            if attempts >= cfg.max_attempts {
                let error = format!("gave up after {attempts} attempts: {error}");
                if maybe_delivered {
                    // An earlier attempt may have delivered it: not a failure, a doubt.
                    Outcome::InDoubt { error }
                } else {
                    Outcome::Failed {
                        error,
                        suppress: None,
                    }
                }
            } else {
                Outcome::Retry {
                    error,
                    retry_at: backoff(retry_after),
                    maybe_delivered: false,
                }
            }
        }
        CallResult::Ambiguous { error } => {
            if idempotent && attempts < cfg.max_attempts {
                // Same key on the retry; the claim checks that the key window still holds.
                Outcome::Retry {
                    error,
                    retry_at: backoff(None),
                    maybe_delivered: true,
                }
            } else {
                Outcome::InDoubt { error }
            }
        }
    }
}

/// The worker loop. Returns when `once` finds nothing left, or after `shutdown` resolves and
/// the in-flight calls have drained (or the drain deadline passed).
///
/// Each turn of the loop is one ledger commit (`Ledger::cycle`): the outcomes of the calls that
/// finished since the last turn are recorded, and as many rows as there are free call slots are
/// leased with their dispatch marker; those calls start right after the commit. So at any
/// moment at most `concurrency` rows are dispatched without a recorded outcome, which bounds
/// what a crash can leave in doubt.
pub async fn run(
    ledger: Arc<dyn Ledger>,
    provider: Arc<dyn Provider>,
    cfg: Config,
    shutdown: impl Future<Output = ()>,
) -> Result<Summary> {
    let caps = provider.capabilities().clone();
    let key_window_ms = caps.key_window.map(|w| w.as_millis() as i64);
    // A call must end well inside its lease: the lease is renewed at dispatch.
    let call_timeout = caps.call_timeout.min(cfg.lease / 2);
    let lease_ms = cfg.lease.as_millis() as i64;
    let mut summary = Summary::default();
    let mut templates: HashMap<i64, Arc<Compiled>> = HashMap::new();
    let mut flights: HashMap<i64, Flight> = HashMap::new();
    let mut inflight: JoinSet<(i64, CallResult)> = JoinSet::new();
    let mut outcomes: Vec<Record> = Vec::new();
    let mut campaigns: Vec<ActiveCampaign> = Vec::new();
    let mut rr = 0usize; // round-robin position over campaigns
                         // Consecutive claims that found nothing; once every campaign came back empty, wait.
    let mut empty_claims = 0usize;
    let mut last_maintenance: Option<Instant> = None;
    let mut last_wal_check = Instant::now();
    let mut stopping = false;
    let mut drain_until: Option<tokio::time::Instant> = None;
    tokio::pin!(shutdown);

    tracing::info!(worker = %cfg.worker_id, provider = %caps.name, batch = cfg.batch,
        concurrency = cfg.concurrency, "worker started");

    loop {
        // 1. Maintenance: due campaigns, list building, cancelled sweeps.
        if !stopping && last_maintenance.is_none_or(|t| t.elapsed() >= cfg.tick) {
            let now = crate::clock::now_ms();
            let started = blocking(&ledger, move |l| l.start_due_campaigns(now)).await?;
            for id in &started {
                tracing::info!(campaign_id = id, "campaign started sending");
            }
            summary.campaigns_started.extend(started);
            blocking(&ledger, move |l| l.sweep_cancelled(now)).await?;
            campaigns = blocking(&ledger, |l| l.active_campaigns()).await?;
            for c in campaigns.iter_mut().filter(|c| !c.list_complete) {
                let (id, chunk) = (c.id, cfg.list_chunk);
                let t = Instant::now();
                while !blocking(&ledger, move |l| {
                    let done = l.build_list_chunk(id, chunk)?;
                    l.checkpoint_if_large()?;
                    Ok(done)
                })
                .await?
                {}
                c.list_complete = true;
                tracing::info!(
                    campaign_id = id,
                    ms = t.elapsed().as_millis() as u64,
                    "recipient list built"
                );
            }
            for c in &campaigns {
                if !summary.campaigns_touched.contains(&c.id) {
                    summary.campaigns_touched.push(c.id);
                }
            }
            last_maintenance = Some(Instant::now());
            empty_claims = 0;
        }

        // 2. Calls that have finished since the last turn.
        while let Some(j) = inflight.try_join_next() {
            collect(
                j,
                &mut flights,
                &mut outcomes,
                key_window_ms.is_some(),
                &cfg,
            );
        }

        // 3. One commit: record those outcomes, lease rows for the free slots (marker included).
        let free = cfg.concurrency.saturating_sub(inflight.len());
        let claim_from =
            (!stopping && free > 0 && !campaigns.is_empty() && empty_claims < campaigns.len())
                .then(|| {
                    let i = rr % campaigns.len();
                    rr = rr.wrapping_add(1);
                    i
                });
        let mut claimed = 0usize;
        let cycle_start = Instant::now();
        let (mut recorded_n, mut cycle_commit_us) = (0usize, 0u64);
        let recorded_any = !outcomes.is_empty();
        if claim_from.is_some() || recorded_any {
            let req = claim_from.map(|i| {
                let c = &campaigns[i];
                ClaimRequest {
                    campaign_id: c.id,
                    account_id: c.account_id,
                    channel: c.channel,
                    batch: cfg.batch.min(free),
                    lease_ms,
                    token: random_token(),
                    owner: cfg.worker_id.clone(),
                    key_window_ms,
                    now: crate::clock::now_ms(),
                }
            });
            let group = std::mem::take(&mut outcomes);
            recorded_n = group.len();
            let now = crate::clock::now_ms();
            let (stats, got) =
                blocking(&ledger, move |l| l.cycle(&group, req.as_ref(), now)).await?;
            cycle_commit_us = cycle_start.elapsed().as_micros() as u64;
            summary.add(&stats);
            summary.suppressed += got.suppressed;
            summary.moved_in_doubt += got.in_doubt;
            if let Some(i) = claim_from {
                if got.rows.is_empty() {
                    empty_claims += 1;
                } else {
                    empty_claims = 0;
                    claimed = got.rows.len();
                    if summary.claimed == 0 {
                        // `sendonce bench` times a restart up to this line.
                        tracing::info!(
                            campaign_id = campaigns[i].id,
                            rows = claimed,
                            "first claim"
                        );
                    }
                    summary.claimed += claimed as u64;
                    let c = &campaigns[i];
                    let tpl = match templates.get(&c.id) {
                        Some(t) => t.clone(),
                        None => {
                            let t = Arc::new(Compiled::new(c.subject.as_deref(), &c.body)?);
                            templates.insert(c.id, t.clone());
                            t
                        }
                    };
                    for row in got.rows {
                        if !row.dispatched {
                            // Only a row whose dispatch marker is committed may be called; this
                            // one goes back to the queue when its lease expires.
                            tracing::warn!(
                                send_id = row.id,
                                "claimed without a dispatch marker; not calling"
                            );
                            continue;
                        }
                        let msg = match tpl.render_json(&row.vars) {
                            Ok((subject, body)) => Message {
                                idempotency_key: idempotency_key(&row.job_id),
                                job_id: row.job_id,
                                channel: c.channel,
                                from: c.sender.clone(),
                                to: row.address,
                                subject,
                                body,
                                html: None,
                            },
                            Err(e) => {
                                outcomes.push(Record {
                                    id: row.id,
                                    token: row.token,
                                    outcome: Outcome::Failed {
                                        error: e.message,
                                        suppress: None,
                                    },
                                });
                                continue;
                            }
                        };
                        flights.insert(
                            row.id,
                            Flight {
                                token: row.token,
                                attempts: row.attempts + 1,
                                maybe_delivered: row.maybe_delivered,
                            },
                        );
                        let p = provider.clone();
                        let id = row.id;
                        inflight.spawn(async move {
                            let res = match tokio::time::timeout(call_timeout, p.send(&msg)).await {
                                Ok(res) => res,
                                Err(_) => CallResult::Ambiguous {
                                    error: format!(
                                        "provider call timed out after {call_timeout:?}"
                                    ),
                                },
                            };
                            if matches!(
                                res,
                                CallResult::Accepted { .. } | CallResult::AlreadyAccepted { .. }
                            ) {
                                crate::crash::point("after_provider_accept");
                            }
                            (id, res)
                        });
                    }
                }
            }
        }

        if claim_from.is_some() || recorded_any {
            tracing::debug!(
                recorded = recorded_n,
                claimed,
                in_flight = inflight.len(),
                commit_us = cycle_commit_us,
                total_us = cycle_start.elapsed().as_micros() as u64,
                "cycle"
            );
        }

        // 4. Keep the WAL bounded even when readers pin it (a stat, and rarely a checkpoint).
        if last_wal_check.elapsed() >= Duration::from_millis(250) {
            blocking(&ledger, |l| l.checkpoint_if_large()).await?;
            last_wal_check = Instant::now();
        }

        // 5. Slots still free and something may be claimable: claim again right away.
        if !stopping
            && claim_from.is_some()
            && (claimed > 0 || empty_claims < campaigns.len())
            && cfg.concurrency > inflight.len()
        {
            continue;
        }

        // 6. Idle: complete campaigns, decide whether to wait or leave.
        if inflight.is_empty() && outcomes.is_empty() {
            if stopping {
                break;
            }
            if claimed > 0 {
                continue;
            }
            let now = crate::clock::now_ms();
            let mut next: Option<i64> = None;
            for c in campaigns.iter().filter(|c| c.list_complete) {
                let id = c.id;
                if blocking(&ledger, move |l| l.try_complete(id, now)).await? {
                    tracing::info!(campaign_id = id, "campaign sent");
                    summary.campaigns_completed.push(id);
                    continue;
                }
                if let Some(v) = blocking(&ledger, move |l| l.next_visible(id)).await? {
                    next = Some(next.map_or(v, |n: i64| n.min(v)));
                }
            }
            if cfg.once && next.is_none() {
                // Maintenance may have found nothing new either: done.
                let now2 = crate::clock::now_ms();
                let due = blocking(&ledger, move |l| l.start_due_campaigns(now2)).await?;
                if due.is_empty() {
                    break;
                }
                summary.campaigns_started.extend(due);
                last_maintenance = None;
                continue;
            }
            let wait = match next {
                Some(v) => {
                    Duration::from_millis((v - now).clamp(1, cfg.tick.as_millis() as i64) as u64)
                }
                None => cfg.tick,
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = &mut shutdown => { stopping = true; }
            }
            if next.is_none() || wait >= cfg.tick {
                last_maintenance = None;
            }
            empty_claims = 0;
            continue;
        }

        // 7. Wait for calls to finish (or for the stop signal / drain deadline).
        if inflight.is_empty() {
            continue; // outcomes to record: the next turn's commit takes them
        }
        tokio::select! {
            joined = inflight.join_next() => {
                if let Some(j) = joined {
                    collect(j, &mut flights, &mut outcomes, key_window_ms.is_some(), &cfg);
                }
                // Calls that finish together (timers firing in the same tick, one provider
                // batch) go into one commit: let the runtime finish them before this turn.
                for _ in 0..4 {
                    tokio::task::yield_now().await;
                    let mut more = false;
                    while let Some(j) = inflight.try_join_next() {
                        collect(j, &mut flights, &mut outcomes, key_window_ms.is_some(), &cfg);
                        more = true;
                    }
                    if !more {
                        break;
                    }
                }
            }
            _ = &mut shutdown, if !stopping => {
                stopping = true;
                summary.interrupted = true;
                drain_until = Some(tokio::time::Instant::now() + cfg.drain_deadline);
                tracing::info!(in_flight = inflight.len(), "stop requested: finishing in-flight calls");
            }
            _ = sleep_until_opt(drain_until), if drain_until.is_some() => {
                tracing::warn!(abandoned = flights.len(), "drain deadline passed; abandoning in-flight calls");
                inflight.abort_all();
                let now = crate::clock::now_ms();
                for (id, f) in flights.drain() {
                    outcomes.push(Record {
                        id,
                        token: f.token,
                        outcome: decide(CallResult::Ambiguous {
                            error: "call abandoned at shutdown".into()
                        }, f.attempts, f.maybe_delivered, key_window_ms.is_some(), &cfg, now),
                    });
                }
                while inflight.join_next().await.is_some() {}
            }
        }
    }

    flush(&ledger, &mut outcomes, &mut summary).await?;
    tracing::info!(worker = %cfg.worker_id, claimed = summary.claimed, sent = summary.sent,
        failed = summary.failed, in_doubt = summary.moved_in_doubt, "worker stopped");
    Ok(summary)
}

/// `run` as a task of the current runtime rather than on the thread that blocks on it: the
/// provider calls it spawns then start on the runtime's own queues instead of the shared
/// injection queue (fewer cross-thread wake-ups per call).
pub async fn spawn(
    ledger: Arc<dyn Ledger>,
    provider: Arc<dyn Provider>,
    cfg: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Summary> {
    tokio::spawn(run(ledger, provider, cfg, shutdown))
        .await
        .map_err(|e| Error::db(format!("the worker task failed: {e}")))?
}

async fn sleep_until_opt(t: Option<tokio::time::Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

fn collect(
    joined: std::result::Result<(i64, CallResult), tokio::task::JoinError>,
    flights: &mut HashMap<i64, Flight>,
    outcomes: &mut Vec<Record>,
    idempotent: bool,
    cfg: &Config,
) {
    let Ok((id, res)) = joined else {
        // A cancelled or panicked task; its row stays leased and dispatched, and recovery
        // treats it as ambiguous when the lease expires.
        return;
    };
    if let Some(f) = flights.remove(&id) {
        let now = crate::clock::now_ms();
        outcomes.push(Record {
            id,
            token: f.token,
            outcome: decide(res, f.attempts, f.maybe_delivered, idempotent, cfg, now),
        });
    }
}

async fn flush(
    ledger: &Arc<dyn Ledger>,
    outcomes: &mut Vec<Record>,
    summary: &mut Summary,
) -> Result<()> {
    if outcomes.is_empty() {
        return Ok(());
    }
    let group = std::mem::take(outcomes);
    let now = crate::clock::now_ms();
    let s = blocking(ledger, move |l| l.record(&group, now)).await?;
    summary.add(&s);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy() {
        let cfg = Config::default();
        let amb = || CallResult::Ambiguous {
            error: "timeout".into(),
        };
        assert!(matches!(
            decide(amb(), 1, false, false, &cfg, 0),
            Outcome::InDoubt { .. }
        ));
        assert!(matches!(
            decide(amb(), 1, false, true, &cfg, 0),
            Outcome::Retry {
                maybe_delivered: true,
                ..
            }
        ));
        let ns = |ra| CallResult::NotSent {
            error: "429".into(),
            retry_after: ra,
        };
        match decide(
            ns(Some(Duration::from_secs(7))),
            1,
            false,
            false,
            &cfg,
            1000,
        ) {
            Outcome::Retry {
                retry_at,
                maybe_delivered: false,
                ..
            } => assert_eq!(retry_at, 8000),
            o => panic!("{o:?}"),
        }
        match decide(ns(None), 3, false, false, &cfg, 0) {
            Outcome::Retry { retry_at, .. } => assert_eq!(retry_at, 4000),
            o => panic!("{o:?}"),
        }
        assert!(matches!(
            decide(ns(None), 8, false, false, &cfg, 0),
            Outcome::Failed { .. }
        ));
        assert!(matches!(
            decide(ns(None), 8, true, true, &cfg, 0),
            Outcome::InDoubt { .. }
        ));
        assert!(matches!(
            decide(
                CallResult::AlreadyAccepted {
                    detail: "409".into()
                },
                2,
                false,
                true,
                &cfg,
                0
            ),
            Outcome::Accepted {
                provider_id: None,
                ..
            }
        ));
    }
}

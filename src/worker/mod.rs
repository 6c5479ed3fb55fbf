//! The worker: claim due rows, render, call the provider with bounded concurrency, and record
//! outcomes in group commits. The only place that calls providers.
//!
//! Per row the order is fixed: lease with dispatch marker (one commit) -> provider call ->
//! confirmation commit. A turn of the loop is one commit: the outcomes of the calls that
//! finished, plus a claim sized to the call slots free at that moment, so no row is ever leased
//! and left waiting, and at most `concurrency` rows are dispatched without an outcome. No
//! database statement or transaction is open across a provider call or an `.await`: every store
//! call runs to completion on a blocking thread.

pub mod ratelimit;
pub mod routes;

use crate::domain::model::idempotency_key;
use crate::domain::template::Compiled;
use crate::error::{Error, ErrorKind, Result};
use crate::provider::{CallResult, Lookup, Message, Provider};
use crate::store::{ActiveCampaign, ClaimRequest, Ledger, Outcome, Record};
use crate::worker::routes::{Route, Routes};
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
    /// Sends the provider reported as already accepted under their key ("same key, different
    /// payload"): recorded as sent, never resent, but the content changed between attempts.
    pub already_accepted: u64,
    /// Acceptances of rows already sent (see `RecordStats::double_confirmations`).
    pub double_confirmations: u64,
    /// In-doubt rows settled by looking them up at the provider.
    pub reconciled: u64,
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
        self.already_accepted += s.already_accepted;
        self.double_confirmations += s.double_confirmations;
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
    /// The provider honours idempotency keys: an ambiguous outcome is retried with the key.
    idempotent: bool,
    /// `route_key` of the route the call went to.
    route: usize,
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

/// The worker loop with one provider for every campaign. See [`run_routed`].
pub async fn run(
    ledger: Arc<dyn Ledger>,
    provider: Arc<dyn Provider>,
    cfg: Config,
    shutdown: impl Future<Output = ()>,
) -> Result<Summary> {
    run_routed(ledger, Arc::new(Routes::single(provider)), cfg, shutdown).await
}

/// Run the worker as a task of the current runtime (not on the thread that blocks on it), so
/// its loop and the provider calls share the runtime's worker threads.
pub async fn spawn(
    ledger: Arc<dyn Ledger>,
    provider: Arc<dyn Provider>,
    cfg: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Summary> {
    spawn_routed(ledger, Arc::new(Routes::single(provider)), cfg, shutdown).await
}

/// [`run_routed`] as a runtime task.
pub async fn spawn_routed(
    ledger: Arc<dyn Ledger>,
    routes: Arc<Routes>,
    cfg: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Summary> {
    tokio::spawn(run_routed(ledger, routes, cfg, shutdown))
        .await
        .map_err(|e| Error::db(format!("the worker task failed: {e}")))?
}

/// Identity of a route, for per-route in-flight counts.
fn route_key(r: &Arc<Route>) -> usize {
    Arc::as_ptr(r) as *const () as usize
}

/// Rows in doubt are looked up at the provider only once they are this old, so that the
/// provider's search index has caught up with a message it accepted just before the doubt.
const RECONCILE_AFTER_MS: i64 = 60_000;

/// The worker loop. Returns when `once` finds nothing left, or after `shutdown` resolves and
/// the in-flight calls have drained (or the drain deadline passed).
pub async fn run_routed(
    ledger: Arc<dyn Ledger>,
    routes: Arc<Routes>,
    cfg: Config,
    shutdown: impl Future<Output = ()>,
) -> Result<Summary> {
    let lease_ms = cfg.lease.as_millis() as i64;
    let mut summary = Summary::default();
    let mut templates: HashMap<i64, Arc<Compiled>> = HashMap::new();
    let mut campaign_routes: HashMap<i64, Arc<Route>> = HashMap::new();
    let mut flights: HashMap<i64, Flight> = HashMap::new();
    let mut per_route: HashMap<usize, usize> = HashMap::new();
    let mut inflight: JoinSet<(i64, CallResult)> = JoinSet::new();
    // Which row each call task is for (to settle a task that panicked).
    let mut task_rows: HashMap<tokio::task::Id, i64> = HashMap::new();
    let mut outcomes: Vec<Record> = Vec::new();
    let mut campaigns: Vec<ActiveCampaign> = Vec::new();
    // Round-robin position over campaigns.
    let mut rr = 0usize;
    // When each campaign's list building started (for the log line when it ends).
    let mut list_started: HashMap<i64, Instant> = HashMap::new();
    let mut last_maintenance: Option<Instant> = None;
    let mut stopping = false;
    let mut drain_until: Option<tokio::time::Instant> = None;
    // Damage found by a claim: no new claims; the calls in flight finish and are recorded,
    // then the worker stops with this error.
    let mut damaged: Option<Error> = None;
    // When rows wait for rate-limit tokens: how long until the next one.
    let mut rate_wait: Option<Duration>;
    tokio::pin!(shutdown);

    tracing::info!(worker = %cfg.worker_id, batch = cfg.batch,
        concurrency = cfg.concurrency, "worker started");

    loop {
        // 1. Maintenance: due campaigns, cancelled sweeps, WAL size, routes, reconciliation.
        if !stopping && last_maintenance.is_none_or(|t| t.elapsed() >= cfg.tick) {
            // Outcomes already in hand are confirmed first: maintenance (lookups at the
            // provider among it) must not keep a finished call unconfirmed.
            flush(&ledger, &mut outcomes, &mut summary).await?;
            let now = crate::domain::clock::now_ms();
            let started = blocking(&ledger, move |l| l.start_due_campaigns(now)).await?;
            for id in &started {
                tracing::info!(campaign_id = id, "campaign started sending");
            }
            summary.campaigns_started.extend(started);
            blocking(&ledger, move |l| l.sweep_cancelled(now)).await?;
            // Readers holding old snapshots stop automatic checkpoints from resetting the WAL.
            blocking(&ledger, |l| l.checkpoint_if_large()).await?;
            campaigns = blocking(&ledger, |l| l.active_campaigns()).await?;
            for c in &campaigns {
                if let std::collections::hash_map::Entry::Vacant(slot) = campaign_routes.entry(c.id)
                {
                    let r = routes
                        .for_campaign(c.account_id, &c.account_name, c.channel)
                        .map_err(|e| e.context(&format!("campaign {}", c.id)))?;
                    tracing::info!(campaign_id = c.id, route = %r.name,
                        provider = %r.provider.capabilities().name, "campaign routed");
                    slot.insert(r);
                }
            }
            for c in &campaigns {
                if !summary.campaigns_touched.contains(&c.id) {
                    summary.campaigns_touched.push(c.id);
                }
                if let Some(r) = campaign_routes.get(&c.id) {
                    if r.provider.capabilities().can_lookup {
                        reconcile(&ledger, r, c, &mut summary).await?;
                    }
                }
            }
            last_maintenance = Some(Instant::now());
        }

        // List building, one chunk (one transaction) per turn, so that a long list starts
        // sending after its first chunk and a stop signal is heard between chunks.
        let mut building = false;
        if !stopping && campaigns.iter().any(|c| !c.list_complete) {
            // Between chunks the loop does not wait on anything: look at the stop signal here.
            let signalled = tokio::select! {
                biased;
                _ = &mut shutdown => true,
                _ = std::future::ready(()) => false,
            };
            if signalled {
                stopping = true;
                summary.interrupted = true;
                drain_until = Some(tokio::time::Instant::now() + cfg.drain_deadline);
                tracing::info!(
                    in_flight = inflight.len(),
                    "stop requested: finishing in-flight calls"
                );
            }
        }
        if !stopping {
            if let Some(c) = campaigns.iter_mut().find(|c| !c.list_complete) {
                // Likewise, a list chunk (a long transaction) does not hold confirmations back.
                flush(&ledger, &mut outcomes, &mut summary).await?;
                let (id, chunk) = (c.id, cfg.list_chunk);
                let started = *list_started.entry(id).or_insert_with(Instant::now);
                if blocking(&ledger, move |l| l.build_list_chunk(id, chunk)).await? {
                    c.list_complete = true;
                    tracing::info!(
                        campaign_id = id,
                        ms = started.elapsed().as_millis() as u64,
                        "recipient list built"
                    );
                }
            }
            building = campaigns.iter().any(|c| !c.list_complete);
        }

        // 2. One commit per turn: the outcomes of finished calls, and a claim sized to the
        // call slots free right now whose rows carry their dispatch marker (they are called
        // as soon as the commit returns). So at any moment at most `concurrency` rows are
        // dispatched without a recorded outcome: that bounds what a crash can leave in doubt.
        // A campaign's rows all go to one route, so the claim is also sized to the route's
        // free slots and to the rate-limit tokens it got.
        let mut claimed_any = false;
        let mut committed = false;
        rate_wait = None;
        let free = cfg.concurrency.saturating_sub(inflight.len());
        if !stopping && free > 0 && !campaigns.is_empty() {
            for _ in 0..campaigns.len() {
                let c = &campaigns[rr % campaigns.len()];
                rr = rr.wrapping_add(1);
                let Some(route) = campaign_routes.get(&c.id).cloned() else {
                    continue;
                };
                let k = route_key(&route);
                let mut slots = free.min(cfg.batch);
                if let Some(cap) = route.concurrency {
                    slots = slots.min(cap.saturating_sub(per_route.get(&k).copied().unwrap_or(0)));
                }
                if slots == 0 {
                    continue;
                }
                if let Some(l) = &route.limiter {
                    let (granted, wait) = l.try_take(slots as u32).await?;
                    if (granted as usize) < slots {
                        let w = Duration::from_millis(wait as u64);
                        rate_wait = Some(rate_wait.map_or(w, |x| x.min(w)));
                    }
                    slots = granted as usize;
                    if slots == 0 {
                        continue;
                    }
                }
                // The template is compiled before the claim: an error here must not leave
                // freshly dispatched rows behind (they would end in doubt, never called).
                let tpl = match templates.get(&c.id) {
                    Some(t) => t.clone(),
                    None => {
                        let t = Arc::new(if c.templated {
                            Compiled::new(c.subject.as_deref(), &c.body)
                                .map_err(|e| e.context(&format!("campaign {}", c.id)))?
                        } else {
                            Compiled::literal(c.subject.as_deref(), &c.body)
                        });
                        templates.insert(c.id, t.clone());
                        t
                    }
                };
                let caps = route.provider.capabilities();
                let req = ClaimRequest {
                    campaign_id: c.id,
                    account_id: c.account_id,
                    channel: c.channel,
                    batch: slots,
                    lease_ms,
                    token: random_token(),
                    owner: cfg.worker_id.clone(),
                    key_window_ms: caps.key_window.map(|w| w.as_millis() as i64),
                    now: crate::domain::clock::now_ms(),
                };
                let group = std::mem::take(&mut outcomes);
                let now = req.now;
                let (stats, got) =
                    match blocking(&ledger, move |l| l.cycle(&group, Some(&req), now)).await {
                        Ok(x) => x,
                        Err(e) if e.kind == ErrorKind::Damaged => {
                            tracing::error!(error = %e.message, in_flight = inflight.len(),
                                "ledger damage: no new claims; recording the calls in flight, \
                                 then stopping");
                            damaged = Some(e);
                            stopping = true;
                            drain_until = Some(tokio::time::Instant::now() + cfg.drain_deadline);
                            break;
                        }
                        Err(e) => return Err(e),
                    };
                committed = true;
                summary.add(&stats);
                summary.suppressed += got.suppressed;
                summary.moved_in_doubt += got.in_doubt;
                if let Some(l) = &route.limiter {
                    // Tokens for slots the claim could not fill stay with this process.
                    l.give_back(slots.saturating_sub(got.rows.len()) as u32)
                        .await;
                }
                if got.rows.is_empty() {
                    continue;
                }
                claimed_any = true;
                if summary.claimed == 0 {
                    // `sendonce bench` times a restart up to this line.
                    tracing::info!(campaign_id = c.id, rows = got.rows.len(), "first claim");
                }
                summary.claimed += got.rows.len() as u64;
                // A call must end well inside its lease: the claim set it to a whole lease.
                let call_timeout = caps.call_timeout.min(cfg.lease / 2);
                let channel = c.channel;
                for row in got.rows {
                    *per_route.entry(k).or_default() += 1;
                    flights.insert(
                        row.id,
                        Flight {
                            token: row.token,
                            attempts: row.attempts + 1,
                            maybe_delivered: row.maybe_delivered,
                            idempotent: caps.key_window.is_some(),
                            route: k,
                        },
                    );
                    let p = route.provider.clone();
                    let tpl = tpl.clone();
                    let from = c.sender.clone();
                    // Rendering happens in the call's task, so the loop starts every call of
                    // the claim at once and the runtime's threads share the work.
                    let row_id = row.id;
                    let task = inflight.spawn(async move {
                        let id = row.id;
                        let msg = match tpl.render_json(&row.vars) {
                            Ok((subject, body)) => Message {
                                idempotency_key: idempotency_key(&row.job_id),
                                job_id: row.job_id,
                                channel,
                                from,
                                to: row.address,
                                subject,
                                body,
                                html: None,
                            },
                            // Variables are checked when the campaign is created; a row whose
                            // stored variables cannot be rendered is never called.
                            Err(e) => {
                                return (
                                    id,
                                    CallResult::Permanent {
                                        error: format!("cannot render the message: {}", e.message),
                                        suppress: None,
                                    },
                                )
                            }
                        };
                        let res = match tokio::time::timeout(call_timeout, p.send(&msg)).await {
                            Ok(res) => res,
                            Err(_) => CallResult::Ambiguous {
                                error: format!("provider call timed out after {call_timeout:?}"),
                            },
                        };
                        if matches!(
                            res,
                            CallResult::Accepted { .. } | CallResult::AlreadyAccepted { .. }
                        ) {
                            crate::tools::crash::point("after_provider_accept");
                        }
                        (id, res)
                    });
                    task_rows.insert(task.id(), row_id);
                }
                break;
            }
        }

        // Outcomes that no claim carried this turn (stopping, or no free slot or token): their
        // own commit, so a confirmation never waits for the next claim.
        if !committed && !outcomes.is_empty() && !inflight.is_empty() {
            flush(&ledger, &mut outcomes, &mut summary).await?;
        }

        // 4. Idle: flush, complete campaigns, decide whether to wait or leave.
        if inflight.is_empty() {
            flush(&ledger, &mut outcomes, &mut summary).await?;
            if stopping {
                break;
            }
            if claimed_any || building {
                continue;
            }
            let now = crate::domain::clock::now_ms();
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
                let now2 = crate::domain::clock::now_ms();
                let due = blocking(&ledger, move |l| l.start_due_campaigns(now2)).await?;
                if due.is_empty() {
                    break;
                }
                summary.campaigns_started.extend(due);
                last_maintenance = None;
                continue;
            }
            // Until the next row is due, and no sooner than the next rate-limit token.
            let until_due =
                next.map(|v| Duration::from_millis((v - now).clamp(1, i64::MAX) as u64));
            let wait = match (rate_wait, until_due) {
                (Some(w), Some(d)) => w.max(d),
                (Some(w), None) => w,
                (None, Some(d)) => d,
                (None, None) => cfg.tick,
            }
            .clamp(Duration::from_millis(1), cfg.tick);
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = &mut shutdown => { stopping = true; summary.interrupted = true; }
            }
            if next.is_none() || wait >= cfg.tick {
                last_maintenance = None;
            }
            continue;
        }

        // 5. Wait for calls to finish (or for the stop signal / drain deadline). While a list
        // is being built, take what has finished and go on building.
        if building {
            while let Some(j) = inflight.try_join_next_with_id() {
                collect(
                    j,
                    &mut task_rows,
                    &mut flights,
                    &mut per_route,
                    &mut outcomes,
                    &cfg,
                );
            }
            continue;
        }
        tokio::select! {
            joined = inflight.join_next_with_id() => {
                if let Some(j) = joined {
                    collect(j, &mut task_rows, &mut flights, &mut per_route, &mut outcomes, &cfg);
                }
                while let Some(j) = inflight.try_join_next_with_id() {
                    collect(j, &mut task_rows, &mut flights, &mut per_route, &mut outcomes, &cfg);
                }
            }
            _ = &mut shutdown, if !stopping => {
                stopping = true;
                summary.interrupted = true;
                drain_until = Some(tokio::time::Instant::now() + cfg.drain_deadline);
                tracing::info!(in_flight = inflight.len(), "stop requested: finishing in-flight calls");
            }
            _ = sleep_until_opt(drain_until), if drain_until.is_some() => {
                // Calls that did finish are recorded with their real outcome.
                while let Some(j) = inflight.try_join_next_with_id() {
                    collect(j, &mut task_rows, &mut flights, &mut per_route, &mut outcomes, &cfg);
                }
                tracing::warn!(abandoned = flights.len(), "drain deadline passed; abandoning in-flight calls");
                inflight.abort_all();
                let now = crate::domain::clock::now_ms();
                for (id, f) in flights.drain() {
                    outcomes.push(Record {
                        id,
                        token: f.token,
                        outcome: decide(CallResult::Ambiguous {
                            error: "call abandoned at shutdown".into()
                        }, f.attempts, f.maybe_delivered, f.idempotent, &cfg, now),
                    });
                }
                per_route.clear();
                task_rows.clear();
                while inflight.join_next().await.is_some() {}
            }
        }
    }

    flush(&ledger, &mut outcomes, &mut summary).await?;
    tracing::info!(worker = %cfg.worker_id, claimed = summary.claimed, sent = summary.sent,
        failed = summary.failed, in_doubt = summary.moved_in_doubt, "worker stopped");
    match damaged {
        Some(e) => Err(e),
        None => Ok(summary),
    }
}

/// Ask the provider about rows in doubt it can look up: found means sent, an authoritative
/// "not found" means it may be sent again. Unknown answers leave the row for the operator.
async fn reconcile(
    ledger: &Arc<dyn Ledger>,
    route: &Arc<Route>,
    c: &ActiveCampaign,
    summary: &mut Summary,
) -> Result<()> {
    let (id, before) = (c.id, crate::domain::clock::now_ms() - RECONCILE_AFTER_MS);
    let rows = blocking(ledger, move |l| l.reconcilable(id, before, 100)).await?;
    for (send_id, job_id, address) in rows {
        let msg = Message {
            idempotency_key: idempotency_key(&job_id),
            job_id,
            channel: c.channel,
            from: c.sender.clone(),
            to: address,
            subject: None,
            body: String::new(),
            html: None,
        };
        let found = match route.provider.lookup(&msg).await {
            Lookup::Found { provider_id } => Some(provider_id),
            Lookup::NotFound => None,
            Lookup::Unknown { reason } => {
                tracing::debug!(send_id, %reason, "lookup could not tell");
                continue;
            }
        };
        let sent = found.is_some();
        if blocking(ledger, move |l| l.settle_doubt(send_id, found)).await? {
            tracing::info!(send_id, sent, "in-doubt row reconciled with the provider");
            summary.reconciled += 1;
        }
    }
    Ok(())
}

async fn sleep_until_opt(t: Option<tokio::time::Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// One finished call task: its outcome goes to `outcomes` and its slot is freed. A task that
/// panicked (or was cancelled) is found by its task id and recorded as ambiguous, so its slot is
/// never leaked and its row is settled like any other unknown outcome.
fn collect(
    joined: std::result::Result<(tokio::task::Id, (i64, CallResult)), tokio::task::JoinError>,
    task_rows: &mut HashMap<tokio::task::Id, i64>,
    flights: &mut HashMap<i64, Flight>,
    per_route: &mut HashMap<usize, usize>,
    outcomes: &mut Vec<Record>,
    cfg: &Config,
) {
    let (id, res) = match joined {
        Ok((task, (id, res))) => {
            task_rows.remove(&task);
            (id, res)
        }
        Err(e) => {
            let Some(id) = task_rows.remove(&e.id()) else {
                return;
            };
            tracing::error!(send_id = id, error = %e, "a provider call task failed");
            (
                id,
                CallResult::Ambiguous {
                    error: format!("the call task failed: {e}"),
                },
            )
        }
    };
    if let CallResult::AlreadyAccepted { detail } = &res {
        tracing::warn!(send_id = id, %detail,
            "the provider says this key was already accepted with other content; \
             recorded as sent and not resent");
    }
    if let Some(f) = flights.remove(&id) {
        if let Some(n) = per_route.get_mut(&f.route) {
            *n = n.saturating_sub(1);
        }
        let now = crate::domain::clock::now_ms();
        outcomes.push(Record {
            id,
            token: f.token,
            outcome: decide(res, f.attempts, f.maybe_delivered, f.idempotent, cfg, now),
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
    let now = crate::domain::clock::now_ms();
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

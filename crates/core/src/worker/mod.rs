//! The worker: claim due rows, render, call the provider with bounded concurrency, and record
//! outcomes in group commits. The only place that calls providers.
//!
//! Per row the order is fixed: lease with dispatch marker (one commit) -> provider call ->
//! confirmation commit. A turn of the loop is one commit: the outcomes of the calls that
//! finished, plus one claim across every campaign and stream with work, sized to the call slots
//! free at that moment (the campaign asked first rotates each turn), so no row is ever leased
//! and left waiting, and at most `concurrency` rows are dispatched without an outcome. No
//! database statement or transaction is open across a provider call or an `.await`: every store
//! call runs to completion on a blocking thread.
//!
//! This file holds the configuration, the summary and the entry point; the loop is the
//! [`engine::Worker`] struct, with its steps in `maintain.rs` (due campaigns, sweeps,
//! reconciliation, list chunks), `claim.rs` (the turn's commit and the calls it starts) and
//! `calls.rs` (the calls in flight and their outcomes). The retry policy is
//! [`sendonce_domain::retry`].

mod calls;
mod claim;
mod engine;
pub mod hooks;
mod maintain;
pub mod ratelimit;
pub mod routes;
mod single;
pub use single::send_one;

use crate::provider::Provider;
use crate::worker::routes::Routes;
use sendonce_domain::error::{Error, Result};
use sendonce_domain::retry::Policy;
use sendonce_store::Ledger;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// The target of the worker's log lines, whichever of its files logs them: `sendonce::worker`,
/// as before the loop was split (a filter such as `SENDONCE_LOG=sendonce::worker=debug` and
/// the lines people grep for stay as they were).
const TARGET: &str = module_path!();

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
    /// Where `{{ unsubscribe_url }}` points; None: a campaign whose templates read it stops
    /// the worker before its first claim.
    pub links: Option<sendonce_domain::links::Links>,
    /// Rung by `serve` when the API has queued a message, so an idle worker claims it now
    /// instead of at its next tick.
    pub wake: Option<std::sync::Arc<tokio::sync::Notify>>,
    /// Events out to webhook endpoints, delivered beside the sends (None: not here).
    pub hooks: Option<hooks::Delivery>,
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
            links: None,
            wake: None,
            hooks: None,
        }
    }
}

impl Config {
    /// The retry policy these settings describe.
    pub fn retry_policy(&self) -> Policy {
        Policy {
            max_attempts: self.max_attempts,
            base_delay: self.retry_base,
            max_delay: self.retry_max,
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
    /// Outcomes refused by the fence (the lease was lost: the row's new holder decides).
    pub fenced_out: u64,
    /// Rows a claim left for later because their send window (or SMS quiet hours) was closed.
    pub held_for_window: u64,
    /// The earliest a window of those rows opens (Unix ms); with `--once`, also when the rows
    /// it left for a later run are due.
    #[serde(serialize_with = "sendonce_domain::clock::ser_opt_ms")]
    pub window_opens: Option<i64>,
    pub campaigns_started: Vec<i64>,
    pub campaigns_completed: Vec<i64>,
    /// Campaigns this run worked on.
    pub campaigns_touched: Vec<i64>,
    /// True when a stop signal ended the run.
    pub interrupted: bool,
}

impl Summary {
    fn add(&mut self, s: &sendonce_store::RecordStats) {
        self.sent += s.sent + s.late_confirmations;
        self.late_confirmations += s.late_confirmations;
        self.already_accepted += s.already_accepted;
        self.double_confirmations += s.double_confirmations;
        self.failed += s.failed;
        self.retried += s.retried;
        self.moved_in_doubt += s.in_doubt;
        self.fenced_out += s.fenced_out;
        crate::metrics::sends("sent", s.sent + s.late_confirmations);
        crate::metrics::sends("failed", s.failed);
        crate::metrics::sends("retried", s.retried);
        crate::metrics::sends("in_doubt", s.in_doubt);
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
        .map_err(|e| Error::internal(format!("the worker task failed: {e}")))?
}

/// The worker loop, and the one entry point (the functions above wrap it). Returns when `once`
/// finds nothing left, or after `shutdown` resolves and the in-flight calls have drained (or the
/// drain deadline passed).
pub async fn run_routed(
    ledger: Arc<dyn Ledger>,
    routes: Arc<Routes>,
    cfg: Config,
    shutdown: impl Future<Output = ()>,
) -> Result<Summary> {
    let mut cfg = cfg;
    let Some(delivery) = cfg.hooks.take() else {
        return engine::Worker::new(ledger, routes, cfg).run(shutdown).await;
    };
    // The webhook deliveries run beside the send loop and stop when it ends.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let hooks = tokio::spawn(async move {
        let res = hooks::run(delivery, stopped).await;
        if let Err(e) = &res {
            tracing::error!(target: TARGET, error = %e.message, "webhook deliveries stopped");
        }
        res
    });
    let summary = engine::Worker::new(ledger, routes, cfg).run(shutdown).await;
    let _ = stop.send(true);
    let delivered = hooks
        .await
        .map_err(|e| Error::internal(format!("the webhook task failed: {e}")))?;
    let summary = summary?;
    delivered?;
    Ok(summary)
}

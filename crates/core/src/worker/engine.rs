//! The `Worker`: the loop's state and its turn (maintain, build a list chunk, commit and claim,
//! then idle or wait for calls), the stop signal, the drain, and the damage stop.

use super::calls::{Calls, Joined};
use super::TARGET;
use super::{Config, Summary};
use crate::worker::routes::{Route, Routes};
use sendonce_domain::error::{Error, ErrorKind, Result};
use sendonce_domain::retry::Policy;
use sendonce_domain::template::Compiled;
use sendonce_store::{ActiveCampaign, Ledger, Record};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The worker's state between turns of its loop.
pub(super) struct Worker {
    pub(super) ledger: Arc<dyn Ledger>,
    pub(super) routes: Arc<Routes>,
    pub(super) cfg: Config,
    pub(super) policy: Policy,
    pub(super) summary: Summary,
    /// Campaigns in `sending`, as the last maintenance found them.
    pub(super) campaigns: Vec<ActiveCampaign>,
    pub(super) templates: HashMap<i64, Arc<Compiled>>,
    pub(super) campaign_routes: HashMap<i64, Arc<Route>>,
    /// Round-robin position over campaigns.
    pub(super) rr: usize,
    /// When each campaign's list building started (for the log line when it ends).
    pub(super) list_started: HashMap<i64, Instant>,
    pub(super) last_maintenance: Option<Instant>,
    pub(super) calls: Calls,
    /// Outcomes of finished calls, committed by the next turn's transaction.
    pub(super) outcomes: Vec<Record>,
    pub(super) stopping: bool,
    pub(super) drain_until: Option<tokio::time::Instant>,
    /// Damage found by a claim: no new claims; the calls in flight finish and are recorded,
    /// then the worker stops with this error.
    pub(super) damaged: Option<Error>,
    /// When rows wait for rate-limit tokens: how long until the next one.
    pub(super) rate_wait: Option<Duration>,
}

/// What the loop does after an idle turn.
enum Idle {
    /// Take another turn.
    Next,
    /// Leave the loop.
    Stop,
}

/// The stop signal, pinned for the whole run.
pub(super) type Signal<'a, S> = Pin<&'a mut S>;

impl Worker {
    pub fn new(ledger: Arc<dyn Ledger>, routes: Arc<Routes>, cfg: Config) -> Worker {
        Worker {
            ledger,
            routes,
            policy: cfg.retry_policy(),
            cfg,
            summary: Summary::default(),
            campaigns: Vec::new(),
            templates: HashMap::new(),
            campaign_routes: HashMap::new(),
            rr: 0,
            list_started: HashMap::new(),
            last_maintenance: None,
            calls: Calls::default(),
            outcomes: Vec::new(),
            stopping: false,
            drain_until: None,
            damaged: None,
            rate_wait: None,
        }
    }

    /// The loop. One turn: maintenance when due; one list chunk while a list is incomplete;
    /// one commit (the finished calls' outcomes and a claim sized to the free call slots) whose
    /// rows are called at once; then, with nothing in flight, idle (complete campaigns, sleep or
    /// leave), else wait for calls to finish.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<Summary> {
        tokio::pin!(shutdown);
        tracing::info!(target: TARGET, worker = %self.cfg.worker_id, batch = self.cfg.batch,
            concurrency = self.cfg.concurrency, "worker started");
        loop {
            if self.maintenance_due() {
                if let Err(e) = self.maintain().await {
                    self.stop_if_damaged(e)?;
                }
            }
            let building = match self.build_step(shutdown.as_mut()).await {
                Ok(b) => b,
                Err(e) => self.stop_if_damaged(e).map(|()| false)?,
            };
            let claimed_any = self.cycle().await?;
            if self.calls.is_empty() {
                match self
                    .idle(claimed_any || building, shutdown.as_mut())
                    .await?
                {
                    Idle::Next => continue,
                    Idle::Stop => break,
                }
            }
            if building {
                // While a list is being built, take what has finished and go on building.
                self.collect_ready();
                continue;
            }
            self.wait(shutdown.as_mut()).await;
        }
        self.finish().await
    }

    /// Maintenance runs once per tick, and not while stopping.
    fn maintenance_due(&self) -> bool {
        !self.stopping
            && self
                .last_maintenance
                .is_none_or(|t| t.elapsed() >= self.cfg.tick)
    }

    /// The stop signal came: no new claims; the calls in flight get until the drain deadline.
    pub(super) fn begin_stop(&mut self) {
        self.stopping = true;
        self.summary.interrupted = true;
        self.drain_until = Some(tokio::time::Instant::now() + self.cfg.drain_deadline);
        tracing::info!(
            target: TARGET,
            in_flight = self.calls.len(),
            "stop requested: finishing in-flight calls"
        );
    }

    /// Damage found by maintenance or list building (a state or channel the database should
    /// not hold) stops the worker as a claim's damage does, recording the calls in flight
    /// first; any other error ends the run at once.
    fn stop_if_damaged(&mut self, e: Error) -> Result<()> {
        if e.kind != ErrorKind::Damaged {
            return Err(e);
        }
        if self.damaged.is_none() {
            self.stop_on_damage(e);
        }
        Ok(())
    }

    /// A claim found ledger damage: no new claims; the calls in flight finish (or the drain
    /// deadline passes) and are recorded, then the run returns this error.
    pub(super) fn stop_on_damage(&mut self, e: Error) {
        tracing::error!(target: TARGET, error = %e.message, in_flight = self.calls.len(),
            "ledger damage: no new claims; recording the calls in flight, then stopping");
        self.damaged = Some(e);
        self.stopping = true;
        self.drain_until = Some(tokio::time::Instant::now() + self.cfg.drain_deadline);
    }

    /// Nothing in flight: flush, complete campaigns, decide whether to wait or leave.
    async fn idle<S: Future<Output = ()>>(
        &mut self,
        busy: bool,
        shutdown: Signal<'_, S>,
    ) -> Result<Idle> {
        self.flush().await?;
        if self.stopping {
            return Ok(Idle::Stop);
        }
        if busy {
            return Ok(Idle::Next);
        }
        let now = sendonce_domain::clock::now_ms();
        let next = self.complete_or_next(now).await?;
        if self.cfg.once && next.is_none() {
            // Maintenance may have found nothing new either: done.
            let now2 = sendonce_domain::clock::now_ms();
            let due = blocking(&self.ledger, move |l| l.start_due_campaigns(now2)).await?;
            if due.is_empty() {
                return Ok(Idle::Stop);
            }
            self.summary.campaigns_started.extend(due);
            self.last_maintenance = None;
            return Ok(Idle::Next);
        }
        let wait = self.idle_wait(next, now);
        let wake = self.cfg.wake.clone();
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = rung(wake.as_deref()) => return Ok(Idle::Next),
            _ = shutdown => { self.stopping = true; self.summary.interrupted = true; }
        }
        if next.is_none() || wait >= self.cfg.tick {
            self.last_maintenance = None;
        }
        Ok(Idle::Next)
    }

    /// Mark finished campaigns sent; of the others, the earliest time a row becomes due.
    async fn complete_or_next(&mut self, now: i64) -> Result<Option<i64>> {
        let mut next: Option<i64> = None;
        let mut left: Option<i64> = None;
        for c in self.campaigns.iter().filter(|c| c.list_complete) {
            let (id, one_off, windowed) = (c.id, !c.templated, c.windowed);
            // A stream never completes.
            if !c.stream && blocking(&self.ledger, move |l| l.try_complete(id, now)).await? {
                // A campaign that is no template (before schema 22 a notification had one of
                // its own): not worth a line.
                if one_off {
                    tracing::debug!(target: TARGET, campaign_id = id, "message settled");
                } else {
                    tracing::info!(target: TARGET, campaign_id = id, "campaign sent");
                }
                self.summary.campaigns_completed.push(id);
                continue;
            }
            if let Some(v) = blocking(&self.ledger, move |l| l.next_visible(id)).await? {
                let slot = match self.left_for_later(windowed, v, now) {
                    true => &mut left,
                    false => &mut next,
                };
                *slot = Some(slot.map_or(v, |n: i64| n.min(v)));
            }
        }
        if let Some(v) = left {
            // Left for a later run: said in the summary.
            let opens = self.summary.window_opens.map_or(v, |w| w.min(v));
            self.summary.window_opens = Some(opens);
        }
        Ok(next)
    }

    /// Whether `--once` leaves a campaign whose next row is due at `next` for a later run: it
    /// has a send window, and the row is due later than any lease or retry backoff could have
    /// put it (so it waits for its window). Rows of other campaigns are waited for.
    fn left_for_later(&self, windowed: bool, next: i64, now: i64) -> bool {
        let longest = self.cfg.lease.max(self.cfg.retry_max) + self.cfg.tick;
        self.cfg.once && windowed && next > now.saturating_add(longest.as_millis() as i64)
    }

    /// Until the next row is due, and no sooner than the next rate-limit token; at most a tick.
    fn idle_wait(&self, next: Option<i64>, now: i64) -> Duration {
        let until_due = next.map(|v| Duration::from_millis((v - now).clamp(1, i64::MAX) as u64));
        match (self.rate_wait, until_due) {
            (Some(w), Some(d)) => w.max(d),
            (Some(w), None) => w,
            (None, Some(d)) => d,
            (None, None) => self.cfg.tick,
        }
        .clamp(Duration::from_millis(1), self.cfg.tick)
    }

    /// Wait for calls to finish, for a new message while call slots are free, for the stop
    /// signal, or for the drain deadline.
    async fn wait<S: Future<Output = ()>>(&mut self, shutdown: Signal<'_, S>) {
        let drain_until = self.drain_until;
        let free = self.calls.len() < self.cfg.concurrency && !self.stopping;
        let wake = self.cfg.wake.clone().filter(|_| free);
        tokio::select! {
            _ = rung(wake.as_deref()) => {}
            joined = self.calls.next() => {
                if let Some(j) = joined {
                    self.collect(j);
                }
                self.collect_ready();
            }
            _ = shutdown, if !self.stopping => self.begin_stop(),
            _ = sleep_until_opt(drain_until), if drain_until.is_some() => {
                // Calls that did finish are recorded with their real outcome.
                self.collect_ready();
                let abandoned = self.calls.abandon(&self.policy).await;
                self.outcomes.extend(abandoned);
            }
        }
    }

    /// One finished call: its outcome waits for the next commit.
    fn collect(&mut self, joined: Joined) {
        if let Some(r) = self.calls.finish(joined, &self.policy) {
            self.outcomes.push(r);
        }
    }

    /// Every call that has already finished.
    fn collect_ready(&mut self) {
        while let Some(j) = self.calls.ready() {
            self.collect(j);
        }
    }

    /// Commit the outcomes in hand, on their own.
    pub(super) async fn flush(&mut self) -> Result<()> {
        if self.outcomes.is_empty() {
            return Ok(());
        }
        let group = std::mem::take(&mut self.outcomes);
        let now = sendonce_domain::clock::now_ms();
        let s = blocking(&self.ledger, move |l| l.record(&group, now)).await?;
        self.summary.add(&s);
        Ok(())
    }

    /// After the loop: the last outcomes, the log line, and the damage error if there was one.
    async fn finish(mut self) -> Result<Summary> {
        self.flush().await?;
        let s = &self.summary;
        tracing::info!(target: TARGET, worker = %self.cfg.worker_id, claimed = s.claimed,
            sent = s.sent, failed = s.failed, in_doubt = s.moved_in_doubt, "worker stopped");
        match self.damaged {
            Some(e) => Err(e),
            None => Ok(self.summary),
        }
    }
}

/// Whether the stop signal has come, without waiting for it.
pub(super) async fn signalled<S: Future<Output = ()>>(shutdown: Signal<'_, S>) -> bool {
    tokio::select! {
        biased;
        _ = shutdown => true,
        _ = std::future::ready(()) => false,
    }
}

/// Run a store call to completion on a blocking thread: no statement is open across an await.
///
/// A database that is unavailable (a PostgreSQL server restarting, a network cut: never
/// SQLite) is waited out: the same call is made again, with a growing pause, for up to
/// [`UNAVAILABLE_FOR_AT_MOST`]. Every ledger call may be made twice: a commit whose answer was
/// lost and is made again confirms rows already sent (counted as double confirmations, never
/// sent twice) or claims other rows, leaving the first claim's rows to expire like a killed
/// worker's.
pub(super) async fn blocking<T: Send + 'static>(
    ledger: &Arc<dyn Ledger>,
    f: impl Fn(&dyn Ledger) -> Result<T> + Send + Sync + 'static,
) -> Result<T> {
    let f = Arc::new(f);
    let started = tokio::time::Instant::now();
    let mut pause = Duration::from_millis(100);
    loop {
        let (l, g) = (ledger.clone(), f.clone());
        let res = tokio::task::spawn_blocking(move || g(l.as_ref()))
            .await
            .map_err(|e| Error::internal(format!("a database task failed: {e}")))?;
        match res {
            Err(e)
                if e.kind == ErrorKind::Unavailable
                    && started.elapsed() < UNAVAILABLE_FOR_AT_MOST =>
            {
                tracing::warn!(target: TARGET, error = %e.message,
                    retry_in_ms = pause.as_millis() as u64,
                    "the database is unavailable; making the same call again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
            }
            other => return other,
        }
    }
}

/// How long a worker waits out an unavailable database before it gives up (exit 1).
const UNAVAILABLE_FOR_AT_MOST: Duration = Duration::from_secs(300);

/// Resolves when `wake` is rung (never without one).
async fn rung(wake: Option<&tokio::sync::Notify>) {
    match wake {
        Some(w) => w.notified().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(t: Option<tokio::time::Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

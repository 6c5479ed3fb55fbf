//! `sendonce bench`: throughput, memory, WAL size and restart time of the real sending path,
//! measured in one run on temporary databases, side by side with the raw SQLite limit (a bare
//! two-marker loop on the same table and index). Figures only; thresholds are read from the
//! output (`targets`), never asserted here.

use crate::limit;
use crate::seed::Bench as _;
use sendonce_core::provider::{self, Provider};
use sendonce_core::worker;
use sendonce_domain::address::Channel;
use sendonce_domain::error::{Error, Result};
use sendonce_store::sqlite::{QueryPlan, SqliteStore};
use sendonce_store::{
    Audience, Campaigns, Ledger, Lists, NewCampaign, NewList, OpenOptions, OptIn, Synchronous,
};
use serde::Serialize;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What to measure (validated by the CLI).
#[derive(Debug, Clone)]
pub struct Options {
    /// Recipients of the limit and pipeline sections.
    pub recipients: u64,
    /// Rows per claim.
    pub batch: usize,
    pub sync: Synchronous,
    /// Provider latency of the latency-bound section.
    pub latency: Duration,
    /// Calls in flight (pipeline, scale and latency sections).
    pub concurrency: usize,
    /// Subscribers of the scale section.
    pub scale: u64,
    /// Where to put the databases (kept); default a temporary directory, removed after.
    pub dir: Option<PathBuf>,
    /// An empty PostgreSQL database on which to run the original design's loop in the same run
    /// (section 2's comparison); None: not compared.
    pub compare_pg: Option<String>,
}

/// Subscribers per list-building transaction (the worker's default).
const LIST_CHUNK: usize = 50_000;
/// Lease length everywhere in the bench (nothing expires during a run).
const LEASE: Duration = Duration::from_secs(60);
/// Backlog of the restart section.
const RESTART_BACKLOG: u64 = 50_000;
/// Restarts measured per bench run (the median is reported).
const RESTART_SAMPLES: usize = 3;
/// The latency section runs about this long at the ideal rate.
const LATENCY_RUN: Duration = Duration::from_secs(2);
/// Pause of the second connection between two campaign status reads during the scale run (a
/// dashboard polling ten times a second).
const STATUS_READ_GAP: Duration = Duration::from_millis(100);
/// Status reads timed after the scale run (the report gives the median).
const STATUS_SAMPLES: usize = 11;
/// Timed `sendonce notify` runs after the first (which creates the state file).
const NOTIFY_SAMPLES: usize = 5;
/// One subscriber in this many has opted out before the campaign.
const OPTED_OUT_EVERY: u64 = 1000;
/// Lists of the targeted list-building figure (overlapping windows, see
/// `Bench::bench_seed_memberships`).
const TARGETED_LISTS: usize = 3;

#[derive(Debug, Serialize)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub mem_total_mib: u64,
    /// 1-minute load average when the bench started and when it ended (other builds share the
    /// machine: read the figures with it in mind).
    pub load_start: f64,
    pub load_end: f64,
    pub sqlite_version: String,
}

#[derive(Debug, Serialize)]
pub struct Settings {
    pub recipients: u64,
    pub batch: usize,
    pub concurrency: usize,
    pub synchronous: &'static str,
    pub latency_ms: f64,
    pub scale: u64,
}

/// Section 1: the bare two-marker loop.
#[derive(Debug, Serialize)]
pub struct Limit {
    pub recipients: u64,
    pub batch: usize,
    pub commits: u64,
    pub seconds: f64,
    /// CPU seconds (all threads of the bench process) spent in the loop.
    pub cpu_seconds: f64,
    pub per_second: f64,
    /// The same loop on a minimal 9-column row (no payload, no unique keys, no counters, only
    /// ids returned by its claim): what the two markers cost without the ledger's schema.
    pub minimal_rows: u64,
    pub minimal_per_second: f64,
    pub minimal_cpu_seconds: f64,
    /// per_second / minimal_per_second: the price of the schema, as a number.
    pub ratio_to_minimal: f64,
}

/// Section 2, one provider: the real path through `worker::run` (campaign CAS, list building,
/// claims with the suppression check, rendering, provider call, confirmation).
#[derive(Debug, Serialize)]
pub struct PipelineRun {
    pub provider: String,
    pub sent: u64,
    pub seconds: f64,
    /// CPU seconds (all threads of the bench process) spent in the run.
    pub cpu_seconds: f64,
    pub per_second: f64,
    /// per_second / limit.per_second
    pub ratio_to_limit: f64,
}

#[derive(Debug, Serialize)]
pub struct Pipeline {
    pub batch: usize,
    pub concurrency: usize,
    pub null: PipelineRun,
    pub outbox: PipelineRun,
}

/// Section 3.
#[derive(Debug, Serialize)]
pub struct Scale {
    pub subscribers: u64,
    pub recipients: u64,
    /// Rows the list building produced: the recipients and the suppressed addresses.
    pub list_build_rows: u64,
    pub seed_seconds: f64,
    pub list_build_seconds: f64,
    pub list_build_cpu_seconds: f64,
    /// The child `sendonce run --once --provider null` over the whole campaign.
    pub run_seconds: f64,
    pub run_per_second: f64,
    /// VmHWM of that child process.
    pub peak_rss_mib: f64,
    /// A campaign status read (`campaign status`'s query) of the whole campaign after the run:
    /// median of `STATUS_SAMPLES`, ms. Its counters were then checked against a full count.
    pub status_ms: f64,
}

/// One list building, timed.
#[derive(Debug, Serialize)]
pub struct Build {
    /// Rows produced (queued and suppressed).
    pub rows: u64,
    pub seconds: f64,
    pub cpu_seconds: f64,
    pub us_per_row: f64,
    /// Seconds per million produced rows.
    pub seconds_per_million: f64,
}

impl Build {
    fn new(rows: u64, seconds: f64, cpu_seconds: f64) -> Build {
        let per_row = if rows == 0 {
            0.0
        } else {
            seconds / rows as f64
        };
        Build {
            rows,
            seconds,
            cpu_seconds,
            us_per_row: per_row * 1e6,
            seconds_per_million: per_row * 1e6,
        }
    }
}

/// Section 3b: list building for the scale's subscribers account-wide (section 3's figure) and
/// through three lists that overlap by a third (every subscriber in one list, a third of them
/// in two), on a file of its own.
#[derive(Debug, Serialize)]
pub struct ListBuild {
    pub subscribers: u64,
    pub lists: usize,
    pub memberships: u64,
    pub account_wide: Build,
    pub targeted: Build,
    /// targeted.us_per_row / account_wide.us_per_row.
    pub ratio: f64,
}

/// `sendonce bench --only list-build`: section 3b alone, with the plans of the list-building
/// statements.
#[derive(Debug, Serialize)]
pub struct ListBuildReport {
    pub machine: Machine,
    pub list_build: ListBuild,
    pub plans: Vec<QueryPlan>,
    pub seconds: f64,
}

/// Section 4.
#[derive(Debug, Serialize)]
pub struct Latency {
    pub in_flight: usize,
    pub latency_ms: f64,
    pub recipients: u64,
    pub seconds: f64,
    pub per_second: f64,
    pub ideal_per_second: f64,
    pub ratio: f64,
    /// Mean duration of a provider call as the worker saw it (the timer of the fake latency
    /// rounds up, so it is a little over `latency_ms`).
    pub mean_call_ms: f64,
    /// Share of the run during which the `in_flight` call slots held a call: what the sender
    /// itself loses between a call's end and the next call in its slot.
    pub slot_utilisation: f64,
    /// A call slot's idle time between one call's end and its next call: median and 99th
    /// percentile, ms (see `slot_idle_ms`).
    pub slot_idle_p50_ms: f64,
    pub slot_idle_p99_ms: f64,
}

/// Section 5.
#[derive(Debug, Serialize)]
pub struct Wal {
    /// Largest `-wal` file seen while the child ran the scale campaign.
    pub max_mib_run: f64,
    /// Largest `-wal` file seen while the list was built.
    pub max_mib_list_build: f64,
    /// Campaign status reads done by the second connection during the run.
    pub status_reads: u64,
    pub mean_status_read_ms: f64,
}

/// Section 6.
#[derive(Debug, Serialize)]
pub struct Restart {
    pub backlog: u64,
    /// Median of the samples: from spawning `sendonce run` to its "first claim" log line.
    /// It includes the start check (`quick_check` of the whole file before the first claim).
    pub ms_to_first_claim: f64,
    pub samples_ms: Vec<f64>,
    /// The same with the start check off (`SENDONCE_START_CHECK_MAX_BYTES=0`): what the check
    /// costs is the difference.
    pub ms_to_first_claim_unchecked: f64,
    /// The size of the file the start check reads, MiB.
    pub file_mib: f64,
}

/// Section 7: `sendonce notify` as a CI job runs it, a new process per message.
#[derive(Debug, Serialize)]
pub struct Notify {
    /// Median wall time of one notify (process start to exit) with a new key each time.
    pub ms: f64,
    pub samples_ms: Vec<f64>,
    /// The first notify, which also creates the state file and its schema.
    pub first_ms: f64,
    /// Deliveries the provider logged (one per notify).
    pub delivered: u64,
}

#[derive(Debug, Serialize)]
pub struct Target {
    pub what: &'static str,
    pub target: String,
    pub value: String,
    pub met: bool,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub machine: Machine,
    pub settings: Settings,
    pub limit: Limit,
    pub pipeline: Pipeline,
    pub scale: Scale,
    pub list_build: ListBuild,
    pub latency: Latency,
    pub wal: Wal,
    pub restart: Restart,
    pub notify: Notify,
    /// Section 2's comparison: the original design's loop on PostgreSQL at its best worker
    /// count, when `--compare-pg` names a database.
    pub original_pg: Option<super::bench_pg::OriginalBest>,
    /// Section 8: `EXPLAIN QUERY PLAN` of every statement of the send path.
    pub plans: Vec<QueryPlan>,
    pub targets: Vec<Target>,
    pub seconds: f64,
}

pub use sendonce_core::metrics::peak_rss_kib;

/// CPU time (user + system) this process has used so far, in seconds: less noisy than wall
/// time on a shared machine.
pub(crate) fn cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

pub(crate) fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0.0)
}

pub(crate) fn machine(load_start: f64) -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let mem_total_mib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| {
                    l.split_whitespace()
                        .nth(1)
                        .and_then(|v| v.parse::<u64>().ok())
                })
        })
        .map(|kib| kib / 1024)
        .unwrap_or(0);
    Machine {
        cpus: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        cpu_model,
        mem_total_mib,
        load_start,
        load_end: load_average(),
        sqlite_version: rusqlite::version().to_string(),
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

pub(crate) fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

fn sync_name(s: Synchronous) -> &'static str {
    match s {
        Synchronous::Full => "full",
        Synchronous::Normal => "normal",
    }
}

/// The databases of one bench run; the temporary directory is removed on drop.
pub(crate) struct Workspace {
    dir: PathBuf,
    keep: bool,
    sync: Synchronous,
}

impl Workspace {
    pub(crate) fn new(dir: Option<&Path>, sync: Synchronous) -> Result<Workspace> {
        let (dir, keep) = match dir {
            Some(d) => (d.to_path_buf(), true),
            None => (
                std::env::temp_dir().join(format!(
                    "sendonce-bench-{}-{}",
                    std::process::id(),
                    sendonce_domain::clock::now_ms()
                )),
                false,
            ),
        };
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::io(&format!("cannot create {}", dir.display()), e))?;
        Ok(Workspace { dir, keep, sync })
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// A new, empty database (refuses to reuse one: figures must come from a fresh file).
    pub(crate) fn fresh(&self, name: &str) -> Result<(PathBuf, SqliteStore)> {
        let path = self.path(name);
        if path.exists() {
            return Err(Error::invalid(format!(
                "{} already exists; pass an empty --dir",
                path.display()
            )));
        }
        let store = SqliteStore::open(
            &path,
            &OpenOptions {
                create: true,
                sync: self.sync,
                ..Default::default()
            },
        )?;
        Ok((path, store))
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// An account with `n` subscribers (one in 1000 opted out) and an approved email campaign.
/// Returns the campaign id.
fn setup_campaign(store: &SqliteStore, n: u64) -> Result<i64> {
    Ok(setup_campaign_in_lists(store, n, 0)?.0)
}

/// [`setup_campaign`], the campaign targeting `lists` lists that hold every subscriber
/// (`Bench::bench_seed_memberships`; none: the whole account). Returns the campaign id
/// and the number of memberships.
pub(crate) fn setup_campaign_in_lists(
    store: &SqliteStore,
    n: u64,
    lists: usize,
) -> Result<(i64, u64)> {
    let account = store.add_account("bench")?;
    store.bench_seed_subscribers(account, n)?;
    store.bench_seed_suppressions(account, OPTED_OUT_EVERY)?;
    let mut ids = Vec::with_capacity(lists);
    for i in 0..lists {
        ids.push(store.create_list(&NewList {
            account_id: account,
            name: &format!("list{i}"),
            description: None,
            optin: OptIn::Single,
            public: false,
            confirm: Default::default(),
        })?);
    }
    let memberships = store.bench_seed_memberships(account, &ids)?;
    let cid = store.create_campaign(&NewCampaign {
        account_id: account,
        name: "bench",
        channel: Channel::Email,
        sender: Some("news@bench.example"),
        subject: Some("News for {{ name }}"),
        body: "Hello {{ name }},\n\nThis month in {{ city }}: nothing was sent twice.\n",
        html: None,
        reply_to: None,
        filter: None,
        sms_footer: None,
        lists: &ids,
        // The bench measures the send path; it seals no unsubscribe links.
        transactional: true,
        windows: &Default::default(),
    })?;
    store.approve_campaign(cid, sendonce_domain::clock::now_ms())?;
    Ok((cid, memberships))
}

/// Rows a list building produced: queued and suppressed.
fn produced(store: &SqliteStore, cid: i64) -> Result<u64> {
    Ok(store.bench_count(cid, "queued")? + store.bench_count(cid, "suppressed")?)
}

/// Seed `n` subscribers on a fresh file `name` (in `lists` lists, or none), then time the
/// building of the campaign's whole list. Returns the figure and the memberships.
fn timed_build(ws: &Workspace, name: &str, n: u64, lists: usize) -> Result<(Build, u64)> {
    let (_, store) = ws.fresh(name)?;
    let (cid, memberships) = setup_campaign_in_lists(&store, n, lists)?;
    store.checkpoint_truncate()?;
    let cpu = cpu_seconds();
    let t = Instant::now();
    build_list(&store, cid)?;
    let secs = t.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu;
    Ok((Build::new(produced(&store, cid)?, secs, cpu), memberships))
}

/// Section 3b, given the account-wide figure (section 3's, or measured here when alone).
fn list_build(ws: &Workspace, opts: &Options, account_wide: Build) -> Result<ListBuild> {
    let (targeted, memberships) = timed_build(ws, "lists.db", opts.scale, TARGETED_LISTS)?;
    Ok(ListBuild {
        subscribers: opts.scale,
        lists: TARGETED_LISTS,
        memberships,
        ratio: if account_wide.us_per_row > 0.0 {
            targeted.us_per_row / account_wide.us_per_row
        } else {
            0.0
        },
        account_wide,
        targeted,
    })
}

/// `sendonce bench --only list-build`: list building for `opts.scale` subscribers
/// account-wide, then through three lists, each on a fresh file.
pub fn run_list_build(opts: &Options) -> Result<ListBuildReport> {
    let started = Instant::now();
    let load_start = load_average();
    let ws = Workspace::new(opts.dir.as_deref(), opts.sync)?;
    let (account_wide, _) = timed_build(&ws, "account.db", opts.scale, 0)?;
    let list_build = list_build(&ws, opts, account_wide)?;
    let plans = ws
        .fresh("plans.db")?
        .1
        .hot_query_plans()?
        .into_iter()
        .filter(|p| p.name.starts_with("list: insert chunk (email"))
        .collect();
    Ok(ListBuildReport {
        machine: machine(load_start),
        list_build,
        plans,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Start the campaign (compare-and-set) and build its whole list, as the worker does.
fn build_list(store: &dyn Ledger, cid: i64) -> Result<()> {
    store.start_due_campaigns(sendonce_domain::clock::now_ms())?;
    while !store.build_list_chunk(cid, LIST_CHUNK)? {}
    Ok(())
}

fn worker_config(opts: &Options, concurrency: usize) -> worker::Config {
    worker::Config {
        batch: opts.batch,
        concurrency,
        lease: LEASE,
        tick: Duration::from_millis(50),
        worker_id: "bench".into(),
        once: true,
        list_chunk: LIST_CHUNK,
        ..Default::default()
    }
}

/// Section 1: the bare loop, two commits per batch (leased claim, fenced confirmation), on
/// the ledger's own table, then on a minimal row (`Limit::minimal`).
pub(crate) fn limit(ws: &Workspace, opts: &Options) -> Result<Limit> {
    let (_, store) = ws.fresh("limit.db")?;
    let cid = setup_campaign(&store, opts.recipients)?;
    build_list(&store, cid)?;
    store.checkpoint_truncate()?;
    let mut limit = two_marker_loop(
        opts,
        |token, now, lease| limit::bare_claim(&store, cid, opts.batch, token, now, lease),
        |ids, token, now| limit::bare_confirm(&store, ids, token, now),
    )?;
    let (_, bare) = ws.fresh("minimal.db")?;
    limit::minimal_seed(&bare, opts.recipients)?;
    bare.checkpoint_truncate()?;
    let minimal = two_marker_loop(
        opts,
        |token, now, lease| limit::minimal_claim(&bare, opts.batch, token, now, lease),
        |ids, token, now| limit::minimal_confirm(&bare, ids, token, now),
    )?;
    limit.minimal_rows = minimal.recipients;
    limit.minimal_per_second = minimal.per_second;
    limit.minimal_cpu_seconds = minimal.cpu_seconds;
    limit.ratio_to_minimal = limit.per_second / minimal.per_second;
    Ok(limit)
}

/// Claim a batch, confirm it, until a claim comes back empty; times the loop.
fn two_marker_loop(
    opts: &Options,
    claim: impl Fn(i64, i64, i64) -> Result<crate::limit::BareClaim>,
    confirm: impl Fn(&[i64], i64, i64) -> Result<u64>,
) -> Result<Limit> {
    let lease_ms = LEASE.as_millis() as i64;
    let mut token = sendonce_domain::clock::now_ms();
    let (mut sent, mut commits) = (0u64, 0u64);
    let cpu = cpu_seconds();
    let t = Instant::now();
    loop {
        token += 1;
        let claimed = claim(token, sendonce_domain::clock::now_ms(), lease_ms)?;
        commits += 1;
        if claimed.ids.is_empty() {
            break;
        }
        sent += confirm(&claimed.ids, token, sendonce_domain::clock::now_ms())?;
        commits += 1;
    }
    let seconds = t.elapsed().as_secs_f64();
    Ok(Limit {
        recipients: sent,
        batch: opts.batch,
        commits,
        seconds,
        cpu_seconds: cpu_seconds() - cpu,
        per_second: sent as f64 / seconds,
        minimal_rows: 0,
        minimal_per_second: 0.0,
        minimal_cpu_seconds: 0.0,
        ratio_to_minimal: 0.0,
    })
}

/// The pipeline runs with at least `batch` calls in flight, so that its claims are as large as
/// the limit loop's (with the null provider a call takes microseconds).
fn pipeline_concurrency(opts: &Options) -> usize {
    opts.concurrency.max(opts.batch)
}

/// Section 2: `worker::run` end to end on a fresh database with one provider.
fn pipeline_run(
    ws: &Workspace,
    opts: &Options,
    rt: &tokio::runtime::Runtime,
    name: &str,
    provider: Arc<dyn Provider>,
    limit: f64,
) -> Result<PipelineRun> {
    pipeline_on(ws, opts, rt, (name, provider), limit, false)
}

/// The pipeline with the null provider on a database whose send events are not recorded (the
/// `sends_event` trigger of schema 24 dropped): what one event per send costs, beside
/// [`pipeline_run`]'s null run in the same round.
pub(crate) fn pipeline_without_events(
    ws: &Workspace,
    opts: &Options,
    rt: &tokio::runtime::Runtime,
    limit: f64,
) -> Result<PipelineRun> {
    let null: Arc<dyn Provider> = Arc::new(provider::Null::new());
    pipeline_on(ws, opts, rt, ("null-no-events", null), limit, true)
}

fn pipeline_on(
    ws: &Workspace,
    opts: &Options,
    rt: &tokio::runtime::Runtime,
    (name, provider): (&str, Arc<dyn Provider>),
    limit: f64,
    without_events: bool,
) -> Result<PipelineRun> {
    let (path, store) = ws.fresh(&format!("pipeline-{name}.db"))?;
    if without_events {
        let c = rusqlite::Connection::open(&path)
            .map_err(|e| Error::db(format!("{}: {e}", path.display())))?;
        c.execute_batch("DROP TRIGGER sends_event")
            .map_err(|e| Error::db(format!("dropping sends_event: {e}")))?;
    }
    let _cid = setup_campaign(&store, opts.recipients)?;
    store.checkpoint_truncate()?;
    let ledger: Arc<dyn Ledger> = Arc::new(store.clone());
    let cfg = worker_config(opts, pipeline_concurrency(opts));
    let cpu = cpu_seconds();
    let t = Instant::now();
    let summary = rt.block_on(worker::spawn(ledger, provider, cfg, std::future::pending()))?;
    let seconds = t.elapsed().as_secs_f64();
    let per_second = summary.sent as f64 / seconds;
    Ok(PipelineRun {
        provider: name.to_string(),
        sent: summary.sent,
        seconds,
        cpu_seconds: cpu_seconds() - cpu,
        per_second,
        ratio_to_limit: per_second / limit,
    })
}

/// Section 2 with both providers: the null provider, then the outbox (`outbox.jsonl` in the
/// workspace).
pub(crate) fn pipelines(
    ws: &Workspace,
    opts: &Options,
    rt: &tokio::runtime::Runtime,
    limit: f64,
) -> Result<(PipelineRun, PipelineRun)> {
    let null = pipeline_run(ws, opts, rt, "null", Arc::new(provider::Null::new()), limit)?;
    let outbox = Arc::new(provider::Outbox::open(&ws.path("outbox.jsonl"), true)?);
    let outbox = pipeline_run(ws, opts, rt, "outbox", outbox, limit)?;
    Ok((null, outbox))
}

/// A provider wrapper that adds up how long its calls took and keeps when each started and
/// ended (nanoseconds from `base`), for the slots' idle times.
struct Timed {
    inner: Arc<dyn Provider>,
    calls: AtomicU64,
    nanos: AtomicU64,
    base: Instant,
    spans: std::sync::Mutex<Vec<(u64, u64)>>,
}

impl Provider for Timed {
    fn capabilities(&self) -> &provider::Capabilities {
        self.inner.capabilities()
    }

    fn send<'a>(&'a self, msg: &'a provider::Message) -> provider::CallFuture<'a> {
        Box::pin(async move {
            let t = Instant::now();
            let res = self.inner.send(msg).await;
            let (start, end) = (
                t.duration_since(self.base).as_nanos() as u64,
                self.base.elapsed().as_nanos() as u64,
            );
            self.nanos.fetch_add(end - start, Ordering::Relaxed);
            self.calls.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut spans) = self.spans.lock() {
                spans.push((start, end));
            }
            res
        })
    }
}

/// How long a call slot stood empty between one call's end and the next call it held, in ms,
/// sorted. Slots are not named, so each call after the first `slots` takes the slot freed
/// longest ago (any assignment of calls to slots gives the same total idle time; this one
/// gives each gap as a slot would see it under a first-in first-out refill).
fn slot_idle_ms(spans: &[(u64, u64)], slots: usize) -> Vec<f64> {
    let mut starts: Vec<u64> = spans.iter().map(|s| s.0).collect();
    let mut ends: Vec<u64> = spans.iter().map(|s| s.1).collect();
    starts.sort_unstable();
    ends.sort_unstable();
    let mut freed = ends.iter().peekable();
    let mut waiting = std::collections::VecDeque::new();
    let mut idle = Vec::new();
    for &start in starts.iter().skip(slots) {
        while let Some(&&end) = freed.peek() {
            if end > start {
                break;
            }
            waiting.push_back(end);
            freed.next();
        }
        if let Some(end) = waiting.pop_front() {
            idle.push((start - end) as f64 / 1e6);
        }
    }
    idle.sort_by(|a, b| a.total_cmp(b));
    idle
}

/// The `q` quantile (0..=1) of sorted figures, nearest rank.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Section 4: a provider that takes `latency` per call, `concurrency` calls in flight.
fn latency_bound(ws: &Workspace, opts: &Options, rt: &tokio::runtime::Runtime) -> Result<Latency> {
    let rounds = (LATENCY_RUN.as_secs_f64() / opts.latency.as_secs_f64())
        .ceil()
        .max(10.0) as u64;
    // Recipients after the opted-out ones are removed: a whole number of rounds.
    let wanted = opts.concurrency as u64 * rounds;
    let subscribers = wanted + wanted / (OPTED_OUT_EVERY - 1);
    let (_, store) = ws.fresh("latency.db")?;
    let cid = setup_campaign(&store, subscribers)?;
    build_list(&store, cid)?;
    store.checkpoint_truncate()?;
    let spec = format!("null?latency={}ms", opts.latency.as_millis());
    let timed = Arc::new(Timed {
        inner: provider::from_spec(&spec)?,
        calls: AtomicU64::new(0),
        nanos: AtomicU64::new(0),
        base: Instant::now(),
        spans: std::sync::Mutex::new(Vec::new()),
    });
    let ledger: Arc<dyn Ledger> = Arc::new(store.clone());
    let cfg = worker_config(opts, opts.concurrency);
    let t = Instant::now();
    let summary = rt.block_on(worker::spawn(
        ledger,
        timed.clone(),
        cfg,
        std::future::pending(),
    ))?;
    let seconds = t.elapsed().as_secs_f64();
    let per_second = summary.sent as f64 / seconds;
    let ideal = opts.concurrency as f64 / opts.latency.as_secs_f64();
    let calls = timed.calls.load(Ordering::Relaxed);
    let busy = timed.nanos.load(Ordering::Relaxed) as f64 / 1e9;
    let idle = match timed.spans.lock() {
        Ok(spans) => slot_idle_ms(&spans, opts.concurrency),
        Err(_) => Vec::new(),
    };
    Ok(Latency {
        slot_idle_p50_ms: quantile(&idle, 0.5),
        slot_idle_p99_ms: quantile(&idle, 0.99),
        mean_call_ms: if calls == 0 {
            0.0
        } else {
            busy * 1000.0 / calls as f64
        },
        slot_utilisation: busy / (seconds * opts.concurrency as f64),
        in_flight: opts.concurrency,
        latency_ms: opts.latency.as_secs_f64() * 1000.0,
        recipients: summary.sent,
        seconds,
        per_second,
        ideal_per_second: ideal,
        ratio: per_second / ideal,
    })
}

pub(crate) fn child_cmd(db: &Path) -> Result<Command> {
    let exe =
        std::env::current_exe().map_err(|e| Error::io("cannot find the sendonce executable", e))?;
    let mut c = Command::new(exe);
    c.arg("--db")
        .arg(db)
        .env_remove("SENDONCE_CRASH_AT")
        .env_remove("SENDONCE_LOG");
    Ok(c)
}

fn run_args(opts: &Options) -> Vec<String> {
    vec![
        "run".into(),
        "--provider".into(),
        "null".into(),
        "--batch".into(),
        opts.batch.to_string(),
        "--concurrency".into(),
        opts.concurrency.to_string(),
        "--tick".into(),
        "50ms".into(),
        "--sync".into(),
        sync_name(opts.sync).into(),
    ]
}

/// Poll the size of `path` until `stop`; the largest size seen goes to `max`.
fn watch_size(path: &Path, stop: &AtomicBool, max: &AtomicU64) {
    while !stop.load(Ordering::Relaxed) {
        if let Ok(m) = std::fs::metadata(path) {
            max.fetch_max(m.len(), Ordering::Relaxed);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Sections 3 and 5: list building for `scale` subscribers, then a child `sendonce run` over
/// the whole campaign (its peak RSS), while a second connection keeps reading the campaign's
/// status and a thread watches the WAL file.
fn scale(ws: &Workspace, opts: &Options) -> Result<(Scale, Wal)> {
    let (db, store) = ws.fresh("scale.db")?;
    let wal_path = PathBuf::from(format!("{}-wal", db.display()));
    let t = Instant::now();
    let cid = setup_campaign(&store, opts.scale)?;
    store.checkpoint_truncate()?;
    let seed_seconds = t.elapsed().as_secs_f64();

    let stop = AtomicBool::new(false);
    let wal_build = AtomicU64::new(0);
    let (list_build_seconds, list_build_cpu_seconds) =
        std::thread::scope(|s| -> Result<(f64, f64)> {
            s.spawn(|| watch_size(&wal_path, &stop, &wal_build));
            let cpu = cpu_seconds();
            let t = Instant::now();
            let built = build_list(&store, cid);
            let secs = t.elapsed().as_secs_f64();
            let cpu = cpu_seconds() - cpu;
            stop.store(true, Ordering::Relaxed);
            built.map(|_| (secs, cpu))
        })?;
    let recipients = store.bench_count(cid, "queued")?;
    let list_build_rows = produced(&store, cid)?;

    let stop = AtomicBool::new(false);
    let wal_run = AtomicU64::new(0);
    let reads = AtomicU64::new(0);
    let read_nanos = AtomicU64::new(0);
    let mut cmd = child_cmd(&db)?;
    cmd.args(["--json", "-q"])
        .args(run_args(opts))
        .args(["--once", "--report-peak-rss"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let (run_seconds, out) = std::thread::scope(|s| -> Result<(f64, Vec<u8>)> {
        s.spawn(|| watch_size(&wal_path, &stop, &wal_run));
        s.spawn(|| read_status(&db, cid, &stop, &reads, &read_nanos));
        let t = Instant::now();
        let res = run_to_end(&mut cmd);
        let secs = t.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        res.map(|out| (secs, out))
    })?;
    let doc: serde_json::Value = serde_json::from_slice(&out)
        .map_err(|e| Error::db(format!("unreadable output of the scale run: {e}")))?;
    let sent = doc["sent"].as_u64().unwrap_or(0);
    let peak = doc["peak_rss_kib"].as_u64().unwrap_or(0);
    let n_reads = reads.load(Ordering::Relaxed);
    let status_ms = timed_status(&store, cid)?;
    check_counters(&store, cid)?;
    Ok((
        Scale {
            subscribers: opts.scale,
            recipients,
            list_build_rows,
            seed_seconds,
            list_build_seconds,
            list_build_cpu_seconds,
            run_seconds,
            run_per_second: sent as f64 / run_seconds,
            peak_rss_mib: peak as f64 / 1024.0,
            status_ms,
        },
        Wal {
            max_mib_run: mib(wal_run.load(Ordering::Relaxed)),
            max_mib_list_build: mib(wal_build.load(Ordering::Relaxed)),
            status_reads: n_reads,
            mean_status_read_ms: if n_reads == 0 {
                0.0
            } else {
                read_nanos.load(Ordering::Relaxed) as f64 / n_reads as f64 / 1e6
            },
        },
    ))
}

/// The median time of `STATUS_SAMPLES` status reads of a campaign, ms.
fn timed_status(store: &SqliteStore, cid: i64) -> Result<f64> {
    let mut ms = Vec::with_capacity(STATUS_SAMPLES);
    for _ in 0..STATUS_SAMPLES {
        let t = Instant::now();
        store.status_counts(cid)?;
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(median(&ms))
}

/// The campaign's counters against a count of its rows: a figure read from counters that
/// disagree with the rows would be worthless, so the bench fails instead.
fn check_counters(store: &SqliteStore, cid: i64) -> Result<()> {
    let counted = store.bench_full_counts(cid)?;
    let kept: Vec<(String, u64)> = store
        .status_counts(cid)?
        .counts
        .into_iter()
        .filter(|(_, n)| *n != 0)
        .map(|(s, n)| (s.to_string(), n))
        .collect();
    if counted != kept {
        return Err(Error::internal(format!(
            "campaign {cid}'s counters say {kept:?} but its rows count {counted:?}"
        )));
    }
    Ok(())
}

/// The second connection of `scale`: a separate handle, reading the campaign's status as a
/// dashboard would until `stop`; counts the reads and their total time.
fn read_status(db: &Path, cid: i64, stop: &AtomicBool, reads: &AtomicU64, read_nanos: &AtomicU64) {
    let Ok(reader) = SqliteStore::open(
        db,
        &OpenOptions {
            pool_size: 1,
            ..Default::default()
        },
    ) else {
        return;
    };
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        if reader.status_counts(cid).is_ok() {
            reads.fetch_add(1, Ordering::Relaxed);
            read_nanos.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        std::thread::sleep(STATUS_READ_GAP);
    }
}

/// Run the scale section's `sendonce run` child to its end; its stdout.
fn run_to_end(cmd: &mut Command) -> Result<Vec<u8>> {
    let mut child = cmd
        .spawn()
        .map_err(|e| Error::io("cannot start sendonce run", e))?;
    let mut out = Vec::new();
    if let Some(mut so) = child.stdout.take() {
        so.read_to_end(&mut out)
            .map_err(|e| Error::io("reading sendonce run", e))?;
    }
    let st = child
        .wait()
        .map_err(|e| Error::io("waiting for sendonce run", e))?;
    if !st.success() {
        return Err(Error::db(format!("the scale run exited with {st}")));
    }
    Ok(out)
}

/// Section 6: spawn `sendonce run -v` on a database with a backlog and time its "first claim"
/// log line; then stop it with SIGTERM (it releases what it has not dispatched).
fn restart(ws: &Workspace, opts: &Options) -> Result<Restart> {
    let (db, store) = ws.fresh("restart.db")?;
    let cid = setup_campaign(&store, RESTART_BACKLOG)?;
    build_list(&store, cid)?;
    let backlog = store.bench_count(cid, "queued")?;
    drop(store); // the last connection checkpoints and removes the WAL, like a stopped worker
    let file_mib = mib(std::fs::metadata(&db).map(|m| m.len()).unwrap_or(0));
    let mut samples = Vec::new();
    for _ in 0..RESTART_SAMPLES {
        samples.push(first_claim_ms(&db, opts, true)?);
    }
    let mut unchecked = Vec::new();
    for _ in 0..RESTART_SAMPLES {
        unchecked.push(first_claim_ms(&db, opts, false)?);
    }
    Ok(Restart {
        backlog,
        ms_to_first_claim: median(&samples),
        samples_ms: samples,
        ms_to_first_claim_unchecked: median(&unchecked),
        file_mib,
    })
}

/// Spawn `sendonce run` on `db` (with or without its start check) and time it to its "first
/// claim" log line; then stop it (SIGTERM: it drains and exits).
fn first_claim_ms(db: &Path, opts: &Options, start_check: bool) -> Result<f64> {
    let mut cmd = child_cmd(db)?;
    if start_check {
        // The default limit, whatever the caller's environment says.
        cmd.env_remove(sendonce_core::app::guard::START_CHECK_ENV);
    } else {
        cmd.env(sendonce_core::app::guard::START_CHECK_ENV, "0");
    }
    cmd.args(["-v", "--log-format", "json"])
        .args(run_args(opts))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let t = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| Error::io("cannot start sendonce run", e))?;
    let Some(stderr) = child.stderr.take() else {
        return Err(Error::db("no stderr from sendonce run"));
    };
    // Never hang the benchmark: a child that does not claim within a minute is stopped.
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let (done, pid) = (done.clone(), child.id() as i32);
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_secs(60));
            if !done.load(std::sync::atomic::Ordering::SeqCst) {
                // SAFETY: kill(2) on our own child, which has not been reaped yet.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        });
    }
    let mut lines = BufReader::new(stderr).lines();
    let mut first: Option<f64> = None;
    for line in lines.by_ref() {
        let line = line.map_err(|e| Error::io("reading sendonce run's log", e))?;
        if line.contains("\"first claim\"") {
            first = Some(t.elapsed().as_secs_f64() * 1000.0);
            break;
        }
    }
    // SAFETY: a plain kill(2) on the pid of the child this function spawned.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    for _ in lines {}
    let st = child
        .wait()
        .map_err(|e| Error::io("waiting for sendonce run", e))?;
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    first.ok_or_else(|| {
        Error::db(format!(
            "sendonce run exited ({st}) without claiming anything"
        ))
    })
}

/// Section 7: time `sendonce notify` processes against the fake provider, served on loopback by
/// this process (real HTTP, durable acceptance), each with a new key so each one delivers.
fn notify(ws: &Workspace, rt: &tokio::runtime::Runtime) -> Result<Notify> {
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .map_err(|e| Error::io("cannot listen on loopback", e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::io("cannot read the loopback address", e))?;
    let log = ws.path("notify-deliveries.jsonl");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = rt.spawn(sendonce_fake::run(
        listener,
        sendonce_fake::Config::new(&log),
        async move {
            let _ = stopped.await;
        },
    ));
    let state = ws.path("notify-state.db");
    let spec = format!("webhook:http://{addr}/send");
    let exe =
        std::env::current_exe().map_err(|e| Error::io("cannot find the sendonce executable", e))?;
    let mut times = Vec::with_capacity(NOTIFY_SAMPLES + 1);
    let mut failure = None;
    for i in 0..=NOTIFY_SAMPLES {
        let mut cmd = Command::new(&exe);
        cmd.args(["-q", "notify", "--to", "ops@bench.example"])
            .args(["--message", "bench: build finished", "--provider", &spec])
            .arg("--key")
            .arg(format!("bench-notify-{i}"))
            .arg("--state")
            .arg(&state)
            .env_remove("SENDONCE_CRASH_AT")
            .env_remove("SENDONCE_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let t = Instant::now();
        let out = cmd
            .output()
            .map_err(|e| Error::io("cannot start sendonce notify", e))?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        if !out.status.success() {
            failure = Some(format!(
                "sendonce notify exited with {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
            break;
        }
    }
    let _ = stop.send(());
    rt.block_on(server)
        .map_err(|e| Error::db(format!("the loopback provider failed: {e}")))??;
    if let Some(f) = failure {
        return Err(Error::db(f));
    }
    let delivered = sendonce_core::provider::deliverylog::read_lines(&log)?.len() as u64;
    if delivered != times.len() as u64 {
        return Err(Error::db(format!(
            "{} notifies, but the provider logged {delivered} deliveries",
            times.len()
        )));
    }
    let samples = times.split_off(1);
    Ok(Notify {
        ms: median(&samples),
        samples_ms: samples,
        first_ms: times[0],
        delivered,
    })
}

impl Target {
    /// Met when `value` (printed with `decimals`) is at least `bound`.
    fn at_least(what: &'static str, value: f64, decimals: usize, bound: f64) -> Target {
        Target {
            what,
            target: format!(">= {bound:.decimals$}"),
            value: format!("{value:.decimals$}"),
            met: value >= bound,
        }
    }

    /// Met when `value` (printed with `decimals`) is at most `bound`.
    fn at_most(what: &'static str, value: f64, decimals: usize, bound: f64) -> Target {
        Target {
            what,
            target: format!("<= {bound:.decimals$}"),
            value: format!("{value:.decimals$}"),
            met: value <= bound,
        }
    }
}

fn targets(r: &Report) -> Vec<Target> {
    let per_million = r.scale.list_build_seconds * 1_000_000.0 / r.scale.subscribers as f64;
    let scans = r
        .plans
        .iter()
        .filter(|p| !p.full_scans().is_empty())
        .count();
    let mut out = original_target(r);
    out.extend([
        Target::at_least(
            "pipeline (null) / limit",
            r.pipeline.null.ratio_to_limit,
            2,
            0.7,
        ),
        Target::at_least(
            "limit / minimal-row two-marker loop",
            r.limit.ratio_to_minimal,
            2,
            0.8,
        ),
        Target::at_most(
            "campaign status of the scale campaign (ms)",
            r.scale.status_ms,
            2,
            10.0,
        ),
        Target::at_most(
            "list building seconds (per 1M subscribers)",
            per_million,
            2,
            3.0,
        ),
        Target::at_most(
            "list building via 3 lists / account-wide, per row",
            r.list_build.ratio,
            2,
            1.0,
        ),
        Target::at_most(
            "peak RSS of the scale run (MiB)",
            r.scale.peak_rss_mib,
            1,
            64.0,
        ),
        Target::at_least("latency-bound / ideal N/D", r.latency.ratio, 3, 0.93),
        Target::at_most(
            "largest WAL (MiB)",
            r.wal.max_mib_run.max(r.wal.max_mib_list_build),
            1,
            64.0,
        ),
        Target::at_most(
            "restart to first claim (ms)",
            r.restart.ms_to_first_claim,
            1,
            100.0,
        ),
        Target::at_most("hot statements reading a whole table", scans as f64, 0, 0.0),
        Target::at_most("notify wall time (ms)", r.notify.ms, 1, 50.0),
    ]);
    out
}

/// The pipeline against the original design's PostgreSQL loop at its best worker count, when
/// it was measured.
fn original_target(r: &Report) -> Vec<Target> {
    let Some(o) = r.original_pg.as_ref().filter(|o| o.best_per_second > 0.0) else {
        return Vec::new();
    };
    vec![Target::at_least(
        "pipeline (null) / original loop on PostgreSQL, best",
        r.pipeline.null.per_second / o.best_per_second,
        2,
        1.5,
    )]
}

/// Run every section. Takes a minute or two at the default sizes.
pub fn run(opts: &Options, rt: &tokio::runtime::Runtime) -> Result<Report> {
    let started = Instant::now();
    let load_start = load_average();
    let ws = Workspace::new(opts.dir.as_deref(), opts.sync)?;

    let limit = limit(&ws, opts)?;
    let (null, outbox) = pipelines(&ws, opts, rt, limit.per_second)?;
    let original_pg = match &opts.compare_pg {
        Some(url) => Some(super::bench_pg::original_best(
            url,
            opts.recipients,
            opts.batch,
        )?),
        None => None,
    };
    let latency = latency_bound(&ws, opts, rt)?;
    let (scale, wal) = scale(&ws, opts)?;
    let account_wide = Build::new(
        scale.list_build_rows,
        scale.list_build_seconds,
        scale.list_build_cpu_seconds,
    );
    let list_build = list_build(&ws, opts, account_wide)?;
    let restart = restart(&ws, opts)?;
    let notify = notify(&ws, rt)?;
    let plans = ws.fresh("plans.db")?.1.hot_query_plans()?;

    let mut report = Report {
        machine: machine(load_start),
        settings: Settings {
            recipients: opts.recipients,
            batch: opts.batch,
            concurrency: opts.concurrency,
            synchronous: sync_name(opts.sync),
            latency_ms: opts.latency.as_secs_f64() * 1000.0,
            scale: opts.scale,
        },
        limit,
        pipeline: Pipeline {
            batch: opts.batch,
            concurrency: pipeline_concurrency(opts),
            null,
            outbox,
        },
        scale,
        list_build,
        latency,
        wal,
        restart,
        notify,
        original_pg,
        plans,
        targets: Vec::new(),
        seconds: started.elapsed().as_secs_f64(),
    };
    report.targets = targets(&report);
    Ok(report)
}

/// One line of the table: section, what was measured, the figure.
fn row(t: &mut String, section: &str, what: String, value: String) {
    t.push_str(&format!("{section:<18} {what:<56} {value:>14}\n"));
}

pub(crate) fn thousands(v: f64) -> String {
    let n = v.round() as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl Report {
    /// The table for people.
    pub fn table(&self) -> String {
        let mut t = self.header();
        self.throughput_rows(&mut t);
        self.timing_rows(&mut t);
        self.plans_and_targets(&mut t);
        t.push_str(&format!("\nbench took {:.1} s", self.seconds));
        t
    }

    /// The settings and the machine the figures were measured with.
    fn header(&self) -> String {
        let m = &self.machine;
        let s = &self.settings;
        format!(
            "sendonce bench: synchronous={}, batch {}, concurrency {}, {} cpu(s) ({}), \
             load {:.1} -> {:.1}, SQLite {}\n\n",
            s.synchronous.to_uppercase(),
            s.batch,
            s.concurrency,
            m.cpus,
            m.cpu_model,
            m.load_start,
            m.load_end,
            m.sqlite_version
        )
    }

    /// Sections 1 to 3: the bare limit, the pipeline (and the original loop when compared),
    /// then [`Self::scale_rows`].
    fn throughput_rows(&self, t: &mut String) {
        row(
            t,
            "1 limit",
            format!(
                "bare two-marker loop, {} rows, {} commits, cpu {:.1} s",
                self.limit.recipients, self.limit.commits, self.limit.cpu_seconds
            ),
            format!("{}/s", thousands(self.limit.per_second)),
        );
        row(
            t,
            "1 limit",
            format!(
                "same loop, minimal 9-column row, cpu {:.1} s ({:.2} x it)",
                self.limit.minimal_cpu_seconds, self.limit.ratio_to_minimal
            ),
            format!("{}/s", thousands(self.limit.minimal_per_second)),
        );
        for p in [&self.pipeline.null, &self.pipeline.outbox] {
            row(
                t,
                &format!("2 pipeline {}", p.provider),
                format!(
                    "end to end, {} sent, cpu {:.1} s ({:.2} x limit)",
                    p.sent, p.cpu_seconds, p.ratio_to_limit
                ),
                format!("{}/s", thousands(p.per_second)),
            );
        }
        if let Some(o) = &self.original_pg {
            let each: Vec<String> = o
                .per_workers
                .iter()
                .map(|(w, r)| format!("{w}: {}", thousands(*r)))
                .collect();
            row(
                t,
                "2 original (pg)",
                format!(
                    "SKIP LOCKED loop, PostgreSQL {}, best of {}",
                    o.server_version,
                    each.join(", ")
                ),
                format!("{}/s", thousands(o.best_per_second)),
            );
        }
        self.scale_rows(t);
    }

    /// Section 3: list building, a run at scale and a status read after it.
    fn scale_rows(&self, t: &mut String) {
        let sc = &self.scale;
        row(
            t,
            "3 scale",
            format!(
                "list building, {} subscribers, cpu {:.1} s",
                sc.subscribers, sc.list_build_cpu_seconds
            ),
            format!("{:.2} s", sc.list_build_seconds),
        );
        self.list_build.rows(t);
        row(
            t,
            "3 scale",
            format!(
                "peak RSS of `run` over {} recipients ({:.1} s)",
                sc.recipients, sc.run_seconds
            ),
            format!("{:.1} MiB", sc.peak_rss_mib),
        );
        row(
            t,
            "3 scale",
            "throughput of that run".into(),
            format!("{}/s", thousands(sc.run_per_second)),
        );
        row(
            t,
            "3 scale",
            "campaign status after it (counters checked against a count)".into(),
            format!("{:.2} ms", sc.status_ms),
        );
    }

    /// Sections 4 to 7: provider latency, the WAL, restart and notify.
    fn timing_rows(&self, t: &mut String) {
        let l = &self.latency;
        row(
            t,
            "4 latency",
            format!(
                "{} in flight at {:.0} ms, ideal {}/s ({:.1}%)",
                l.in_flight,
                l.latency_ms,
                thousands(l.ideal_per_second),
                l.ratio * 100.0
            ),
            format!("{}/s", thousands(l.per_second)),
        );
        row(
            t,
            "4 latency",
            format!("calls took {:.2} ms on average; slots busy", l.mean_call_ms),
            format!("{:.1}%", l.slot_utilisation * 100.0),
        );
        row(
            t,
            "4 latency",
            "a slot's idle time between calls, p50 / p99".to_string(),
            format!("{:.1} / {:.1} ms", l.slot_idle_p50_ms, l.slot_idle_p99_ms),
        );
        let w = &self.wal;
        row(
            t,
            "5 WAL",
            format!(
                "largest -wal during the run ({} status reads)",
                w.status_reads
            ),
            format!("{:.1} MiB", w.max_mib_run),
        );
        row(
            t,
            "5 WAL",
            "largest -wal during list building".into(),
            format!("{:.1} MiB", w.max_mib_list_build),
        );
        let r = &self.restart;
        row(
            t,
            "6 restart",
            format!(
                "start to first claim, {} backlog (median of {})",
                r.backlog,
                r.samples_ms.len()
            ),
            format!("{:.1} ms", r.ms_to_first_claim),
        );
        row(
            t,
            "6 restart",
            format!(
                "the same without the start check ({:.1} MiB quick_check)",
                r.file_mib
            ),
            format!("{:.1} ms", r.ms_to_first_claim_unchecked),
        );
        let n = &self.notify;
        row(
            t,
            "7 notify",
            format!(
                "notify, loopback provider, median of {} (first {:.0} ms)",
                n.samples_ms.len(),
                n.first_ms
            ),
            format!("{:.1} ms", n.ms),
        );
    }

    /// Section 8 (query plans) and the targets, met or missed.
    fn plans_and_targets(&self, t: &mut String) {
        t.push_str(&format!(
            "8 plans            EXPLAIN QUERY PLAN of the {} statements of the send path:\n",
            self.plans.len()
        ));
        for p in &self.plans {
            t.push_str(&format!("  {:<38} {}\n", p.name, p.plan.join(" / ")));
        }
        t.push_str("\ntargets:\n");
        for g in &self.targets {
            t.push_str(&format!(
                "  {:<6} {:<44} {:>10} (target {})\n",
                if g.met { "met" } else { "MISSED" },
                g.what,
                g.value,
                g.target
            ));
        }
    }
}

impl ListBuild {
    /// Section 3b's lines, in µs per produced row (the same number as seconds per million).
    fn rows(&self, t: &mut String) {
        for (what, b) in [
            ("account-wide".to_string(), &self.account_wide),
            (
                format!("{} lists ({} memberships)", self.lists, self.memberships),
                &self.targeted,
            ),
        ] {
            row(
                t,
                "3b list build",
                format!("{what}, {} rows, cpu {:.1} s", b.rows, b.cpu_seconds),
                format!("{:.2} us/row", b.us_per_row),
            );
        }
        row(
            t,
            "3b list build",
            "per row: via lists / account-wide (us/row = s per 1M)".into(),
            format!("{:.2}", self.ratio),
        );
    }
}

impl ListBuildReport {
    /// The table for people.
    pub fn table(&self) -> String {
        let m = &self.machine;
        let mut t = format!(
            "sendonce bench --only list-build: {} subscribers, {} cpu(s) ({}), load {:.1} -> \
             {:.1}, SQLite {}\n\n",
            self.list_build.subscribers,
            m.cpus,
            m.cpu_model,
            m.load_start,
            m.load_end,
            m.sqlite_version
        );
        self.list_build.rows(&mut t);
        t.push_str("\nplans:\n");
        for p in &self.plans {
            t.push_str(&format!("  {:<38} {}\n", p.name, p.plan.join(" / ")));
        }
        t.push_str(&format!("\nbench took {:.1} s", self.seconds));
        t
    }
}

#[cfg(test)]
mod tests {
    use super::{quantile, slot_idle_ms};

    #[test]
    fn a_slot_idles_from_the_end_of_its_call_to_the_start_of_the_next() {
        // Two slots: calls (0, 10) and (0, 20) fill them; the call at 13 takes the slot freed
        // at 10 (3 ms idle at 1 ms = 1e6 ns), the one at 25 the slot freed at 20 (5), the one
        // at 30 the slot freed at 23 by the call that started at 13.
        let ms = 1_000_000;
        let spans = [
            (0, 10 * ms),
            (0, 20 * ms),
            (13 * ms, 23 * ms),
            (25 * ms, 40 * ms),
            (30 * ms, 41 * ms),
        ];
        assert_eq!(slot_idle_ms(&spans, 2), vec![3.0, 5.0, 7.0]);
        assert_eq!(quantile(&[3.0, 5.0, 7.0], 0.5), 5.0);
        assert_eq!(quantile(&[3.0, 5.0, 7.0], 0.99), 7.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
    }
}

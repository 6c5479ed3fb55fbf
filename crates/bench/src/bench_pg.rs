//! `sendonce bench --db postgres://…`: the exactly-once pipeline on PostgreSQL with 1, 2 and 4
//! worker processes, beside the original design's at-most-once loop (claim with `FOR UPDATE
//! SKIP LOCKED`, mark sent before the call, commit) with as many concurrent workers, the same
//! rows and batch size, on the same server, in the same run. Rounds interleave the two, so a
//! noisy neighbour slows both; the report gives medians.

use crate::original;
use crate::seed::Bench as _;
use sendonce_domain::address::Channel;
use sendonce_domain::error::{Error, Result};
use sendonce_store::postgres::{PgPlan, PgStore};
use sendonce_store::{Audience, Campaigns, Ledger, NewCampaign, OpenOptions};
use serde::Serialize;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

/// Rounds per worker count (the report gives the median).
const ROUNDS: usize = 3;
/// Worker counts measured.
const WORKERS: [usize; 3] = [1, 2, 4];
/// Subscribers per list-building transaction (the worker's default).
const LIST_CHUNK: usize = 50_000;

/// What to measure (validated by the CLI).
#[derive(Debug, Clone)]
pub struct Options {
    /// The database (its password never printed: the report shows it redacted).
    pub url: String,
    pub recipients: u64,
    pub batch: usize,
    pub concurrency: usize,
}

/// One worker count: medians of the rounds.
#[derive(Debug, Serialize)]
pub struct Arm {
    pub workers: usize,
    /// The original design's loop: rows marked sent per second.
    pub original_per_second: f64,
    /// The exactly-once pipeline: rows confirmed sent per second (worker processes started,
    /// connected, claimed, called the null provider, confirmed, exited).
    pub pipeline_per_second: f64,
    /// pipeline / original.
    pub ratio: f64,
    /// Each round's figures, in order (original, pipeline).
    pub rounds: Vec<(f64, f64)>,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub store: &'static str,
    pub database: String,
    pub server_version: String,
    pub recipients: u64,
    pub batch: usize,
    pub concurrency: usize,
    pub rounds: usize,
    pub arms: Vec<Arm>,
    /// The plans of the hot reads of the last campaign sent (all its rows sent, statistics
    /// fresh), and whether each reads through its partial index.
    pub plans: Vec<PgPlan>,
    pub load_start: f64,
    pub load_end: f64,
    pub seconds: f64,
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// A new approved campaign over every subscriber of `account`, its list built: only the
/// claims, calls and confirmations are left for the timed part.
fn ready_campaign(store: &PgStore, account: i64) -> Result<i64> {
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
        lists: &[],
        // The bench measures the send path; it seals no unsubscribe links.
        transactional: true,
        windows: &Default::default(),
    })?;
    store.approve_campaign(cid, sendonce_domain::clock::now_ms())?;
    store.start_due_campaigns(sendonce_domain::clock::now_ms())?;
    while !store.build_list_chunk(cid, LIST_CHUNK)? {}
    Ok(cid)
}

/// Calls in flight per worker: at least a batch, so that its claims are as large as the
/// original loop's (as the SQLite bench's pipeline does; the null provider answers at once).
fn concurrency(opts: &Options) -> usize {
    opts.concurrency.max(opts.batch)
}

/// `workers` processes of `sendonce run --once --provider null`; the database URL goes in
/// their environment (never their argv, where `ps` shows it).
fn pipeline(opts: &Options, workers: usize) -> Result<f64> {
    let exe =
        std::env::current_exe().map_err(|e| Error::io("cannot find the sendonce executable", e))?;
    let t = Instant::now();
    let mut children = Vec::with_capacity(workers);
    for w in 0..workers {
        let child = Command::new(&exe)
            .env("SENDONCE_DB", &opts.url)
            .env_remove("SENDONCE_CRASH_AT")
            .env_remove("SENDONCE_LOG")
            .args([
                "run",
                "--once",
                "--quiet",
                "--provider",
                "null",
                "--tick",
                "50ms",
            ])
            .args(["--batch", &opts.batch.to_string()])
            .args(["--concurrency", &concurrency(opts).to_string()])
            .args(["--worker-id", &format!("bench-{w}")])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Error::io("cannot start sendonce run", e))?;
        children.push(child);
    }
    for child in children {
        let out = child
            .wait_with_output()
            .map_err(|e| Error::io("waiting for sendonce run", e))?;
        if !out.status.success() {
            return Err(Error::db(format!(
                "a bench worker exited with {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
    }
    Ok(t.elapsed().as_secs_f64())
}

/// `workers` concurrent loops of the original design over its table; returns the seconds.
fn original(store: &Arc<PgStore>, cid: i64, batch: usize, workers: usize) -> Result<(f64, u64)> {
    let t = Instant::now();
    let done: Vec<Result<crate::original::OriginalLoop>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| s.spawn(|| original::run_loop(store, cid, batch)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::internal("a bench loop panicked")))
            })
            .collect()
    });
    let seconds = t.elapsed().as_secs_f64();
    let mut rows = 0;
    for d in done {
        rows += d?.rows;
    }
    Ok((seconds, rows))
}

/// Open the bench's database, refusing one that holds accounts (the bench writes into it and
/// empties it after); the store and its name as shown (password redacted).
fn open_empty(url: &str) -> Result<(Arc<PgStore>, String)> {
    let store = Arc::new(PgStore::open(
        url,
        &OpenOptions {
            create: true,
            pool_size: (WORKERS.iter().max().copied().unwrap_or(1) + 1) as u32,
            ..Default::default()
        },
    )?);
    let database = store.shown().display().to_string();
    if !store.bench_database_is_empty()? {
        return Err(Error::invalid(format!(
            "{database} holds accounts: `sendonce bench` writes campaigns into the database \
             it is given and empties it after, so it only runs on an empty one (createdb a \
             database for it)"
        )));
    }
    Ok((store, database))
}

/// One round of the original loop over its `queued` rows with `workers` workers: rows/s.
fn original_rate(
    store: &Arc<PgStore>,
    cid: i64,
    queued: u64,
    batch: usize,
    workers: usize,
) -> Result<f64> {
    original::requeue(store)?;
    let (secs, rows) = original(store, cid, batch, workers)?;
    if rows != queued {
        return Err(Error::internal(format!(
            "the original loop marked {rows} rows of {queued}"
        )));
    }
    Ok(rows as f64 / secs)
}

/// Run the comparison. The database must hold no account (the bench writes into it and
/// empties it after).
pub fn run(opts: &Options) -> Result<Report> {
    let started = Instant::now();
    let load_start = super::bench::load_average();
    let (store, database) = open_empty(&opts.url)?;
    let result = measure(&store, opts);
    let cleaned = original::clean(&store);
    let (server_version, arms, plans) = result?;
    cleaned?;
    Ok(Report {
        store: "postgres",
        database,
        server_version,
        recipients: opts.recipients,
        batch: opts.batch,
        concurrency: concurrency(opts),
        rounds: ROUNDS,
        arms,
        plans,
        load_start,
        load_end: super::bench::load_average(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

fn measure(store: &Arc<PgStore>, opts: &Options) -> Result<(String, Vec<Arm>, Vec<PgPlan>)> {
    let account = store.add_account("bench")?;
    store.bench_seed_subscribers(account, opts.recipients)?;
    let server_version = store.server_version()?;
    let original_cid = 0;
    let queued = original::setup(store, original_cid, account)?;
    let mut arms = Vec::new();
    let mut last = None;
    for workers in WORKERS {
        let mut rounds = Vec::new();
        for _ in 0..ROUNDS {
            let o_rate = original_rate(store, original_cid, queued, opts.batch, workers)?;
            let cid = ready_campaign(store, account)?;
            last = Some(cid);
            let p_secs = pipeline(opts, workers)?;
            let sent = store.bench_count(cid, "sent")?;
            if sent != opts.recipients {
                return Err(Error::internal(format!(
                    "the pipeline sent {sent} of {} rows",
                    opts.recipients
                )));
            }
            rounds.push((o_rate, sent as f64 / p_secs));
        }
        let original_per_second = median(&rounds.iter().map(|r| r.0).collect::<Vec<_>>());
        let pipeline_per_second = median(&rounds.iter().map(|r| r.1).collect::<Vec<_>>());
        arms.push(Arm {
            workers,
            original_per_second,
            pipeline_per_second,
            ratio: pipeline_per_second / original_per_second,
            rounds,
        });
    }
    let plans = match last {
        Some(cid) => store.hot_read_plans(cid)?,
        None => Vec::new(),
    };
    Ok((server_version, arms, plans))
}

/// The original design's loop alone, for the SQLite bench's comparison: medians of `ROUNDS`
/// at each of `WORKERS`, and the best of them.
#[derive(Debug, Serialize)]
pub struct OriginalBest {
    pub database: String,
    pub server_version: String,
    pub rows: u64,
    /// (workers, median rows/s).
    pub per_workers: Vec<(usize, f64)>,
    pub best_workers: usize,
    pub best_per_second: f64,
}

/// Run the original design's loop on `url` (an empty database: it is emptied after) with
/// `recipients` rows, batch `batch`, at 1, 2 and 4 concurrent workers.
pub fn original_best(url: &str, recipients: u64, batch: usize) -> Result<OriginalBest> {
    let (store, database) = open_empty(url)?;
    let measured = original_rounds(&store, recipients, batch);
    let cleaned = original::clean(&store);
    let (server_version, rows, per_workers) = measured?;
    cleaned?;
    let (best_workers, best_per_second) = per_workers
        .iter()
        .copied()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or((0, 0.0));
    Ok(OriginalBest {
        database,
        server_version,
        rows,
        per_workers,
        best_workers,
        best_per_second,
    })
}

type Rounds = (String, u64, Vec<(usize, f64)>);

fn original_rounds(store: &Arc<PgStore>, recipients: u64, batch: usize) -> Result<Rounds> {
    let account = store.add_account("bench")?;
    store.bench_seed_subscribers(account, recipients)?;
    let server_version = store.server_version()?;
    let cid = 0;
    let queued = original::setup(store, cid, account)?;
    let mut per_workers = Vec::new();
    for workers in WORKERS {
        let mut rates = Vec::with_capacity(ROUNDS);
        for _ in 0..ROUNDS {
            rates.push(original_rate(store, cid, queued, batch, workers)?);
        }
        per_workers.push((workers, median(&rates)));
    }
    Ok((server_version, queued, per_workers))
}

impl Report {
    /// The table for people.
    pub fn table(&self) -> String {
        let mut t = format!(
            "sendonce bench on PostgreSQL {} ({}): {} rows, batch {}, concurrency {}, \
             medians of {} rounds, load {:.1} -> {:.1}\n\n",
            self.server_version,
            self.database,
            self.recipients,
            self.batch,
            self.concurrency,
            self.rounds,
            self.load_start,
            self.load_end
        );
        t.push_str(&format!(
            "{:<8} {:>26} {:>26} {:>8}\n",
            "workers", "original loop (rows/s)", "exactly-once (rows/s)", "ratio"
        ));
        for a in &self.arms {
            t.push_str(&format!(
                "{:<8} {:>26} {:>26} {:>8.2}\n",
                a.workers,
                super::bench::thousands(a.original_per_second),
                super::bench::thousands(a.pipeline_per_second),
                a.ratio
            ));
        }
        let whole: Vec<&str> = self
            .plans
            .iter()
            .filter(|p| p.reads_whole_campaign())
            .map(|p| p.name)
            .collect();
        t.push_str(&format!(
            "\nhot reads of a finished campaign not served by their partial index: {} of {}{}\n",
            whole.len(),
            self.plans.len(),
            match whole.is_empty() {
                true => String::new(),
                false => format!(" ({})", whole.join(", ")),
            }
        ));
        t.push_str(
            "\noriginal loop: claim with FOR UPDATE SKIP LOCKED, mark sent before the call, \
             commit (at most once: a crash after the commit loses the batch).\n\
             exactly-once: `sendonce run` worker processes (lease + fence before the call, \
             confirmation after), their start and exit included.\n",
        );
        t.push_str(&format!("\nbench took {:.1} s", self.seconds));
        t
    }
}

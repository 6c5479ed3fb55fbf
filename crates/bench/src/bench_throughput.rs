//! `sendonce bench --only throughput`: sections 1 and 2 (the bare two-marker loop on the
//! ledger's table and on a minimal row, the pipeline with the null and the outbox provider),
//! three rounds back to back on fresh files, reported as medians with each round's figures:
//! the quick way to measure one lever of the send path.

use super::bench::{self, Machine, Options, Workspace};
use sendonce_domain::error::Result;
use serde::Serialize;
use std::time::Instant;

/// Rounds of the report (its figures are their medians).
const ROUNDS: usize = 3;

/// One round's figures, rows per second.
#[derive(Debug, Serialize)]
pub struct Round {
    pub limit: f64,
    pub minimal: f64,
    pub pipeline_null: f64,
    pub pipeline_outbox: f64,
    /// CPU microseconds per row of each: limit, minimal, pipeline (null).
    pub cpu_us_per_row: (f64, f64, f64),
    /// The null pipeline on a database that records no send events: rows/s and CPU µs per row.
    pub without_events: (f64, f64),
}

/// The medians of the rounds, and the ratios the targets name (each the median of the
/// rounds' ratios, so a slow round slows both sides of its ratio).
#[derive(Debug, Serialize)]
pub struct Medians {
    pub limit: f64,
    pub minimal: f64,
    pub pipeline_null: f64,
    pub pipeline_outbox: f64,
    pub limit_to_minimal: f64,
    pub pipeline_to_limit: f64,
    pub cpu_us_per_row: (f64, f64, f64),
    /// CPU per row of the null pipeline with its send events over without them, minus one
    /// (target <= 0.10).
    pub events_cpu_cost: f64,
}

#[derive(Debug, Serialize)]
pub struct ThroughputReport {
    pub machine: Machine,
    pub recipients: u64,
    pub batch: usize,
    pub rounds: Vec<Round>,
    pub medians: Medians,
    pub seconds: f64,
}

fn round(opts: &Options, rt: &tokio::runtime::Runtime, n: usize) -> Result<Round> {
    let dir = opts.dir.as_ref().map(|d| d.join(format!("round-{n}")));
    let ws = Workspace::new(dir.as_deref(), opts.sync)?;
    let limit = bench::limit(&ws, opts)?;
    let (null, outbox) = bench::pipelines(&ws, opts, rt, limit.per_second)?;
    let bare = bench::pipeline_without_events(&ws, opts, rt, limit.per_second)?;
    let us = |cpu: f64, rows: u64| cpu * 1e6 / rows.max(1) as f64;
    Ok(Round {
        limit: limit.per_second,
        minimal: limit.minimal_per_second,
        pipeline_null: null.per_second,
        pipeline_outbox: outbox.per_second,
        cpu_us_per_row: (
            us(limit.cpu_seconds, limit.recipients),
            us(limit.minimal_cpu_seconds, limit.minimal_rows),
            us(null.cpu_seconds, null.sent),
        ),
        without_events: (bare.per_second, us(bare.cpu_seconds, bare.sent)),
    })
}

/// Run the rounds.
pub fn run(opts: &Options, rt: &tokio::runtime::Runtime) -> Result<ThroughputReport> {
    let started = Instant::now();
    let load_start = bench::load_average();
    let mut rounds = Vec::with_capacity(ROUNDS);
    for n in 0..ROUNDS {
        rounds.push(round(opts, rt, n)?);
    }
    let m = |f: &dyn Fn(&Round) -> f64| bench::median(&rounds.iter().map(f).collect::<Vec<_>>());
    let medians = Medians {
        limit: m(&|r| r.limit),
        minimal: m(&|r| r.minimal),
        pipeline_null: m(&|r| r.pipeline_null),
        pipeline_outbox: m(&|r| r.pipeline_outbox),
        limit_to_minimal: m(&|r| r.limit / r.minimal),
        pipeline_to_limit: m(&|r| r.pipeline_null / r.limit),
        cpu_us_per_row: (
            m(&|r| r.cpu_us_per_row.0),
            m(&|r| r.cpu_us_per_row.1),
            m(&|r| r.cpu_us_per_row.2),
        ),
        events_cpu_cost: m(&|r| r.cpu_us_per_row.2 / r.without_events.1 - 1.0),
    };
    Ok(ThroughputReport {
        machine: bench::machine(load_start),
        recipients: opts.recipients,
        batch: opts.batch,
        rounds,
        medians,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// A line of the table: what, the median, its CPU µs per row, the figure of a round.
type Line<'a> = (&'a str, f64, Option<f64>, &'a dyn Fn(&Round) -> f64);

impl ThroughputReport {
    /// The table for people.
    pub fn table(&self) -> String {
        let m = &self.machine;
        let mut t = format!(
            "sendonce bench --only throughput: {} rows, batch {}, {} rounds, {} cpu(s), load \
             {:.1} -> {:.1}, SQLite {}\n\n",
            self.recipients,
            self.batch,
            self.rounds.len(),
            m.cpus,
            m.load_start,
            m.load_end,
            m.sqlite_version
        );
        t.push_str(&format!(
            "{:<44} {:>12}   rounds\n",
            "rows/s (cpu µs per row)", "median"
        ));
        let d = &self.medians;
        let lines: [Line; 5] = [
            (
                "1 limit: two markers, ledger's table",
                d.limit,
                Some(d.cpu_us_per_row.0),
                &|r| r.limit,
            ),
            (
                "1 limit: two markers, minimal row",
                d.minimal,
                Some(d.cpu_us_per_row.1),
                &|r| r.minimal,
            ),
            (
                "2 pipeline, null provider",
                d.pipeline_null,
                Some(d.cpu_us_per_row.2),
                &|r| r.pipeline_null,
            ),
            (
                "2 pipeline, outbox provider",
                d.pipeline_outbox,
                None,
                &|r| r.pipeline_outbox,
            ),
            (
                "2 pipeline, null, no send events",
                bench::median(
                    &self
                        .rounds
                        .iter()
                        .map(|r| r.without_events.0)
                        .collect::<Vec<_>>(),
                ),
                Some(bench::median(
                    &self
                        .rounds
                        .iter()
                        .map(|r| r.without_events.1)
                        .collect::<Vec<_>>(),
                )),
                &|r| r.without_events.0,
            ),
        ];
        for (what, median, cpu, f) in lines {
            let what = match cpu {
                Some(c) => format!("{what} ({c:.1})"),
                None => what.to_string(),
            };
            let each: Vec<String> = self.rounds.iter().map(|r| bench::thousands(f(r))).collect();
            t.push_str(&format!(
                "{what:<44} {:>12}   {}\n",
                bench::thousands(median),
                each.join(", ")
            ));
        }
        t.push_str(&self.ratios());
        t
    }

    /// The ratios the targets name, and how long it took.
    fn ratios(&self) -> String {
        let d = &self.medians;
        format!(
            "\nlimit / minimal row: {:.2} (target >= 0.80)\npipeline / limit: {:.2} (target >= \
             0.70)\nsend events' CPU per row: {:+.1}% (target <= +10%)\n\nbench took {:.1} s",
            d.limit_to_minimal,
            d.pipeline_to_limit,
            d.events_cpu_cost * 100.0,
            self.seconds
        )
    }
}

//! `sendonce run`: flags checked into a worker configuration, then `app::run` (routes chosen,
//! never guessed; the worker on the one runtime), and its outcome told in text and JSON.

use super::args::{Cli, RunArgs};
use super::{open_opts, sync_of, to_json, Output};
use crate::app::{self, limits};
use crate::error::Result;
use crate::store::OpenOptions;
use crate::{exit, worker};
use serde_json::json;

pub(super) fn run(cli: &Cli, a: &RunArgs, rt: &tokio::runtime::Runtime) -> Result<Output> {
    let cfg = worker_config(a)?;
    let store = crate::store::open(
        &cli.db,
        &OpenOptions {
            sync: sync_of(a.sync),
            ..open_opts(cli)?
        },
    )?;
    let routes = app::run::routes(a.config.as_deref(), a.provider.as_deref(), &store)?;
    let finished = app::run::run(&store, routes, cfg, rt)?;
    Ok(told(&finished, a.report_peak_rss))
}

/// The worker's configuration from the flags, each checked against its bounds.
fn worker_config(a: &RunArgs) -> Result<worker::Config> {
    let lease = limits::LEASE.parse("--lease", &a.lease)?;
    let tick = limits::TICK.parse("--tick", &a.tick)?;
    let retry_base = limits::RETRY_BASE.parse("--retry-base", &a.retry_base)?;
    let drain = limits::DRAIN.parse("--drain", &a.drain)?;
    let batch = limits::count_in("--batch", a.batch, limits::BATCH)?;
    let concurrency = limits::count_in("--concurrency", a.concurrency, limits::CONCURRENCY)?;
    let max_attempts = limits::at_least("--max-attempts", a.max_attempts, 1)?;
    Ok(worker::Config {
        batch,
        concurrency,
        lease,
        tick,
        worker_id: a
            .worker_id
            .clone()
            .unwrap_or_else(worker::default_worker_id),
        once: a.once,
        max_attempts,
        retry_base,
        drain_deadline: drain,
        list_chunk: a.list_chunk.max(1),
        ..Default::default()
    })
}

/// The run's outcome for people and as JSON, with what still waits (paused campaigns, rows
/// in doubt) and the exit code.
fn told(f: &app::run::Finished, peak_rss: bool) -> Output {
    let mut doc = to_json(f);
    if peak_rss {
        doc["peak_rss_kib"] = json!(crate::tools::bench::peak_rss_kib());
    }
    let s = &f.summary;
    let mut text = format!(
        "claimed {}, sent {}, failed {}, retried {}, suppressed at claim {}",
        s.claimed, s.sent, s.failed, s.retried, s.suppressed
    );
    for id in &f.paused {
        text.push_str(&format!(
            "\ncampaign {id} is paused and waiting: `sendonce campaign resume {id}`, then run \
             again (a running `sendonce run` without --once picks it up by itself)"
        ));
    }
    if s.already_accepted > 0 {
        text.push_str(&format!(
            "\n{} send(s) reported by the provider as already accepted under their key with \
             other content: recorded as sent, not resent (see `campaign report`)",
            s.already_accepted
        ));
    }
    if f.in_doubt > 0 {
        text.push_str(&format!(
            "\n{} send(s) in doubt: see `sendonce doubts list --campaign ID`",
            f.in_doubt
        ));
    }
    let code = exit::for_outcome(exit::Outcome {
        in_doubt: f.in_doubt,
        failed: 0,
    });
    Output {
        json: doc,
        text,
        code,
    }
}

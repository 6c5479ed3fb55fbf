//! `sendonce run`: flags checked into a worker configuration, the provider routes chosen
//! (never guessed), the worker run on one runtime, and its summary told in text and JSON.

use super::args::{Cli, RunArgs};
use super::{open_opts, sync_of, Output};
use crate::domain::clock;
use crate::error::{Error, Result};
use crate::shutdown::stop_signal;
use crate::store::{OpenOptions, Storage};
use crate::worker::routes::Routes;
use crate::{exit, provider, worker};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

pub(super) fn run(cli: &Cli, a: &RunArgs, rt: &tokio::runtime::Runtime) -> Result<Output> {
    let cfg = worker_config(a)?;
    let store = crate::store::open(
        &cli.db,
        &OpenOptions {
            sync: sync_of(a.sync),
            ..open_opts(cli)?
        },
    )?;
    let routes = routes(a, &store)?;
    let ledger: Arc<dyn crate::store::Ledger> = store.clone();
    let summary = rt.block_on(async move {
        let stop = stop_signal()?;
        worker::spawn_routed(ledger, Arc::new(routes), cfg, stop).await
    })?;
    told(&*store, &summary, a.report_peak_rss)
}

/// The worker's configuration from the flags, each checked against its range.
fn worker_config(a: &RunArgs) -> Result<worker::Config> {
    const HOUR: Duration = Duration::from_secs(3600);
    let lease =
        clock::parse_duration_in("--lease", &a.lease, Duration::from_millis(200), 24 * HOUR)?;
    let tick = clock::parse_duration_in("--tick", &a.tick, Duration::from_millis(10), HOUR)?;
    let retry_base = clock::parse_duration_in(
        "--retry-base",
        &a.retry_base,
        Duration::from_millis(1),
        HOUR,
    )?;
    let drain = clock::parse_duration_in("--drain", &a.drain, Duration::ZERO, HOUR)?;
    if a.batch == 0 || a.batch > 10_000 {
        return Err(Error::invalid("--batch must be between 1 and 10000"));
    }
    if a.concurrency == 0 || a.concurrency > 10_000 {
        return Err(Error::invalid("--concurrency must be between 1 and 10000"));
    }
    if a.max_attempts < 1 {
        return Err(Error::invalid("--max-attempts must be at least 1"));
    }
    Ok(worker::Config {
        batch: a.batch,
        concurrency: a.concurrency,
        lease,
        tick,
        worker_id: a
            .worker_id
            .clone()
            .unwrap_or_else(worker::default_worker_id),
        once: a.once,
        max_attempts: a.max_attempts,
        retry_base,
        drain_deadline: drain,
        list_chunk: a.list_chunk.max(1),
        ..Default::default()
    })
}

/// The config file's routes, or the one `--provider`; with neither, `run` refuses to start.
fn routes(a: &RunArgs, store: &Arc<dyn Storage>) -> Result<Routes> {
    if let Some(file) = crate::config::Config::load(a.config.as_deref())? {
        return Routes::from_config(file, a.provider.as_deref(), store);
    }
    match a.provider.as_deref() {
        Some(spec) => Ok(Routes::single(provider::from_spec(spec)?)),
        None => Err(Error::invalid(
            "no provider chosen: pass --provider SPEC (e.g. --provider outbox:./outbox.jsonl \
             to write messages to a file, or smtp://HOST:PORT), set SENDONCE_PROVIDER, or \
             write a sendonce.toml (--config FILE); see `sendonce run --help`",
        )),
    }
}

/// The run's summary for people and as JSON, with what still waits (paused campaigns, rows
/// in doubt) and the exit code.
fn told(store: &dyn Storage, summary: &worker::Summary, peak_rss: bool) -> Result<Output> {
    let mut in_doubt = 0;
    for id in &summary.campaigns_touched {
        in_doubt += store.status_counts(*id)?.counts["in_doubt"];
    }
    let paused: Vec<i64> = store
        .list_campaigns(None, Some(crate::domain::model::CampaignStatus::Paused))?
        .iter()
        .map(|c| c.id)
        .collect();
    let mut doc = serde_json::to_value(summary).unwrap_or_default();
    doc["in_doubt"] = json!(in_doubt);
    doc["paused"] = json!(paused);
    if peak_rss {
        doc["peak_rss_kib"] = json!(crate::tools::bench::peak_rss_kib());
    }
    let mut text = format!(
        "claimed {}, sent {}, failed {}, retried {}, suppressed at claim {}",
        summary.claimed, summary.sent, summary.failed, summary.retried, summary.suppressed
    );
    for id in &paused {
        text.push_str(&format!(
            "\ncampaign {id} is paused and waiting: `sendonce campaign resume {id}`, then run \
             again (a running `sendonce run` without --once picks it up by itself)"
        ));
    }
    if summary.already_accepted > 0 {
        text.push_str(&format!(
            "\n{} send(s) reported by the provider as already accepted under their key with \
             other content: recorded as sent, not resent (see `campaign report`)",
            summary.already_accepted
        ));
    }
    if in_doubt > 0 {
        text.push_str(&format!(
            "\n{in_doubt} send(s) in doubt: see `sendonce doubts list --campaign ID`"
        ));
    }
    let code = exit::for_outcome(exit::Outcome {
        in_doubt,
        failed: 0,
    });
    Ok(Output {
        json: doc,
        text,
        code,
    })
}

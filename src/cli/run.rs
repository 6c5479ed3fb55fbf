//! `sendonce run`: flags checked into a worker configuration, then `app::run` (routes chosen,
//! never guessed; the worker on the one runtime), and its outcome told in text and JSON.

use super::args::{Cli, RunArgs};
use super::{open_opts, sync_of, to_json, Output};
use sendonce_core::app;
use sendonce_domain::error::Result;
use sendonce_domain::exit;
use sendonce_store::OpenOptions;
use serde_json::json;

pub(super) fn run(cli: &Cli, a: &RunArgs, rt: &tokio::runtime::Runtime) -> Result<Output> {
    let mut cfg = settings(a).check()?;
    cfg.links = app::run::links(a.config.as_deref(), a.public_url.as_deref())?;
    let store = sendonce_store::open(
        &super::target(cli),
        &OpenOptions {
            sync: sync_of(a.sync),
            ..open_opts(cli)?
        },
    )?;
    let routes = app::run::routes(a.config.as_deref(), a.provider.as_deref(), &store)?;
    let file = sendonce_core::config::Config::load(a.config.as_deref())?;
    let events = app::events::settings(file.as_ref())?;
    cfg.hooks = app::run::hook_delivery(&store, app::run::keys_if_set()?, &events);
    let finished = app::run::run(&store, routes, cfg, rt)?;
    Ok(told(&finished, a.report_peak_rss))
}

/// The flags of `run` as the use case's settings.
fn settings(a: &RunArgs) -> app::run::Settings {
    app::run::Settings {
        lease: a.lease.clone(),
        tick: a.tick.clone(),
        retry_base: a.retry_base.clone(),
        drain: a.drain.clone(),
        batch: a.batch,
        concurrency: a.concurrency,
        max_attempts: a.max_attempts,
        worker_id: a.worker_id.clone(),
        once: a.once,
        list_chunk: a.list_chunk,
    }
}

/// The run's outcome for people and as JSON, with what still waits (paused campaigns, rows
/// in doubt) and the exit code.
fn told(f: &app::run::Finished, peak_rss: bool) -> Output {
    let mut doc = to_json(f);
    if peak_rss {
        doc["peak_rss_kib"] = json!(sendonce_core::metrics::peak_rss_kib());
    }
    let s = &f.summary;
    let mut text = format!(
        "claimed {}, sent {}, failed {}, retried {}, suppressed at claim {}",
        s.claimed, s.sent, s.failed, s.retried, s.suppressed
    );
    if let Some(at) = s.window_opens {
        text.push_str(&format!(
            "\nsends wait for their send window ({} held by this run; the next is due at \
             {}): a `sendonce run` then sends them",
            s.held_for_window,
            sendonce_domain::clock::format_ms(at),
        ));
    }
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

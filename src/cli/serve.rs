//! `sendonce serve`: flags checked into the server's settings (and, with `--worker`, the
//! worker's, as `run` checks them), the bound address printed before anything else, and what
//! the in-process worker did told at the end.

use super::args::{Cli, ServeArgs};
use super::{open, to_json, Output};
use sendonce_core::app::{self, limits};
use sendonce_domain::error::{Error, Result};
use std::io::Write;

pub(super) fn serve(cli: &Cli, a: &ServeArgs, rt: &tokio::runtime::Runtime) -> Result<Output> {
    let loaded = sendonce_core::config::Config::load(a.config.as_deref())?;
    let file = loaded.as_ref().map(|c| c.serve.clone()).unwrap_or_default();
    let pick = |flag: &Option<String>, file: &Option<String>, default: &str| {
        flag.clone()
            .or_else(|| file.clone())
            .unwrap_or_else(|| default.to_string())
    };
    let drain_text = pick(&a.drain, &file.drain, "30s");
    let drain = limits::DRAIN.parse("--drain", &drain_text)?;
    let body_limit = a.body_limit.or(file.body_limit).unwrap_or(1024 * 1024);
    let timeout = pick(&a.request_timeout, &file.request_timeout, "60s");
    let body_timeout = pick(&a.body_timeout, &file.body_timeout, "10s");
    let max_connections = max_connections(a, &file)?;
    let events = app::events::settings(loaded.as_ref())?;
    let settings = sendonce_http::Settings {
        listen: pick(&a.listen, &file.listen, "127.0.0.1:8025"),
        drain,
        body_limit: limits::count_in("--body-limit", body_limit, limits::BODY_LIMIT)?,
        request_timeout: limits::REQUEST_TIMEOUT.parse("--request-timeout", &timeout)?,
        body_timeout: limits::BODY_TIMEOUT.parse("--body-timeout", &body_timeout)?,
        max_connections,
        worker: None,
        hooks: app::webhooks::Hooks::load(a.config.as_deref(), a.public_url.as_deref())?,
        keys: app::run::keys_if_set()?,
        links: app::run::links(a.config.as_deref(), a.public_url.as_deref())?,
        consent_ip: app::privacy::settings(loaded.as_ref())?,
        ops: sendonce_http::Ops {
            db: cli.db.clone(),
            db_from: cli.db_from.clone(),
            config: a.config.clone(),
            provider: a.provider.clone(),
            file: loaded,
            doctor: Default::default(),
            doctor_running: Default::default(),
        },
        events,
    };
    let with_worker = a.worker || file.worker == Some(true);
    if !with_worker && a.provider.is_some() {
        return Err(Error::invalid(
            "--provider chooses the worker's provider: add --worker (or run `sendonce run` \
             beside the server)",
        ));
    }
    let store = open(cli)?;
    let settings = match with_worker {
        false => settings,
        true => {
            let mut cfg = worker_settings(a, &drain_text).check()?;
            cfg.drain_deadline = drain;
            cfg.links = settings.links.clone();
            cfg.hooks = app::run::hook_delivery(&store, settings.keys.clone(), &settings.events);
            let routes = app::run::routes(a.config.as_deref(), a.provider.as_deref(), &store)?;
            app::guard::before_sending(&store)?;
            sendonce_http::Settings {
                worker: Some((routes, cfg)),
                ..settings
            }
        }
    };
    let json = cli.json;
    let summary = sendonce_http::serve(store, settings, rt, |addr| {
        let mut out = std::io::stdout().lock();
        let line = match json {
            true => serde_json::json!({ "listening": format!("http://{addr}") }).to_string(),
            false => format!("listening on http://{addr}"),
        };
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    })?;
    let text = match &summary {
        Some(s) => format!(
            "stopped; the worker sent {} and failed {}",
            s.sent, s.failed
        ),
        None => "stopped".to_string(),
    };
    Ok(Output::ok(to_json(&summary), text))
}

/// `--max-connections` (flag, then the file, then the default), in bounds and within what
/// `ulimit -n` leaves.
fn max_connections(a: &ServeArgs, file: &sendonce_core::config::Serve) -> Result<usize> {
    let n = a
        .max_connections
        .or(file.max_connections)
        .unwrap_or(sendonce_http::MAX_CONNECTIONS);
    let n = limits::count_in("--max-connections", n, limits::MAX_CONNECTIONS)?;
    sendonce_http::check_fd_limit(n)?;
    Ok(n)
}

/// The worker of `serve --worker`, with `run`'s defaults where `serve` has no flag.
fn worker_settings(a: &ServeArgs, drain: &str) -> app::run::Settings {
    app::run::Settings {
        lease: a.lease.clone(),
        tick: a.tick.clone(),
        retry_base: "1s".into(),
        drain: drain.to_string(),
        batch: 100,
        concurrency: a.concurrency,
        max_attempts: 8,
        worker_id: None,
        once: false,
        list_chunk: 50_000,
    }
}

//! Sending: the provider routes chosen (never guessed: no provider, no start), the worker run
//! on the process's runtime until done or stopped, and what it did with what still waits
//! (campaigns paused, sends in doubt).

use super::limits;
use crate::worker;
pub use crate::worker::routes::Routes;
use sendonce_domain::error::{Error, Result};
use sendonce_domain::model::CampaignStatus;
use sendonce_domain::shutdown::stop_signal;
use sendonce_store::prelude::*;
use sendonce_store::Store;
use serde::Serialize;
use std::path::Path;
use std::sync::Arc;

/// The config file's routes (`config`, or the file `config::discover` finds) with `provider` as
/// their default, or the one `provider` for everything; with neither, sending refuses to start.
pub fn routes(config: Option<&Path>, provider: Option<&str>, store: &Arc<Store>) -> Result<Routes> {
    if let Some(file) = crate::config::Config::load(config)? {
        return Routes::from_config(file, provider, store);
    }
    match provider {
        Some(spec) => Ok(Routes::single(crate::provider::from_spec(spec)?)),
        None => Err(Error::invalid(
            "no provider chosen: pass --provider SPEC (e.g. --provider outbox:./outbox.jsonl \
             to write messages to a file, or smtp://HOST:PORT), set SENDONCE_PROVIDER, or \
             write a sendonce.toml (--config FILE; `sendonce config show` lists where it is looked for); see `sendonce run --help`",
        )),
    }
}

/// Where `{{ unsubscribe_url }}` points: `public_url` (a flag or its environment variable), else
/// the config file's `public_url`; sealed with the key from `SENDONCE_UNSUBSCRIBE_SECRET` (older
/// keys from `SENDONCE_UNSUBSCRIBE_OLD_SECRETS` still open links).
/// None when neither gives a URL.
pub fn links(
    config: Option<&Path>,
    public_url: Option<&str>,
) -> Result<Option<sendonce_domain::links::Links>> {
    use sendonce_domain::links::{Keys, Links};
    let from_file = match public_url {
        Some(_) => None,
        None => crate::config::Config::load(config)?.and_then(|c| c.public_url),
    };
    let Some(url) = public_url.map(str::to_string).or(from_file) else {
        return Ok(None);
    };
    let keys = Keys::from_env().map_err(|e| Error::invalid(format!("--public-url: {e}")))?;
    Links::new(&url, keys)
        .map(Some)
        .map_err(|e| Error::invalid(format!("--public-url: {e}")))
}

/// The webhook deliveries a worker makes beside its sends (and the pruning of old events).
/// Without `keys` (`SENDONCE_UNSUBSCRIBE_SECRET` unset) it only prunes: endpoint secrets
/// derive from them.
pub fn hook_delivery(
    store: &Arc<Store>,
    keys: Option<sendonce_domain::links::Keys>,
    events: &super::events::Settings,
) -> Option<worker::hooks::Delivery> {
    let mut d = worker::hooks::Delivery::new(store.clone(), keys, events.allow.clone());
    d.retention = events.retention;
    d.retry_base = events.retry_base;
    Some(d)
}

/// The ring of `SENDONCE_UNSUBSCRIBE_SECRET` (and its old keys) when the secret is set; an
/// error when it is set but unusable.
pub fn keys_if_set() -> Result<Option<sendonce_domain::links::Keys>> {
    if std::env::var_os(sendonce_domain::links::SECRET_ENV).is_none() {
        return Ok(None);
    }
    sendonce_domain::links::Keys::from_env()
        .map(Some)
        .map_err(Error::invalid)
}

/// How a worker should run, as a caller gives it (flags today): durations as text
/// (`30s`, `100ms`), counts as numbers. [`Settings::check`] holds every bound.
#[derive(Debug, Clone)]
pub struct Settings {
    pub lease: String,
    pub tick: String,
    pub retry_base: String,
    pub drain: String,
    pub batch: usize,
    pub concurrency: usize,
    pub max_attempts: i64,
    /// None: host name and process id.
    pub worker_id: Option<String>,
    /// Leave when nothing is left to send.
    pub once: bool,
    /// Subscribers per list-building transaction (0 counts as 1).
    pub list_chunk: usize,
}

impl Settings {
    /// The worker's configuration, each value checked against its bounds; the error names
    /// the flag.
    pub fn check(&self) -> Result<worker::Config> {
        Ok(worker::Config {
            lease: limits::LEASE.parse("--lease", &self.lease)?,
            tick: limits::TICK.parse("--tick", &self.tick)?,
            retry_base: limits::RETRY_BASE.parse("--retry-base", &self.retry_base)?,
            drain_deadline: limits::DRAIN.parse("--drain", &self.drain)?,
            batch: limits::count_in("--batch", self.batch, limits::BATCH)?,
            concurrency: limits::count_in("--concurrency", self.concurrency, limits::CONCURRENCY)?,
            max_attempts: limits::at_least("--max-attempts", self.max_attempts, 1)?,
            worker_id: self
                .worker_id
                .clone()
                .unwrap_or_else(worker::default_worker_id),
            once: self.once,
            list_chunk: self.list_chunk.max(1),
            ..Default::default()
        })
    }
}

/// What a run did, and what still waits for an operator.
#[derive(Debug, Clone, Serialize)]
pub struct Finished {
    #[serde(flatten)]
    pub summary: worker::Summary,
    /// Sends in doubt in the campaigns this run touched.
    pub in_doubt: u64,
    /// Campaigns paused (waiting for `campaign resume`).
    pub paused: Vec<i64>,
}

/// Run the worker with `cfg` over `routes` on `rt` until it is done (`cfg.once`) or a stop
/// signal drains it.
pub fn run(
    store: &Arc<Store>,
    routes: Routes,
    cfg: worker::Config,
    rt: &tokio::runtime::Runtime,
) -> Result<Finished> {
    super::guard::before_sending(store)?;
    let ledger: Arc<dyn sendonce_store::Ledger> = store.clone();
    let summary = rt.block_on(async move {
        let stop = stop_signal()?;
        worker::spawn_routed(ledger, Arc::new(routes), cfg, stop).await
    })?;
    finished(store, summary)
}

/// `summary` with the sends in doubt of the campaigns it touched and the paused campaigns.
pub fn finished(store: &Store, summary: worker::Summary) -> Result<Finished> {
    let mut in_doubt = 0;
    for id in &summary.campaigns_touched {
        in_doubt += store
            .status_counts(*id)?
            .counts
            .get("in_doubt")
            .copied()
            .unwrap_or(0);
    }
    let paused = store
        .list_campaigns(None, Some(CampaignStatus::Paused))?
        .iter()
        .map(|c| c.id)
        .collect();
    Ok(Finished {
        summary,
        in_doubt,
        paused,
    })
}

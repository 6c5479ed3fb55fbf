//! The worker's second loop: events out to the users' webhook endpoints, with the rules of
//! provider calls. One store transaction per turn records the attempts that finished, fans new
//! events out and leases the deliveries that are due ([`Endpoints::delivery_turn`]); the calls
//! run after its commit, none held across them. Each call is a Standard Webhooks POST
//! (`webhook-id` is the event's stable id, so a receiver drops a repeat), signed with every
//! secret valid now; a 2xx answer delivers, anything else is retried with exponential backoff
//! and jitter for three days (`outhooks::next_attempt`). A lease that expires (a killed worker)
//! hands the delivery to the next turn: at least once.
//!
//! The receiver's address is checked at every call: a host that resolves (or is written) inside
//! the operator's network is refused unless `events.allow` names it, and redirects are not
//! followed, so a DNS answer that changed since the endpoint was saved leads nowhere inside.

use crate::wire::{payload, wire_id};
use sendonce_domain::clock;
use sendonce_domain::error::{Error, ErrorKind, Result};
use sendonce_domain::links::Keys;
use sendonce_domain::outhooks::{self, Allow};
use sendonce_store::{Attempt, DeliveryTurn, DueDelivery, Endpoints, Events, NextStep};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

const TARGET: &str = "sendonce::worker::hooks";

/// What the delivery loop needs from the store.
pub trait HookStore: Endpoints + Events {}
impl<T: Endpoints + Events> HookStore for T {}

/// How the delivery loop runs.
#[derive(Clone)]
pub struct Delivery {
    pub store: Arc<dyn HookStore>,
    /// The link keys endpoint secrets derive from; None (no `SENDONCE_UNSUBSCRIBE_SECRET`):
    /// nothing is delivered (no endpoint can be made without them), old events are still
    /// pruned.
    pub keys: Option<Keys>,
    pub allow: Allow,
    /// Events older than this are pruned.
    pub retention: Duration,
    /// Calls in flight at most.
    pub concurrency: usize,
    /// One call's limit (a lease is twice as long: an outcome is recorded as soon as its call ends).
    pub timeout: Duration,
    /// How often to look for new events when idle.
    pub tick: Duration,
    /// The first retry's delay (it doubles per failed call).
    pub retry_base: Duration,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("retention", &self.retention)
            .field("concurrency", &self.concurrency)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Delivery {
    pub fn new(store: Arc<dyn HookStore>, keys: Option<Keys>, allow: Allow) -> Delivery {
        Delivery {
            store,
            keys,
            allow,
            retention: outhooks::DEFAULT_RETENTION,
            concurrency: 8,
            timeout: Duration::from_secs(10),
            tick: Duration::from_millis(500),
            retry_base: outhooks::FIRST_DELAY,
        }
    }
}

/// Events pruned per transaction, and how often.
const PRUNE_BATCH: usize = 1000;
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// Deliver until `stop` turns true; then record what is in flight (waiting at most one call
/// timeout) and return.
pub async fn run(d: Delivery, mut stop: tokio::sync::watch::Receiver<bool>) -> Result<()> {
    let client = client(&d)?;
    let d = Arc::new(d);
    let mut calls: JoinSet<Attempt> = JoinSet::new();
    let mut done: Vec<Attempt> = Vec::new();
    let mut last_prune: Option<Instant> = None;
    loop {
        let stopping = *stop.borrow();
        while let Some(r) = calls.try_join_next() {
            done.extend(r.ok());
        }
        let free = if stopping || d.keys.is_none() {
            0
        } else {
            d.concurrency.saturating_sub(calls.len())
        };
        let due = turn(&d, std::mem::take(&mut done), free).await?;
        for delivery in due {
            let (c, how) = (client.clone(), d.clone());
            calls.spawn(async move { call(&c, &how, delivery).await });
        }
        if stopping && calls.is_empty() {
            return Ok(());
        }
        if last_prune.is_none_or(|t| t.elapsed() >= PRUNE_EVERY) && !stopping {
            last_prune = Some(Instant::now());
            prune(&d).await;
        }
        tokio::select! {
            Some(r) = calls.join_next(), if !calls.is_empty() => done.extend(r.ok()),
            _ = tokio::time::sleep(d.tick) => {}
            _ = stop.changed(), if !stopping => {}
        }
    }
}

async fn turn(d: &Delivery, attempts: Vec<Attempt>, free: usize) -> Result<Vec<DueDelivery>> {
    let store = d.store.clone();
    let lease_ms = i64::try_from(d.timeout.as_millis() * 2).unwrap_or(60_000);
    let breaker = outhooks::BREAKER.as_millis() as i64;
    let res = tokio::task::spawn_blocking(move || {
        store.delivery_turn(&DeliveryTurn {
            attempts: &attempts,
            now: clock::now_ms(),
            lease_ms,
            max: free,
            fan_out: 500,
            broken_after_ms: breaker,
        })
    })
    .await
    .map_err(|e| Error::internal(format!("a database task failed: {e}")))?;
    match res {
        Ok(due) => Ok(due),
        Err(e) if e.stops_worker() => Err(e),
        Err(e) => {
            // The attempts of this turn are lost with it: their leases expire and the
            // deliveries are made again (at least once).
            tracing::warn!(target: TARGET, error = %e.message, "webhook delivery turn failed");
            Ok(Vec::new())
        }
    }
}

async fn prune(d: &Delivery) {
    let store = d.store.clone();
    let before = clock::now_ms() - d.retention.as_millis() as i64;
    let res = tokio::task::spawn_blocking(move || store.prune_events(before, PRUNE_BATCH)).await;
    if let Ok(Err(e)) = res {
        tracing::warn!(target: TARGET, error = %e.message, "pruning old events failed");
    }
}

fn client(d: &Delivery) -> Result<reqwest::Client> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(Arc::new(Guarded(d.allow.clone())))
        .timeout(d.timeout)
        .user_agent(concat!(
            "sendonce/",
            env!("CARGO_PKG_VERSION"),
            " (webhooks)"
        ))
        .build()
        .map_err(|e| Error::new(ErrorKind::Internal, format!("webhook client: {e}")))
}

/// A resolver that refuses inside addresses (`outhooks::Allow`).
struct Guarded(Allow);

impl reqwest::dns::Resolve for Guarded {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow = self.0.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if let Some((ip, why)) = addrs
                .iter()
                .find_map(|a| allow.refuses(a.ip()).map(|w| (a.ip(), w)))
            {
                let msg = format!("{host} resolves to {ip}, {why} (not in events.allow)");
                return Err(msg.into());
            }
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// One delivery's call and what it leads to.
async fn call(client: &reqwest::Client, how: &Delivery, d: DueDelivery) -> Attempt {
    let started = Instant::now();
    let at = clock::now_ms();
    let (status, error) = match &d.event {
        None => (
            None,
            Some("the event was pruned before it could be delivered".into()),
        ),
        Some(event) => match (literal_refused(&d.url, &how.allow), &how.keys) {
            (Some(why), _) => (None, Some(why)),
            (None, None) => (None, Some("SENDONCE_UNSUBSCRIBE_SECRET is not set".into())),
            (None, Some(keys)) => post(client, keys, &d, event, how.timeout).await,
        },
    };
    let ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
    let ok = status.is_some_and(|s| (200..300).contains(&s));
    let now = clock::now_ms();
    let next = if ok {
        NextStep::Delivered
    } else if d.event.is_none() {
        NextStep::Drop
    } else {
        let (window, jitter) = ((d.created_at, now), jitter(d.id, d.attempts));
        match outhooks::next_attempt(d.attempts, how.retry_base, window, jitter) {
            Some(t) => NextStep::RetryAt(t),
            None => NextStep::Drop,
        }
    };
    if !ok {
        tracing::info!(target: TARGET, endpoint = d.endpoint_id, delivery = d.id,
            attempts = d.attempts, status = ?status, error = error.as_deref().unwrap_or(""),
            "webhook delivery failed");
    }
    Attempt {
        delivery_id: d.id,
        endpoint_id: d.endpoint_id,
        token: d.token,
        at,
        status,
        error,
        ms,
        next,
    }
}

/// The refusal of a URL whose host is written as an inside address (the resolver never sees
/// those).
fn literal_refused(url: &str, allow: &Allow) -> Option<String> {
    let parsed = reqwest::Url::parse(url).ok()?;
    let host = parsed.host_str()?;
    let ip: IpAddr = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()?;
    allow
        .refuses(ip)
        .map(|why| format!("{ip} is {why} (not in events.allow)"))
}

async fn post(
    client: &reqwest::Client,
    keys: &Keys,
    d: &DueDelivery,
    event: &sendonce_store::EventRow,
    timeout: Duration,
) -> (Option<u16>, Option<String>) {
    let body = payload(event).to_string();
    let id = wire_id(event.id);
    let now = clock::now_ms();
    let ts = now / 1000;
    let old = d.old_salt.as_ref().map(|(s, until)| (s.as_str(), *until));
    let signature = outhooks::signature(keys, (&d.salt, old), now, (&id, ts, body.as_bytes()));
    let request = client
        .post(&d.url)
        .timeout(timeout)
        .header("content-type", "application/json")
        .header("webhook-id", &id)
        .header("webhook-timestamp", ts.to_string())
        .header("webhook-signature", signature)
        .body(body);
    match request.send().await {
        Ok(r) => {
            let status = r.status().as_u16();
            let error = (!r.status().is_success()).then(|| format!("answered HTTP {status}"));
            (Some(status), error)
        }
        Err(e) => (None, Some(describe(&e))),
    }
}

/// A transport error without the URL (it may carry the user's own token in its query).
fn describe(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    if let Some(url) = e.url() {
        text = text.replace(url.as_str(), "the endpoint");
    }
    text
}

/// A number in [0, 1) from the delivery and its attempt: retries of many deliveries spread out,
/// and the same run of the same delivery waits the same (no random source needed).
fn jitter(id: i64, attempts: i64) -> f64 {
    let mut x = (id as u64) ^ ((attempts as u64) << 32) ^ 0x9E37_79B9_7F4A_7C15;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    (x % 1_000_000) as f64 / 1_000_000.0
}

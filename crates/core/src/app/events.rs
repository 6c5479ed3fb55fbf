//! Events out, the use cases: the wire format of an event (the same in the feed and in a
//! webhook delivery), reading the feed after a cursor, and an account's webhook endpoints
//! (create with the secret shown once, list, show, change, rotate, replay, delete). Endpoint
//! URLs are checked against the inside-network rules (`outhooks::Allow`) here, when they are
//! saved, and again by the worker's resolver at every call.

pub use crate::wire::{payload, wire_id};
use sendonce_domain::clock;
use sendonce_domain::error::{Error, Result};
use sendonce_domain::links::Keys;
use sendonce_domain::outhooks::{self, Allow};
use sendonce_store::prelude::*;
use sendonce_store::{
    Cursor, DeliveryRow, EndpointChange, EndpointRow, FeedQuery, NewEndpoint, Store,
};
use serde::Serialize;
use serde_json::Value;
use std::net::ToSocketAddrs;
use std::time::Duration;

/// Events per feed page at most, and by default.
pub const MAX_PAGE: usize = 500;
pub const DEFAULT_PAGE: usize = 100;
/// Longest a feed read may wait for an event.
pub const MAX_WAIT: Duration = Duration::from_secs(60);
pub use outhooks::DEFAULT_RETENTION;
/// How long events are kept at least (longer than a delivery's retries).
pub const MIN_RETENTION: Duration = Duration::from_secs(4 * 24 * 3600);
/// How long the secret before a rotation keeps signing by default.
pub const DEFAULT_OVERLAP: Duration = Duration::from_secs(24 * 3600);
/// Endpoints per account at most.
const MAX_ENDPOINTS: usize = 20;
/// Events a replay queues at most.
pub const MAX_REPLAY: usize = 10_000;

/// The `[events]` settings in effect.
#[derive(Debug, Clone)]
pub struct Settings {
    pub retention: Duration,
    pub allow: Allow,
    /// The first retry's delay of a failed webhook delivery (doubling after each failure).
    pub retry_base: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            retention: DEFAULT_RETENTION,
            allow: Allow::default(),
            retry_base: outhooks::FIRST_DELAY,
        }
    }
}

/// The settings from `SENDONCE_EVENTS_RETENTION` / `SENDONCE_EVENTS_ALLOW`, else the file's
/// `[events]`, else the defaults.
pub fn settings(file: Option<&crate::config::Config>) -> Result<Settings> {
    let pick = |env: &str, key: &str| {
        std::env::var(env)
            .ok()
            .filter(|v| !v.is_empty())
            .or_else(|| file.and_then(|f| f.get(key)))
    };
    let retention = match pick("SENDONCE_EVENTS_RETENTION", "events.retention") {
        Some(t) => {
            clock::parse_duration_in("events.retention", &t, MIN_RETENTION, clock::MAX_DURATION)?
        }
        None => DEFAULT_RETENTION,
    };
    let allow = match pick("SENDONCE_EVENTS_ALLOW", "events.allow") {
        Some(t) => Allow::parse(&t).map_err(Error::invalid)?,
        None => Allow::default(),
    };
    let retry_base = match pick("SENDONCE_EVENTS_RETRY_BASE", "events.retry_base") {
        Some(t) => clock::parse_duration_in(
            "events.retry_base",
            &t,
            Duration::from_millis(100),
            Duration::from_secs(3600),
        )?,
        None => outhooks::FIRST_DELAY,
    };
    Ok(Settings {
        retention,
        allow,
        retry_base,
    })
}

/// A cursor as the feed hands it out: `{txid}-{id}`, opaque to clients.
pub fn cursor_text(c: Cursor) -> String {
    format!("{}-{}", c.txid, c.id)
}

/// Read a cursor given back by a client.
pub fn parse_cursor(text: &str) -> Result<Cursor> {
    let bad = || {
        Error::invalid(format!(
            "after: {text:?} is not a cursor this feed handed out (use `next` of the last page)"
        ))
    };
    let (t, i) = text.split_once('-').ok_or_else(bad)?;
    let txid = t.parse::<i64>().map_err(|_| bad())?;
    let id = i.parse::<i64>().map_err(|_| bad())?;
    if txid < 0 || id < 0 {
        return Err(bad());
    }
    Ok(Cursor { txid, id })
}

/// An event id as a person or a client gives it: `evt_12` (a delivery's `webhook-id`) or `12`.
pub fn parse_event_id(text: &str) -> Result<i64> {
    let t = text.trim();
    t.strip_prefix("evt_")
        .unwrap_or(t)
        .parse::<i64>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| Error::invalid(format!("{t:?} is not an event id (evt_…)")))
}

/// Split and check a `types` list (comma-separated).
pub fn parse_types(text: Option<&str>) -> Result<Vec<String>> {
    let types: Vec<String> = text
        .unwrap_or("")
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect();
    outhooks::check_types(&types).map_err(Error::invalid)?;
    Ok(types)
}

/// One page of the feed.
#[derive(Debug, Clone, Serialize)]
pub struct Page {
    pub events: Vec<Value>,
    /// Where to read on from (`after=`), also when the page is empty.
    pub next: String,
}

/// The events of `account_id` after `after`, of `types`, at most `limit`.
pub fn feed(
    store: &Store,
    account_id: i64,
    after: Cursor,
    types: &[String],
    limit: usize,
) -> Result<Page> {
    let (rows, next) = store.events(&FeedQuery {
        account_id,
        after,
        types,
        limit: limit.clamp(1, MAX_PAGE),
    })?;
    Ok(Page {
        events: rows.iter().map(payload).collect(),
        next: cursor_text(next),
    })
}

/// An endpoint as shown: never its secret.
#[derive(Debug, Clone, Serialize)]
pub struct EndpointInfo {
    pub id: i64,
    pub account_id: i64,
    pub url: String,
    pub types: Vec<String>,
    pub ordered: bool,
    pub status: String,
    #[serde(serialize_with = "clock::ser_opt_ms")]
    pub failing_since: Option<i64>,
    #[serde(serialize_with = "clock::ser_opt_ms")]
    pub old_secret_until: Option<i64>,
    pub pending: i64,
    pub delivered: i64,
    pub dropped: i64,
    #[serde(serialize_with = "clock::ser_ms")]
    pub created_at: i64,
}

impl From<EndpointRow> for EndpointInfo {
    fn from(r: EndpointRow) -> Self {
        EndpointInfo {
            id: r.id,
            account_id: r.account_id,
            url: r.url,
            types: r.types,
            ordered: r.ordered,
            status: r.status,
            failing_since: r.failing_since,
            old_secret_until: r.old_salt.map(|(_, until)| until),
            pending: r.pending,
            delivered: r.delivered,
            dropped: r.dropped,
            created_at: r.created_at,
        }
    }
}

/// An endpoint with its secret: the answer to create and rotate, the only time it is shown.
#[derive(Debug, Clone, Serialize)]
pub struct WithSecret {
    #[serde(flatten)]
    pub endpoint: EndpointInfo,
    /// `whsec_…`: configure the receiver with it (Standard Webhooks).
    pub secret: String,
}

/// What a new endpoint is, as the caller gives it.
#[derive(Debug, Clone, Default)]
pub struct EndpointInput {
    pub url: String,
    pub types: Vec<String>,
    pub ordered: bool,
}

/// Check an endpoint URL: http(s), a host, no credentials, at most 2,048 bytes, and every
/// address the host has now outside the operator's network unless `allow` lets it in.
pub fn check_url(url: &str, allow: &Allow) -> Result<()> {
    let parsed = reqwest::Url::parse(url)
        .map_err(|e| Error::invalid(format!("url: {url:?} is not a URL ({e})")))?;
    if url.len() > 2048 {
        return Err(Error::invalid("url: longer than 2,048 bytes"));
    }
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(Error::invalid(
            "url: only http:// and https:// URLs take webhooks",
        ));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(Error::invalid(
            "url: credentials in the URL are refused (deliveries are signed instead)",
        ));
    }
    let host = parsed
        .host_str()
        .ok_or_else(|| Error::invalid("url: no host"))?;
    let port = parsed.port_or_known_default().unwrap_or(443);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addrs = (host, port)
        .to_socket_addrs()
        .map_err(|e| Error::invalid(format!("url: the host {host:?} does not resolve ({e})")))?;
    for a in addrs {
        if let Some(why) = allow.refuses(a.ip()) {
            return Err(Error::invalid(format!(
                "url: {host} resolves to {}, {why}; deliveries do not go inside the operator's \
                 network unless the events.allow setting names it",
                a.ip()
            )));
        }
    }
    Ok(())
}

fn need_keys(keys: Option<&Keys>) -> Result<&Keys> {
    keys.ok_or_else(|| {
        Error::new(
            sendonce_domain::error::ErrorKind::Unavailable,
            "webhook endpoints need SENDONCE_UNSUBSCRIBE_SECRET: each endpoint's signing secret \
             is derived from it (see docs/events.md)",
        )
    })
}

/// Make an endpoint; the answer holds its secret, shown this once.
pub fn create_endpoint(
    store: &Store,
    keys: Option<&Keys>,
    allow: &Allow,
    account_id: i64,
    input: &EndpointInput,
) -> Result<WithSecret> {
    let keys = need_keys(keys)?;
    outhooks::check_types(&input.types).map_err(Error::invalid)?;
    check_url(&input.url, allow)?;
    if store.endpoints(account_id)?.len() >= MAX_ENDPOINTS {
        return Err(Error::conflict(format!(
            "account {account_id} has {MAX_ENDPOINTS} webhook endpoints already (the most)"
        )));
    }
    let salt = outhooks::new_salt().map_err(Error::internal)?;
    let now = clock::now_ms();
    let row = store.create_endpoint(&NewEndpoint {
        account_id,
        url: &input.url,
        types: &input.types,
        ordered: input.ordered,
        salt: &salt,
        now,
    })?;
    Ok(WithSecret {
        secret: outhooks::secret(keys, &salt, now),
        endpoint: row.into(),
    })
}

pub fn endpoints(store: &Store, account_id: i64) -> Result<Vec<EndpointInfo>> {
    Ok(store
        .endpoints(account_id)?
        .into_iter()
        .map(EndpointInfo::from)
        .collect())
}

pub fn endpoint(store: &Store, account_id: i64, id: i64) -> Result<EndpointInfo> {
    Ok(store.endpoint(account_id, id)?.into())
}

/// A change to an endpoint, as the caller gives it.
#[derive(Debug, Clone, Default)]
pub struct EndpointUpdate {
    pub url: Option<String>,
    pub types: Option<Vec<String>>,
    pub ordered: Option<bool>,
    /// true: enable (also a broken one), false: disable.
    pub enabled: Option<bool>,
}

pub fn update_endpoint(
    store: &Store,
    allow: &Allow,
    account_id: i64,
    id: i64,
    u: &EndpointUpdate,
) -> Result<EndpointInfo> {
    if let Some(url) = &u.url {
        check_url(url, allow)?;
    }
    if let Some(types) = &u.types {
        outhooks::check_types(types).map_err(Error::invalid)?;
    }
    let change = EndpointChange {
        url: u.url.as_deref(),
        types: u.types.as_deref(),
        ordered: u.ordered,
        status: u.enabled.map(|on| if on { "enabled" } else { "disabled" }),
        rotate: None,
    };
    Ok(store
        .update_endpoint(account_id, id, &change, clock::now_ms())?
        .into())
}

/// A new secret for an endpoint; the old one keeps signing for `overlap`.
pub fn rotate_endpoint(
    store: &Store,
    keys: Option<&Keys>,
    account_id: i64,
    id: i64,
    overlap: Duration,
) -> Result<WithSecret> {
    let keys = need_keys(keys)?;
    let salt = outhooks::new_salt().map_err(Error::internal)?;
    let now = clock::now_ms();
    let until = now + i64::try_from(overlap.as_millis()).unwrap_or(i64::MAX / 2);
    let change = EndpointChange {
        rotate: Some((&salt, until)),
        ..EndpointChange::default()
    };
    let row = store.update_endpoint(account_id, id, &change, now)?;
    Ok(WithSecret {
        secret: outhooks::secret(keys, &salt, now),
        endpoint: row.into(),
    })
}

pub fn delete_endpoint(store: &Store, account_id: i64, id: i64) -> Result<()> {
    store.delete_endpoint(account_id, id)
}

/// Deliver again one event (`to` = `from`) or a range of event ids.
pub fn replay(store: &Store, account_id: i64, id: i64, from: i64, to: i64) -> Result<u64> {
    if to < from {
        return Err(Error::invalid(format!(
            "replay: the range {from}..{to} is empty (to before from)"
        )));
    }
    let range = sendonce_store::Replay::Ids(from, to);
    store.replay(account_id, id, range, MAX_REPLAY, clock::now_ms())
}

/// Deliver again the events that happened between two times (RFC 3339), at most
/// [`MAX_REPLAY`] of them.
pub fn replay_times(
    store: &Store,
    account_id: i64,
    id: i64,
    since: &str,
    until: &str,
) -> Result<u64> {
    let from = clock::parse_rfc3339_ms(since).map_err(|e| e.context("since"))?;
    let to = clock::parse_rfc3339_ms(until).map_err(|e| e.context("until"))?;
    if to < from {
        return Err(Error::invalid(format!("replay: {until} is before {since}")));
    }
    let range = sendonce_store::Replay::Times(from, to);
    store.replay(account_id, id, range, MAX_REPLAY, clock::now_ms())
}

/// A delivery as shown.
#[derive(Debug, Clone, Serialize)]
pub struct DeliveryInfo {
    pub id: i64,
    pub event: String,
    pub subject: String,
    pub status: String,
    pub attempts: i64,
    #[serde(serialize_with = "clock::ser_ms")]
    pub next_at: i64,
    pub last_status: Option<i64>,
    pub last_error: Option<String>,
    #[serde(serialize_with = "clock::ser_ms")]
    pub updated_at: i64,
}

impl From<DeliveryRow> for DeliveryInfo {
    fn from(d: DeliveryRow) -> Self {
        DeliveryInfo {
            id: d.id,
            event: wire_id(d.event_id),
            subject: d.subject,
            status: d.status,
            attempts: d.attempts,
            next_at: d.visible_at,
            last_status: d.last_status,
            last_error: d.last_error,
            updated_at: d.updated_at,
        }
    }
}

pub fn deliveries(store: &Store, account_id: i64, id: i64) -> Result<Vec<DeliveryInfo>> {
    Ok(store
        .deliveries(account_id, id, 100)?
        .into_iter()
        .map(DeliveryInfo::from)
        .collect())
}

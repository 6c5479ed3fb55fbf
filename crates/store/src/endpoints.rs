//! Webhook endpoints of an account and the deliveries of events to them (`Endpoints`), written
//! once for both stores. A delivery is a row per (endpoint, event), leased and fenced like a
//! send: one transaction per turn records the outcomes of the calls that finished (with the
//! attempt log and the endpoint's failure clock), fans the new events out to each endpoint
//! past its cursor, and leases the deliveries that are due (for an endpoint that asked for
//! order, only the first undelivered one of each subject). The calls happen outside it.

use crate::events::{rows_by_id, scan_after, type_matches, Cursor, EventRow};
use crate::shared::require_account;
use crate::sql::{args, Db, Row, Tx};
use sendonce_domain::error::{Error, Result};

/// An endpoint as stored, with its delivery counts.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointRow {
    pub id: i64,
    pub account_id: i64,
    pub url: String,
    /// Event types or `family.*`; empty: every type.
    pub types: Vec<String>,
    /// Deliver each subject's events one at a time, in the feed's order.
    pub ordered: bool,
    /// What the signing secret is derived from (not secret by itself).
    pub salt: String,
    /// The salt before the last rotation, and until when it also signs.
    pub old_salt: Option<(String, i64)>,
    /// `enabled`, `disabled` (by the user) or `broken` (by the circuit breaker).
    pub status: String,
    /// When the current run of failures began; None after a success.
    pub failing_since: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    /// Deliveries waiting or in flight.
    pub pending: i64,
    pub delivered: i64,
    pub dropped: i64,
}

/// What a new endpoint is.
#[derive(Debug, Clone, Copy)]
pub struct NewEndpoint<'a> {
    pub account_id: i64,
    pub url: &'a str,
    pub types: &'a [String],
    pub ordered: bool,
    pub salt: &'a str,
    pub now: i64,
}

/// A change to an endpoint: each field that is Some replaces the stored one.
#[derive(Debug, Clone, Copy, Default)]
pub struct EndpointChange<'a> {
    pub url: Option<&'a str>,
    pub types: Option<&'a [String]>,
    pub ordered: Option<bool>,
    /// `enabled` or `disabled` (enabling a broken endpoint restarts its failure clock).
    pub status: Option<&'a str>,
    /// A new salt, with the time until which the current one keeps signing.
    pub rotate: Option<(&'a str, i64)>,
}

/// Which events a replay delivers again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replay {
    /// Event ids `from..=to`.
    Ids(i64, i64),
    /// Events that happened from `from` to `to` (ms since the epoch, inclusive).
    Times(i64, i64),
}

/// One delivery attempt, as the worker saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    pub delivery_id: i64,
    /// Its endpoint (attempts are recorded in endpoint order: two workers never lock the same
    /// endpoints in opposite orders).
    pub endpoint_id: i64,
    /// The lease token the delivery was handed out with (the fence).
    pub token: i64,
    pub at: i64,
    /// The receiver's HTTP status; None when it did not answer.
    pub status: Option<u16>,
    /// What went wrong, for the attempt log (never a secret).
    pub error: Option<String>,
    pub ms: i64,
    pub next: NextStep,
}

/// What becomes of a delivery after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextStep {
    Delivered,
    /// Failed; try again at this time.
    RetryAt(i64),
    /// Failed for the last time (its retry window is over).
    Drop,
}

/// One delivery turn's parameters.
#[derive(Debug, Clone, Copy)]
pub struct DeliveryTurn<'a> {
    pub attempts: &'a [Attempt],
    pub now: i64,
    pub lease_ms: i64,
    /// Deliveries to lease at most.
    pub max: usize,
    /// Events to look at per endpoint at most.
    pub fan_out: usize,
    /// An endpoint failing for this long is marked `broken` (the circuit breaker).
    pub broken_after_ms: i64,
}

/// A delivery handed to the worker: call `url` with the event, signed with the endpoint's
/// secret(s); report the outcome with `token`.
#[derive(Debug, Clone, PartialEq)]
pub struct DueDelivery {
    pub id: i64,
    pub token: i64,
    /// Calls made so far, this one included.
    pub attempts: i64,
    pub created_at: i64,
    pub endpoint_id: i64,
    pub url: String,
    pub salt: String,
    pub old_salt: Option<(String, i64)>,
    pub event_id: i64,
    /// None when the event was pruned (the delivery is then dropped).
    pub event: Option<EventRow>,
}

/// A delivery as the user sees it (the attempt log's summary).
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryRow {
    pub id: i64,
    pub event_id: i64,
    pub subject: String,
    pub status: String,
    pub attempts: i64,
    pub visible_at: i64,
    pub last_status: Option<i64>,
    pub last_error: Option<String>,
    pub updated_at: i64,
}

/// An account's webhook endpoints and their deliveries.
pub trait Endpoints: Send + Sync {
    /// A new endpoint; it hears the events that come after it.
    fn create_endpoint(&self, e: &NewEndpoint<'_>) -> Result<EndpointRow>;
    fn endpoints(&self, account_id: i64) -> Result<Vec<EndpointRow>>;
    fn endpoint(&self, account_id: i64, id: i64) -> Result<EndpointRow>;
    fn update_endpoint(
        &self,
        account_id: i64,
        id: i64,
        change: &EndpointChange<'_>,
        now: i64,
    ) -> Result<EndpointRow>;
    /// Remove an endpoint with its deliveries and their attempt log.
    fn delete_endpoint(&self, account_id: i64, id: i64) -> Result<()>;
    /// Deliver again the endpoint's events in `range` (ids, or times in ms) that it listens to
    /// (at most `limit`); returns how many deliveries were queued.
    fn replay(
        &self,
        account_id: i64,
        id: i64,
        range: Replay,
        limit: usize,
        now: i64,
    ) -> Result<u64>;
    /// The endpoint's latest deliveries, newest first.
    fn deliveries(&self, account_id: i64, id: i64, limit: usize) -> Result<Vec<DeliveryRow>>;
    /// One worker turn (see the module's comment).
    fn delivery_turn(&self, t: &DeliveryTurn<'_>) -> Result<Vec<DueDelivery>>;
    /// Endpoints the circuit breaker has turned off, every account's.
    fn broken_endpoints(&self) -> Result<Vec<EndpointRow>>;
}

const ENDPOINT_COLS: &str = "e.id, e.account_id, e.url, e.types, e.ordered, e.salt, e.old_salt,
     e.old_until, e.status, e.failing_since, e.created_at, e.updated_at,
     (SELECT count(*) FROM hook_deliveries d
      WHERE d.endpoint_id = e.id AND d.status IN ('pending', 'leased')),
     (SELECT count(*) FROM hook_deliveries d
      WHERE d.endpoint_id = e.id AND d.status = 'delivered'),
     (SELECT count(*) FROM hook_deliveries d
      WHERE d.endpoint_id = e.id AND d.status = 'dropped')";

fn endpoint_row(r: Row<'_>) -> Result<EndpointRow> {
    let types: String = r.get(3)?;
    let old_salt: Option<String> = r.get(6)?;
    let old_until: Option<i64> = r.get(7)?;
    Ok(EndpointRow {
        id: r.get(0)?,
        account_id: r.get(1)?,
        url: r.get(2)?,
        types: types.split_whitespace().map(str::to_string).collect(),
        ordered: r.get(4)?,
        salt: r.get(5)?,
        old_salt: old_salt.zip(old_until),
        status: r.get(8)?,
        failing_since: r.get(9)?,
        created_at: r.get(10)?,
        updated_at: r.get(11)?,
        pending: r.get(12)?,
        delivered: r.get(13)?,
        dropped: r.get(14)?,
    })
}

fn load(tx: &mut dyn Tx, account_id: i64, id: i64) -> Result<EndpointRow> {
    tx.query_opt(
        &format!(
            "SELECT {ENDPOINT_COLS} FROM hook_endpoints e WHERE e.account_id = ?1 AND e.id = ?2"
        ),
        &args![account_id, id],
        endpoint_row,
    )?
    .ok_or_else(|| {
        Error::not_found(format!(
            "webhook endpoint {id} does not exist in account {account_id}"
        ))
    })
}

/// The newest event a reader of the account may see now (`Dialect::events_newest`): where a
/// new endpoint starts.
fn newest(tx: &mut dyn Tx, account_id: i64) -> Result<Cursor> {
    let sql = tx.dialect().events_newest;
    let c = tx.query_opt(sql, &args![account_id], |r| {
        Ok(Cursor {
            txid: r.get(0)?,
            id: r.get(1)?,
        })
    })?;
    Ok(c.unwrap_or_default())
}

impl<S: Db> Endpoints for S {
    fn create_endpoint(&self, e: &NewEndpoint<'_>) -> Result<EndpointRow> {
        let types = e.types.join(" ");
        self.write(|tx| {
            require_account(tx, e.account_id)?;
            let start = newest(tx, e.account_id)?;
            let id: i64 = tx.scalar(
                "INSERT INTO hook_endpoints (account_id, url, types, ordered, salt, cursor_txid,
                                             cursor_id, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8) RETURNING id",
                &args![
                    e.account_id,
                    e.url,
                    &types,
                    e.ordered,
                    e.salt,
                    start.txid,
                    start.id,
                    e.now
                ],
            )?;
            load(tx, e.account_id, id)
        })
    }

    fn endpoints(&self, account_id: i64) -> Result<Vec<EndpointRow>> {
        self.read(|tx| {
            require_account(tx, account_id)?;
            tx.query(
                &format!(
                    "SELECT {ENDPOINT_COLS} FROM hook_endpoints e
                     WHERE e.account_id = ?1 ORDER BY e.id"
                ),
                &args![account_id],
                endpoint_row,
            )
        })
    }

    fn endpoint(&self, account_id: i64, id: i64) -> Result<EndpointRow> {
        self.read(|tx| load(tx, account_id, id))
    }

    fn update_endpoint(
        &self,
        account_id: i64,
        id: i64,
        c: &EndpointChange<'_>,
        now: i64,
    ) -> Result<EndpointRow> {
        let types = c.types.map(|t| t.join(" "));
        let (salt, until) = c.rotate.unzip();
        self.write(|tx| {
            load(tx, account_id, id)?;
            tx.exec(
                "UPDATE hook_endpoints SET
                     url = coalesce(?3, url), types = coalesce(?4, types),
                     ordered = coalesce(?5, ordered),
                     failing_since = CASE WHEN ?6 = 'enabled' THEN NULL ELSE failing_since END,
                     status = coalesce(?6, status),
                     old_salt = CASE WHEN CAST(?7 AS TEXT) IS NULL THEN old_salt ELSE salt END,
                     old_until = CASE WHEN CAST(?7 AS TEXT) IS NULL THEN old_until
                                 ELSE CAST(?8 AS BIGINT) END,
                     salt = coalesce(?7, salt), updated_at = ?9
                 WHERE account_id = ?1 AND id = ?2",
                &args![account_id, id, c.url, &types, c.ordered, c.status, salt, until, now],
            )?;
            load(tx, account_id, id)
        })
    }

    fn delete_endpoint(&self, account_id: i64, id: i64) -> Result<()> {
        self.write(|tx| {
            load(tx, account_id, id)?;
            tx.exec(
                "DELETE FROM hook_attempts WHERE delivery_id IN
                     (SELECT id FROM hook_deliveries WHERE endpoint_id = ?1)",
                &args![id],
            )?;
            tx.exec(
                "DELETE FROM hook_deliveries WHERE endpoint_id = ?1",
                &args![id],
            )?;
            tx.exec("DELETE FROM hook_endpoints WHERE id = ?1", &args![id])?;
            Ok(())
        })
    }

    fn replay(
        &self,
        account_id: i64,
        id: i64,
        range: Replay,
        limit: usize,
        now: i64,
    ) -> Result<u64> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let (column, from, to) = match range {
            Replay::Ids(a, b) => ("id", a, b),
            Replay::Times(a, b) => ("at", a, b),
        };
        self.write(|tx| {
            let ep = load(tx, account_id, id)?;
            let found: Vec<(i64, String, String)> = tx.query(
                &format!(
                    "SELECT id, type, subject FROM events
                     WHERE account_id = ?1 AND {column} BETWEEN ?2 AND ?3
                     ORDER BY txid, id LIMIT ?4"
                ),
                &args![account_id, from, to, limit],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?;
            let mut queued = 0;
            for (event, kind, subject) in found {
                if type_matches(&ep.types, &kind) {
                    queued += tx.exec(
                        "INSERT INTO hook_deliveries (endpoint_id, event_id, subject, visible_at,
                                                      created_at, updated_at)
                         VALUES (?1, ?2, ?3, ?4, ?4, ?4)
                         ON CONFLICT (endpoint_id, event_id) DO UPDATE SET status = 'pending',
                             attempts = 0, visible_at = ?4, created_at = ?4, updated_at = ?4",
                        &args![id, event, &subject, now],
                    )?;
                }
            }
            Ok(queued)
        })
    }

    fn deliveries(&self, account_id: i64, id: i64, limit: usize) -> Result<Vec<DeliveryRow>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(|tx| {
            load(tx, account_id, id)?;
            tx.query(
                "SELECT id, event_id, subject, status, attempts, visible_at, last_status,
                        last_error, updated_at
                 FROM hook_deliveries WHERE endpoint_id = ?1 ORDER BY id DESC LIMIT ?2",
                &args![id, limit],
                |r| {
                    Ok(DeliveryRow {
                        id: r.get(0)?,
                        event_id: r.get(1)?,
                        subject: r.get(2)?,
                        status: r.get(3)?,
                        attempts: r.get(4)?,
                        visible_at: r.get(5)?,
                        last_status: r.get(6)?,
                        last_error: r.get(7)?,
                        updated_at: r.get(8)?,
                    })
                },
            )
        })
    }

    fn delivery_turn(&self, t: &DeliveryTurn<'_>) -> Result<Vec<DueDelivery>> {
        if t.attempts.is_empty() {
            // Most stores have no endpoint: a read, not a write, every turn then.
            let any = self.read(|tx| {
                tx.exists(
                    "SELECT 1 FROM hook_endpoints WHERE status = 'enabled'",
                    &args![],
                )
            })?;
            if !any {
                return Ok(Vec::new());
            }
        }
        let mut attempts: Vec<&Attempt> = t.attempts.iter().collect();
        attempts.sort_by_key(|a| (a.endpoint_id, a.delivery_id));
        self.write(|tx| {
            for a in &attempts {
                record(tx, a, t)?;
            }
            fan_out(tx, t)?;
            lease(tx, t)
        })
    }

    fn broken_endpoints(&self) -> Result<Vec<EndpointRow>> {
        self.read(|tx| {
            tx.query(
                &format!(
                    "SELECT {ENDPOINT_COLS} FROM hook_endpoints e
                     WHERE e.status = 'broken' ORDER BY e.id"
                ),
                &args![],
                endpoint_row,
            )
        })
    }
}

/// One attempt: logged whatever the fence says (the call happened), unless its delivery was
/// removed with its endpoint meanwhile; the delivery moves on only if the attempt still holds
/// its lease (ids are never given again, so a token names one lease of one delivery); the
/// endpoint's failure clock starts, stops, or trips the breaker.
fn record(tx: &mut dyn Tx, a: &Attempt, t: &DeliveryTurn<'_>) -> Result<()> {
    let status = a.status.map(i64::from);
    tx.exec(
        "INSERT INTO hook_attempts (delivery_id, at, status, error, ms)
         SELECT ?1, ?2, ?3, ?4, ?5 WHERE EXISTS (SELECT 1 FROM hook_deliveries WHERE id = ?1)",
        &args![a.delivery_id, a.at, status, &a.error, a.ms],
    )?;
    let (state, visible) = match a.next {
        NextStep::Delivered => ("delivered", t.now),
        NextStep::RetryAt(at) => ("pending", at),
        NextStep::Drop => ("dropped", t.now),
    };
    let n = tx.exec(
        "UPDATE hook_deliveries SET status = ?3, visible_at = ?4, last_status = ?5,
             last_error = ?6, updated_at = ?7
         WHERE id = ?1 AND lease_token = ?2 AND status = 'leased'",
        &args![
            a.delivery_id,
            a.token,
            state,
            visible,
            status,
            &a.error,
            t.now
        ],
    )?;
    if n == 0 {
        return Ok(());
    }
    let ok = a.next == NextStep::Delivered;
    tx.exec(
        "UPDATE hook_endpoints SET
             failing_since = CASE WHEN ?2 THEN NULL ELSE coalesce(failing_since, ?3) END,
             status = CASE WHEN NOT ?2 AND status = 'enabled'
                            AND coalesce(failing_since, ?3) <= ?3 - ?4
                      THEN 'broken' ELSE status END
         WHERE id = (SELECT endpoint_id FROM hook_deliveries WHERE id = ?1)",
        &args![a.delivery_id, ok, a.at, t.broken_after_ms],
    )?;
    Ok(())
}

/// New events to each enabled endpoint that listens to them, from its cursor on.
fn fan_out(tx: &mut dyn Tx, t: &DeliveryTurn<'_>) -> Result<()> {
    let lock = (tx.dialect().for_update_of)("hook_endpoints");
    let lock = if lock.is_empty() {
        lock
    } else {
        lock + " SKIP LOCKED"
    };
    let endpoints: Vec<(i64, i64, String, Cursor)> = tx.query(
        &format!(
            "SELECT id, account_id, types, cursor_txid, cursor_id FROM hook_endpoints
             WHERE status = 'enabled' ORDER BY id{lock}"
        ),
        &args![],
        |r| {
            let c = Cursor {
                txid: r.get(3)?,
                id: r.get(4)?,
            };
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, c))
        },
    )?;
    let scan = i64::try_from(t.fan_out).unwrap_or(i64::MAX);
    for (id, account_id, types, cursor) in endpoints {
        let types: Vec<String> = types.split_whitespace().map(str::to_string).collect();
        let events = scan_after(tx, account_id, cursor, scan)?;
        let Some(last) = events.last().map(|e| e.cursor) else {
            continue;
        };
        for e in &events {
            if e.account_id == account_id && type_matches(&types, &e.kind) {
                tx.exec(
                    "INSERT INTO hook_deliveries (endpoint_id, event_id, subject, visible_at,
                                                  created_at, updated_at)
                     VALUES (?1, ?2, ?3, ?4, ?4, ?4) ON CONFLICT DO NOTHING",
                    &args![id, e.cursor.id, &e.subject, t.now],
                )?;
            }
        }
        tx.exec(
            "UPDATE hook_endpoints SET cursor_txid = ?2, cursor_id = ?3 WHERE id = ?1",
            &args![id, last.txid, last.id],
        )?;
    }
    Ok(())
}

/// The due deliveries of enabled endpoints (for an ordered endpoint, only those with no
/// earlier undelivered delivery of the same subject), leased with a new token each.
fn lease(tx: &mut dyn Tx, t: &DeliveryTurn<'_>) -> Result<Vec<DueDelivery>> {
    let lock = (tx.dialect().for_update_of)("d");
    let lock = if lock.is_empty() {
        lock
    } else {
        lock + " SKIP LOCKED"
    };
    let max = i64::try_from(t.max).unwrap_or(i64::MAX);
    let mut due: Vec<DueDelivery> = tx.query(
        &format!(
            "SELECT d.id, d.lease_token, d.attempts, d.created_at, d.event_id, e.id, e.url,
                    e.salt, e.old_salt, e.old_until
             FROM hook_deliveries d JOIN hook_endpoints e ON e.id = d.endpoint_id
             WHERE d.status IN ('pending', 'leased') AND d.visible_at <= ?1
               AND e.status = 'enabled'
               AND (NOT e.ordered OR NOT EXISTS (
                   SELECT 1 FROM hook_deliveries p
                   WHERE p.endpoint_id = d.endpoint_id AND p.subject = d.subject
                     AND p.id < d.id AND p.status IN ('pending', 'leased')))
             ORDER BY d.visible_at, d.id LIMIT ?2{lock}"
        ),
        &args![t.now, max],
        |r| {
            let old_salt: Option<String> = r.get(8)?;
            let old_until: Option<i64> = r.get(9)?;
            Ok(DueDelivery {
                id: r.get(0)?,
                token: r.get::<Option<i64>>(1)?.unwrap_or(0) + 1,
                attempts: r.get::<i64>(2)? + 1,
                created_at: r.get(3)?,
                endpoint_id: r.get(5)?,
                url: r.get(6)?,
                salt: r.get(7)?,
                old_salt: old_salt.zip(old_until),
                event_id: r.get(4)?,
                event: None,
            })
        },
    )?;
    for d in &due {
        tx.exec(
            "UPDATE hook_deliveries SET status = 'leased', lease_token = ?2, visible_at = ?3,
                 attempts = attempts + 1, updated_at = ?4
             WHERE id = ?1",
            &args![d.id, d.token, t.now + t.lease_ms, t.now],
        )?;
    }
    let ids: Vec<i64> = due.iter().map(|d| d.event_id).collect();
    let events = rows_by_id(tx, &ids)?;
    for d in &mut due {
        d.event = events.iter().find(|e| e.id == d.event_id).cloned();
    }
    Ok(due)
}

//! Events out, the feed's side (`Events`): what happened, recorded in the transaction that made
//! it happen (triggers of `schema/0024_events.sql` for state changes; [`emit`] for delivery
//! reports, which only the webhook code understands), read back in the feed's order after a
//! cursor, and pruned in small batches. Written once for both stores; the one difference, which
//! events a reader may see yet and through which index, is `Dialect::events_scan`.

use crate::sql::{args, Db, Row, Tx};
use sendonce_domain::error::Result;

/// Where a reader stands in an account's feed: after the event `(txid, id)` (`txid` is 0 on
/// SQLite; on PostgreSQL the writing transaction's id, see `schema/postgres/0011_events.sql`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cursor {
    pub txid: i64,
    pub id: i64,
}

/// One event as stored, with what its payload names that never changes (the send's job,
/// address, channel and campaign, the API message's key and metadata, the subscriber's
/// addresses), read at the same time.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRow {
    pub id: i64,
    pub txid: i64,
    pub account_id: i64,
    pub kind: String,
    pub subject: String,
    pub at: i64,
    /// The event's own fields (JSON object text).
    pub data: String,
    pub send: Option<SendFacts>,
    /// The subscriber's email and phone, for subscriber events.
    pub subscriber: Option<(Option<String>, Option<String>)>,
}

impl EventRow {
    pub fn cursor(&self) -> Cursor {
        Cursor {
            txid: self.txid,
            id: self.id,
        }
    }
}

/// What a send event says about its message.
#[derive(Debug, Clone, PartialEq)]
pub struct SendFacts {
    pub send_id: i64,
    pub job_id: String,
    pub address: String,
    pub channel: String,
    pub campaign_id: i64,
    /// `campaign`, `notify` or `api` (the stream's messages).
    pub origin: String,
    pub idempotency_key: Option<String>,
    /// The client's own JSON object, as it was given.
    pub metadata: Option<String>,
}

/// What a feed read asks for.
#[derive(Debug, Clone, Copy)]
pub struct FeedQuery<'a> {
    pub account_id: i64,
    pub after: Cursor,
    /// Event types (`send.failed`) or families (`send.*`); empty: every type.
    pub types: &'a [String],
    pub limit: usize,
}

/// An account's events.
pub trait Events: Send + Sync {
    /// Up to `limit` events after `after`, in the feed's order, of the requested types, that
    /// no transaction still running can precede; and the cursor to read on from (past the
    /// last event looked at, which may be past the last one returned).
    fn events(&self, q: &FeedQuery<'_>) -> Result<(Vec<EventRow>, Cursor)>;
    /// The events with these ids (at most a few hundred), in id order.
    fn events_by_id(&self, ids: &[i64]) -> Result<Vec<EventRow>>;
    /// Delete up to `batch` events older than `before` (never the newest one, so an id is
    /// never given again) and the finished webhook deliveries of that age; returns the number
    /// of events deleted. The retention is longer than a delivery's retries (`app::events`),
    /// so an event still being delivered is not this old.
    fn prune_events(&self, before: i64, batch: usize) -> Result<u64>;
}

/// The columns [`event_row`] reads; `e` events, `s` sends, `c` campaigns, `m` API messages,
/// `b` subscribers.
const EVENT_COLS: &str = "e.id, e.txid, e.account_id, e.type, e.subject, e.at,
     e.data, s.id, s.job_id, s.address, c.channel, c.id, c.kind, m.idempotency_key,
     m.metadata, b.id, b.email, b.phone";

const EVENT_JOINS: &str = "LEFT JOIN sends s ON s.id = e.send_id
     LEFT JOIN campaigns c ON c.id = s.campaign_id
     LEFT JOIN api_messages m ON m.send_id = e.send_id
     LEFT JOIN subscribers b ON b.id = e.subscriber_id";

fn event_row(r: Row<'_>) -> Result<EventRow> {
    let send = match r.get::<Option<i64>>(7)? {
        Some(send_id) => Some(SendFacts {
            send_id,
            job_id: r.get(8)?,
            address: r.get(9)?,
            channel: r.get(10)?,
            campaign_id: r.get(11)?,
            origin: r.get(12)?,
            idempotency_key: r.get(13)?,
            metadata: r.get(14)?,
        }),
        None => None,
    };
    let subscriber = match r.get::<Option<i64>>(15)? {
        Some(_) => Some((r.get(16)?, r.get(17)?)),
        None => None,
    };
    Ok(EventRow {
        id: r.get(0)?,
        txid: r.get(1)?,
        account_id: r.get(2)?,
        kind: r.get(3)?,
        subject: r.get(4)?,
        at: r.get(5)?,
        data: r.get(6)?,
        send,
        subscriber,
    })
}

/// Whether `kind` is one of `types` (exact, or `family.*`); every kind when `types` is empty.
pub fn type_matches(types: &[String], kind: &str) -> bool {
    types.is_empty()
        || types.iter().any(|t| match t.strip_suffix(".*") {
            Some(family) => kind
                .strip_prefix(family)
                .is_some_and(|rest| rest.starts_with('.')),
            None => t == kind,
        })
}

/// Events scanned per feed read at most, matching or not (on SQLite, other accounts' too): a
/// read stops there and hands back a cursor past what it looked at.
pub(crate) const SCAN: i64 = 5000;

/// An event a trigger cannot write: a delivery report, in the transaction that records it.
pub(crate) struct Emit<'a> {
    pub account_id: i64,
    pub kind: &'a str,
    pub subject: &'a str,
    pub at: i64,
    pub send_id: Option<i64>,
    pub data: &'a serde_json::Value,
}

pub(crate) fn emit(tx: &mut dyn Tx, e: &Emit<'_>) -> Result<()> {
    let data = e.data.to_string();
    tx.exec(
        "INSERT INTO events (account_id, type, subject, at, send_id, data)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        &args![e.account_id, e.kind, e.subject, e.at, e.send_id, &data],
    )?;
    Ok(())
}

/// One event as a scan sees it.
pub(crate) struct Scanned {
    pub cursor: Cursor,
    pub account_id: i64,
    pub kind: String,
    pub subject: String,
}

/// Up to `limit` events after `after` that are safe to read, in the feed's order
/// (`Dialect::events_scan`: on PostgreSQL the account's, through its index; on SQLite every
/// account's, through the primary key, which the caller filters: the file keeps no index of
/// events by account, whose upkeep would cost every send a fifth more CPU).
pub(crate) fn scan_after(
    tx: &mut dyn Tx,
    account_id: i64,
    after: Cursor,
    limit: i64,
) -> Result<Vec<Scanned>> {
    let sql = tx.dialect().events_scan;
    tx.query(sql, &args![account_id, after.txid, after.id, limit], |r| {
        Ok(Scanned {
            cursor: Cursor {
                txid: r.get(0)?,
                id: r.get(1)?,
            },
            account_id: r.get(2)?,
            kind: r.get(3)?,
            subject: r.get(4)?,
        })
    })
}

pub(crate) fn rows_by_id(tx: &mut dyn Tx, ids: &[i64]) -> Result<Vec<EventRow>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let json = serde_json::to_string(ids).unwrap_or_else(|_| "[]".into());
    let within = (tx.dialect().in_json_ids)("e.id", "?1");
    tx.query(
        &format!("SELECT {EVENT_COLS} FROM events e {EVENT_JOINS} WHERE {within} ORDER BY e.id"),
        &args![&json],
        event_row,
    )
}

impl<S: Db> Events for S {
    fn events(&self, q: &FeedQuery<'_>) -> Result<(Vec<EventRow>, Cursor)> {
        let limit = q.limit.max(1);
        self.read(|tx| {
            let scanned = scan_after(tx, q.account_id, q.after, SCAN)?;
            let mut next = q.after;
            let mut ids = Vec::new();
            for e in scanned {
                next = e.cursor;
                if e.account_id == q.account_id && type_matches(q.types, &e.kind) {
                    ids.push(e.cursor);
                    if ids.len() == limit {
                        break;
                    }
                }
            }
            let id_list: Vec<i64> = ids.iter().map(|c| c.id).collect();
            let mut rows = rows_by_id(tx, &id_list)?;
            rows.sort_by_key(EventRow::cursor);
            Ok((rows, next))
        })
    }

    fn events_by_id(&self, ids: &[i64]) -> Result<Vec<EventRow>> {
        self.read(|tx| rows_by_id(tx, ids))
    }

    fn prune_events(&self, before: i64, batch: usize) -> Result<u64> {
        let batch = i64::try_from(batch).unwrap_or(i64::MAX);
        self.write(|tx| {
            let finished: Vec<i64> = tx.query(
                "SELECT id FROM hook_deliveries
                 WHERE status IN ('delivered', 'dropped') AND updated_at < ?1 ORDER BY id LIMIT ?2",
                &args![before, batch],
                |r| r.get(0),
            )?;
            let json = serde_json::to_string(&finished).unwrap_or_else(|_| "[]".into());
            let d = tx.dialect();
            let (attempts, deliveries) = (
                (d.in_json_ids)("delivery_id", "?1"),
                (d.in_json_ids)("id", "?1"),
            );
            tx.exec(
                &format!("DELETE FROM hook_attempts WHERE {attempts}"),
                &args![&json],
            )?;
            tx.exec(
                &format!("DELETE FROM hook_deliveries WHERE {deliveries}"),
                &args![&json],
            )?;
            tx.exec(
                "DELETE FROM events WHERE id IN (
                     SELECT id FROM events
                     WHERE at < ?1 AND id < (SELECT max(id) FROM events)
                     ORDER BY id LIMIT ?2)",
                &args![before, batch],
            )
        })
    }
}

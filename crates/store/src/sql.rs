//! The seam between the store's operations and its two databases. Each operation (a claim, a
//! record, an unsubscribe, a token lookup…) is written once as a function over [`Tx`], a
//! synchronous transaction handle with `exec` and `query` over neutral values ([`Arg`] in,
//! [`Value`] out); `sqlite/tx.rs` and `postgres/tx.rs` implement it, and where the SQL text or the
//! locking differs, the operation asks the transaction's [`Dialect`] (`sqlite/dialect.rs`,
//! `postgres/dialect.rs`).
//!
//! SQL is written with SQLite's numbered placeholders (`?1`, `?2`…); the PostgreSQL
//! transaction rewrites them to `$1`, `$2`… and converts each value to the type the server
//! inferred for its parameter (an integer to `boolean`, `integer` or `bigint`, text to `json`…),
//! so the operation does not care which column types a backend chose. A parameter whose type
//! PostgreSQL cannot infer (`?2 - ?3`) is written `CAST(?2 AS BIGINT)`, which both read.

use crate::OptIn;
use sendonce_domain::address::Channel;
use sendonce_domain::error::{Error, Result};
use sendonce_domain::model::{CampaignStatus, SendStatus};
use sendonce_domain::token::Scope;

/// A value bound to a placeholder, borrowed from the caller (no copies on the way in).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arg<'a> {
    Null,
    Int(i64),
    Real(f64),
    Text(&'a str),
    Blob(&'a [u8]),
}

/// A column's value, borrowed from the row the backend returned.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    Null,
    Int(i64),
    Real(f64),
    Text(&'a str),
    Blob(&'a [u8]),
}

impl std::fmt::Display for Value<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Null => f.write_str("NULL"),
            Value::Int(i) => write!(f, "the integer {i}"),
            Value::Real(r) => write!(f, "the number {r}"),
            Value::Text(t) => write!(f, "{t:?}"),
            Value::Blob(b) => write!(f, "a blob of {} bytes", b.len()),
        }
    }
}

macro_rules! int_arg {
    ($($t:ty),*) => {$(
        impl From<$t> for Arg<'_> {
            fn from(v: $t) -> Self {
                Arg::Int(v as i64)
            }
        }
    )*};
}
int_arg!(i64, i32, u32, u16, u8);

impl From<bool> for Arg<'_> {
    fn from(v: bool) -> Self {
        Arg::Int(i64::from(v))
    }
}

impl From<f64> for Arg<'_> {
    fn from(v: f64) -> Self {
        Arg::Real(v)
    }
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(v: &'a str) -> Self {
        Arg::Text(v)
    }
}

impl<'a> From<&'a String> for Arg<'a> {
    fn from(v: &'a String) -> Self {
        Arg::Text(v)
    }
}

impl<'a> From<&'a [u8]> for Arg<'a> {
    fn from(v: &'a [u8]) -> Self {
        Arg::Blob(v)
    }
}

impl<'a> From<&'a Vec<u8>> for Arg<'a> {
    fn from(v: &'a Vec<u8>) -> Self {
        Arg::Blob(v)
    }
}

impl<'a, const N: usize> From<&'a [u8; N]> for Arg<'a> {
    fn from(v: &'a [u8; N]) -> Self {
        Arg::Blob(v)
    }
}

impl<'a, T: Into<Arg<'a>>> From<Option<T>> for Arg<'a> {
    fn from(v: Option<T>) -> Self {
        v.map_or(Arg::Null, Into::into)
    }
}

impl<'a> From<&'a Option<String>> for Arg<'a> {
    fn from(v: &'a Option<String>) -> Self {
        v.as_deref().map_or(Arg::Null, Arg::Text)
    }
}

/// The arguments of one statement: `args![a, b, c]` is `[Arg::from(a), …]`.
#[macro_export]
macro_rules! args {
    ($($v:expr),* $(,)?) => {
        [$($crate::sql::Arg::from($v)),*]
    };
}
pub use args;

/// A type a column can be read as. Text enums (a status, a channel) are read by their names; a
/// name that is not one of them is damage, never a default.
pub trait Column: Sized {
    /// The value as `Self`, or what is wrong with it (`Err(true)`: a text that names no
    /// variant, i.e. damage; `Err(false)`: a value of another type).
    fn from_value(v: Value<'_>) -> std::result::Result<Self, Mismatch>;
}

/// Why a value could not be read as the requested type.
pub struct Mismatch {
    /// What the column should hold ("send status", "integer").
    pub what: &'static str,
    /// A text that names no variant of an enum: the file is damaged.
    pub unknown_name: bool,
}

fn mismatch<T>(what: &'static str) -> std::result::Result<T, Mismatch> {
    Err(Mismatch {
        what,
        unknown_name: false,
    })
}

impl Column for i64 {
    fn from_value(v: Value<'_>) -> std::result::Result<Self, Mismatch> {
        match v {
            Value::Int(i) => Ok(i),
            _ => mismatch("integer"),
        }
    }
}

macro_rules! int_column {
    ($($t:ty),*) => {$(
        impl Column for $t {
            fn from_value(v: Value<'_>) -> std::result::Result<Self, Mismatch> {
                match v {
                    Value::Int(i) => <$t>::try_from(i).or_else(|_| mismatch(stringify!($t))),
                    _ => mismatch("integer"),
                }
            }
        }
    )*};
}
int_column!(i32, u32, u64, usize, u16, u8);

impl Column for bool {
    fn from_value(v: Value<'_>) -> std::result::Result<Self, Mismatch> {
        match v {
            Value::Int(i) => Ok(i != 0),
            _ => mismatch("boolean"),
        }
    }
}

impl Column for f64 {
    fn from_value(v: Value<'_>) -> std::result::Result<Self, Mismatch> {
        match v {
            Value::Real(r) => Ok(r),
            Value::Int(i) => Ok(i as f64),
            _ => mismatch("number"),
        }
    }
}

impl Column for String {
    fn from_value(v: Value<'_>) -> std::result::Result<Self, Mismatch> {
        match v {
            Value::Text(t) => Ok(t.to_string()),
            _ => mismatch("text"),
        }
    }
}

impl Column for Vec<u8> {
    fn from_value(v: Value<'_>) -> std::result::Result<Self, Mismatch> {
        match v {
            Value::Blob(b) => Ok(b.to_vec()),
            Value::Text(t) => Ok(t.as_bytes().to_vec()),
            _ => mismatch("blob"),
        }
    }
}

impl<T: Column> Column for Option<T> {
    fn from_value(v: Value<'_>) -> std::result::Result<Self, Mismatch> {
        match v {
            Value::Null => Ok(None),
            v => T::from_value(v).map(Some),
        }
    }
}

/// `Column` and `Arg` for an enum stored by name (`as_str` / a parser).
macro_rules! text_enum {
    ($t:ty, $what:literal, $parse:expr) => {
        impl Column for $t {
            fn from_value(v: Value<'_>) -> std::result::Result<Self, Mismatch> {
                let parse = $parse;
                match v {
                    Value::Text(t) => parse(t).ok_or(Mismatch {
                        what: $what,
                        unknown_name: true,
                    }),
                    _ => Err(Mismatch {
                        what: $what,
                        unknown_name: true,
                    }),
                }
            }
        }
        impl From<$t> for Arg<'_> {
            fn from(v: $t) -> Self {
                Arg::Text(v.as_str())
            }
        }
    };
}

text_enum!(SendStatus, "send status", SendStatus::parse);
text_enum!(CampaignStatus, "campaign status", CampaignStatus::parse);
text_enum!(Channel, "channel", |s: &str| s.parse::<Channel>().ok());
text_enum!(OptIn, "list opt-in mode", |s: &str| OptIn::parse(s).ok());
text_enum!(Scope, "token scope", |s: &str| Scope::parse(s).ok());

/// One row as a backend returned it (`sqlite/tx.rs`, `postgres/tx.rs`).
pub trait Fields {
    /// Column `i`'s value.
    fn value(&self, i: usize) -> Result<Value<'_>>;
    /// Column `i`'s name (for messages).
    fn name(&self, i: usize) -> &str;
}

/// A row of a result, read by column index.
#[derive(Clone, Copy)]
pub struct Row<'r>(pub &'r dyn Fields);

impl Row<'_> {
    /// Column `i` as `T`. A text that names no variant of an enum is damage (the message names
    /// the column and the value); any other mismatch is a database error.
    pub fn get<T: Column>(&self, i: usize) -> Result<T> {
        let v = self.0.value(i)?;
        T::from_value(v).map_err(|m| {
            let place = self.0.name(i);
            if m.unknown_name {
                Error::damaged(format!("{place} holds {v}, which is not a {}", m.what))
            } else {
                Error::db(format!(
                    "database error: column {place} holds {v}, not a value of type {}",
                    m.what
                ))
            }
        })
    }

    /// Column `i`'s raw value.
    pub fn value(&self, i: usize) -> Result<Value<'_>> {
        self.0.value(i)
    }
}

/// One open transaction (or, for reads, one connection) on either backend.
pub trait Tx {
    /// The SQL and locking differences of this backend.
    fn dialect(&self) -> &'static Dialect;
    /// Run a statement; the number of rows it changed.
    fn exec(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<u64>;
    /// Run a query, calling `f` with each row in order (stopping at its first error).
    fn each(
        &mut self,
        sql: &str,
        args: &[Arg<'_>],
        f: &mut dyn FnMut(Row<'_>) -> Result<()>,
    ) -> Result<()>;
}

impl dyn Tx + '_ {
    /// Every row, mapped by `f`.
    pub fn query<T>(
        &mut self,
        sql: &str,
        args: &[Arg<'_>],
        mut f: impl FnMut(Row<'_>) -> Result<T>,
    ) -> Result<Vec<T>> {
        let mut out = Vec::new();
        self.each(sql, args, &mut |r| {
            out.push(f(r)?);
            Ok(())
        })?;
        Ok(out)
    }

    /// The first row, mapped by `f`, if there is one.
    pub fn query_opt<T>(
        &mut self,
        sql: &str,
        args: &[Arg<'_>],
        f: impl FnOnce(Row<'_>) -> Result<T>,
    ) -> Result<Option<T>> {
        let mut f = Some(f);
        let mut out = None;
        self.each(sql, args, &mut |r| {
            if let Some(f) = f.take() {
                out = Some(f(r)?);
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// The first row's first column (a query that returns no row is an internal error).
    pub fn scalar<T: Column>(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<T> {
        self.query_opt(sql, args, |r| r.get(0))?
            .ok_or_else(|| Error::internal(format!("a query returned no row: {sql}")))
    }

    /// The first row's first column, if there is a row.
    pub fn scalar_opt<T: Column>(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<Option<T>> {
        self.query_opt(sql, args, |r| r.get(0))
    }

    /// Whether the query returns a row.
    pub fn exists(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<bool> {
        Ok(self.query_opt(sql, args, |_| Ok(()))?.is_some())
    }
}

/// A database that runs transactions over [`Tx`]: `SqliteStore` and `PgStore`. Every
/// operation written once is generic over it.
pub trait Db: Send + Sync + 'static {
    /// Run `f` in a writing transaction and commit it: `BEGIN IMMEDIATE` on SQLite (so the
    /// transaction holds the one write lock from its first statement); READ COMMITTED on
    /// PostgreSQL, run again (three more times at most) after a deadlock or a serialization
    /// failure, so `f` may run more than once and must not act outside the transaction.
    fn write<T>(&self, f: impl FnMut(&mut dyn Tx) -> Result<T>) -> Result<T>;

    /// Run `f` on a connection without a transaction of ours (each statement sees the latest
    /// commit).
    fn read<T>(&self, f: impl FnOnce(&mut dyn Tx) -> Result<T>) -> Result<T>;
}

/// What differs between the two SQL dialects, as data: one table per backend
/// (`sqlite/dialect.rs`, `postgres/dialect.rs`). An operation takes a fragment or a statement
/// from here instead of testing which backend it runs on; a statement that one backend does not
/// need (a row or advisory lock, where SQLite's one writer already excludes every other) is
/// `None` there. The few fragments that wrap a caller's column or placeholder are functions.
#[derive(Debug)]
pub struct Dialect {
    /// `"sqlite"` or `"postgres"`.
    pub name: &'static str,

    // --- locking clauses and statements ---
    /// The clause that locks the rows a `SELECT` returns until commit (` FOR UPDATE` on
    /// PostgreSQL; nothing on SQLite, whose write transaction already excludes every other).
    pub for_update: &'static str,
    /// The clause that locks the rows of table `alias` a `SELECT` returns (` FOR UPDATE OF s`).
    pub for_update_of: fn(alias: &str) -> String,
    /// The clause that keeps a read row from changing until commit (` FOR SHARE`).
    pub for_share: &'static str,
    /// The clause after the claim's candidate read (` FOR UPDATE OF s SKIP LOCKED` on
    /// PostgreSQL: rows another claim holds are skipped, never waited for).
    pub skip_locked: &'static str,
    /// Takes the transaction-scoped advisory lock `?1` (a bigint key), exclusive and shared.
    pub advisory_lock: Option<(&'static str, &'static str)>,
    /// Takes the two-key advisory lock (`?1` a class, `?2` a text hashed into the second key).
    pub advisory_lock_text: Option<&'static str>,
    /// Locks campaign `?1`'s row until commit.
    pub lock_campaign: Option<&'static str>,
    /// The statement that opens a read-only transaction seeing one snapshot (`BEGIN` on
    /// SQLite; REPEATABLE READ, READ ONLY on PostgreSQL); `COMMIT` ends it.
    pub begin_snapshot: &'static str,

    // --- text, JSON ---
    /// The collation that orders and compares text byte by byte, written after a column
    /// (nothing on SQLite, whose BINARY already does; ` COLLATE "C"` on PostgreSQL, whatever
    /// the database's collation), so that a prefix is a range of the order.
    pub byte_order: &'static str,
    /// A condition that `column` starts with the text of placeholder `param`, appended to a
    /// byte range's bounds (` AND starts_with(..)` on PostgreSQL; nothing on SQLite, where the
    /// range alone is the prefix).
    pub starts_with: fn(column: &str, param: &str) -> String,
    /// A condition that `column` starts with the text bound at `param`, by itself: a range of
    /// the column's byte order on SQLite (up to the text followed by U+10FFFF, which sorts
    /// after every character an address can hold); `starts_with` on PostgreSQL.
    pub prefix_match: fn(column: &str, param: &str) -> String,
    /// The case-insensitive `LIKE` (SQLite's `LIKE` is; PostgreSQL's `ILIKE`).
    pub like_ci: &'static str,
    /// Two texts compared two-valued (a NULL equals only NULL): equal, and different.
    pub same_text: (&'static str, &'static str),
    /// SQLite's `json_patch(?1, ?2)` where the database has it; `None`: the same merge in Rust
    /// (`shared::json_patch`; PostgreSQL's `jsonb ||` is shallow and reorders keys).
    pub json_patch: Option<&'static str>,
    /// The aggregate that makes a JSON array text of its rows.
    pub json_array_agg: &'static str,
    /// The condition "`col` is one of the ids of the JSON array bound at `param`". On
    /// PostgreSQL `col = ANY(ARRAY(...))`: the array is built once and the ids are an index
    /// condition (as a semi-join, the planner walked the index without them).
    pub in_json_ids: fn(col: &str, param: &str) -> String,
    /// The template variables a send captures from its subscriber `s` (JSON text): the
    /// attributes, with the built-ins `name`, `email`, `phone` on top.
    pub captured_vars: &'static str,
    /// The value bound for an attribute path of an audience filter (SQLite: the JSON path
    /// `$."key"`; PostgreSQL: the key).
    pub attr_param: fn(key: &str) -> String,
    /// The text of the subscriber's attribute whose path (or key) is bound at `param`, as
    /// SQLite's `CAST(json_extract(attrs, path) AS TEXT)` gives it (NULL when missing).
    pub attr_text: fn(param: &str) -> String,
    /// The keys of the JSON object text `obj`, as a table function whose rows have a `key`
    /// column (SQLite's `json_each`; PostgreSQL's `jsonb_each` of the text cast).
    pub json_keys: fn(obj: &str) -> String,
    /// Every attribute name of account `?1`'s subscribers (`DISTINCT key` rows); PostgreSQL
    /// skips an `attrs` that is not a JSON object, where `json_each` would fail.
    pub attribute_names: &'static str,
    /// A statement the database refused ends the transaction (PostgreSQL: every later one
    /// fails until `ROLLBACK`); SQLite undoes that statement alone and the transaction goes
    /// on. An import that skips bad rows skips one the database refused only where it goes on.
    pub failed_statement_aborts: bool,

    // --- counters, plans ---
    /// The member counts of list `l` as three columns (subscribed, unsubscribed, pending):
    /// SQLite reads its `list_counts` counters (0015), PostgreSQL counts the memberships.
    pub list_member_counts: &'static str,
    /// A campaign's sends per state, `(status, n)` rows of campaign `?1` (no row for a state
    /// without sends): SQLite reads its counters (`campaign_counts`, 0014), PostgreSQL counts.
    pub status_counts: &'static str,
    /// How many sends of campaign `?1` are in state `?2`, when the store keeps that count
    /// (SQLite's counters); `None` on PostgreSQL, which keeps no counters.
    pub state_count: Option<&'static str>,
    /// How a report page finds its campaign's sends (`?1`): the statement's text after
    /// `FROM sends` up to its first condition, for a page narrowed by a prefix and/or a
    /// `state` that `in_state` sends are in (from the counters; 0 when unknown). SQLite names
    /// the index that reads fewest rows; PostgreSQL's planner picks its own.
    pub report_scan: fn(prefix: bool, state: Option<SendStatus>, in_state: i64) -> &'static str,
    /// How many rows a full report reads per query: `None` streams one statement (SQLite,
    /// rows read as the callback takes them); PostgreSQL reads pages by send id, because its
    /// client returns a query's rows all at once.
    pub report_batch: Option<i64>,
    /// Counts the sends in doubt through the partial index of in-doubt rows (SQLite is told
    /// which index; PostgreSQL's planner picks it).
    pub in_doubt_count: &'static str,
    /// The hint after `sends s` that makes SQLite read the rows in doubt through the partial
    /// index `sends_doubt` (` INDEXED BY sends_doubt`); nothing on PostgreSQL.
    pub sends_doubt_index: &'static str,
    /// After `FROM subscribers s` in list building: SQLite reads the chunk by rowid
    /// (` NOT INDEXED`).
    pub subscribers_by_id: &'static str,
    /// The statement that confirms a group's accepted outcomes at once, fenced on each lease
    /// token (`?1`: a JSON array of `{id, token, pid, note}`, `?2`: now), returning the ids it
    /// confirmed: one round trip instead of one per row on PostgreSQL. `None` on SQLite, where
    /// a statement costs no round trip: one per row.
    pub confirm_many: Option<&'static str>,

    // --- bench ---
    /// Inserts `sendonce bench`'s confirmed email subscribers `reader<i>@bench.example`, i from
    /// `?2` to `?3`, of account `?1` at time `?4`, each with a `city` attribute: counted by a
    /// recursive CTE on SQLite, by `generate_series` on PostgreSQL.
    pub seed_subscribers: &'static str,
    /// The events after a cursor (`?1` account, `?2` txid, `?3` id, `?4` limit), in the feed's
    /// order, that no running transaction can precede: txid, id, account_id, type, subject. On
    /// PostgreSQL only events of transactions older than the oldest one still running
    /// (`pg_snapshot_xmin`), whose events could otherwise appear behind a cursor; on SQLite
    /// (one writer, ids in commit order) no bound.
    pub events_scan: &'static str,
    /// The newest event an account's reader may see (`?1` account): txid, id.
    pub events_newest: &'static str,

    // --- erasure ---
    /// The statements that make the transaction's deletes and updates overwrite the old
    /// content with zeros, and that stop it again (SQLite's `secure_delete`, on around an
    /// erasure); `None` on PostgreSQL, whose old row versions stay until VACUUM.
    pub secure_delete: Option<(&'static str, &'static str)>,
}

/// Advisory lock keys (PostgreSQL's one-bigint key space; the migration lock lives elsewhere
/// in it, the webhook events' two-key locks in the other space).
pub(crate) const OPT_OUT_LOCK: i64 = 1 << 62;
pub(crate) const SUBSCRIBERS_LOCK: i64 = 1 << 61;
/// The advisory lock class of webhook events (the two-key form).
const WEBHOOK_EVENT_LOCK: i32 = 0x574B_4556; // "WKEV"

/// The locks and merges an operation asks for, written once over the dialect's statements: on
/// SQLite each is nothing (its one writer already orders every transaction) or SQLite's own.
impl Dialect {
    fn advisory(&self, tx: &mut dyn Tx, key: i64, shared: bool) -> Result<()> {
        if let Some((exclusive, share)) = self.advisory_lock {
            tx.exec(if shared { share } else { exclusive }, &args![key])?;
        }
        Ok(())
    }

    /// Order this transaction after every opt-out of the account (suppression, removal,
    /// unsubscribe, bounce) and every claim of it: PostgreSQL takes the account's opt-out lock
    /// exclusively (claims share it until their commit). Returns the time after the lock was
    /// granted (an opt-out is dated then).
    pub fn lock_opt_outs(&self, tx: &mut dyn Tx, account_id: i64) -> Result<i64> {
        self.advisory(tx, OPT_OUT_LOCK | account_id, false)?;
        Ok(sendonce_domain::clock::now_ms())
    }

    /// The time an opt-out made at `now` is dated: after taking the account's opt-out lock
    /// ([`Dialect::lock_opt_outs`]), no earlier than the time it was granted (so later than
    /// every claim that committed before it).
    pub fn opt_out_at(&self, tx: &mut dyn Tx, account_id: i64, now: i64) -> Result<i64> {
        Ok(now.max(self.lock_opt_outs(tx, account_id)?))
    }

    /// A claim shares the account's opt-out lock from before it reads its candidates to its
    /// commit ([`Dialect::lock_opt_outs`]).
    pub fn share_opt_outs(&self, tx: &mut dyn Tx, account_id: i64) -> Result<()> {
        self.advisory(tx, OPT_OUT_LOCK | account_id, true)
    }

    /// New subscribers and list building of one account in one order: identity ids are handed
    /// out before commit, so without this a list chunk could end past an id committed early
    /// and leave behind the lower ids of a slower import still in flight. Inserting
    /// subscribers shares the lock; a list chunk (`for_list`) takes it exclusively, so when it
    /// reads no insert is in flight.
    pub fn lock_subscribers(&self, tx: &mut dyn Tx, account_id: i64, for_list: bool) -> Result<()> {
        self.advisory(tx, SUBSCRIBERS_LOCK | account_id, !for_list)
    }

    /// Lock the campaign row before deciding it is finished, so that the decision reads after
    /// every transaction that holds it (a claim, a notification adding a recipient) committed.
    pub fn lock_campaign(&self, tx: &mut dyn Tx, campaign_id: i64) -> Result<()> {
        if let Some(sql) = self.lock_campaign {
            tx.exec(sql, &args![campaign_id])?;
        }
        Ok(())
    }

    /// Take the lock of one webhook event's key (account, source, event id) until commit, so
    /// that two deliveries of one event at once apply it once.
    pub fn lock_webhook_event(
        &self,
        tx: &mut dyn Tx,
        account_id: i64,
        source: &str,
        event_id: &str,
    ) -> Result<()> {
        if let Some(sql) = self.advisory_lock_text {
            let key = format!("{account_id}:{source}:{event_id}");
            tx.exec(sql, &args![WEBHOOK_EVENT_LOCK, &key])?;
        }
        Ok(())
    }

    /// SQLite's `json_patch(attrs, patch)` (RFC 7396 merge patch, key order kept), so that both
    /// stores keep the same bytes.
    pub fn json_patch(&self, tx: &mut dyn Tx, attrs: &str, patch: &str) -> Result<String> {
        match self.json_patch {
            Some(sql) => tx.scalar(sql, &args![attrs, patch]),
            None => crate::shared::json_patch(attrs, patch),
        }
    }
}

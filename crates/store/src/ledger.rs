//! The ledger, backend-neutral and written once: the rows the worker claims and the outcomes it
//! records, the `Ledger` trait, and its one implementation for every store over `sql::Tx`
//! (`impl<S: LedgerStore> Ledger for S`). The exactly-once rules live here: the lease (expiry
//! in `visible_at`), the fence token (`lease_token`) every outcome is written against, the
//! dispatch marker (`dispatched_at`), and the in-doubt rule (a row that may already have been
//! delivered is retried only with the same key inside the provider's key window, else parked
//! in doubt). What differs per backend is asked of the transaction's `Dialect` (PostgreSQL
//! reads the claim's candidates `FOR UPDATE OF s SKIP LOCKED` under the account's shared
//! opt-out lock; SQLite's `BEGIN IMMEDIATE` already excludes every other writer) and of
//! [`LedgerStore`] (how a claim is counted: SQLite's clone guard, PostgreSQL's sequence).

use crate::shared::{get_at, BodyFormat};
use crate::sql::{args, Db, Dialect, Row, Tx};
use sendonce_domain::address::Channel;
use sendonce_domain::attachment::Attachment;
use sendonce_domain::crash;
use sendonce_domain::error::{Error, Result};
use sendonce_domain::model::{
    CampaignStatus, SendStatus, CAMPAIGN_JOB_AT, CAMPAIGN_JOB_PREFIX, CAMPAIGN_JOB_SUB, EPOCH_MARK,
    INSTALLATION_SCOPE_LEN,
};
use sendonce_domain::segment::Filter;
use sendonce_domain::window::{Planner, Policy};
use std::sync::OnceLock;

/// A campaign the worker may claim from (status `sending`), with its frozen content.
#[derive(Debug, Clone)]
pub struct ActiveCampaign {
    pub id: i64,
    pub account_id: i64,
    /// For routing by account name in the config file.
    pub account_name: String,
    pub channel: Channel,
    pub sender: Option<String>,
    pub subject: Option<String>,
    /// The text template; empty when the text part is generated from `html`.
    pub body: String,
    pub html: Option<String>,
    pub reply_to: Option<String>,
    pub sms_footer: Option<String>,
    /// The campaign's name and the names of the lists it targets (template variables).
    pub name: String,
    pub list_names: Vec<String>,
    /// The ids of the lists it targets (empty: the whole account); sealed into unsubscribe links.
    pub list_ids: Vec<i64>,
    /// False: subject and body are literal text, not templates (one-off notifications).
    pub templated: bool,
    /// Marked transactional, or a one-off message (API, notify): its email carries no
    /// List-Unsubscribe, and the worker sends it without a public URL.
    pub transactional: bool,
    /// False while the recipient list is still being built.
    pub list_complete: bool,
    /// An account's stream of transactional messages (`schema/0020_stream.sql`): each row
    /// carries its own content ([`ClaimedRow::content`]), and it never completes.
    pub stream: bool,
    /// It has a send window or SMS quiet hours: rows may wait hours for them.
    pub windowed: bool,
}

/// What one claim asks for.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    pub campaign_id: i64,
    pub account_id: i64,
    pub channel: Channel,
    pub batch: usize,
    /// Lease length: the row is ours until `now + lease_ms`.
    pub lease_ms: i64,
    /// The fence token written on every row of this claim.
    pub token: i64,
    pub owner: String,
    /// The provider's idempotency-key window, if it has one. A row that may already have been
    /// delivered is retried only inside this window (with the same key); otherwise it goes
    /// `in_doubt`.
    pub key_window_ms: Option<i64>,
    pub now: i64,
}

/// What one claim writes on every row it leases (both stores).
pub(crate) struct LeaseTerms {
    /// Taken once the claim is ordered against opt-outs (SQLite: the write lock; PostgreSQL:
    /// the account's opt-out lock, shared from before the candidates are read to the commit): a
    /// suppression whose created_at is earlier committed before this claim (the crash-suite
    /// checker relies on it). It marks the claim that started the current delivery chain: a
    /// same-key retry of a row that may have been delivered keeps the first one.
    pub(crate) claimed_at: i64,
    /// The lease runs from now, not from `req.now`: waiting for the write lock (or for the
    /// rows' locks) must not eat into the time a call has before its lease expires.
    pub(crate) until: i64,
    /// The dispatch marker, when the caller is about to call every row: dispatched now and
    /// attempts + 1 (NULL and 0 otherwise).
    pub(crate) dispatched_at: Option<i64>,
    pub(crate) increment: i64,
}

impl LeaseTerms {
    pub(crate) fn now(req: &ClaimRequest, dispatch: bool) -> Self {
        let claimed_at = sendonce_domain::clock::now_ms();
        LeaseTerms {
            claimed_at,
            until: claimed_at + req.lease_ms,
            dispatched_at: dispatch.then_some(claimed_at),
            increment: i64::from(dispatch),
        }
    }
}

/// What the claim does with one due row.
pub(crate) enum Decision {
    /// It may already have been delivered and a retry is not safe: park it in doubt.
    InDoubt { since: i64 },
    /// Its address is suppressed.
    Suppress,
    /// It may already have been delivered; the provider's key window still covers a retry with
    /// the same key.
    SameKeyRetry { since: i64 },
    /// Nothing special (nearly every row).
    Lease,
}

/// The per-row decision of a claim (both stores), from when the row may already have been
/// delivered (`maybe_since`: its `doubt_since`, or the dispatch of an expired lease; `None` for
/// a row never dispatched) and whether its address is suppressed. A row that may already have
/// been delivered is retried only by an idempotent provider, still inside its key window.
pub(crate) fn decide(maybe_since: Option<i64>, suppressed: bool, req: &ClaimRequest) -> Decision {
    match maybe_since {
        Some(since) => {
            if sendonce_domain::retry::same_key_retry_safe(since, req.now, req.key_window_ms) {
                Decision::SameKeyRetry { since }
            } else {
                Decision::InDoubt { since }
            }
        }
        None if suppressed => Decision::Suppress,
        None => Decision::Lease,
    }
}

/// A row this worker now holds.
#[derive(Debug, Clone)]
pub struct ClaimedRow {
    pub id: i64,
    pub job_id: String,
    pub address: String,
    /// Captured template variables (JSON text).
    pub vars: String,
    /// Provider calls dispatched before this claim.
    pub attempts: i64,
    pub token: i64,
    /// An earlier call may have delivered it: this is a retry with the same key.
    pub maybe_delivered: bool,
    /// A stream row's own content (`None` for a campaign's row, which has its campaign's).
    pub content: Option<MessageContent>,
    /// A stream row's message id (its content's and files' key).
    pub message_id: Option<i64>,
}

/// The content of one stream message, as stored when it was queued: literal text, or (a double
/// opt-in confirmation) templates rendered with the row's captured variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageContent {
    pub from: Option<String>,
    pub reply_to: Option<String>,
    pub subject: Option<String>,
    /// The text; empty when it is generated from `html`.
    pub text: String,
    pub html: Option<String>,
    /// The subject and text are templates, rendered per row with its variables.
    pub templated: bool,
    /// Its attachments, in the order the request gave them (read after the claim's commit).
    pub attachments: Vec<Attachment>,
}

/// The result of one claim transaction.
#[derive(Debug, Default)]
pub struct Claimed {
    pub rows: Vec<ClaimedRow>,
    /// Rows moved to `suppressed` because their address was suppressed before this claim.
    pub suppressed: u64,
    /// Rows moved to `in_doubt`: dispatched by a worker whose lease expired, provider not
    /// idempotent (or the key window has passed).
    pub in_doubt: u64,
    /// Rows that may already have been delivered, settled (sent or failed) by a delivery
    /// report a provider webhook had sent while they were still leased.
    pub settled_by_webhook: u64,
    /// Rows left for later because their recipient's send window (or SMS quiet hours) is
    /// closed: made visible again when it opens (`domain::window`).
    pub held: u64,
    /// The earliest time a window of a held row opens.
    pub held_until: Option<i64>,
}

/// How one provider call ended, as the ledger records it. The worker decides (backoff, key
/// window, attempt limit); the store applies.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The provider accepted the message.
    Accepted {
        provider_id: Option<String>,
        note: Option<String>,
    },
    /// It will never be accepted; with `suppress`, the address is added to the suppression list.
    Failed {
        error: String,
        suppress: Option<String>,
    },
    /// Definitely not sent (or an ambiguous outcome that is safe to retry with the same key):
    /// back to `queued`, ready at `retry_at`.
    Retry {
        error: String,
        retry_at: i64,
        maybe_delivered: bool,
    },
    /// The outcome is unknown and cannot be retried safely.
    InDoubt { error: String },
}

/// One outcome for one leased row.
#[derive(Debug, Clone)]
pub struct Record {
    pub id: i64,
    pub token: i64,
    pub outcome: Outcome,
}

#[derive(Debug, Default, Clone, Copy)]
pub struct RecordStats {
    pub sent: u64,
    pub failed: u64,
    pub retried: u64,
    pub in_doubt: u64,
    /// Accepted after our lease was lost: recorded as sent anyway (never dropped).
    pub late_confirmations: u64,
    /// Non-accepted outcomes whose lease was lost: the row's new holder decides.
    pub fenced_out: u64,
    /// Acceptances without a provider id: the provider reported the key as already used
    /// (for a key API, "same key, different payload"). Recorded as sent, never resent.
    pub already_accepted: u64,
    /// Acceptances of a row already `sent` (a replayed key; or another provider id, noted on
    /// the row as a possible second delivery).
    pub double_confirmations: u64,
}

/// What the worker needs from a ledger. A second backend implements this without touching the
/// worker.
pub trait Ledger: Send + Sync + 'static {
    /// Compare-and-set `approved -> sending` for every campaign due at `now`.
    fn start_due_campaigns(&self, now: i64) -> Result<Vec<i64>>;
    /// Campaigns in `sending`, with their content.
    fn active_campaigns(&self) -> Result<Vec<ActiveCampaign>>;
    /// Add the next `chunk` subscribers to the list; returns true when the list is complete.
    fn build_list_chunk(&self, campaign_id: i64, chunk: usize) -> Result<bool>;
    /// Lease up to `batch` due rows, moving suppressed and unrecoverable ones aside.
    fn claim(&self, req: &ClaimRequest) -> Result<Claimed>;
    /// Write the dispatch marker (and renew the lease) for rows about to be called. Returns the
    /// ids still held: a row whose lease was lost must not be called.
    fn mark_dispatched(&self, rows: &[(i64, i64)], now: i64, lease_ms: i64) -> Result<Vec<i64>>;
    /// Record a group of outcomes in one commit.
    fn record(&self, records: &[Record], now: i64) -> Result<RecordStats>;
    /// One commit per worker cycle: record the outcomes of finished calls and run `claims`
    /// (one per campaign or stream with free call slots, in the order given), whose rows all
    /// get their dispatch marker in the lease statement; together they lease at most `budget`
    /// rows (the worker's free call slots). Claims with the same `pool_of` entry share their
    /// `batch` (a route's slots and tokens): all of them lease at most that many. Returns one
    /// [`Claimed`] per request, in order.
    fn cycle(
        &self,
        records: &[Record],
        claims: &[ClaimRequest],
        pool_of: &[usize],
        budget: usize,
        now: i64,
    ) -> Result<(RecordStats, Vec<Claimed>)>;
    /// Keep the WAL file bounded: checkpoint and truncate it when it has grown past the
    /// store's limit (readers that hold old snapshots stop the automatic checkpoints from
    /// resetting it). Returns true if a checkpoint ran. Default: nothing to do.
    fn checkpoint_if_large(&self) -> Result<bool> {
        Ok(false)
    }
    /// Give back leased rows that were never dispatched.
    fn release(&self, rows: &[(i64, i64)], now: i64) -> Result<u64>;
    /// Mark the campaign `sent` if the ledger says it is finished.
    fn try_complete(&self, campaign_id: i64, now: i64) -> Result<bool>;
    /// The earliest time a row of this campaign becomes claimable, if any row can.
    fn next_visible(&self, campaign_id: i64) -> Result<Option<i64>>;
    /// Settle expired leases of cancelled campaigns (dispatched: in doubt; else cancelled).
    fn sweep_cancelled(&self, now: i64) -> Result<u64>;
    /// Rows in doubt since before `before`, to look up at the provider: (id, job id, address).
    fn reconcilable(
        &self,
        campaign_id: i64,
        before: i64,
        limit: usize,
    ) -> Result<Vec<(i64, String, String)>>;
    /// The provider answered for a row in doubt: `Some(id)` it has the message (sent), `None`
    /// it never accepted it (queued again). Returns false if the row was no longer in doubt.
    fn settle_doubt(&self, send_id: i64, found: Option<String>) -> Result<bool>;
}

/// An acceptance for a row that is already `sent` (`stored`: the row's provider id, `None` when
/// the row does not exist). The same provider id (a replay of the same key) or none (the
/// provider said "already accepted") is a benign repeat. A different id can happen with an
/// intact database (an operator requeued a row in doubt and it was sent again before the first
/// call's late "yes" arrived; a provider that gives a replay a new id): it is not damage, but it
/// may mean two deliveries, so the row's reason says so (the returned note) and the run counts
/// it. A row that does not exist at all means the database is damaged. Both backends decide
/// here; they only read the row and write the note.
pub(crate) fn confirmed_again(
    id: i64,
    ours: Option<&str>,
    stored: Option<Option<String>>,
) -> Result<Option<String>> {
    let Some(stored) = stored else {
        return Err(sendonce_domain::error::Error::damaged(format!(
            "a provider accepted send {id}, which is not in the ledger"
        )));
    };
    match (ours, stored.as_deref()) {
        (Some(ours), Some(theirs)) if ours != theirs => {
            tracing::warn!(
                send_id = id,
                first = theirs,
                second = ours,
                "a sent row was confirmed again with another provider id: it may have been \
                 delivered twice"
            );
            Ok(Some(format!(
                "confirmed again with another provider id ({ours}): it may have been delivered \
                 twice"
            )))
        }
        _ => {
            tracing::warn!(
                send_id = id,
                "a second confirmation of a sent row (same key)"
            );
            Ok(None)
        }
    }
}

/// What a store does around the ledger that the other does not (implemented in
/// `sqlite/ledger.rs` and `postgres/ledger.rs`): everything else is [`Ledger`] written once.
pub trait LedgerStore: Db {
    /// Inside a claim that leased rows, before its commit: count it. SQLite raises the clone
    /// guard's generation (refusing a copy, a moved file, or a file gone back in time under
    /// this process); PostgreSQL draws from the `claim_generation` sequence (one row every
    /// claim updated would serialize every worker of every host on its lock).
    fn count_claim(&self, tx: &mut dyn Tx, claimed_at: i64) -> Result<Option<i64>>;
    /// After the claim committed: the guard's watermark follows its generation (SQLite).
    fn claim_committed(&self, generation: Option<i64>, now: i64) -> Result<()>;
    /// [`Ledger::checkpoint_if_large`].
    fn checkpoint_wal_if_large(&self) -> Result<bool>;
}

impl<S: LedgerStore> Ledger for S {
    fn start_due_campaigns(&self, now: i64) -> Result<Vec<i64>> {
        self.write(|tx| {
            let ids = tx.query(START_DUE_CAMPAIGNS, &args![now], |r| r.get(0))?;
            if !ids.is_empty() {
                crash::point("campaign_cas");
            }
            Ok(ids)
        })
    }

    fn active_campaigns(&self) -> Result<Vec<ActiveCampaign>> {
        self.read(|tx| {
            let sql = ACTIVE_CAMPAIGNS.get(tx.dialect());
            tx.query(sql, &[], active_campaign)
        })
    }

    fn build_list_chunk(&self, campaign_id: i64, chunk: usize) -> Result<bool> {
        let done = self.write(|tx| list_chunk(tx, campaign_id, chunk))?;
        crash::point("list_build_committed");
        Ok(done)
    }

    fn claim(&self, req: &ClaimRequest) -> Result<Claimed> {
        let one = std::slice::from_ref(req);
        let (mut all, generation) =
            self.write(|tx| claims_tx(self, tx, (one, &[0]), req.batch, false))?;
        let mut out = all.pop().unwrap_or_default();
        self.claim_committed(generation, req.now)?;
        attach_files(self, &mut out.rows)?;
        if !out.rows.is_empty() {
            crash::point("after_claim_commit");
        }
        Ok(out)
    }

    /// One transaction: the outcomes, then every claim of the turn, whose rows get their
    /// dispatch marker in the lease statement itself.
    fn cycle(
        &self,
        records: &[Record],
        claims: &[ClaimRequest],
        pool_of: &[usize],
        budget: usize,
        now: i64,
    ) -> Result<(RecordStats, Vec<Claimed>)> {
        if records.is_empty() && claims.is_empty() {
            return Ok((RecordStats::default(), Vec::new()));
        }
        let both = self.write(|tx| {
            let stats = record_tx(tx, records, now)?;
            let got = claims_tx(self, tx, (claims, pool_of), budget, true)?;
            Ok((stats, got))
        });
        let (stats, (mut got, generation)) = match both {
            Ok(x) => x,
            // The claim found damage (or the guard refused it) and rolled everything back: the
            // outcomes of calls that did finish are still the truth, so they are committed on
            // their own first.
            Err(e) if e.stops_worker() && !records.is_empty() => {
                self.write(|tx| record_tx(tx, records, now))?;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        self.claim_committed(generation, now)?;
        for claimed in &mut got {
            attach_files(self, &mut claimed.rows)?;
        }
        if !records.is_empty() {
            crash::point("after_confirm_commit");
        }
        if got.iter().any(|c| !c.rows.is_empty()) {
            crash::point("after_claim_commit");
            crash::point("after_dispatch_mark");
        }
        Ok((stats, got))
    }

    fn checkpoint_if_large(&self) -> Result<bool> {
        self.checkpoint_wal_if_large()
    }

    fn mark_dispatched(&self, rows: &[(i64, i64)], now: i64, lease_ms: i64) -> Result<Vec<i64>> {
        let held = self.write(|tx| mark_tx(tx, rows, now, lease_ms))?;
        crash::point("after_dispatch_mark");
        Ok(held)
    }

    fn record(&self, records: &[Record], now: i64) -> Result<RecordStats> {
        let stats = self.write(|tx| record_tx(tx, records, now))?;
        crash::point("after_confirm_commit");
        Ok(stats)
    }

    fn release(&self, rows: &[(i64, i64)], now: i64) -> Result<u64> {
        self.write(|tx| {
            let mut n = 0;
            for &(id, token) in rows {
                n += tx.exec(RELEASE, &args![id, token, now])?;
            }
            Ok(n)
        })
    }

    fn try_complete(&self, campaign_id: i64, now: i64) -> Result<bool> {
        self.write(|tx| complete_if_done(tx, campaign_id, now))
    }

    fn next_visible(&self, campaign_id: i64) -> Result<Option<i64>> {
        self.read(|tx| tx.scalar(NEXT_VISIBLE, &args![campaign_id]))
    }

    fn reconcilable(
        &self,
        campaign_id: i64,
        before: i64,
        limit: usize,
    ) -> Result<Vec<(i64, String, String)>> {
        self.read(|tx| {
            tx.query(
                RECONCILABLE,
                &args![campaign_id, before, limit as i64],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
        })
    }

    fn settle_doubt(&self, send_id: i64, found: Option<String>) -> Result<bool> {
        let now = sendonce_domain::clock::now_ms();
        self.write(|tx| {
            settle_doubt_tx(
                tx,
                send_id,
                found.as_deref(),
                found.is_some(),
                now,
                "provider lookup",
            )
        })
    }

    fn sweep_cancelled(&self, now: i64) -> Result<u64> {
        self.write(|tx| {
            let ids: Vec<i64> = tx.query(CANCELLED_CAMPAIGNS, &[], |r| r.get(0))?;
            if ids.is_empty() {
                return Ok(0);
            }
            let sql = SWEEP_CANCELLED.get(tx.dialect());
            tx.exec(sql, &args![now, json_ids(&ids).as_str()])
        })
    }
}

/// A statement whose text takes fragments of the dialect: built once per dialect, then the
/// same text on every call (the prepared-statement caches key on it).
pub(crate) struct PerDialect {
    cells: [OnceLock<String>; 2],
    build: fn(&Dialect) -> String,
}

impl PerDialect {
    const fn new(build: fn(&Dialect) -> String) -> Self {
        PerDialect {
            cells: [OnceLock::new(), OnceLock::new()],
            build,
        }
    }

    /// The statement's text in dialect `d`.
    pub(crate) fn get(&'static self, d: &Dialect) -> &'static str {
        let cell = &self.cells[usize::from(d.name != "sqlite")];
        cell.get_or_init(|| (self.build)(d))
    }
}

/// `ids` as a JSON array (bound for [`Dialect::in_json_ids`]).
fn json_ids(ids: &[i64]) -> String {
    let mut json = String::with_capacity(ids.len() * 8 + 2);
    json.push('[');
    for (i, id) in ids.iter().enumerate() {
        if i > 0 {
            json.push(',');
        }
        json.push_str(&id.to_string());
    }
    json.push(']');
    json
}

/// A campaign in `sending` as [`ACTIVE_CAMPAIGNS`] reads it.
fn active_campaign(r: Row<'_>) -> Result<ActiveCampaign> {
    let format: BodyFormat = r.get(9)?;
    let (body, html) = format.load(r.get(5)?, r.get(10)?);
    let lists: Option<String> = r.get(14)?;
    let mut list_names: Vec<String> = lists
        .map(|l| serde_json::from_str(&l).unwrap_or_default())
        .unwrap_or_default();
    list_names.sort();
    let ids: Option<String> = r.get(15)?;
    let list_ids: Vec<i64> = ids
        .map(|l| serde_json::from_str(&l).unwrap_or_default())
        .unwrap_or_default();
    Ok(ActiveCampaign {
        id: r.get(0)?,
        account_id: r.get(1)?,
        channel: get_at(r, 2, "campaigns.channel")?,
        sender: r.get(3)?,
        subject: r.get(4)?,
        body,
        html,
        reply_to: r.get(11)?,
        sms_footer: r.get(12)?,
        name: r.get(13)?,
        list_names,
        list_ids,
        templated: r.get(7)?,
        transactional: r.get(16)?,
        account_name: r.get(8)?,
        list_complete: r.get(6)?,
        stream: r.get(17)?,
        windowed: r.get(18)?,
    })
}

/// What list building reads of its campaign ([`LIST_CAMPAIGN`]).
struct ListCampaign {
    account_id: i64,
    channel: Channel,
    cursor: i64,
    complete: bool,
    status: CampaignStatus,
    /// It targets lists (else the whole account).
    targeted: bool,
    /// The audience filter as stored.
    filter: Option<String>,
}

/// One chunk of the recipient list. On PostgreSQL the campaign row is locked first (builders
/// on several hosts take turns, the cursor only moves forward) and the account's subscribers
/// lock is taken exclusively (no insert of lower ids is still in flight).
fn list_chunk(tx: &mut dyn Tx, campaign_id: i64, chunk: usize) -> Result<bool> {
    let d = tx.dialect();
    let row = tx.query_opt(LIST_CAMPAIGN.get(d), &args![campaign_id], |r| {
        Ok(ListCampaign {
            account_id: r.get(0)?,
            channel: get_at(r, 1, "campaigns.channel")?,
            cursor: r.get(2)?,
            complete: r.get(3)?,
            status: get_at(r, 4, "campaigns.status")?,
            targeted: r.get(5)?,
            filter: r.get(6)?,
        })
    })?;
    let Some(c) = row else {
        return Ok(true);
    };
    if c.complete || c.status != CampaignStatus::Sending {
        return Ok(true);
    }
    d.lock_subscribers(tx, c.account_id, true)?;
    // A filter that no longer parses is damage: never build the list without it.
    let filter = c
        .filter
        .as_deref()
        .map(|f| Filter::parse_stored(f, campaign_id))
        .transpose()?;
    // The last subscriber id of this chunk (over all of the account's subscribers, so the
    // cursor always moves forward).
    let (chunk_end, n): (Option<i64>, i64) = tx
        .query_opt(
            LIST_CHUNK_END,
            &args![c.account_id, c.cursor, chunk as i64],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?
        .unwrap_or((None, 0));
    if let Some(end) = chunk_end {
        insert_chunk(tx, campaign_id, &c, filter.as_ref(), end)?;
        crash::point("list_build");
    }
    let complete = (n as usize) < chunk;
    tx.exec(
        LIST_ADVANCE_CURSOR,
        &args![campaign_id, chunk_end, complete],
    )?;
    Ok(complete)
}

/// Insert the recipients among subscribers `c.cursor < id <= end`. One row per normalised
/// address (UNIQUE (campaign_id, address)); re-running a chunk after a crash inserts nothing
/// twice (ON CONFLICT DO NOTHING). The statement is cached by its text, which depends on the
/// filter's shape only (its values are bound after the statement's own, from `?7`).
fn insert_chunk(
    tx: &mut dyn Tx,
    campaign_id: i64,
    c: &ListCampaign,
    filter: Option<&Filter>,
    end: i64,
) -> Result<()> {
    let d = tx.dialect();
    let now = sendonce_domain::clock::now_ms();
    let compiled = filter.map(|f| crate::segment::compile(d, Some(f), 7));
    let sql = list_insert_sql(
        d,
        c.channel,
        c.targeted,
        compiled.as_ref().map(|f| f.sql.as_str()),
    );
    let fixed = args![campaign_id, c.account_id, c.cursor, now, end, c.channel];
    let all = match &compiled {
        Some(f) => f.with(&fixed),
        None => fixed.to_vec(),
    };
    tx.exec(&sql, &all)?;
    Ok(())
}

/// The list-building INSERT for a channel (the address column differs): `?1` campaign, `?2`
/// account, `?3` cursor, `?4` now, `?5` end, `?6` channel; `filter`, the compiled audience
/// filter (a condition on `s` whose values are all bound, `store/segment.rs`), from `?7`. An
/// address already suppressed gets its row too, as `suppressed` with the reason, so that status
/// and report account for everyone the campaign considered. The job id is built from the same
/// constants as [`sendonce_domain::model::campaign_job_id`].
/// With `targeted`, only subscribers with a `subscribed` membership in at least one of the
/// campaign's lists (`campaign_lists`); otherwise every confirmed subscriber of the account (a
/// subscriber that arrived through double opt-in lists only is `pending` until it confirms).
/// The memberships are read as one key range per targeted list over the chunk's ids (a set
/// SQLite builds once per chunk; the subscribers are then read by id, in order), not probed
/// list by list for every subscriber: with three lists overlapping by a third that took the
/// targeted build from about 1.15-1.25x to 1.06-1.14x the account-wide time per row (`sendonce
/// bench --only list-build`; the set costs one insert per membership), and a small list in a
/// large account reads only its members.
pub(crate) fn list_insert_sql(
    d: &Dialect,
    channel: Channel,
    targeted: bool,
    filter: Option<&str>,
) -> String {
    let addr = match channel {
        Channel::Sms => "s.phone",
        Channel::Email => "s.email_norm",
    };
    let in_lists = if targeted {
        "AND s.id IN (SELECT m.subscriber_id FROM campaign_lists cl
                        JOIN list_members m ON m.list_id = cl.list_id
                        WHERE cl.campaign_id = CAST(?1 AS BIGINT) AND m.status = 'subscribed'
                          AND m.subscriber_id > CAST(?3 AS BIGINT)
                          AND m.subscriber_id <= CAST(?5 AS BIGINT))"
    } else {
        ""
    };
    let filter = filter.map_or(String::new(), |f| format!("AND {f}"));
    // The scope: the installation, then `~L` for a campaign or subscriber made after an adopt
    // that found the file gone back (L: that adopt's label; `model::key_scope`).
    let job_id = format!(
        "{} || CAST(?1 AS BIGINT) || {} || s.id || {}
                || (SELECT substr(id, 1, {INSTALLATION_SCOPE_LEN}) FROM installation
                    WHERE singleton = 1)
                || coalesce({} || (SELECT max(e.label) FROM guard_epochs e
                    WHERE e.campaigns_through < CAST(?1 AS BIGINT)
                       OR e.subscribers_through < s.id), '')",
        sql_text(CAMPAIGN_JOB_PREFIX),
        sql_text(CAMPAIGN_JOB_SUB),
        sql_text(CAMPAIGN_JOB_AT),
        sql_text(EPOCH_MARK)
    );
    let (vars, by_id) = (d.captured_vars, d.subscribers_by_id);
    format!(
        "INSERT INTO sends (account_id, campaign_id, subscriber_id, job_id, address,
                            vars, status, last_error, doubt_since, visible_at, created_at,
                            updated_at)
         SELECT s.account_id, CAST(?1 AS BIGINT), s.id, {job_id}, {addr}, {vars},
                CASE WHEN su.address IS NULL THEN 'queued' ELSE 'suppressed' END,
                CASE WHEN su.address IS NULL THEN NULL
                     ELSE 'address suppressed before the list was built' END,
                CASE WHEN su.address IS NULL THEN {REPLAY_SINCE} END,
                CAST(?4 AS BIGINT), CAST(?4 AS BIGINT), CAST(?4 AS BIGINT)
         FROM subscribers s{by_id}
         LEFT JOIN suppressions su ON su.account_id = s.account_id
                                  AND su.channel = CAST(?6 AS TEXT) AND su.address = {addr}
         WHERE s.account_id = CAST(?2 AS BIGINT) AND s.id > CAST(?3 AS BIGINT)
           AND s.id <= CAST(?5 AS BIGINT)
           AND s.status = 'confirmed' AND {addr} IS NOT NULL {in_lists} {filter}
         ORDER BY s.id
         ON CONFLICT DO NOTHING"
    )
}

/// A row that list building adds to a campaign that existed when `adopt` found the file gone
/// back in time may have been sent by the lost timeline: it starts as possibly delivered
/// (`schema/0011_guard.sql`). NULL for every other campaign.
const REPLAY_SINCE: &str = "(SELECT g.replay_since FROM guard g
     WHERE g.singleton = 1 AND CAST(?1 AS BIGINT) <= g.replay_through)";

/// A SQL string literal.
fn sql_text(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// A due row the claim read (and, on PostgreSQL, locked), before it decides what to do with it.
struct Candidate {
    id: i64,
    job_id: String,
    address: String,
    vars: String,
    attempts: i64,
    /// Earliest dispatch that may have delivered (expired lease or earlier doubt).
    maybe_since: Option<i64>,
    suppressed: bool,
    /// A stream row's content ([`MessageContent`]).
    message_id: Option<i64>,
}

/// The due rows of one claim: one range scan of the partial index `sends_claim` (on
/// PostgreSQL locked `SKIP LOCKED`, under the account's opt-out lock shared until the commit:
/// [`Dialect::lock_opt_outs`]). The partial index lets SQLite skip re-reading the status: a
/// row whose status was damaged while its index entry stayed would come back here. Damage
/// never turns into sending: the status is read from the row and checked.
fn claim_candidates(tx: &mut dyn Tx, req: &ClaimRequest) -> Result<Vec<Candidate>> {
    let d = tx.dialect();
    d.share_opt_outs(tx, req.account_id)?;
    let mut cands = Vec::with_capacity(req.batch);
    let a = args![
        req.campaign_id,
        req.account_id,
        req.channel,
        req.now,
        req.batch as i64
    ];
    tx.each(CLAIM_CANDIDATES.get(d), &a, &mut |r| {
        let status: SendStatus = r.get(7)?;
        if !matches!(status, SendStatus::Queued | SendStatus::Leased) {
            return Err(Error::damaged(format!(
                "send {} of campaign {} is in the claim index with status {:?}",
                r.get::<i64>(0)?,
                req.campaign_id,
                status.as_str()
            )));
        }
        cands.push(Candidate {
            id: r.get(0)?,
            job_id: r.get(1)?,
            address: r.get(2)?,
            vars: r.get(3)?,
            attempts: r.get(4)?,
            maybe_since: r.get(5)?,
            suppressed: r.get(6)?,
            message_id: r.get(8)?,
        });
        Ok(())
    })?;
    Ok(cands)
}

/// What a claim needs of its campaign (this account's) when it is still `sending`: whether
/// it is a stream, and its send windows (a stream has none).
fn sending_campaign(tx: &mut dyn Tx, req: &ClaimRequest) -> Result<Option<(bool, Option<Policy>)>> {
    let sql = CLAIM_CAMPAIGN_STATUS.get(tx.dialect());
    let found = tx.query_opt(sql, &args![req.campaign_id, req.account_id], |r| {
        let columns: [Option<String>; 3] = [r.get(2)?, r.get(3)?, r.get(4)?];
        Ok((r.get::<CampaignStatus>(0)?, r.get::<bool>(1)?, columns))
    })?;
    let Some((CampaignStatus::Sending, stream, [tz, window, sms_hours])) = found else {
        return Ok(None);
    };
    let sms = req.channel == Channel::Sms;
    let policy = Policy::from_columns(window.as_deref(), sms_hours.as_deref(), tz.as_deref(), sms)
        .map_err(|e| {
            Error::damaged(format!(
                "campaign {}'s send window no longer reads: {}",
                req.campaign_id, e.message
            ))
        })?;
    Ok(Some((stream, policy)))
}

/// The rows a claim settles without leasing them: settled by a delivery report that came
/// while they were leased, parked in doubt, or suppressed. True when `c` was one of them.
fn settle_or_park(
    tx: &mut dyn Tx,
    c: &Candidate,
    decision: &Decision,
    req: &ClaimRequest,
    out: &mut Claimed,
) -> Result<bool> {
    match *decision {
        Decision::InDoubt { .. } | Decision::SameKeyRetry { .. }
            if settled_by_callback(tx, c, req)? =>
        {
            out.settled_by_webhook += 1;
        }
        Decision::InDoubt { since } => {
            let n = tx.exec(CLAIM_PARK_IN_DOUBT, &args![c.id, since, req.now])?;
            expect_one(n, c.id, "park in doubt")?;
            out.in_doubt += 1;
        }
        Decision::Suppress => {
            let n = tx.exec(CLAIM_SUPPRESS, &args![c.id, req.now])?;
            expect_one(n, c.id, "suppress")?;
            out.suppressed += 1;
        }
        Decision::SameKeyRetry { .. } | Decision::Lease => return Ok(false),
    }
    Ok(true)
}

/// Leave a due row for when its send window opens: queued, visible again at `at`
/// ([`CLAIM_HOLD`]).
fn hold(tx: &mut dyn Tx, c: &Candidate, at: i64, now: i64, out: &mut Claimed) -> Result<()> {
    let n = tx.exec(CLAIM_HOLD, &args![c.id, at, now])?;
    expect_one(n, c.id, "hold for its send window")?;
    out.held += 1;
    out.held_until = Some(out.held_until.map_or(at, |h| h.min(at)));
    Ok(())
}

/// A stream's rows carry their content and a campaign's rows do not: a row that breaks this
/// would be sent with the wrong content, so the file is damaged.
fn check_content(c: &Candidate, stream: bool, req: &ClaimRequest) -> Result<()> {
    if c.message_id.is_some() == stream {
        return Ok(());
    }
    Err(Error::damaged(format!(
        "send {} of campaign {} {}",
        c.id,
        req.campaign_id,
        match stream {
            true => "is in a stream but has no content of its own",
            false => "names message content but its campaign is no stream",
        }
    )))
}

/// Lease one row that may already have been delivered (same-key retry): it keeps its
/// `doubt_since` and the first `claimed_at` of its delivery chain.
fn lease_one(
    tx: &mut dyn Tx,
    id: i64,
    since: i64,
    req: &ClaimRequest,
    terms: &LeaseTerms,
) -> Result<()> {
    let n = tx.exec(
        CLAIM_LEASE_ONE,
        &args![
            id,
            req.token,
            &req.owner,
            terms.until,
            terms.dispatched_at,
            terms.increment,
            since,
            req.now,
            terms.claimed_at
        ],
    )?;
    expect_one(n, id, "lease")
}

/// Lease the plain rows (nearly all of them) by one statement over a JSON array of their ids:
/// the same row writes as one UPDATE per row, without the per-statement overhead.
fn lease_many(tx: &mut dyn Tx, ids: &[i64], req: &ClaimRequest, terms: &LeaseTerms) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let json = json_ids(ids);
    let n = tx.exec(
        CLAIM_LEASE_MANY.get(tx.dialect()),
        &args![
            json.as_str(),
            req.token,
            &req.owner,
            terms.until,
            terms.dispatched_at,
            terms.increment,
            req.now,
            terms.claimed_at
        ],
    )?;
    if n != ids.len() as u64 {
        return Err(Error::damaged(format!(
            "the claim of campaign {} leased {n} rows instead of {}",
            req.campaign_id,
            ids.len()
        )));
    }
    Ok(())
}

/// Claims in one transaction, in order, together at most `budget` rows and the claims of one
/// pool (`pool_of`, parallel to `claims`) at most the `batch` of its first (with their dispatch
/// marker when `dispatch`). A transaction that leased rows is counted once (SQLite: the clone
/// guard is checked, the watermark follows the commit).
fn claims_tx<S: LedgerStore + ?Sized>(
    store: &S,
    tx: &mut dyn Tx,
    (claims, pool_of): (&[ClaimRequest], &[usize]),
    budget: usize,
    dispatch: bool,
) -> Result<(Vec<Claimed>, Option<i64>)> {
    let (mut left, mut first) = (budget, None);
    let mut pools: std::collections::HashMap<usize, usize> = Default::default();
    let mut out = Vec::with_capacity(claims.len());
    for (i, req) in claims.iter().enumerate() {
        let pool = pools
            .entry(pool_of.get(i).copied().unwrap_or(i))
            .or_insert(req.batch);
        let sized = ClaimRequest {
            batch: req.batch.min(left).min(*pool),
            ..req.clone()
        };
        let (got, at) = match sized.batch {
            0 => (Claimed::default(), None),
            _ => claim_rows(tx, &sized, dispatch)?,
        };
        *pool -= got.rows.len().min(*pool);
        left -= got.rows.len().min(left);
        first = first.or(at);
        out.push(got);
    }
    let generation = match first {
        Some(at) => store.count_claim(tx, at)?,
        None => None,
    };
    crash::point("before_claim_commit");
    Ok((out, generation))
}

/// One campaign's (or stream's) claim inside the caller's transaction: the leased rows, and
/// the lease terms' time when it leased any.
fn claim_rows(
    tx: &mut dyn Tx,
    req: &ClaimRequest,
    dispatch: bool,
) -> Result<(Claimed, Option<i64>)> {
    let mut out = Claimed::default();
    let Some((stream, policy)) = sending_campaign(tx, req)? else {
        return Ok((out, None));
    };
    let cands = claim_candidates(tx, req)?;
    // Taken after the rows are read (and locked): the lease runs from now, not from `req.now`,
    // and a window is judged at the later of the two (waiting for the lock must not carry a
    // row past its window's end).
    let terms = LeaseTerms::now(req, dispatch);
    let judged_at = terms.claimed_at.max(req.now);
    let mut windows = policy.as_ref().map(|p| Planner::new(p, judged_at));
    let mut plain = Vec::with_capacity(cands.len());
    // Leased stream rows: (index in `out.rows`, message id).
    let mut contents = Vec::new();
    for c in cands {
        check_content(&c, stream, req)?;
        let decision = decide(c.maybe_since, c.suppressed, req);
        if settle_or_park(tx, &c, &decision, req, &mut out)? {
            continue;
        }
        if let Some(w) = windows.as_mut() {
            let at = w.open_at(&c.vars, &c.address);
            if at > judged_at {
                hold(tx, &c, at, req.now, &mut out)?;
                continue;
            }
        }
        match decision {
            Decision::SameKeyRetry { since } => lease_one(tx, c.id, since, req, &terms)?,
            _ => plain.push(c.id),
        }
        out.rows.push(ClaimedRow {
            id: c.id,
            job_id: c.job_id,
            address: c.address,
            vars: c.vars,
            attempts: c.attempts,
            token: req.token,
            maybe_delivered: c.maybe_since.is_some(),
            content: None,
            message_id: c.message_id,
        });
        if let Some(m) = c.message_id {
            contents.push((out.rows.len() - 1, m));
        }
    }
    lease_many(tx, &plain, req, &terms)?;
    load_contents(tx, &contents, &mut out.rows)?;
    let claimed_at = (!out.rows.is_empty()).then_some(terms.claimed_at);
    Ok((out, claimed_at))
}

/// The content of every leased stream row (`rows[i]` for each `(i, message id)`), read in the
/// claim's transaction by one statement. A stream row whose content is missing means the file
/// is damaged: it is never sent without it.
fn load_contents(tx: &mut dyn Tx, wanted: &[(usize, i64)], rows: &mut [ClaimedRow]) -> Result<()> {
    if wanted.is_empty() {
        return Ok(());
    }
    let ids: Vec<i64> = wanted.iter().map(|&(_, m)| m).collect();
    let mut found = std::collections::HashMap::with_capacity(ids.len());
    tx.each(
        CLAIM_CONTENTS.get(tx.dialect()),
        &args![json_ids(&ids).as_str()],
        &mut |r| {
            let format: BodyFormat = r.get(5)?;
            let (text, html) = format.load(r.get(4)?, r.get(6)?);
            let content = MessageContent {
                from: r.get(1)?,
                reply_to: r.get(2)?,
                subject: r.get(3)?,
                text,
                html,
                templated: r.get(7)?,
                attachments: Vec::new(),
            };
            found.insert(r.get::<i64>(0)?, content);
            Ok(())
        },
    )?;
    for &(i, m) in wanted {
        let Some(c) = found.get(&m) else {
            return Err(Error::damaged(format!(
                "send {} names message content {m}, which does not exist",
                rows[i].id
            )));
        };
        rows[i].content = Some(c.clone());
    }
    Ok(())
}

/// The files of the stream rows a claim leased, read after its commit by one statement (in each
/// message's order): they never change once stored, and reading megabytes inside the claim's
/// write transaction would hold every other writer's turn at the file.
fn attach_files<S: Db>(store: &S, rows: &mut [ClaimedRow]) -> Result<()> {
    let ids: Vec<i64> = rows.iter().filter_map(|r| r.message_id).collect();
    if ids.is_empty() {
        return Ok(());
    }
    let mut found: std::collections::HashMap<i64, Vec<Attachment>> = Default::default();
    store.read(|tx| {
        tx.each(
            CLAIM_ATTACHMENTS.get(tx.dialect()),
            &args![json_ids(&ids).as_str()],
            &mut |r| {
                let a = Attachment {
                    filename: r.get(1)?,
                    content_type: r.get(2)?,
                    content_id: r.get(3)?,
                    data: r.get::<Vec<u8>>(4)?.into(),
                };
                found.entry(r.get(0)?).or_default().push(a);
                Ok(())
            },
        )
    })?;
    for r in rows {
        if let (Some(m), Some(c)) = (r.message_id, r.content.as_mut()) {
            // A notification's rows share one content: each takes its own copy of the list
            // (the files' bytes are shared, not copied).
            c.attachments = found.get(&m).cloned().unwrap_or_default();
        }
    }
    Ok(())
}

/// A row that may already have been delivered, and a provider webhook reported its outcome
/// (kept by `Webhooks::apply_webhook` while the row was still leased): settled as the report
/// says (`sent` if any report says delivered, else `failed`) instead of being parked in doubt
/// or retried; settled as sent, it keeps the provider's message id of the first report that
/// says delivered and names one, unless it has an id already. Returns false when no report
/// came.
fn settled_by_callback(tx: &mut dyn Tx, c: &Candidate, req: &ClaimRequest) -> Result<bool> {
    let (sent, provider_id) = report(tx, CLAIM_CALLBACK, &args![req.account_id, &c.job_id])?;
    let Some(sent) = sent else {
        return Ok(false);
    };
    let n = tx.exec(
        CLAIM_SETTLE_BY_CALLBACK,
        &args![c.id, sent, req.now, provider_id.as_deref()],
    )?;
    expect_one(n, c.id, "settle by webhook")?;
    Ok(true)
}

/// What the delivery reports of a job say ([`CLAIM_CALLBACK`], [`RECORD_DOUBT_REPORT`]).
fn report(
    tx: &mut dyn Tx,
    sql: &str,
    a: &[crate::sql::Arg<'_>],
) -> Result<(Option<bool>, Option<String>)> {
    Ok(tx
        .query_opt(sql, a, |r| Ok((r.get(0)?, r.get(1)?)))?
        .unwrap_or((None, None)))
}

/// A statement that moves one row by id, within the claim transaction that has just read that
/// row as claimable, must change exactly that row; anything else means the file is damaged.
fn expect_one(changed: u64, id: i64, what: &str) -> Result<()> {
    if changed == 1 {
        Ok(())
    } else {
        Err(Error::damaged(format!(
            "{what} of send {id} changed {changed} rows instead of 1"
        )))
    }
}

/// The dispatch marker: fenced on the lease token; returns the ids still held.
fn mark_tx(tx: &mut dyn Tx, rows: &[(i64, i64)], now: i64, lease_ms: i64) -> Result<Vec<i64>> {
    let mut held = Vec::with_capacity(rows.len());
    for &(id, token) in rows {
        if tx.exec(MARK_DISPATCHED, &args![id, token, now, now + lease_ms])? == 1 {
            held.push(id);
        }
    }
    Ok(held)
}

/// An acceptance for a row that is already `sent`: [`confirmed_again`] decides; this reads the
/// row and writes its note.
fn confirmed_twice(tx: &mut dyn Tx, id: i64, provider_id: Option<&str>) -> Result<()> {
    let stored: Option<Option<String>> =
        tx.query_opt(RECORD_CHECK_ROW, &args![id], |r| r.get(0))?;
    if let Some(note) = confirmed_again(id, provider_id, stored)? {
        tx.exec(RECORD_NOTE_TWICE, &args![id, note.as_str()])?;
    }
    Ok(())
}

/// Apply a group of outcomes, each fenced on its lease token. In id order, so two
/// transactions that touch the same rows (PostgreSQL) lock them in the same order.
fn record_tx(tx: &mut dyn Tx, records: &[Record], now: i64) -> Result<RecordStats> {
    let mut stats = RecordStats::default();
    let mut order: Vec<&Record> = records.iter().collect();
    order.sort_by_key(|r| r.id);
    let confirmed = confirm_accepted(tx, &order, now)?;
    let half = order.len() / 2;
    for (i, r) in order.into_iter().enumerate() {
        if i == half && i > 0 {
            crash::point("mid_confirm_group");
        }
        match &r.outcome {
            Outcome::Accepted { provider_id, .. } if confirmed.contains(&r.id) => {
                stats.already_accepted += u64::from(provider_id.is_none());
                stats.sent += 1;
            }
            Outcome::Accepted { provider_id, note } => {
                record_accepted(tx, r, provider_id.as_deref(), note, now, &mut stats)?
            }
            Outcome::Failed { error, suppress } => {
                let n = tx.exec(RECORD_FAILED, &args![r.id, r.token, error, now])?;
                count_fenced(n, &mut stats.failed, &mut stats.fenced_out);
                if let (1, Some(reason)) = (n, suppress) {
                    suppress_failed(tx, r.id, reason, now)?;
                }
            }
            Outcome::Retry {
                error,
                retry_at,
                maybe_delivered,
            } => {
                let a = args![r.id, r.token, error, *retry_at, now, *maybe_delivered];
                let n = tx.exec(RECORD_RETRY, &a)?;
                count_fenced(n, &mut stats.retried, &mut stats.fenced_out);
            }
            Outcome::InDoubt { error } => {
                let n = tx.exec(RECORD_IN_DOUBT, &args![r.id, r.token, error, now])?;
                match (n, settle_parked_from_report(tx, r.id, now, n == 1)?) {
                    (1, Some(true)) => stats.sent += 1,
                    (1, Some(false)) => stats.failed += 1,
                    _ => count_fenced(n, &mut stats.in_doubt, &mut stats.fenced_out),
                }
            }
        }
    }
    Ok(stats)
}

/// The common case of a confirmation in one statement where the dialect has one
/// ([`Dialect::confirm_many`]): every accepted outcome whose row is still leased with its token
/// becomes `sent`. Returns the ids it confirmed; the rest (fenced, late, confirmed twice) go
/// through the per-row rules in [`record_tx`].
fn confirm_accepted(
    tx: &mut dyn Tx,
    order: &[&Record],
    now: i64,
) -> Result<std::collections::HashSet<i64>> {
    let Some(sql) = tx.dialect().confirm_many else {
        return Ok(Default::default());
    };
    let rows: Vec<serde_json::Value> = order
        .iter()
        .filter_map(|r| match &r.outcome {
            Outcome::Accepted { provider_id, note } => Some(serde_json::json!({
                "id": r.id, "token": r.token, "pid": provider_id, "note": note,
            })),
            _ => None,
        })
        .collect();
    if rows.is_empty() {
        return Ok(Default::default());
    }
    let json = serde_json::Value::Array(rows).to_string();
    let ids = tx.query(sql, &args![json.as_str(), now], |r| r.get(0))?;
    Ok(ids.into_iter().collect())
}

/// A failure that says the address must not be tried again: added to its account's
/// suppressions, dated no earlier than the account's last opt-out (taken under its lock,
/// [`Dialect::lock_opt_outs`]).
fn suppress_failed(tx: &mut dyn Tx, id: i64, reason: &str, now: i64) -> Result<()> {
    let account: i64 = tx.scalar("SELECT account_id FROM sends WHERE id = ?1", &args![id])?;
    let at = now.max(tx.dialect().lock_opt_outs(tx, account)?);
    tx.exec(RECORD_ADD_SUPPRESSION, &args![id, reason, at])?;
    Ok(())
}

/// A row just parked in doubt (`parked`) whose outcome a provider webhook reported while its
/// call was still running (the report was kept, `Webhooks::apply_webhook`): settled as the
/// report says (as sent: with the report's provider message id when the row has none). Returns
/// the settled outcome (true: sent), None when no report came.
fn settle_parked_from_report(
    tx: &mut dyn Tx,
    id: i64,
    now: i64,
    parked: bool,
) -> Result<Option<bool>> {
    if !parked {
        return Ok(None);
    }
    let (sent, provider_id) = report(tx, RECORD_DOUBT_REPORT, &args![id])?;
    let Some(sent) = sent else {
        return Ok(None);
    };
    let n = tx.exec(
        RECORD_SETTLE_FROM_REPORT,
        &args![id, sent, now, provider_id.as_deref()],
    )?;
    expect_one(n, id, "settle by webhook")?;
    Ok(Some(sent))
}

/// A fenced statement changed its row (`n == 1`: counted in `done`) or lost the fence.
fn count_fenced(n: u64, done: &mut u64, fenced_out: &mut u64) {
    if n == 1 {
        *done += 1;
    } else {
        *fenced_out += 1;
    }
}

/// Record one acceptance: fenced; else late (the lease was lost); else a row already sent.
fn record_accepted(
    tx: &mut dyn Tx,
    r: &Record,
    provider_id: Option<&str>,
    note: &Option<String>,
    now: i64,
    stats: &mut RecordStats,
) -> Result<()> {
    if provider_id.is_none() {
        stats.already_accepted += 1;
    }
    let n = tx.exec(RECORD_SENT, &args![r.id, r.token, provider_id, now, note])?;
    if n == 1 {
        stats.sent += 1;
    } else if tx.exec(RECORD_LATE, &args![r.id, provider_id, now])? == 1 {
        stats.late_confirmations += 1;
        tracing::warn!(
            send_id = r.id,
            "confirmation arrived after the lease was lost; recorded as sent"
        );
    } else {
        confirmed_twice(tx, r.id, provider_id)?;
        stats.double_confirmations += 1;
    }
    Ok(())
}

// The campaign's completion and the settling of a row in doubt (also the app's `resolve`,
// `campaigns.rs`, and a webhook's effect, `webhooks.rs`).

/// Mark the campaign `sent` if its list is complete and no row is queued, leased or in doubt;
/// the campaign row locked first ([`Dialect::lock_campaign`]), so that a row added
/// concurrently is never left queued in a finished campaign.
pub(crate) fn complete_if_done(tx: &mut dyn Tx, campaign_id: i64, now: i64) -> Result<bool> {
    tx.dialect().lock_campaign(tx, campaign_id)?;
    Ok(tx.exec(COMPLETE_IF_DONE, &args![campaign_id, now])? == 1)
}

/// Settle one row in doubt as sent (with the provider's id, if known) or queued again, then
/// complete the campaign if that was its last open row. False if it was not in doubt.
pub(crate) fn settle_doubt_tx(
    tx: &mut dyn Tx,
    send_id: i64,
    provider_id: Option<&str>,
    as_sent: bool,
    now: i64,
    by: &str,
) -> Result<bool> {
    let sql = DOUBT_CAMPAIGN.get(tx.dialect());
    let Some(campaign_id) = tx.scalar_opt::<i64>(sql, &args![send_id])? else {
        return Ok(false);
    };
    if as_sent {
        tx.exec(
            "UPDATE sends SET status = 'sent', sent_at = ?2, updated_at = ?2,
                    doubt_since = NULL,
                    provider_message_id = coalesce(?3, provider_message_id),
                    last_error = 'resolved as sent by ' || ?4
             WHERE id = ?1 AND status = 'in_doubt'",
            &args![send_id, now, provider_id, by],
        )?;
    } else {
        tx.exec(
            "UPDATE sends SET status = 'queued', visible_at = ?2, updated_at = ?2,
                    doubt_since = NULL, dispatched_at = NULL,
                    last_error = 'requeued by ' || ?3 || ' after doubt'
             WHERE id = ?1 AND status = 'in_doubt'",
            &args![send_id, now, by],
        )?;
    }
    complete_if_done(tx, campaign_id, now)?;
    Ok(true)
}

/// The campaign of a row in doubt, the row locked (PostgreSQL).
static DOUBT_CAMPAIGN: PerDialect = PerDialect::new(|d| {
    format!(
        "SELECT campaign_id FROM sends WHERE id = ?1 AND status = 'in_doubt'{}",
        d.for_update
    )
});

/// A campaign is sent only when its list is complete and no row is queued, leased or in
/// doubt. Two `NOT EXISTS`, each with exactly one partial index's predicate (`sends_claim`,
/// `sends_doubt`): with the three states in one list the planner can use neither and reads
/// every row of the campaign.
pub(crate) const COMPLETE_IF_DONE: &str = "UPDATE campaigns SET status = 'sent', finished_at = ?2
     WHERE id = ?1 AND status = 'sending' AND list_complete = TRUE AND stream = FALSE
       AND NOT EXISTS (SELECT 1 FROM sends WHERE campaign_id = ?1
                       AND status IN ('queued', 'leased'))
       AND NOT EXISTS (SELECT 1 FROM sends WHERE campaign_id = ?1
                       AND status = 'in_doubt')";

// The hot SQL, named: the functions above use these, and `sendonce bench` prints their query
// plans (`sqlite/ledger.rs`'s `hot_queries`, `postgres/plans.rs`).

pub(crate) const START_DUE_CAMPAIGNS: &str =
    "UPDATE campaigns SET status = 'sending', started_at = coalesce(started_at, ?1)
     WHERE status = 'approved' AND scheduled_for <= ?1 RETURNING id";

/// Whether campaign `c` has a send window or SMS quiet hours (its rows may wait for them).
pub(crate) const WINDOWED: &str = "(c.send_window IS NOT NULL OR c.sms_hours IS NOT NULL)";

/// The campaigns in `sending`, with the names and the ids (in id order) of the lists they
/// target as JSON arrays.
pub(crate) static ACTIVE_CAMPAIGNS: PerDialect = PerDialect::new(|d| {
    let agg = d.json_array_agg;
    format!(
        "SELECT c.id, c.account_id, c.channel, c.sender, c.subject, c.body,
     c.list_complete, c.templated, a.name, c.body_format, c.html, c.reply_to, c.sms_footer, c.name,
     (SELECT {agg}(l.name) FROM campaign_lists cl JOIN lists l ON l.id = cl.list_id
      WHERE cl.campaign_id = c.id),
     (SELECT {agg}(o.list_id) FROM (SELECT cl.list_id FROM campaign_lists cl
      WHERE cl.campaign_id = c.id ORDER BY cl.list_id) o),
     c.transactional OR c.kind <> 'campaign', c.stream,
     {WINDOWED}
     FROM campaigns c JOIN accounts a ON a.id = c.account_id
     WHERE c.status = 'sending' ORDER BY c.id"
    )
});

/// The campaign row (locked on PostgreSQL, so builders take turns), and whether it targets
/// lists (else: the whole account).
pub(crate) static LIST_CAMPAIGN: PerDialect = PerDialect::new(|d| {
    format!(
        "SELECT account_id, channel, list_cursor, list_complete, status,
            EXISTS (SELECT 1 FROM campaign_lists cl WHERE cl.campaign_id = campaigns.id), filter
     FROM campaigns WHERE id = ?1{}",
        d.for_update
    )
});

pub(crate) const LIST_CHUNK_END: &str = "SELECT max(id), count(*) FROM (SELECT id FROM subscribers
     WHERE account_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3) chunk";

pub(crate) const LIST_ADVANCE_CURSOR: &str =
    "UPDATE campaigns SET list_cursor = coalesce(?2, list_cursor), list_complete = ?3
     WHERE id = ?1";

pub(crate) const RELEASE: &str =
    "UPDATE sends SET status = 'queued', lease_token = NULL, lease_owner = NULL,
     visible_at = ?3, updated_at = ?3
     WHERE id = ?1 AND lease_token = ?2 AND status = 'leased' AND dispatched_at IS NULL";

pub(crate) const NEXT_VISIBLE: &str = "SELECT min(visible_at) FROM sends
     WHERE campaign_id = ?1 AND status IN ('queued', 'leased')";

pub(crate) const RECONCILABLE: &str = "SELECT id, job_id, address FROM sends
     WHERE campaign_id = ?1 AND status = 'in_doubt' AND doubt_since < ?2
     ORDER BY id LIMIT ?3";

/// The campaigns [`SWEEP_CANCELLED`] looks into (through `campaigns_status`).
pub(crate) const CANCELLED_CAMPAIGNS: &str = "SELECT id FROM campaigns WHERE status = 'cancelled'";

/// Runs every tick: expired leases of the cancelled campaigns `?2` (a JSON array read first:
/// given as a subquery, PostgreSQL's planner walked `sends_claim` on `visible_at` alone, every
/// due row of every campaign, and only then joined the campaigns). With the ids bound, each is
/// a range of `sends_claim` on (campaign_id, visible_at); the redundant
/// `status IN ('queued', 'leased')` lets SQLite use that partial index.
pub(crate) static SWEEP_CANCELLED: PerDialect = PerDialect::new(|d| {
    format!(
        "UPDATE sends SET status = CASE WHEN dispatched_at IS NULL THEN 'cancelled'
     ELSE 'in_doubt' END,
     doubt_since = CASE WHEN dispatched_at IS NULL THEN doubt_since
     ELSE coalesce(doubt_since, dispatched_at) END,
     lease_token = NULL, updated_at = ?1
     WHERE {} AND status IN ('queued', 'leased') AND status = 'leased'
       AND visible_at <= ?1",
        (d.in_json_ids)("campaign_id", "?2")
    )
});

/// The campaign's status, kept from changing until the claim commits (PostgreSQL).
pub(crate) static CLAIM_CAMPAIGN_STATUS: PerDialect = PerDialect::new(|d| {
    format!(
        "SELECT status, stream, tz, send_window, sms_hours FROM campaigns
         WHERE id = ?1 AND account_id = ?2{}",
        d.for_share
    )
});

/// The contents of the stream rows a claim leased, by a JSON array of their ids (`?1`).
pub(crate) static CLAIM_CONTENTS: PerDialect = PerDialect::new(|d| {
    format!(
        "SELECT id, sender, reply_to, subject, body, body_format, html, templated
     FROM message_contents WHERE {}",
        (d.in_json_ids)("id", "?1")
    )
});

/// The attachments of the stream rows a claim leased, by a JSON array of their message ids
/// (`?1`), in each message's order.
pub(crate) static CLAIM_ATTACHMENTS: PerDialect = PerDialect::new(|d| {
    format!(
        "SELECT message_id, filename, content_type, content_id, data FROM message_attachments
     WHERE {} ORDER BY message_id, position",
        (d.in_json_ids)("message_id", "?1")
    )
});

/// The due rows (`?1` campaign, `?2` account, `?3` channel, `?4` now, `?5` batch); on
/// PostgreSQL locked, rows another claim holds locked skipped, never waited for. The sixth
/// column is the earliest dispatch that may have delivered: the smaller of the dispatch and
/// `doubt_since` for an expired dispatched lease.
pub(crate) static CLAIM_CANDIDATES: PerDialect = PerDialect::new(|d| {
    format!(
        "SELECT s.id, s.job_id, s.address, s.vars, s.attempts,
     CASE WHEN s.status = 'leased' AND s.dispatched_at IS NOT NULL
     THEN CASE WHEN s.doubt_since < s.dispatched_at THEN s.doubt_since ELSE s.dispatched_at END
     ELSE s.doubt_since END,
     EXISTS (SELECT 1 FROM suppressions su
     WHERE su.account_id = s.account_id AND su.channel = ?3
     AND su.address = s.address),
     s.status, s.message_id
     FROM sends s
     WHERE s.campaign_id = ?1 AND s.account_id = ?2
     AND s.status IN ('queued', 'leased') AND s.visible_at <= ?4
     ORDER BY s.visible_at, s.id LIMIT ?5{}",
        d.skip_locked
    )
});

pub(crate) const CLAIM_LEASE_ONE: &str =
    "UPDATE sends SET status = 'leased', lease_token = ?2, lease_owner = ?3,
     visible_at = ?4, dispatched_at = ?5, attempts = attempts + ?6,
     doubt_since = ?7, updated_at = ?8,
     claimed_at = CASE WHEN CAST(?7 AS BIGINT) IS NULL THEN ?9
     ELSE coalesce(claimed_at, ?9) END
     WHERE id = ?1 AND status IN ('queued', 'leased')";

pub(crate) const CLAIM_PARK_IN_DOUBT: &str =
    "UPDATE sends SET status = 'in_doubt', lease_token = NULL, dispatched_at = NULL,
     doubt_since = ?2, updated_at = ?3,
     last_error = coalesce(last_error || '; ', '') ||
     'lease expired after dispatch; provider has no usable idempotency key'
     WHERE id = ?1 AND status IN ('queued', 'leased')";

/// NULL: no delivery report for the job; 1: one says delivered; 0: only failures. Then the
/// provider's message id of the first report that says delivered and names one.
pub(crate) const CLAIM_CALLBACK: &str = "SELECT max(CASE WHEN delivery = 'sent' THEN 1 ELSE 0 END),
     (SELECT r.provider_message_id FROM webhook_events r
      WHERE r.account_id = ?1 AND r.job_id = ?2 AND r.delivery = 'sent'
        AND r.provider_message_id IS NOT NULL
      ORDER BY r.id LIMIT 1)
     FROM webhook_events
     WHERE account_id = ?1 AND job_id = ?2 AND delivery IS NOT NULL";

/// Settled as sent, the row keeps the report's provider message id (`?4`) unless it has one.
pub(crate) const CLAIM_SETTLE_BY_CALLBACK: &str =
    "UPDATE sends SET status = CASE WHEN ?2 THEN 'sent' ELSE 'failed' END,
     sent_at = CASE WHEN ?2 THEN ?3 ELSE sent_at END,
     provider_message_id = CASE WHEN ?2 THEN coalesce(provider_message_id, ?4)
     ELSE provider_message_id END,
     lease_token = NULL, dispatched_at = NULL, doubt_since = NULL, updated_at = ?3,
     last_error = CASE WHEN ?2 THEN 'delivery reported by a provider webhook'
     ELSE 'failure reported by a provider webhook' END
     WHERE id = ?1 AND status IN ('queued', 'leased')";

/// A due row held for its send window: queued again, visible when it opens (`?2`). An expired
/// lease is given up; if it was dispatched, its dispatch becomes the row's `doubt_since` (the
/// same "may have been delivered since" the claim reads), so the next claim decides as this
/// one would have, and a late acceptance still lands (`RECORD_LATE`).
pub(crate) const CLAIM_HOLD: &str = "UPDATE sends SET status = 'queued', lease_token = NULL,
     lease_owner = NULL,
     doubt_since = CASE WHEN status = 'leased' AND dispatched_at IS NOT NULL
       THEN CASE WHEN doubt_since < dispatched_at THEN doubt_since ELSE dispatched_at END
       ELSE doubt_since END,
     dispatched_at = NULL, visible_at = ?2, updated_at = ?3
     WHERE id = ?1 AND status IN ('queued', 'leased')";

pub(crate) const CLAIM_SUPPRESS: &str =
    "UPDATE sends SET status = 'suppressed', lease_token = NULL, updated_at = ?2,
     last_error = 'address suppressed before claim'
     WHERE id = ?1 AND status IN ('queued', 'leased')";

/// The plain rows of a claim, by the JSON array of their ids (`?1`).
pub(crate) static CLAIM_LEASE_MANY: PerDialect = PerDialect::new(|d| {
    format!(
        "UPDATE sends SET status = 'leased', lease_token = ?2, lease_owner = ?3,
     visible_at = ?4, dispatched_at = ?5, attempts = attempts + ?6,
     doubt_since = NULL, updated_at = ?7, claimed_at = ?8
     WHERE {} AND status IN ('queued', 'leased')",
        (d.in_json_ids)("id", "?1")
    )
});

pub(crate) const MARK_DISPATCHED: &str =
    "UPDATE sends SET dispatched_at = ?3, attempts = attempts + 1, visible_at = ?4,
     updated_at = ?3
     WHERE id = ?1 AND lease_token = ?2 AND status = 'leased'";

pub(crate) const RECORD_SENT: &str =
    "UPDATE sends SET status = 'sent', provider_message_id = ?3, sent_at = ?4,
     updated_at = ?4, lease_token = NULL, doubt_since = NULL, last_error = ?5
     WHERE id = ?1 AND lease_token = ?2 AND status = 'leased'";

/// The fence failed but the provider said yes: the truth is "sent", whoever holds the row
/// now. Never dropped.
pub(crate) const RECORD_LATE: &str =
    "UPDATE sends SET status = 'sent', provider_message_id = ?2, sent_at = ?3,
     updated_at = ?3, lease_token = NULL, doubt_since = NULL,
     last_error = 'confirmed after the lease was lost'
     WHERE id = ?1 AND status <> 'sent'";

pub(crate) const RECORD_CHECK_ROW: &str = "SELECT provider_message_id FROM sends WHERE id = ?1";

pub(crate) const RECORD_NOTE_TWICE: &str =
    "UPDATE sends SET last_error = coalesce(last_error || '; ', '') || ?2 WHERE id = ?1";

pub(crate) const RECORD_FAILED: &str =
    "UPDATE sends SET status = 'failed', last_error = ?3, updated_at = ?4,
     lease_token = NULL
     WHERE id = ?1 AND lease_token = ?2 AND status = 'leased'";

pub(crate) const RECORD_ADD_SUPPRESSION: &str =
    "INSERT INTO suppressions (account_id, channel, address, reason, source, created_at)
     SELECT s.account_id, c.channel, s.address, ?2, 'provider', ?3
     FROM sends s JOIN campaigns c ON c.id = s.campaign_id WHERE s.id = ?1
     ON CONFLICT DO NOTHING";

pub(crate) const RECORD_RETRY: &str =
    "UPDATE sends SET status = 'queued', last_error = ?3, visible_at = ?4,
     updated_at = ?5, lease_token = NULL, lease_owner = NULL,
     doubt_since = CASE WHEN ?6 THEN coalesce(doubt_since, dispatched_at)
     ELSE doubt_since END,
     dispatched_at = NULL
     WHERE id = ?1 AND lease_token = ?2 AND status = 'leased'";

pub(crate) const RECORD_IN_DOUBT: &str =
    "UPDATE sends SET status = 'in_doubt', last_error = ?3, updated_at = ?4,
     lease_token = NULL,
     doubt_since = coalesce(doubt_since, dispatched_at, ?4),
     dispatched_at = NULL
     WHERE id = ?1 AND lease_token = ?2 AND status = 'leased'";

/// NULL: no delivery report for the row's job; 1: one says delivered; 0: only failures. Then
/// the provider's message id of the first report that says delivered and names one.
pub(crate) const RECORD_DOUBT_REPORT: &str =
    "SELECT max(CASE WHEN w.delivery = 'sent' THEN 1 ELSE 0 END),
     (SELECT r.provider_message_id FROM sends t
      JOIN webhook_events r ON r.account_id = t.account_id AND r.job_id = t.job_id
      AND r.delivery = 'sent' AND r.provider_message_id IS NOT NULL
      WHERE t.id = ?1
      ORDER BY r.id LIMIT 1)
     FROM sends s
     JOIN webhook_events w ON w.account_id = s.account_id AND w.job_id = s.job_id
     AND w.delivery IS NOT NULL
     WHERE s.id = ?1";

/// Settled as sent, the row keeps the report's provider message id (`?4`) unless it has one.
pub(crate) const RECORD_SETTLE_FROM_REPORT: &str =
    "UPDATE sends SET status = CASE WHEN ?2 THEN 'sent' ELSE 'failed' END,
     sent_at = CASE WHEN ?2 THEN ?3 ELSE sent_at END,
     provider_message_id = CASE WHEN ?2 THEN coalesce(provider_message_id, ?4)
     ELSE provider_message_id END,
     doubt_since = NULL, updated_at = ?3,
     last_error = coalesce(last_error || '; ', '') || CASE WHEN ?2
     THEN 'delivery reported by a provider webhook' ELSE 'failure reported by a provider webhook' END
     WHERE id = ?1 AND status = 'in_doubt'";

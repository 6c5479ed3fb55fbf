//! The worker's narrow interface to the ledger (claim, dispatch, record, complete), implemented
//! for SQLite. Every method is one `BEGIN IMMEDIATE` transaction.

use super::codec;
use super::error::on_send_path;
use super::segment;
use super::SqliteStore;
use crate::domain::address::Channel;
use crate::domain::model::{
    CampaignStatus, SendStatus, CAMPAIGN_JOB_AT, CAMPAIGN_JOB_PREFIX, CAMPAIGN_JOB_SUB, EPOCH_MARK,
    INSTALLATION_SCOPE_LEN,
};
use crate::domain::segment::Filter;
use crate::error::{Error, Result};
use crate::store::ledger::{decide, Decision, LeaseTerms};
use crate::store::{
    ActiveCampaign, Admin, ClaimRequest, Claimed, ClaimedRow, Ledger, Outcome, Record, RecordStats,
};
use crate::tools::crash;
use rusqlite::{named_params, params, OptionalExtension, Transaction};

impl Ledger for SqliteStore {
    fn start_due_campaigns(&self, now: i64) -> Result<Vec<i64>> {
        self.write(|tx| {
            let mut st = tx.prepare_cached(START_DUE_CAMPAIGNS)?;
            let ids = st
                .query_map([now], |r| r.get(0))?
                .collect::<rusqlite::Result<Vec<i64>>>()?;
            if !ids.is_empty() {
                crash::point("campaign_cas");
            }
            Ok(ids)
        })
    }

    fn active_campaigns(&self) -> Result<Vec<ActiveCampaign>> {
        self.read(|c| {
            let mut st = c.prepare_cached(ACTIVE_CAMPAIGNS)?;
            let rows = st
                .query_map([], |r| {
                    let format: codec::BodyFormat = codec::get(r, 9, "campaigns")?;
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
                        channel: codec::get(r, 2, "campaigns")?,
                        sender: r.get(3)?,
                        subject: r.get(4)?,
                        body,
                        html,
                        reply_to: r.get(11)?,
                        sms_footer: r.get(12)?,
                        name: r.get(13)?,
                        list_names,
                        list_ids,
                        templated: r.get::<_, i64>(7)? != 0,
                        transactional: r.get::<_, i64>(16)? != 0,
                        account_name: r.get(8)?,
                        list_complete: r.get::<_, i64>(6)? != 0,
                    })
                })?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(on_send_path)?;
            Ok(rows)
        })
    }

    fn build_list_chunk(&self, campaign_id: i64, chunk: usize) -> Result<bool> {
        let done = self.write(|tx| {
            let row: Option<ListCampaign> = tx
                .query_row(LIST_CAMPAIGN, [campaign_id], |r| {
                    Ok(ListCampaign {
                        account_id: r.get(0)?,
                        channel: codec::get(r, 1, "campaigns")?,
                        cursor: r.get(2)?,
                        complete: r.get::<_, i64>(3)? != 0,
                        status: codec::get(r, 4, "campaigns")?,
                        targeted: r.get(5)?,
                        filter: r.get(6)?,
                    })
                })
                .optional()
                .map_err(on_send_path)?;
            let Some(c) = row else {
                return Ok(true);
            };
            if c.complete || c.status != CampaignStatus::Sending {
                return Ok(true);
            }
            // A filter that no longer parses is damage: never build the list without it.
            let filter = c
                .filter
                .as_deref()
                .map(|f| Filter::parse_stored(f, campaign_id))
                .transpose()?;
            // The last subscriber id of this chunk (over all of the account's subscribers, so
            // the cursor always moves forward).
            let (chunk_end, n): (Option<i64>, i64) = tx.query_row(
                LIST_CHUNK_END,
                params![c.account_id, c.cursor, chunk as i64],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            if let Some(end) = chunk_end {
                insert_chunk(tx, campaign_id, &c, filter.as_ref(), end)?;
                crash::point("list_build");
            }
            let complete = (n as usize) < chunk;
            tx.prepare_cached(LIST_ADVANCE_CURSOR)?.execute(params![
                campaign_id,
                chunk_end,
                complete as i64
            ])?;
            Ok(complete)
        })?;
        crash::point("list_build_committed");
        Ok(done)
    }

    fn claim(&self, req: &ClaimRequest) -> Result<Claimed> {
        let (out, generation) = self.write(|tx| claim_tx(tx, req, false, self.guard()))?;
        self.claimed(generation, req.now)?;
        if !out.rows.is_empty() {
            crash::point("after_claim_commit");
        }
        Ok(out)
    }

    fn cycle(
        &self,
        records: &[Record],
        claim: Option<&ClaimRequest>,
        now: i64,
    ) -> Result<(RecordStats, Claimed)> {
        if records.is_empty() && claim.is_none() {
            return Ok((RecordStats::default(), Claimed::default()));
        }
        let both = self.write(|tx| {
            let stats = record_tx(tx, records, now)?;
            let got = match claim {
                Some(req) => claim_tx(tx, req, true, self.guard())?,
                None => (Claimed::default(), None),
            };
            Ok((stats, got))
        });
        let (stats, (got, generation)) = match both {
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
        self.claimed(generation, now)?;
        if !records.is_empty() {
            crash::point("after_confirm_commit");
        }
        if !got.rows.is_empty() {
            crash::point("after_claim_commit");
            crash::point("after_dispatch_mark");
        }
        Ok((stats, got))
    }

    fn checkpoint_if_large(&self) -> Result<bool> {
        let wal = std::path::PathBuf::from(format!("{}-wal", self.path().display()));
        let size = match std::fs::metadata(&wal) {
            Ok(m) => m.len(),
            Err(_) => return Ok(false),
        };
        if size < super::WAL_CHECKPOINT_BYTES {
            return Ok(false);
        }
        self.checkpoint_truncate()?;
        tracing::debug!(wal_bytes = size, "WAL checkpointed and truncated");
        Ok(true)
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
            let mut st = tx.prepare_cached(RELEASE)?;
            let mut n = 0;
            for &(id, token) in rows {
                n += st.execute(params![id, token, now])? as u64;
            }
            Ok(n)
        })
    }

    fn try_complete(&self, campaign_id: i64, now: i64) -> Result<bool> {
        self.write(|tx| super::campaigns::complete_if_done(tx, campaign_id, now))
    }

    fn next_visible(&self, campaign_id: i64) -> Result<Option<i64>> {
        self.read(|c| {
            Ok(c.prepare_cached(NEXT_VISIBLE)?
                .query_row([campaign_id], |r| r.get(0))?)
        })
    }

    fn reconcilable(
        &self,
        campaign_id: i64,
        before: i64,
        limit: usize,
    ) -> Result<Vec<(i64, String, String)>> {
        self.read(|c| {
            let mut st = c.prepare_cached(RECONCILABLE)?;
            let rows = st
                .query_map(params![campaign_id, before, limit as i64], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })
    }

    fn settle_doubt(&self, send_id: i64, found: Option<String>) -> Result<bool> {
        let now = crate::domain::clock::now_ms();
        self.write(|tx| {
            super::campaigns::settle_doubt_tx(
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
            let n = tx.execute(SWEEP_CANCELLED, [now])?;
            Ok(n as u64)
        })
    }
}

/// A due row the claim read, before it decides what to do with it.
struct Candidate {
    id: i64,
    job_id: String,
    address: String,
    vars: String,
    attempts: i64,
    /// Earliest dispatch that may have delivered (expired lease or earlier doubt).
    maybe_since: Option<i64>,
    suppressed: bool,
}

/// The due rows of one claim: one range scan of the partial index `sends_claim`. The partial
/// index lets SQLite skip re-reading the status: a row whose status was damaged while its
/// index entry stayed would come back here. Damage never turns into sending: the status is
/// read from the row and checked.
fn claim_candidates(tx: &Transaction<'_>, req: &ClaimRequest) -> Result<Vec<Candidate>> {
    let mut cands = Vec::with_capacity(req.batch);
    let mut st = tx.prepare_cached(CLAIM_CANDIDATES)?;
    let mut rows = st.query(named_params! {
        ":campaign": req.campaign_id,
        ":now": req.now,
        ":batch": req.batch as i64,
        ":channel": req.channel,
        ":account": req.account_id,
    })?;
    while let Some(r) = rows.next()? {
        let status: SendStatus = codec::get(r, 7, "sends").map_err(on_send_path)?;
        if !matches!(status, SendStatus::Queued | SendStatus::Leased) {
            return Err(Error::damaged(format!(
                "send {} of campaign {} is in the claim index with status {:?}",
                r.get::<_, i64>(0)?,
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
            suppressed: r.get::<_, i64>(6)? != 0,
        });
    }
    Ok(cands)
}

/// The campaign is still `sending` (and is this account's).
fn campaign_is_sending(tx: &Transaction<'_>, req: &ClaimRequest) -> Result<bool> {
    let status: Option<CampaignStatus> = tx
        .prepare_cached(CLAIM_CAMPAIGN_STATUS)?
        .query_row(params![req.campaign_id, req.account_id], |r| {
            codec::get(r, 0, "campaigns")
        })
        .optional()
        .map_err(on_send_path)?;
    Ok(status == Some(CampaignStatus::Sending))
}

/// Lease one row that may already have been delivered (same-key retry): it keeps its
/// `doubt_since` and the first `claimed_at` of its delivery chain.
fn lease_one(
    tx: &Transaction<'_>,
    id: i64,
    since: i64,
    req: &ClaimRequest,
    terms: &LeaseTerms,
) -> Result<()> {
    let n = tx.prepare_cached(CLAIM_LEASE_ONE)?.execute(named_params! {
        ":id": id,
        ":token": req.token,
        ":owner": req.owner,
        ":until": terms.until,
        ":since": since,
        ":now": req.now,
        ":claimed_at": terms.claimed_at,
        ":dispatched_at": terms.dispatched_at,
        ":increment": terms.increment,
    })?;
    expect_one(n, id, "lease")
}

/// Lease the plain rows (nearly all of them) by one statement over a JSON array of their ids:
/// the same row writes as one UPDATE per row, without the per-statement overhead.
fn lease_many(
    tx: &Transaction<'_>,
    ids: &[i64],
    req: &ClaimRequest,
    terms: &LeaseTerms,
) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let mut json = String::with_capacity(ids.len() * 8 + 2);
    json.push('[');
    for (i, id) in ids.iter().enumerate() {
        if i > 0 {
            json.push(',');
        }
        json.push_str(&id.to_string());
    }
    json.push(']');
    let n = tx
        .prepare_cached(CLAIM_LEASE_MANY)?
        .execute(named_params! {
            ":ids": json,
            ":token": req.token,
            ":owner": req.owner,
            ":until": terms.until,
            ":now": req.now,
            ":dispatched_at": terms.dispatched_at,
            ":increment": terms.increment,
            ":claimed_at": terms.claimed_at,
        })?;
    if n != ids.len() {
        return Err(Error::damaged(format!(
            "the claim of campaign {} leased {n} rows instead of {}",
            req.campaign_id,
            ids.len()
        )));
    }
    Ok(())
}

/// The claim inside a transaction; with `dispatch`, every leased row also gets its dispatch
/// marker (attempts + 1, dispatched now) in the same UPDATE.
fn claim_tx(
    tx: &Transaction<'_>,
    req: &ClaimRequest,
    dispatch: bool,
    guard: Option<&super::guard::Guard>,
) -> Result<(Claimed, Option<i64>)> {
    let mut out = Claimed::default();
    if !campaign_is_sending(tx, req)? {
        return Ok((out, None));
    }
    let cands = claim_candidates(tx, req)?;
    let terms = LeaseTerms::now(req, dispatch);
    let mut plain = Vec::with_capacity(cands.len());
    for c in cands {
        match decide(c.maybe_since, c.suppressed, req) {
            Decision::InDoubt { .. } | Decision::SameKeyRetry { .. }
                if settled_by_callback(tx, &c, req)? =>
            {
                out.settled_by_webhook += 1;
                continue;
            }
            Decision::InDoubt { since } => {
                let n = tx
                    .prepare_cached(CLAIM_PARK_IN_DOUBT)?
                    .execute(params![c.id, since, req.now])?;
                expect_one(n, c.id, "park in doubt")?;
                out.in_doubt += 1;
                continue;
            }
            Decision::Suppress => {
                let n = tx
                    .prepare_cached(CLAIM_SUPPRESS)?
                    .execute(params![c.id, req.now])?;
                expect_one(n, c.id, "suppress")?;
                out.suppressed += 1;
                continue;
            }
            Decision::SameKeyRetry { since } => lease_one(tx, c.id, since, req, &terms)?,
            Decision::Lease => plain.push(c.id),
        }
        out.rows.push(ClaimedRow {
            id: c.id,
            job_id: c.job_id,
            address: c.address,
            vars: c.vars,
            attempts: c.attempts,
            token: req.token,
            maybe_delivered: c.maybe_since.is_some(),
        });
    }
    lease_many(tx, &plain, req, &terms)?;
    // Leased rows: the clone guard is checked and the claim counted (the watermark follows).
    let generation = match out.rows.is_empty() {
        true => None,
        false => Some(super::guard::claim_generation(tx, guard, terms.claimed_at)?),
    };
    crash::point("before_claim_commit");
    Ok((out, generation))
}

/// A row that may already have been delivered, and a provider webhook reported its outcome
/// (kept by `Webhooks::apply_webhook` while the row was still leased): settled as the report
/// says (`sent` if any report says delivered, else `failed`) instead of being parked in doubt
/// or retried; settled as sent, it keeps the provider's message id of the first report that
/// says delivered and names one, unless it has an id already. Returns false when no report
/// came.
fn settled_by_callback(tx: &Transaction<'_>, c: &Candidate, req: &ClaimRequest) -> Result<bool> {
    let (sent, provider_id): (Option<bool>, Option<String>) = tx
        .prepare_cached(CLAIM_CALLBACK)?
        .query_row(params![req.account_id, c.job_id], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
    let Some(sent) = sent else {
        return Ok(false);
    };
    let n = tx
        .prepare_cached(CLAIM_SETTLE_BY_CALLBACK)?
        .execute(params![c.id, sent, req.now, provider_id])?;
    expect_one(n, c.id, "settle by webhook")?;
    Ok(true)
}

/// A statement that moves one row by id, within the claim transaction that has just read that
/// row as claimable, must change exactly that row; anything else means the file is damaged.
fn expect_one(changed: usize, id: i64, what: &str) -> Result<()> {
    if changed == 1 {
        Ok(())
    } else {
        Err(Error::damaged(format!(
            "{what} of send {id} changed {changed} rows instead of 1"
        )))
    }
}

/// The dispatch marker: fenced on the lease token; returns the ids still held.
fn mark_tx(tx: &Transaction<'_>, rows: &[(i64, i64)], now: i64, lease_ms: i64) -> Result<Vec<i64>> {
    let mut st = tx.prepare_cached(MARK_DISPATCHED)?;
    let mut held = Vec::with_capacity(rows.len());
    for &(id, token) in rows {
        let n = st.execute(named_params! {
            ":id": id,
            ":token": token,
            ":now": now,
            ":until": now + lease_ms,
        })?;
        if n == 1 {
            held.push(id);
        }
    }
    Ok(held)
}

/// An acceptance for a row that is already `sent`: `store::ledger::confirmed_again` decides;
/// this reads the row and writes its note.
fn confirmed_twice(tx: &Transaction<'_>, id: i64, provider_id: Option<&str>) -> Result<()> {
    let stored: Option<Option<String>> = tx
        .prepare_cached(RECORD_CHECK_ROW)?
        .query_row([id], |r| r.get(0))
        .optional()?;
    if let Some(note) = crate::store::ledger::confirmed_again(id, provider_id, stored)? {
        tx.prepare_cached(RECORD_NOTE_TWICE)?
            .execute(params![id, note])?;
    }
    Ok(())
}

/// The statements of one record group, prepared once for the group.
struct RecordStatements<'t> {
    sent: rusqlite::CachedStatement<'t>,
    /// The fence failed but the provider said yes: the truth is "sent", whoever holds the row
    /// now. Never drop it.
    late: rusqlite::CachedStatement<'t>,
    failed: rusqlite::CachedStatement<'t>,
    add_suppression: rusqlite::CachedStatement<'t>,
    retry: rusqlite::CachedStatement<'t>,
    doubt: rusqlite::CachedStatement<'t>,
}

impl<'t> RecordStatements<'t> {
    fn prepare(tx: &'t Transaction<'_>) -> Result<Self> {
        Ok(RecordStatements {
            sent: tx.prepare_cached(RECORD_SENT)?,
            late: tx.prepare_cached(RECORD_LATE)?,
            failed: tx.prepare_cached(RECORD_FAILED)?,
            add_suppression: tx.prepare_cached(RECORD_ADD_SUPPRESSION)?,
            retry: tx.prepare_cached(RECORD_RETRY)?,
            doubt: tx.prepare_cached(RECORD_IN_DOUBT)?,
        })
    }
}

/// Apply a group of outcomes, each fenced on its lease token.
fn record_tx(tx: &Transaction<'_>, records: &[Record], now: i64) -> Result<RecordStats> {
    let mut stats = RecordStats::default();
    let mut st = RecordStatements::prepare(tx)?;
    let half = records.len() / 2;
    for (i, r) in records.iter().enumerate() {
        if i == half && i > 0 {
            crash::point("mid_confirm_group");
        }
        match &r.outcome {
            Outcome::Accepted { provider_id, note } => record_accepted(
                tx,
                &mut st,
                r,
                provider_id.as_deref(),
                note,
                now,
                &mut stats,
            )?,
            Outcome::Failed { error, suppress } => {
                let n = st.failed.execute(named_params! {
                    ":id": r.id, ":token": r.token, ":error": error, ":now": now,
                })?;
                if n == 1 {
                    stats.failed += 1;
                    if let Some(reason) = suppress {
                        st.add_suppression.execute(params![r.id, reason, now])?;
                    }
                } else {
                    stats.fenced_out += 1;
                }
            }
            Outcome::Retry {
                error,
                retry_at,
                maybe_delivered,
            } => {
                let n = st.retry.execute(named_params! {
                    ":id": r.id,
                    ":token": r.token,
                    ":error": error,
                    ":retry_at": retry_at,
                    ":now": now,
                    ":maybe_delivered": maybe_delivered,
                })?;
                count_fenced(n, &mut stats.retried, &mut stats.fenced_out);
            }
            Outcome::InDoubt { error } => {
                let n = st.doubt.execute(named_params! {
                    ":id": r.id, ":token": r.token, ":error": error, ":now": now,
                })?;
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

/// A row just parked in doubt (`parked`) whose outcome a provider webhook reported while its
/// call was still running (the report was kept, `Webhooks::apply_webhook`): settled as the
/// report says (as sent: with the report's provider message id when the row has none). Returns
/// the settled outcome (true: sent), None when no report came.
fn settle_parked_from_report(
    tx: &Transaction<'_>,
    id: i64,
    now: i64,
    parked: bool,
) -> Result<Option<bool>> {
    if !parked {
        return Ok(None);
    }
    let (sent, provider_id): (Option<bool>, Option<String>) = tx
        .prepare_cached(RECORD_DOUBT_REPORT)?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let Some(sent) = sent else {
        return Ok(None);
    };
    let n = tx
        .prepare_cached(RECORD_SETTLE_FROM_REPORT)?
        .execute(params![id, sent, now, provider_id])?;
    expect_one(n, id, "settle by webhook")?;
    Ok(Some(sent))
}

/// A fenced statement changed its row (`n == 1`: counted in `done`) or lost the fence.
fn count_fenced(n: usize, done: &mut u64, fenced_out: &mut u64) {
    if n == 1 {
        *done += 1;
    } else {
        *fenced_out += 1;
    }
}

/// Record one acceptance: fenced; else late (the lease was lost); else a row already sent.
fn record_accepted(
    tx: &Transaction<'_>,
    st: &mut RecordStatements<'_>,
    r: &Record,
    provider_id: Option<&str>,
    note: &Option<String>,
    now: i64,
    stats: &mut RecordStats,
) -> Result<()> {
    if provider_id.is_none() {
        stats.already_accepted += 1;
    }
    let n = st.sent.execute(named_params! {
        ":id": r.id,
        ":token": r.token,
        ":provider_id": provider_id,
        ":now": now,
        ":note": note,
    })?;
    if n == 1 {
        stats.sent += 1;
    } else if st.late.execute(params![r.id, provider_id, now])? == 1 {
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

// The hot SQL, named: the functions above use these, and `sendonce bench` prints their query
// plans (`SqliteStore::hot_query_plans`).

const START_DUE_CAMPAIGNS: &str =
    "UPDATE campaigns SET status = 'sending', started_at = coalesce(started_at, ?1)
     WHERE status = 'approved' AND scheduled_for <= ?1 RETURNING id";

const ACTIVE_CAMPAIGNS: &str = "SELECT c.id, c.account_id, c.channel, c.sender, c.subject, c.body,
     c.list_complete, c.templated, a.name, c.body_format, c.html, c.reply_to, c.sms_footer, c.name,
     (SELECT json_group_array(l.name) FROM campaign_lists cl JOIN lists l ON l.id = cl.list_id
      WHERE cl.campaign_id = c.id),
     (SELECT json_group_array(cl.list_id) FROM campaign_lists cl WHERE cl.campaign_id = c.id),
     c.transactional OR c.kind <> 'campaign'
     FROM campaigns c JOIN accounts a ON a.id = c.account_id
     WHERE c.status = 'sending' ORDER BY c.id";

/// The campaign row, and whether it targets lists (else: the whole account).
const LIST_CAMPAIGN: &str = "SELECT account_id, channel, list_cursor, list_complete, status,
            EXISTS (SELECT 1 FROM campaign_lists cl WHERE cl.campaign_id = campaigns.id), filter
     FROM campaigns WHERE id = ?1";

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

/// Insert the recipients among subscribers `c.cursor < id <= end`. One row per normalised
/// address (UNIQUE (campaign_id, address)); re-running a chunk after a crash inserts nothing
/// twice (ON CONFLICT DO NOTHING). The statement is cached by its text, which depends on the
/// filter's shape only (its values are bound).
fn insert_chunk(
    tx: &Transaction<'_>,
    campaign_id: i64,
    c: &ListCampaign,
    filter: Option<&Filter>,
    end: i64,
) -> Result<()> {
    let now = crate::domain::clock::now_ms();
    let compiled = filter.map(|f| segment::compile(Some(f)));
    let sql = list_insert_sql(
        c.channel,
        c.targeted,
        compiled.as_ref().map(|f| f.sql.as_str()),
    );
    let fixed: [(&str, &dyn rusqlite::ToSql); 6] = [
        (":campaign", &campaign_id),
        (":account", &c.account_id),
        (":cursor", &c.cursor),
        (":now", &now),
        (":end", &end),
        (":channel", &c.channel),
    ];
    let params = match &compiled {
        Some(f) => f.with(&fixed),
        None => fixed.to_vec(),
    };
    tx.prepare_cached(&sql)?.execute(params.as_slice())?;
    Ok(())
}

const LIST_CHUNK_END: &str = "SELECT max(id), count(*) FROM (SELECT id FROM subscribers
     WHERE account_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3)";

const LIST_ADVANCE_CURSOR: &str =
    "UPDATE campaigns SET list_cursor = coalesce(?2, list_cursor), list_complete = ?3
     WHERE id = ?1";

const RELEASE: &str = "UPDATE sends SET status = 'queued', lease_token = NULL, lease_owner = NULL,
     visible_at = ?3, updated_at = ?3
     WHERE id = ?1 AND lease_token = ?2 AND status = 'leased' AND dispatched_at IS NULL";

const NEXT_VISIBLE: &str = "SELECT min(visible_at) FROM sends
     WHERE campaign_id = ?1 AND status IN ('queued', 'leased')";

const RECONCILABLE: &str = "SELECT id, job_id, address FROM sends
     WHERE campaign_id = ?1 AND status = 'in_doubt' AND doubt_since < ?2
     ORDER BY id LIMIT ?3";

/// Runs every tick. The redundant `status IN ('queued', 'leased')` lets SQLite use the
/// `sends_claim` partial index (expired leases only); without it the plan walks every row of
/// every cancelled campaign, every second, forever.
const SWEEP_CANCELLED: &str =
    "UPDATE sends SET status = CASE WHEN dispatched_at IS NULL THEN 'cancelled'
     ELSE 'in_doubt' END,
     doubt_since = CASE WHEN dispatched_at IS NULL THEN doubt_since
     ELSE coalesce(doubt_since, dispatched_at) END,
     lease_token = NULL, updated_at = ?1
     WHERE status IN ('queued', 'leased') AND status = 'leased' AND visible_at <= ?1
     AND campaign_id IN (SELECT id FROM campaigns WHERE status = 'cancelled')";

const CLAIM_CAMPAIGN_STATUS: &str =
    "SELECT status FROM campaigns WHERE id = ?1 AND account_id = ?2";

const CLAIM_CANDIDATES: &str = "SELECT s.id, s.job_id, s.address, s.vars, s.attempts,
     CASE WHEN s.status = 'leased' AND s.dispatched_at IS NOT NULL
     THEN min(s.dispatched_at, coalesce(s.doubt_since, s.dispatched_at))
     ELSE s.doubt_since END,
     EXISTS (SELECT 1 FROM suppressions su
     WHERE su.account_id = s.account_id AND su.channel = :channel
     AND su.address = s.address),
     s.status
     FROM sends s
     WHERE s.campaign_id = :campaign AND s.account_id = :account
     AND s.status IN ('queued', 'leased') AND s.visible_at <= :now
     ORDER BY s.visible_at, s.id LIMIT :batch";

const CLAIM_LEASE_ONE: &str =
    "UPDATE sends SET status = 'leased', lease_token = :token, lease_owner = :owner,
     visible_at = :until, dispatched_at = :dispatched_at, attempts = attempts + :increment,
     doubt_since = :since, updated_at = :now,
     claimed_at = CASE WHEN :since IS NULL THEN :claimed_at
     ELSE coalesce(claimed_at, :claimed_at) END
     WHERE id = :id AND status IN ('queued', 'leased')";

const CLAIM_PARK_IN_DOUBT: &str =
    "UPDATE sends SET status = 'in_doubt', lease_token = NULL, dispatched_at = NULL,
     doubt_since = ?2, updated_at = ?3,
     last_error = coalesce(last_error || '; ', '') ||
     'lease expired after dispatch; provider has no usable idempotency key'
     WHERE id = ?1 AND status IN ('queued', 'leased')";

/// NULL: no delivery report for the job; 1: one says delivered; 0: only failures. Then the
/// provider's message id of the first report that says delivered and names one.
const CLAIM_CALLBACK: &str = "SELECT max(delivery = 'sent'),
     (SELECT r.provider_message_id FROM webhook_events r
      WHERE r.account_id = ?1 AND r.job_id = ?2 AND r.delivery = 'sent'
        AND r.provider_message_id IS NOT NULL
      ORDER BY r.id LIMIT 1)
     FROM webhook_events
     WHERE account_id = ?1 AND job_id = ?2 AND delivery IS NOT NULL";

/// Settled as sent, the row keeps the report's provider message id (`?4`) unless it has one.
const CLAIM_SETTLE_BY_CALLBACK: &str =
    "UPDATE sends SET status = CASE WHEN ?2 THEN 'sent' ELSE 'failed' END,
     sent_at = CASE WHEN ?2 THEN ?3 ELSE sent_at END,
     provider_message_id = CASE WHEN ?2 THEN coalesce(provider_message_id, ?4)
     ELSE provider_message_id END,
     lease_token = NULL, dispatched_at = NULL, doubt_since = NULL, updated_at = ?3,
     last_error = CASE WHEN ?2 THEN 'delivery reported by a provider webhook'
     ELSE 'failure reported by a provider webhook' END
     WHERE id = ?1 AND status IN ('queued', 'leased')";

const CLAIM_SUPPRESS: &str =
    "UPDATE sends SET status = 'suppressed', lease_token = NULL, updated_at = ?2,
     last_error = 'address suppressed before claim'
     WHERE id = ?1 AND status IN ('queued', 'leased')";

const CLAIM_LEASE_MANY: &str =
    "UPDATE sends SET status = 'leased', lease_token = :token, lease_owner = :owner,
     visible_at = :until, dispatched_at = :dispatched_at, attempts = attempts + :increment,
     doubt_since = NULL, updated_at = :now, claimed_at = :claimed_at
     WHERE id IN (SELECT value FROM json_each(:ids)) AND status IN ('queued', 'leased')";

const MARK_DISPATCHED: &str =
    "UPDATE sends SET dispatched_at = :now, attempts = attempts + 1, visible_at = :until,
     updated_at = :now
     WHERE id = :id AND lease_token = :token AND status = 'leased'";

const RECORD_SENT: &str =
    "UPDATE sends SET status = 'sent', provider_message_id = :provider_id, sent_at = :now,
     updated_at = :now, lease_token = NULL, doubt_since = NULL, last_error = :note
     WHERE id = :id AND lease_token = :token AND status = 'leased'";

const RECORD_LATE: &str =
    "UPDATE sends SET status = 'sent', provider_message_id = ?2, sent_at = ?3,
     updated_at = ?3, lease_token = NULL, doubt_since = NULL,
     last_error = 'confirmed after the lease was lost'
     WHERE id = ?1 AND status <> 'sent'";

const RECORD_CHECK_ROW: &str = "SELECT provider_message_id FROM sends WHERE id = ?1";

const RECORD_NOTE_TWICE: &str =
    "UPDATE sends SET last_error = coalesce(last_error || '; ', '') || ?2 WHERE id = ?1";

const RECORD_FAILED: &str =
    "UPDATE sends SET status = 'failed', last_error = :error, updated_at = :now,
     lease_token = NULL
     WHERE id = :id AND lease_token = :token AND status = 'leased'";

const RECORD_ADD_SUPPRESSION: &str =
    "INSERT INTO suppressions (account_id, channel, address, reason, source, created_at)
     SELECT s.account_id, c.channel, s.address, ?2, 'provider', ?3
     FROM sends s JOIN campaigns c ON c.id = s.campaign_id WHERE s.id = ?1
     ON CONFLICT DO NOTHING";

const RECORD_RETRY: &str =
    "UPDATE sends SET status = 'queued', last_error = :error, visible_at = :retry_at,
     updated_at = :now, lease_token = NULL, lease_owner = NULL,
     doubt_since = CASE WHEN :maybe_delivered THEN coalesce(doubt_since, dispatched_at)
     ELSE doubt_since END,
     dispatched_at = NULL
     WHERE id = :id AND lease_token = :token AND status = 'leased'";

const RECORD_IN_DOUBT: &str =
    "UPDATE sends SET status = 'in_doubt', last_error = :error, updated_at = :now,
     lease_token = NULL,
     doubt_since = coalesce(doubt_since, dispatched_at, :now),
     dispatched_at = NULL
     WHERE id = :id AND lease_token = :token AND status = 'leased'";

/// NULL: no delivery report for the row's job; 1: one says delivered; 0: only failures. Then
/// the provider's message id of the first report that says delivered and names one.
const RECORD_DOUBT_REPORT: &str = "SELECT max(w.delivery = 'sent'),
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
const RECORD_SETTLE_FROM_REPORT: &str =
    "UPDATE sends SET status = CASE WHEN ?2 THEN 'sent' ELSE 'failed' END,
     sent_at = CASE WHEN ?2 THEN ?3 ELSE sent_at END,
     provider_message_id = CASE WHEN ?2 THEN coalesce(provider_message_id, ?4)
     ELSE provider_message_id END,
     doubt_since = NULL, updated_at = ?3,
     last_error = coalesce(last_error || '; ', '') || CASE WHEN ?2
     THEN 'delivery reported by a provider webhook' ELSE 'failure reported by a provider webhook' END
     WHERE id = ?1 AND status = 'in_doubt'";

/// The list-building INSERT for a channel (the address column differs). An address already
/// suppressed gets its row too, as `suppressed` with the reason, so that status and report
/// account for everyone the campaign considered. The job id is built from the same constants
/// as [`crate::domain::model::campaign_job_id`].
/// With `targeted`, only subscribers with a `subscribed` membership in at least one of the
/// campaign's lists (`campaign_lists`); otherwise every confirmed subscriber of the account (a
/// subscriber that arrived through double opt-in lists only is `pending` until it confirms).
/// The memberships are read as one key range per targeted list over the chunk's ids (a set
/// SQLite builds once per chunk; the subscribers are then read by id, in order), not probed
/// list by list for every subscriber: with three lists overlapping by a third that took the
/// targeted build from about 1.15-1.25x to 1.06-1.14x the account-wide time per row (`sendonce
/// bench --only list-build`; the set costs one insert per membership), and a small list in a
/// large account reads only its members.
fn list_insert_sql(channel: Channel, targeted: bool, filter: Option<&str>) -> String {
    let addr = match channel {
        Channel::Sms => "s.phone",
        Channel::Email => "s.email_norm",
    };
    let in_lists = if targeted {
        "AND s.id IN (SELECT m.subscriber_id FROM campaign_lists cl
                        JOIN list_members m ON m.list_id = cl.list_id
                        WHERE cl.campaign_id = :campaign AND m.status = 'subscribed'
                          AND m.subscriber_id > :cursor AND m.subscriber_id <= :end)"
            .to_string()
    } else {
        String::new()
    };
    // The audience filter: a condition on `s` whose values are all bound (`segment.rs`).
    let filter = filter.map_or(String::new(), |f| format!("AND {f}"));
    // The scope: the installation, then `~L` for a campaign or subscriber made after an adopt
    // that found the file gone back (L: that adopt's label; `model::key_scope`).
    let job_id = format!(
        "{} || :campaign || {} || s.id || {}
                || (SELECT substr(id, 1, {INSTALLATION_SCOPE_LEN}) FROM installation
                    WHERE singleton = 1)
                || coalesce({} || (SELECT max(e.label) FROM guard_epochs e
                    WHERE e.campaigns_through < :campaign
                       OR e.subscribers_through < s.id), '')",
        sql_text(CAMPAIGN_JOB_PREFIX),
        sql_text(CAMPAIGN_JOB_SUB),
        sql_text(CAMPAIGN_JOB_AT),
        sql_text(EPOCH_MARK)
    );
    format!(
        "INSERT INTO sends (account_id, campaign_id, subscriber_id, job_id, address,
                            vars, status, last_error, doubt_since, visible_at, created_at,
                            updated_at)
         SELECT s.account_id, :campaign, s.id, {job_id}, {addr}, {CAPTURED_VARS},
                CASE WHEN su.address IS NULL THEN 'queued' ELSE 'suppressed' END,
                CASE WHEN su.address IS NULL THEN NULL
                     ELSE 'address suppressed before the list was built' END,
                CASE WHEN su.address IS NULL THEN {REPLAY_SINCE} END,
                :now, :now, :now
         FROM subscribers s NOT INDEXED
         LEFT JOIN suppressions su ON su.account_id = s.account_id
                                  AND su.channel = :channel AND su.address = {addr}
         WHERE s.account_id = :account AND s.id > :cursor AND s.id <= :end
           AND s.status = 'confirmed' AND {addr} IS NOT NULL {in_lists} {filter}
         ORDER BY s.id
         ON CONFLICT DO NOTHING"
    )
}

/// A row that list building adds to a campaign that existed when `adopt` found the file gone
/// back in time may have been sent by the lost timeline: it starts as possibly delivered
/// (`schema/0011_guard.sql`). NULL for every other campaign.
const REPLAY_SINCE: &str = "(SELECT g.replay_since FROM guard g
     WHERE g.singleton = 1 AND :campaign <= g.replay_through)";

/// The template variables a send captures from its subscriber (`s`): the attributes, with the
/// built-ins on top. Campaign preview reads the same expression.
pub(super) const CAPTURED_VARS: &str =
    "json_patch(s.attrs, json_object('name', s.name, 'email', s.email, 'phone', s.phone))";

/// A SQL string literal.
fn sql_text(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Every statement of the send path, by name, for `SqliteStore::hot_query_plans`.
pub(super) fn hot_queries() -> Vec<(&'static str, String)> {
    let mut q: Vec<(&'static str, String)> = [
        ("start due campaigns", START_DUE_CAMPAIGNS),
        ("active campaigns", ACTIVE_CAMPAIGNS),
        ("list: campaign row", LIST_CAMPAIGN),
        ("list: chunk end", LIST_CHUNK_END),
        ("list: advance cursor", LIST_ADVANCE_CURSOR),
        ("claim: campaign status", CLAIM_CAMPAIGN_STATUS),
        ("claim: due rows + suppression check", CLAIM_CANDIDATES),
        ("claim: lease many (JSON ids)", CLAIM_LEASE_MANY),
        ("claim: lease one (same-key retry)", CLAIM_LEASE_ONE),
        ("claim: park in doubt", CLAIM_PARK_IN_DOUBT),
        ("claim: suppress", CLAIM_SUPPRESS),
        ("claim: webhook report for a job", CLAIM_CALLBACK),
        ("claim: settle by webhook", CLAIM_SETTLE_BY_CALLBACK),
        ("dispatch marker (separate)", MARK_DISPATCHED),
        ("record: sent (fenced)", RECORD_SENT),
        ("record: late confirmation", RECORD_LATE),
        ("record: check a twice-confirmed row", RECORD_CHECK_ROW),
        ("record: note a twice-confirmed row", RECORD_NOTE_TWICE),
        ("record: failed", RECORD_FAILED),
        ("record: add suppression", RECORD_ADD_SUPPRESSION),
        ("record: retry", RECORD_RETRY),
        ("record: in doubt", RECORD_IN_DOUBT),
        (
            "record: webhook report for a parked row",
            RECORD_DOUBT_REPORT,
        ),
        (
            "record: settle a parked row by webhook",
            RECORD_SETTLE_FROM_REPORT,
        ),
        ("release", RELEASE),
        ("next visible", NEXT_VISIBLE),
        ("reconcilable", RECONCILABLE),
        ("sweep cancelled", SWEEP_CANCELLED),
        ("complete if done", super::campaigns::COMPLETE_IF_DONE),
        ("status counts", super::campaigns::STATUS_COUNTS),
    ]
    .into_iter()
    .map(|(n, q)| (n, q.to_string()))
    .collect();
    let chunks = [
        ("list: insert chunk (email)", Channel::Email, false),
        ("list: insert chunk (sms)", Channel::Sms, false),
        ("list: insert chunk (email, lists)", Channel::Email, true),
        ("list: insert chunk (sms, lists)", Channel::Sms, true),
    ];
    for (i, (name, channel, targeted)) in chunks.into_iter().enumerate() {
        q.insert(3 + i, (name, list_insert_sql(channel, targeted, None)));
    }
    // With an audience filter: the same range, the filter evaluated on each row of it.
    let sample = Filter::parse(r#"city = "x" and not (plan in ("a", "b") or has zone)"#)
        .map(|f| segment::compile(Some(&f)).sql)
        .unwrap_or_default();
    q.insert(
        3 + chunks.len(),
        (
            "list: insert chunk (email, lists, filter)",
            list_insert_sql(Channel::Email, true, Some(&sample)),
        ),
    );
    q
}

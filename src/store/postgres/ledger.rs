//! `Ledger` on PostgreSQL: the same rules as `sqlite/ledger.rs`, statement for statement, with
//! the claim's row reads taken `FOR UPDATE OF s SKIP LOCKED` so workers on several hosts never
//! wait on each other's rows and never lease the same row twice. `SKIP LOCKED` alone would
//! forget a claim whose host dies between the call and the commit; the lease (expiry in
//! `visible_at`, fence token in `lease_token`, dispatch marker in `dispatched_at`) is what
//! survives, exactly as on SQLite: an expired dispatched row is retried with the same key inside
//! the provider's key window or parked in doubt, and a late confirmation is fenced on its token.
//!
//! Transactions run at READ COMMITTED: each statement sees what was committed before it
//! started, so a suppression committed before the claim's candidate read wins. A deadlock or
//! serialization failure (possible between a late confirmation and another worker's record)
//! rolls back and reruns the whole transaction, at most three times.
//!
//! The claim counter (`GuardState::generation`) is the sequence `claim_generation`, not an
//! UPDATE of the guard row: one row every claim updates would serialize every worker of every
//! host on its lock.
//!
//! `build_list_chunk` applies a campaign's audience filter as compiled by `segment.rs`.

use super::PgStore;
use crate::error::{Error, Result};
use crate::store::ledger::{decide, Decision, LeaseTerms};
use crate::store::{
    ActiveCampaign, ClaimRequest, Claimed, ClaimedRow, Ledger, Outcome, Record, RecordStats,
};
use deadpool_postgres::Transaction;

/// An error inside a transaction: the driver's (kept whole, so a deadlock can be retried) or
/// ours.
pub(crate) enum TxError {
    Pg(tokio_postgres::Error),
    Other(Error),
}

impl From<tokio_postgres::Error> for TxError {
    fn from(e: tokio_postgres::Error) -> Self {
        TxError::Pg(e)
    }
}

impl From<Error> for TxError {
    fn from(e: Error) -> Self {
        TxError::Other(e)
    }
}

impl From<TxError> for Error {
    fn from(e: TxError) -> Self {
        match e {
            TxError::Pg(e) => e.into(),
            TxError::Other(e) => e,
        }
    }
}

pub(crate) type TxResult<T> = std::result::Result<T, TxError>;

/// A deadlock or serialization failure: the whole transaction can run again.
pub(crate) fn retryable(e: &TxError) -> bool {
    use tokio_postgres::error::SqlState;
    match e {
        TxError::Pg(e) => matches!(
            e.code(),
            Some(c) if *c == SqlState::T_R_DEADLOCK_DETECTED
                || *c == SqlState::T_R_SERIALIZATION_FAILURE
        ),
        TxError::Other(_) => false,
    }
}

/// Run `$body` (which uses `$tx` and returns `TxResult<T>`) in a transaction on `$client` and
/// commit it; a deadlock or serialization failure reruns it (three more times at most).
macro_rules! transaction {
    ($client:expr, $tx:ident => $body:expr) => {{
        let mut tries = 0u32;
        loop {
            let $tx = $client.transaction().await?;
            let out: $crate::store::postgres::ledger::TxResult<_> = async { $body }.await;
            let out = match out {
                Ok(v) => $tx.commit().await.map(|_| v).map_err(Into::into),
                Err(e) => Err(e),
            };
            match out {
                Ok(v) => break Ok(v),
                Err(e) if $crate::store::postgres::ledger::retryable(&e) && tries < 3 => {
                    tries += 1;
                    continue;
                }
                Err(e) => break Err($crate::error::Error::from(e)),
            }
        }
    }};
}
pub(crate) use transaction;

impl Ledger for PgStore {
    fn start_due_campaigns(&self, now: i64) -> Result<Vec<i64>> {
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                let rows = tx.query(START_DUE_CAMPAIGNS, &[&now]).await?;
                Ok(rows.iter().map(|r| r.get::<_, i64>(0)).collect::<Vec<i64>>())
            })
        })
    }

    fn active_campaigns(&self) -> Result<Vec<ActiveCampaign>> {
        self.run(|pool| async move {
            let c = pool.get().await?;
            let rows = c.query(ACTIVE_CAMPAIGNS, &[]).await?;
            let mut out = Vec::with_capacity(rows.len());
            for r in rows {
                let channel: String = r.get(2);
                let channel = channel
                    .parse()
                    .map_err(|_| Error::damaged(format!("campaign channel {channel:?}")))?;
                let format: String = r.get(9);
                let (body, html): (String, Option<String>) = match format.as_str() {
                    // body_format 'html': `body` holds the HTML (see schema 0005).
                    "html" => (String::new(), Some(r.get(5))),
                    _ => (r.get(5), r.get(10)),
                };
                let mut list_names: Vec<String> = r.get(14);
                list_names.sort();
                out.push(ActiveCampaign {
                    id: r.get(0),
                    account_id: r.get(1),
                    channel,
                    sender: r.get(3),
                    subject: r.get(4),
                    body,
                    html,
                    reply_to: r.get(11),
                    sms_footer: r.get(12),
                    name: r.get(13),
                    list_names,
                    list_ids: r.get(15),
                    templated: r.get(7),
                    transactional: r.get(16),
                    account_name: r.get(8),
                    list_complete: r.get(6),
                });
            }
            Ok(out)
        })
    }

    /// One chunk of the recipient list, as on SQLite; the campaign row is locked first, so
    /// builders on several hosts take turns and the cursor only moves forward. The audience
    /// filter is compiled by `segment.rs` (its values bound after the statement's own).
    fn build_list_chunk(&self, campaign_id: i64, chunk: usize) -> Result<bool> {
        let chunk = chunk as i64;
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                let Some(row) = tx.query_opt(LIST_CAMPAIGN, &[&campaign_id]).await? else {
                    return Ok(true);
                };
                let (account, channel, cursor): (i64, String, i64) =
                    (row.get(0), row.get(1), row.get(2));
                let (complete, status, targeted): (bool, String, bool) =
                    (row.get(3), row.get(4), row.get(5));
                let filter: Option<String> = row.get(6);
                if complete || status != "sending" {
                    return Ok(true);
                }
                lock_subscribers(&tx, account, true).await?;
                let filter = filter
                    .as_deref()
                    .map(|f| crate::domain::segment::Filter::parse_stored(f, campaign_id))
                    .transpose()?;
                let compiled = filter
                    .as_ref()
                    .map(|f| super::segment::compile(Some(f), 7));
                let channel: crate::domain::address::Channel = channel
                    .parse()
                    .map_err(|_| Error::damaged(format!("campaign channel {channel:?}")))?;
                let end = tx
                    .query_one(LIST_CHUNK_END, &[&account, &cursor, &chunk])
                    .await?;
                let (chunk_end, n): (Option<i64>, i64) = (end.get(0), end.get(1));
                if let Some(end) = chunk_end {
                    let now = crate::domain::clock::now_ms();
                    let sql = list_insert_sql(
                        channel,
                        targeted,
                        compiled.as_ref().map(|f| f.sql.as_str()),
                    );
                    let channel = channel.as_str();
                    let fixed: [&(dyn tokio_postgres::types::ToSql + Sync); 6] =
                        [&campaign_id, &account, &cursor, &now, &end, &channel];
                    let params = match &compiled {
                        Some(f) => f.with(&fixed),
                        None => fixed.to_vec(),
                    };
                    tx.execute(&sql, &params).await?;
                }
                let complete = n < chunk;
                tx.execute(LIST_ADVANCE_CURSOR, &[&campaign_id, &chunk_end, &complete])
                    .await?;
                Ok(complete)
            })
        })
    }

    fn claim(&self, req: &ClaimRequest) -> Result<Claimed> {
        let req = req.clone();
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => claim_tx(&tx, &req, false).await)
        })
    }

    fn mark_dispatched(&self, rows: &[(i64, i64)], now: i64, lease_ms: i64) -> Result<Vec<i64>> {
        let (ids, tokens): (Vec<i64>, Vec<i64>) = rows.iter().copied().unzip();
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                let held = tx
                    .query(MARK_DISPATCHED, &[&ids, &tokens, &now, &(now + lease_ms)])
                    .await?;
                Ok(held.iter().map(|r| r.get::<_, i64>(0)).collect::<Vec<i64>>())
            })
        })
    }

    fn record(&self, records: &[Record], now: i64) -> Result<RecordStats> {
        let records = records.to_vec();
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => record_tx(&tx, &records, now).await)
        })
    }

    /// One transaction: the outcomes, then (with `claim`) a claim whose rows get their
    /// dispatch marker in the lease statement itself.
    fn cycle(
        &self,
        records: &[Record],
        claim: Option<&ClaimRequest>,
        now: i64,
    ) -> Result<(RecordStats, Claimed)> {
        if records.is_empty() && claim.is_none() {
            return Ok((RecordStats::default(), Claimed::default()));
        }
        let records = records.to_vec();
        let claim = claim.cloned();
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            let both = transaction!(c, tx => {
                let stats = record_tx(&tx, &records, now).await?;
                let got = match &claim {
                    Some(req) => claim_tx(&tx, req, true).await?,
                    None => Claimed::default(),
                };
                Ok((stats, got))
            });
            match both {
                // The claim found damage and rolled everything back: the outcomes of calls
                // that did finish are still the truth, so they are committed on their own.
                Err(e) if e.stops_worker() && !records.is_empty() => {
                    transaction!(c, tx => record_tx(&tx, &records, now).await)?;
                    Err(e)
                }
                other => other,
            }
        })
    }

    fn release(&self, rows: &[(i64, i64)], now: i64) -> Result<u64> {
        let (ids, tokens): (Vec<i64>, Vec<i64>) = rows.iter().copied().unzip();
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => Ok(tx.execute(RELEASE, &[&ids, &tokens, &now]).await?))
        })
    }

    fn try_complete(&self, campaign_id: i64, now: i64) -> Result<bool> {
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                tx.execute(LOCK_CAMPAIGN, &[&campaign_id]).await?;
                Ok(tx.execute(COMPLETE_IF_DONE, &[&campaign_id, &now]).await? == 1)
            })
        })
    }

    fn next_visible(&self, campaign_id: i64) -> Result<Option<i64>> {
        self.run(move |pool| async move {
            let c = pool.get().await?;
            Ok(c.query_one(NEXT_VISIBLE, &[&campaign_id]).await?.get(0))
        })
    }

    fn sweep_cancelled(&self, now: i64) -> Result<u64> {
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                let ids: Vec<i64> = tx
                    .query(CANCELLED_CAMPAIGNS, &[])
                    .await?
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                if ids.is_empty() {
                    return Ok(0);
                }
                Ok(tx.execute(SWEEP_CANCELLED, &[&now, &ids]).await?)
            })
        })
    }

    fn reconcilable(
        &self,
        campaign_id: i64,
        before: i64,
        limit: usize,
    ) -> Result<Vec<(i64, String, String)>> {
        let limit = limit as i64;
        self.run(move |pool| async move {
            let c = pool.get().await?;
            let rows = c
                .query(RECONCILABLE, &[&campaign_id, &before, &limit])
                .await?;
            Ok(rows
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect())
        })
    }

    fn settle_doubt(&self, send_id: i64, found: Option<String>) -> Result<bool> {
        let now = crate::domain::clock::now_ms();
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                let as_sent = found.is_some();
                settle_doubt_tx(&tx, send_id, found.as_deref(), as_sent, now, "provider lookup")
                    .await
            })
        })
    }
}

/// Settle one row in doubt as sent (with the provider's id, if known) or queued again, then
/// complete the campaign if that was its last open row. False if it was not in doubt.
pub(crate) async fn settle_doubt_tx(
    tx: &Transaction<'_>,
    send_id: i64,
    provider_id: Option<&str>,
    as_sent: bool,
    now: i64,
    by: &str,
) -> TxResult<bool> {
    let campaign_id: Option<i64> = tx
        .query_opt(
            "SELECT campaign_id FROM sends WHERE id = $1 AND status = 'in_doubt' FOR UPDATE",
            &[&send_id],
        )
        .await?
        .map(|r| r.get(0));
    let Some(campaign_id) = campaign_id else {
        return Ok(false);
    };
    if as_sent {
        tx.execute(
            "UPDATE sends SET status = 'sent', sent_at = $2, updated_at = $2,
                    doubt_since = NULL,
                    provider_message_id = coalesce($3, provider_message_id),
                    last_error = 'resolved as sent by ' || $4
             WHERE id = $1 AND status = 'in_doubt'",
            &[&send_id, &now, &provider_id, &by],
        )
        .await?;
    } else {
        tx.execute(
            "UPDATE sends SET status = 'queued', visible_at = $2, updated_at = $2,
                    doubt_since = NULL, dispatched_at = NULL,
                    last_error = 'requeued by ' || $3 || ' after doubt'
             WHERE id = $1 AND status = 'in_doubt'",
            &[&send_id, &now, &by],
        )
        .await?;
    }
    tx.execute(LOCK_CAMPAIGN, &[&campaign_id]).await?;
    tx.execute(COMPLETE_IF_DONE, &[&campaign_id, &now]).await?;
    Ok(true)
}

/// A due row the claim read and locked, before it decides what to do with it.
struct Candidate {
    id: i64,
    job_id: String,
    address: String,
    vars: String,
    attempts: i64,
    maybe_since: Option<i64>,
    suppressed: bool,
}

/// Advisory lock keys (PostgreSQL's one-bigint key space; the migration lock and the webhook
/// events' two-key locks live elsewhere in it or in the other space).
const OPT_OUT_LOCK: i64 = 1 << 62;
const SUBSCRIBERS_LOCK: i64 = 1 << 61;

/// Opt-outs and claims of one account in one order. SQLite's single writer orders them for
/// free; here an opt-out (suppression, removal, unsubscribe, bounce) takes this lock
/// exclusively before it writes and a claim shares it from before it reads its candidates to
/// its commit. So a claim either sees the opt-out, or committed before the opt-out was
/// written, and the opt-out's time (taken after the lock: the returned clock) is later than
/// the claim's. Returns the time after the lock was granted.
pub(crate) async fn lock_opt_outs(tx: &Transaction<'_>, account_id: i64) -> TxResult<i64> {
    tx.execute(
        "SELECT pg_advisory_xact_lock($1::bigint)",
        &[&(OPT_OUT_LOCK | account_id)],
    )
    .await?;
    Ok(crate::domain::clock::now_ms())
}

/// New subscribers and list building of one account in one order: identity ids are handed
/// out before commit, so without this a list chunk could end past an id committed early and
/// leave behind the lower ids of a slower import still in flight. Inserting subscribers shares
/// the lock; a list chunk takes it exclusively, so when it reads no insert is in flight.
pub(crate) async fn lock_subscribers(
    tx: &Transaction<'_>,
    account_id: i64,
    exclusive: bool,
) -> TxResult<()> {
    let sql = match exclusive {
        true => "SELECT pg_advisory_xact_lock($1::bigint)",
        false => "SELECT pg_advisory_xact_lock_shared($1::bigint)",
    };
    tx.execute(sql, &[&(SUBSCRIBERS_LOCK | account_id)]).await?;
    Ok(())
}

/// The due rows of the claim, locked (`FOR UPDATE SKIP LOCKED`), under the account's opt-out
/// lock shared until the commit ([`lock_opt_outs`]). A row in another state is damage.
async fn candidates(tx: &Transaction<'_>, req: &ClaimRequest) -> TxResult<Vec<Candidate>> {
    tx.execute(
        "SELECT pg_advisory_xact_lock_shared($1::bigint)",
        &[&(OPT_OUT_LOCK | req.account_id)],
    )
    .await?;
    let rows = tx
        .query(
            CLAIM_CANDIDATES,
            &[
                &req.campaign_id,
                &req.account_id,
                &req.channel.as_str(),
                &req.now,
                &(req.batch as i64),
            ],
        )
        .await?;
    let mut cands = Vec::with_capacity(rows.len());
    for r in rows {
        let status: String = r.get(7);
        if status != "queued" && status != "leased" {
            return Err(Error::damaged(format!(
                "send {} of campaign {} was claimed with status {status:?}",
                r.get::<_, i64>(0),
                req.campaign_id
            ))
            .into());
        }
        cands.push(Candidate {
            id: r.get(0),
            job_id: r.get(1),
            address: r.get(2),
            vars: r.get(3),
            attempts: r.get(4),
            maybe_since: r.get(5),
            suppressed: r.get(6),
        });
    }
    Ok(cands)
}

/// The campaign is still `sending` (and is this account's).
async fn campaign_is_sending(tx: &Transaction<'_>, req: &ClaimRequest) -> TxResult<bool> {
    let status: Option<String> = tx
        .query_opt(CLAIM_CAMPAIGN_STATUS, &[&req.campaign_id, &req.account_id])
        .await?
        .map(|r| r.get(0));
    Ok(status.as_deref() == Some("sending"))
}

/// The claim inside a transaction; with `dispatch`, every leased row also gets its dispatch
/// marker (attempts + 1, dispatched now) in the same UPDATE.
async fn claim_tx(tx: &Transaction<'_>, req: &ClaimRequest, dispatch: bool) -> TxResult<Claimed> {
    let mut out = Claimed::default();
    if !campaign_is_sending(tx, req).await? {
        return Ok(out);
    }
    let cands = candidates(tx, req).await?;
    // Taken after the rows are locked: the lease runs from now, not from `req.now`.
    let terms = LeaseTerms::now(req, dispatch);
    let mut plain = Vec::with_capacity(cands.len());
    for c in cands {
        // A row that may already have been delivered is first settled by a webhook's report.
        if c.maybe_since.is_some() && settled_by_callback(tx, &c, req).await? {
            out.settled_by_webhook += 1;
            continue;
        }
        match decide(c.maybe_since, c.suppressed, req) {
            Decision::InDoubt { since } => {
                let n = tx
                    .execute(CLAIM_PARK_IN_DOUBT, &[&c.id, &since, &req.now])
                    .await?;
                expect_one(n, c.id, "park in doubt")?;
                out.in_doubt += 1;
                continue;
            }
            Decision::Suppress => {
                let n = tx.execute(CLAIM_SUPPRESS, &[&c.id, &req.now]).await?;
                expect_one(n, c.id, "suppress")?;
                out.suppressed += 1;
                continue;
            }
            Decision::SameKeyRetry { since } => lease_one(tx, c.id, since, req, &terms).await?,
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
    lease_many(tx, &plain, req, &terms).await?;
    if !out.rows.is_empty() {
        tx.execute("SELECT nextval('claim_generation')", &[])
            .await?;
    }
    Ok(out)
}

/// Lease one row that may already have been delivered (same-key retry): it keeps its
/// `doubt_since` and the first `claimed_at` of its delivery chain.
async fn lease_one(
    tx: &Transaction<'_>,
    id: i64,
    since: i64,
    req: &ClaimRequest,
    terms: &LeaseTerms,
) -> TxResult<()> {
    let n = tx
        .execute(
            CLAIM_LEASE_ONE,
            &[
                &id,
                &req.token,
                &req.owner,
                &terms.until,
                &terms.dispatched_at,
                &terms.increment,
                &since,
                &req.now,
                &terms.claimed_at,
            ],
        )
        .await?;
    expect_one(n, id, "lease")
}

/// Lease the plain rows (nearly all of them) by one statement over the array of their ids.
async fn lease_many(
    tx: &Transaction<'_>,
    ids: &[i64],
    req: &ClaimRequest,
    terms: &LeaseTerms,
) -> TxResult<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let n = tx
        .execute(
            CLAIM_LEASE_MANY,
            &[
                &ids,
                &req.token,
                &req.owner,
                &terms.until,
                &terms.dispatched_at,
                &terms.increment,
                &req.now,
                &terms.claimed_at,
            ],
        )
        .await?;
    if n as usize != ids.len() {
        return Err(Error::damaged(format!(
            "the claim of campaign {} leased {n} rows instead of {}",
            req.campaign_id,
            ids.len()
        ))
        .into());
    }
    Ok(())
}

/// A row that may already have been delivered whose outcome a provider webhook reported:
/// settled as the report says (as sent: with the provider's message id of the first report
/// that says delivered and names one, unless the row has an id). False when no report came.
async fn settled_by_callback(
    tx: &Transaction<'_>,
    c: &Candidate,
    req: &ClaimRequest,
) -> TxResult<bool> {
    let row = tx
        .query_one(CLAIM_CALLBACK, &[&req.account_id, &c.job_id])
        .await?;
    let (sent, provider_id): (Option<bool>, Option<String>) = (row.get(0), row.get(1));
    let Some(sent) = sent else {
        return Ok(false);
    };
    let n = tx
        .execute(
            CLAIM_SETTLE_BY_CALLBACK,
            &[&c.id, &sent, &req.now, &provider_id],
        )
        .await?;
    expect_one(n, c.id, "settle by webhook")?;
    Ok(true)
}

fn expect_one(changed: u64, id: i64, what: &str) -> TxResult<()> {
    if changed == 1 {
        Ok(())
    } else {
        Err(Error::damaged(format!(
            "{what} of send {id} changed {changed} rows instead of 1"
        ))
        .into())
    }
}

/// Apply a group of outcomes, each fenced on its lease token. In id order, so two
/// transactions that touch the same rows lock them in the same order.
async fn record_tx(tx: &Transaction<'_>, records: &[Record], now: i64) -> TxResult<RecordStats> {
    let mut stats = RecordStats::default();
    let mut order: Vec<&Record> = records.iter().collect();
    order.sort_by_key(|r| r.id);
    let confirmed = confirm_accepted(tx, &order, now).await?;
    for r in order {
        match &r.outcome {
            Outcome::Accepted { provider_id, note } => {
                if provider_id.is_none() {
                    stats.already_accepted += 1;
                }
                if confirmed.contains(&r.id) {
                    stats.sent += 1;
                } else {
                    let pid = provider_id.as_deref();
                    record_accepted(tx, r, pid, note, now, &mut stats).await?;
                }
            }
            Outcome::Failed { error, suppress } => {
                let n = tx
                    .execute(RECORD_FAILED, &[&r.id, &r.token, error, &now])
                    .await?;
                count_fenced(n, &mut stats.failed, &mut stats.fenced_out);
                if let (1, Some(reason)) = (n, suppress) {
                    suppress_failed(tx, r.id, reason, now).await?;
                }
            }
            Outcome::Retry {
                error,
                retry_at,
                maybe_delivered,
            } => {
                let n = tx
                    .execute(
                        RECORD_RETRY,
                        &[&r.id, &r.token, error, retry_at, &now, maybe_delivered],
                    )
                    .await?;
                count_fenced(n, &mut stats.retried, &mut stats.fenced_out);
            }
            Outcome::InDoubt { error } => {
                let n = tx
                    .execute(RECORD_IN_DOUBT, &[&r.id, &r.token, error, &now])
                    .await?;
                match (n, settle_parked_from_report(tx, r.id, now, n == 1).await?) {
                    (1, Some(true)) => stats.sent += 1,
                    (1, Some(false)) => stats.failed += 1,
                    _ => count_fenced(n, &mut stats.in_doubt, &mut stats.fenced_out),
                }
            }
        }
    }
    Ok(stats)
}

/// Record one acceptance the batch statement did not confirm: fenced; else late (the lease
/// was lost); else a row already sent.
async fn record_accepted(
    tx: &Transaction<'_>,
    r: &Record,
    provider_id: Option<&str>,
    note: &Option<String>,
    now: i64,
    stats: &mut RecordStats,
) -> TxResult<()> {
    let n = tx
        .execute(RECORD_SENT, &[&r.id, &r.token, &provider_id, &now, note])
        .await?;
    if n == 1 {
        stats.sent += 1;
    } else if tx
        .execute(RECORD_LATE, &[&r.id, &provider_id, &now])
        .await?
        == 1
    {
        stats.late_confirmations += 1;
        tracing::warn!(
            send_id = r.id,
            "confirmation arrived after the lease was lost; recorded as sent"
        );
    } else {
        confirmed_twice(tx, r.id, provider_id).await?;
        stats.double_confirmations += 1;
    }
    Ok(())
}

/// A failure that says the address must not be tried again: added to its account's
/// suppressions, dated no earlier than the account's last opt-out (taken under its lock).
async fn suppress_failed(tx: &Transaction<'_>, id: i64, reason: &str, now: i64) -> TxResult<()> {
    let account: i64 = tx
        .query_one("SELECT account_id FROM sends WHERE id = $1", &[&id])
        .await?
        .get(0);
    let at = now.max(lock_opt_outs(tx, account).await?);
    tx.execute(RECORD_ADD_SUPPRESSION, &[&id, &reason, &at])
        .await?;
    Ok(())
}

/// A row just parked in doubt (`parked`) whose outcome a provider webhook reported while its
/// call was still running: settled as the report says (as sent: with the report's provider
/// message id when the row has none). Returns the settled outcome (true: sent), None when no
/// report came.
async fn settle_parked_from_report(
    tx: &Transaction<'_>,
    id: i64,
    now: i64,
    parked: bool,
) -> TxResult<Option<bool>> {
    if !parked {
        return Ok(None);
    }
    let row = tx.query_one(RECORD_DOUBT_REPORT, &[&id]).await?;
    let (sent, provider_id): (Option<bool>, Option<String>) = (row.get(0), row.get(1));
    let Some(sent) = sent else {
        return Ok(None);
    };
    let n = tx
        .execute(RECORD_SETTLE_FROM_REPORT, &[&id, &sent, &now, &provider_id])
        .await?;
    expect_one(n, id, "settle by webhook")?;
    Ok(Some(sent))
}

/// The common case of a confirmation in one statement: every accepted outcome whose row is
/// still leased with its token becomes `sent` (one round trip for a whole batch instead of one
/// per row). Returns the ids it confirmed; the rest (fenced, late, confirmed twice) go through
/// the per-row rules in [`record_tx`].
async fn confirm_accepted(
    tx: &Transaction<'_>,
    order: &[&Record],
    now: i64,
) -> TxResult<std::collections::HashSet<i64>> {
    let (mut ids, mut tokens, mut pids, mut notes) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for r in order {
        if let Outcome::Accepted { provider_id, note } = &r.outcome {
            ids.push(r.id);
            tokens.push(r.token);
            pids.push(provider_id.clone());
            notes.push(note.clone());
        }
    }
    if ids.is_empty() {
        return Ok(Default::default());
    }
    let rows = tx
        .query(RECORD_SENT_MANY, &[&ids, &tokens, &pids, &now, &notes])
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// An acceptance for a row that is already `sent`: `store::ledger::confirmed_again` decides;
/// this reads the row and writes its note.
async fn confirmed_twice(tx: &Transaction<'_>, id: i64, provider_id: Option<&str>) -> TxResult<()> {
    let stored: Option<Option<String>> = tx
        .query_opt(RECORD_CHECK_ROW, &[&id])
        .await?
        .map(|r| r.get(0));
    if let Some(note) = crate::store::ledger::confirmed_again(id, provider_id, stored)? {
        tx.execute(RECORD_NOTE_TWICE, &[&id, &note]).await?;
    }
    Ok(())
}

fn count_fenced(n: u64, done: &mut u64, fenced_out: &mut u64) {
    if n == 1 {
        *done += 1;
    } else {
        *fenced_out += 1;
    }
}

const LIST_CAMPAIGN: &str = "SELECT account_id, channel, list_cursor, list_complete, status,
            EXISTS (SELECT 1 FROM campaign_lists cl WHERE cl.campaign_id = campaigns.id), filter
     FROM campaigns WHERE id = $1 FOR UPDATE";

const LIST_CHUNK_END: &str = "SELECT max(id), count(*) FROM (SELECT id FROM subscribers
     WHERE account_id = $1 AND id > $2 ORDER BY id LIMIT $3) chunk";

const LIST_ADVANCE_CURSOR: &str =
    "UPDATE campaigns SET list_cursor = coalesce($2, list_cursor), list_complete = $3
     WHERE id = $1";

/// The template variables captured for a recipient: the attributes with the built-in `name`,
/// `email`, `phone` over them (a NULL built-in is absent), as SQLite's `json_patch` does. The
/// text differs from SQLite's (jsonb orders keys), which nothing depends on: it is parsed, and
/// captured once per row.
const CAPTURED_VARS: &str = "((s.attrs::jsonb - 'name' - 'email' - 'phone')
     || jsonb_strip_nulls(jsonb_build_object('name', s.name, 'email', s.email,
                                             'phone', s.phone)))::text";

/// Insert the recipients among subscribers `cursor < id <= end` ($1 campaign, $2 account,
/// $3 cursor, $4 now, $5 end, $6 channel; `filter`, the compiled audience filter, from $7):
/// one row per address, nothing twice after a crash.
fn list_insert_sql(
    channel: crate::domain::address::Channel,
    targeted: bool,
    filter: Option<&str>,
) -> String {
    use crate::domain::address::Channel;
    use crate::domain::model::{
        CAMPAIGN_JOB_AT, CAMPAIGN_JOB_PREFIX, CAMPAIGN_JOB_SUB, EPOCH_MARK, INSTALLATION_SCOPE_LEN,
    };
    let text = |s: &str| format!("'{}'", s.replace('\'', "''"));
    let addr = match channel {
        Channel::Sms => "s.phone",
        Channel::Email => "s.email_norm",
    };
    let in_lists = if targeted {
        "AND s.id IN (SELECT m.subscriber_id FROM campaign_lists cl
                        JOIN list_members m ON m.list_id = cl.list_id
                        WHERE cl.campaign_id = $1::bigint AND m.status = 'subscribed'
                          AND m.subscriber_id > $3::bigint AND m.subscriber_id <= $5::bigint)"
    } else {
        ""
    };
    // The audience filter: a condition on `s` whose values are all bound (`segment.rs`).
    let filter = filter.map_or(String::new(), |f| format!("AND {f}"));
    let job_id = format!(
        "{} || $1::bigint || {} || s.id || {}
                || (SELECT substr(id, 1, {INSTALLATION_SCOPE_LEN}) FROM installation
                    WHERE singleton = 1)
                || coalesce({} || (SELECT max(e.label) FROM guard_epochs e
                    WHERE e.campaigns_through < $1::bigint
                       OR e.subscribers_through < s.id), '')",
        text(CAMPAIGN_JOB_PREFIX),
        text(CAMPAIGN_JOB_SUB),
        text(CAMPAIGN_JOB_AT),
        text(EPOCH_MARK)
    );
    format!(
        "INSERT INTO sends (account_id, campaign_id, subscriber_id, job_id, address,
                            vars, status, last_error, doubt_since, visible_at, created_at,
                            updated_at)
         SELECT s.account_id, $1::bigint, s.id, {job_id}, {addr}, {CAPTURED_VARS},
                CASE WHEN su.address IS NULL THEN 'queued' ELSE 'suppressed' END,
                CASE WHEN su.address IS NULL THEN NULL
                     ELSE 'address suppressed before the list was built' END,
                CASE WHEN su.address IS NULL THEN
                    (SELECT g.replay_since FROM guard g
                     WHERE g.singleton = 1 AND $1::bigint <= g.replay_through) END,
                $4::bigint, $4::bigint, $4::bigint
         FROM subscribers s
         LEFT JOIN suppressions su ON su.account_id = s.account_id
                                  AND su.channel = $6::text AND su.address = {addr}
         WHERE s.account_id = $2::bigint AND s.id > $3::bigint AND s.id <= $5::bigint
           AND s.status = 'confirmed' AND {addr} IS NOT NULL {in_lists} {filter}
         ORDER BY s.id
         ON CONFLICT DO NOTHING"
    )
}

// The SQL: `sqlite/ledger.rs`'s statements in PostgreSQL's dialect (positional parameters,
// arrays instead of JSON id lists, least() for the two-argument min()).

const START_DUE_CAMPAIGNS: &str =
    "UPDATE campaigns SET status = 'sending', started_at = coalesce(started_at, $1)
     WHERE status = 'approved' AND scheduled_for <= $1 RETURNING id";

const ACTIVE_CAMPAIGNS: &str = "SELECT c.id, c.account_id, c.channel, c.sender, c.subject, c.body,
     c.list_complete, c.templated, a.name, c.body_format, c.html, c.reply_to, c.sms_footer, c.name,
     ARRAY(SELECT l.name FROM campaign_lists cl JOIN lists l ON l.id = cl.list_id
           WHERE cl.campaign_id = c.id),
     ARRAY(SELECT cl.list_id FROM campaign_lists cl WHERE cl.campaign_id = c.id ORDER BY cl.list_id),
     c.transactional OR c.kind <> 'campaign'
     FROM campaigns c JOIN accounts a ON a.id = c.account_id
     WHERE c.status = 'sending' ORDER BY c.id";

/// Taken before [`COMPLETE_IF_DONE`], so that its `NOT EXISTS` reads after every transaction
/// that holds the campaign row (a notification adding a recipient, a claim) has committed: a
/// row added concurrently is never left queued in a finished campaign.
pub(crate) const LOCK_CAMPAIGN: &str = "SELECT 1 FROM campaigns WHERE id = $1 FOR UPDATE";

/// A campaign is sent only when its list is complete and no row is queued, leased or in
/// doubt. Two `NOT EXISTS`, each with exactly one partial index's predicate (`sends_claim`,
/// `sends_doubt`): with the three states in one list the planner can use neither and reads
/// every row of the campaign (40 ms at 50,000, with the campaign row locked against claims).
pub(crate) const COMPLETE_IF_DONE: &str = "UPDATE campaigns SET status = 'sent', finished_at = $2
     WHERE id = $1 AND status = 'sending' AND list_complete
       AND NOT EXISTS (SELECT 1 FROM sends WHERE campaign_id = $1
                       AND status IN ('queued', 'leased'))
       AND NOT EXISTS (SELECT 1 FROM sends WHERE campaign_id = $1 AND status = 'in_doubt')";

const RELEASE: &str =
    "UPDATE sends s SET status = 'queued', lease_token = NULL, lease_owner = NULL,
     visible_at = $3, updated_at = $3
     FROM unnest($1::bigint[], $2::bigint[]) AS k(id, token)
     WHERE s.id = k.id AND s.lease_token = k.token AND s.status = 'leased'
       AND s.dispatched_at IS NULL";

pub(crate) const NEXT_VISIBLE: &str = "SELECT min(visible_at) FROM sends
     WHERE campaign_id = $1 AND status IN ('queued', 'leased')";

pub(crate) const RECONCILABLE: &str = "SELECT id, job_id, address FROM sends
     WHERE campaign_id = $1 AND status = 'in_doubt' AND doubt_since < $2
     ORDER BY id LIMIT $3";

/// The campaigns [`SWEEP_CANCELLED`] looks into (through `campaigns_status`).
const CANCELLED_CAMPAIGNS: &str = "SELECT id FROM campaigns WHERE status = 'cancelled'";

/// Expired leases of the cancelled campaigns `$2`, an array read first: given as a subquery,
/// the planner walked `sends_claim` on `visible_at` alone, every due row of every campaign
/// (50,000 heap reads per tick while one was sending), and only then joined the campaigns.
/// With the ids bound, each is a range of `sends_claim` on (campaign_id, visible_at).
pub(crate) const SWEEP_CANCELLED: &str =
    "UPDATE sends SET status = CASE WHEN dispatched_at IS NULL THEN 'cancelled'
     ELSE 'in_doubt' END,
     doubt_since = CASE WHEN dispatched_at IS NULL THEN doubt_since
     ELSE coalesce(doubt_since, dispatched_at) END,
     lease_token = NULL, updated_at = $1
     WHERE campaign_id = ANY($2) AND status IN ('queued', 'leased') AND status = 'leased'
       AND visible_at <= $1";

const CLAIM_CAMPAIGN_STATUS: &str =
    "SELECT status FROM campaigns WHERE id = $1 AND account_id = $2 FOR SHARE";

/// The due rows, locked; rows another claim holds locked are skipped, never waited for.
pub(crate) const CLAIM_CANDIDATES: &str = "SELECT s.id, s.job_id, s.address, s.vars, s.attempts,
     CASE WHEN s.status = 'leased' AND s.dispatched_at IS NOT NULL
     THEN least(s.dispatched_at, coalesce(s.doubt_since, s.dispatched_at))
     ELSE s.doubt_since END,
     EXISTS (SELECT 1 FROM suppressions su
     WHERE su.account_id = s.account_id AND su.channel = $3
     AND su.address = s.address),
     s.status
     FROM sends s
     WHERE s.campaign_id = $1 AND s.account_id = $2
     AND s.status IN ('queued', 'leased') AND s.visible_at <= $4
     ORDER BY s.visible_at, s.id LIMIT $5
     FOR UPDATE OF s SKIP LOCKED";

const CLAIM_LEASE_ONE: &str =
    "UPDATE sends SET status = 'leased', lease_token = $2, lease_owner = $3,
     visible_at = $4, dispatched_at = $5, attempts = attempts + $6,
     doubt_since = $7, updated_at = $8,
     claimed_at = coalesce(claimed_at, $9)
     WHERE id = $1 AND status IN ('queued', 'leased')";

const CLAIM_PARK_IN_DOUBT: &str =
    "UPDATE sends SET status = 'in_doubt', lease_token = NULL, dispatched_at = NULL,
     doubt_since = $2, updated_at = $3,
     last_error = coalesce(last_error || '; ', '') ||
     'lease expired after dispatch; provider has no usable idempotency key'
     WHERE id = $1 AND status IN ('queued', 'leased')";

/// NULL: no delivery report for the job; true: one says delivered; false: only failures.
/// Then the provider's message id of the first report that says delivered and names one.
const CLAIM_CALLBACK: &str = "SELECT bool_or(delivery = 'sent'),
     (SELECT r.provider_message_id FROM webhook_events r
      WHERE r.account_id = $1 AND r.job_id = $2 AND r.delivery = 'sent'
        AND r.provider_message_id IS NOT NULL
      ORDER BY r.id LIMIT 1)
     FROM webhook_events
     WHERE account_id = $1 AND job_id = $2 AND delivery IS NOT NULL";

/// Settled as sent, the row keeps the report's provider message id (`$4`) unless it has one.
const CLAIM_SETTLE_BY_CALLBACK: &str =
    "UPDATE sends SET status = CASE WHEN $2 THEN 'sent' ELSE 'failed' END,
     sent_at = CASE WHEN $2 THEN $3 ELSE sent_at END,
     provider_message_id = CASE WHEN $2 THEN coalesce(provider_message_id, $4)
     ELSE provider_message_id END,
     lease_token = NULL, dispatched_at = NULL, doubt_since = NULL, updated_at = $3,
     last_error = CASE WHEN $2 THEN 'delivery reported by a provider webhook'
     ELSE 'failure reported by a provider webhook' END
     WHERE id = $1 AND status IN ('queued', 'leased')";

const CLAIM_SUPPRESS: &str =
    "UPDATE sends SET status = 'suppressed', lease_token = NULL, updated_at = $2,
     last_error = 'address suppressed before claim'
     WHERE id = $1 AND status IN ('queued', 'leased')";

const CLAIM_LEASE_MANY: &str =
    "UPDATE sends SET status = 'leased', lease_token = $2, lease_owner = $3,
     visible_at = $4, dispatched_at = $5, attempts = attempts + $6,
     doubt_since = NULL, updated_at = $7, claimed_at = $8
     WHERE id = ANY($1) AND status IN ('queued', 'leased')";

const MARK_DISPATCHED: &str =
    "UPDATE sends s SET dispatched_at = $3, attempts = attempts + 1, visible_at = $4,
     updated_at = $3
     FROM unnest($1::bigint[], $2::bigint[]) AS k(id, token)
     WHERE s.id = k.id AND s.lease_token = k.token AND s.status = 'leased'
     RETURNING s.id";

const RECORD_SENT: &str =
    "UPDATE sends SET status = 'sent', provider_message_id = $3, sent_at = $4,
     updated_at = $4, lease_token = NULL, doubt_since = NULL, last_error = $5
     WHERE id = $1 AND lease_token = $2 AND status = 'leased'";

/// [`RECORD_SENT`] for many rows at once (arrays of ids, tokens, provider ids and notes). Rows
/// leased with the token are this worker's: claimers skip locked rows, so only a cancel or a
/// sweep can wait on them, and a deadlock with one is retried (`transaction!`).
const RECORD_SENT_MANY: &str =
    "UPDATE sends s SET status = 'sent', provider_message_id = v.pid, sent_at = $4,
     updated_at = $4, lease_token = NULL, doubt_since = NULL, last_error = v.note
     FROM unnest($1::bigint[], $2::bigint[], $3::text[], $5::text[]) AS v(id, token, pid, note)
     WHERE s.id = v.id AND s.lease_token = v.token AND s.status = 'leased'
     RETURNING s.id";

const RECORD_LATE: &str =
    "UPDATE sends SET status = 'sent', provider_message_id = $2, sent_at = $3,
     updated_at = $3, lease_token = NULL, doubt_since = NULL,
     last_error = 'confirmed after the lease was lost'
     WHERE id = $1 AND status <> 'sent'";

const RECORD_CHECK_ROW: &str = "SELECT provider_message_id FROM sends WHERE id = $1";

const RECORD_NOTE_TWICE: &str =
    "UPDATE sends SET last_error = coalesce(last_error || '; ', '') || $2 WHERE id = $1";

const RECORD_FAILED: &str = "UPDATE sends SET status = 'failed', last_error = $3, updated_at = $4,
     lease_token = NULL
     WHERE id = $1 AND lease_token = $2 AND status = 'leased'";

const RECORD_ADD_SUPPRESSION: &str =
    "INSERT INTO suppressions (account_id, channel, address, reason, source, created_at)
     SELECT s.account_id, c.channel, s.address, $2, 'provider', $3
     FROM sends s JOIN campaigns c ON c.id = s.campaign_id WHERE s.id = $1
     ON CONFLICT DO NOTHING";

const RECORD_RETRY: &str = "UPDATE sends SET status = 'queued', last_error = $3, visible_at = $4,
     updated_at = $5, lease_token = NULL, lease_owner = NULL,
     doubt_since = CASE WHEN $6 THEN coalesce(doubt_since, dispatched_at)
     ELSE doubt_since END,
     dispatched_at = NULL
     WHERE id = $1 AND lease_token = $2 AND status = 'leased'";

const RECORD_IN_DOUBT: &str =
    "UPDATE sends SET status = 'in_doubt', last_error = $3, updated_at = $4,
     lease_token = NULL,
     doubt_since = coalesce(doubt_since, dispatched_at, $4),
     dispatched_at = NULL
     WHERE id = $1 AND lease_token = $2 AND status = 'leased'";

/// NULL: no delivery report for the row's job; true: one says delivered; false: only
/// failures. Then the provider's message id of the first report that says delivered and
/// names one.
const RECORD_DOUBT_REPORT: &str = "SELECT bool_or(w.delivery = 'sent'),
     (SELECT r.provider_message_id FROM sends t
      JOIN webhook_events r ON r.account_id = t.account_id AND r.job_id = t.job_id
      AND r.delivery = 'sent' AND r.provider_message_id IS NOT NULL
      WHERE t.id = $1
      ORDER BY r.id LIMIT 1)
     FROM sends s
     JOIN webhook_events w ON w.account_id = s.account_id AND w.job_id = s.job_id
     AND w.delivery IS NOT NULL
     WHERE s.id = $1";

/// Settled as sent, the row keeps the report's provider message id (`$4`) unless it has one.
const RECORD_SETTLE_FROM_REPORT: &str =
    "UPDATE sends SET status = CASE WHEN $2 THEN 'sent' ELSE 'failed' END,
     sent_at = CASE WHEN $2 THEN $3 ELSE sent_at END,
     provider_message_id = CASE WHEN $2 THEN coalesce(provider_message_id, $4)
     ELSE provider_message_id END,
     doubt_since = NULL, updated_at = $3,
     last_error = coalesce(last_error || '; ', '') || CASE WHEN $2
     THEN 'delivery reported by a provider webhook' ELSE 'failure reported by a provider webhook' END
     WHERE id = $1 AND status = 'in_doubt'";

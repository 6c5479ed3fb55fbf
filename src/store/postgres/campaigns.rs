//! `Campaigns` on PostgreSQL, the rest of it (pause, resume, cancel, reports, the in-doubt
//! queue, `recipient`): the bodies the `impl Campaigns` in `audience.rs` calls, the same rules as
//! `sqlite/campaigns.rs`.
//!
//! Differences from SQLite, none visible to a caller: `pause` moves its campaign and requeues
//! its undispatched leases in one transaction (SQLite uses two, one after the other); `report`
//! reads in pages of [`REPORT_PAGE`] rows by send id (the callback cannot run on the store's
//! runtime), so it is not one snapshot of a campaign still sending, just as a paged
//! `report_page` reader's is not.

use super::ledger::transaction;
use super::PgStore;
use crate::domain::address::Channel;
use crate::domain::model::SendStatus;
use crate::error::{Error, Result};
use crate::store::{AccountDoubtRow, Campaign, Campaigns, DoubtRow, RecipientRow, ReportRow};
use deadpool_postgres::Transaction;

/// How many rows `report` reads per query.
const REPORT_PAGE: i64 = 5000;

/// The columns of a report row, in [`report_row`]'s order.
const REPORT_COLS: &str =
    "id, job_id, address, status, attempts, provider_message_id, last_error, sent_at";

/// The template variables list building would capture (a copy of `ledger.rs`'s private
/// `CAPTURED_VARS`; keep the two the same).
const CAPTURED_VARS: &str = "((s.attrs::jsonb - 'name' - 'email' - 'phone')
     || jsonb_strip_nulls(jsonb_build_object('name', s.name, 'email', s.email,
                                             'phone', s.phone)))::text";

fn send_status(s: &str) -> Result<SendStatus> {
    SendStatus::parse(s).ok_or_else(|| Error::damaged(format!("send status {s:?}")))
}

fn report_row(r: &tokio_postgres::Row) -> Result<ReportRow> {
    Ok(ReportRow {
        send_id: r.get(0),
        job_id: r.get(1),
        address: r.get(2),
        status: send_status(r.get(3))?.to_string(),
        attempts: r.get(4),
        provider_message_id: r.get(5),
        reason: r.get(6),
        sent_at: r.get(7),
    })
}

/// The status of a campaign that must exist (read after a compare-and-set, to say why it
/// changed nothing).
async fn campaign_status(tx: &Transaction<'_>, id: i64) -> Result<String> {
    let row = tx
        .query_opt("SELECT status FROM campaigns WHERE id = $1", &[&id])
        .await?;
    match row {
        Some(r) => Ok(r.get(0)),
        None => Err(Error::not_found(format!("unknown campaign id {id}"))),
    }
}

/// Apply a compare-and-set transition (`$1` is the campaign id); on 0 rows changed, explain
/// why. Then run `after` (`$1` id, `$2` now) in the same transaction.
fn transition(
    s: &PgStore,
    id: i64,
    verb: &'static str,
    sql: &'static str,
    after: Option<&'static str>,
) -> Result<Campaign> {
    let now = crate::domain::clock::now_ms();
    s.run(move |pool| async move {
        let mut c = pool.get().await?;
        transaction!(c, tx => {
            let n = tx.execute(sql, &[&id]).await?;
            let current = campaign_status(&tx, id).await?;
            if n == 0 {
                return Err(Error::conflict(format!(
                    "cannot {verb} campaign {id}: it is {current}"
                ))
                .into());
            }
            if let Some(after) = after {
                tx.execute(after, &[&id, &now]).await?;
            }
            Ok(())
        })
    })?;
    s.campaign(id)
}

/// `approved|sending -> paused`. Rows leased but not dispatched go back to the queue.
pub(super) fn pause(s: &PgStore, id: i64) -> Result<Campaign> {
    transition(
        s,
        id,
        "pause",
        "UPDATE campaigns SET status = 'paused'
         WHERE id = $1 AND status IN ('approved', 'sending')",
        Some(
            "UPDATE sends SET status = 'queued', lease_token = NULL, lease_owner = NULL,
                    visible_at = $2, updated_at = $2
             WHERE campaign_id = $1 AND status = 'leased' AND dispatched_at IS NULL",
        ),
    )
}

/// `paused -> sending` (or back to `approved` if it had not started).
pub(super) fn resume(s: &PgStore, id: i64) -> Result<Campaign> {
    transition(
        s,
        id,
        "resume",
        "UPDATE campaigns SET status = CASE WHEN started_at IS NULL THEN 'approved'
                                            ELSE 'sending' END
         WHERE id = $1 AND status = 'paused'",
        None,
    )
}

/// Any non-terminal state -> `cancelled`. Queued and undispatched rows are cancelled; rows
/// whose call may be in flight keep their lease, the in-doubt ones stay in doubt.
pub(super) fn cancel(s: &PgStore, id: i64) -> Result<Campaign> {
    let now = crate::domain::clock::now_ms();
    s.run(move |pool| async move {
        let mut c = pool.get().await?;
        transaction!(c, tx => {
            let n = tx
                .execute(
                    "UPDATE campaigns SET status = 'cancelled', finished_at = $2
                     WHERE id = $1 AND status IN ('draft', 'approved', 'sending', 'paused')",
                    &[&id, &now],
                )
                .await?;
            let current = campaign_status(&tx, id).await?;
            if n == 0 {
                return Err(Error::conflict(format!(
                    "cannot cancel campaign {id}: it is {current}"
                ))
                .into());
            }
            tx.execute(
                "UPDATE sends SET status = 'cancelled', lease_token = NULL, updated_at = $2
                 WHERE campaign_id = $1
                   AND (status = 'queued' OR (status = 'leased' AND dispatched_at IS NULL))",
                &[&id, &now],
            )
            .await?;
            Ok(())
        })
    })?;
    s.campaign(id)
}

async fn page(
    pool: &deadpool_postgres::Pool,
    id: i64,
    account: i64,
    after: i64,
    limit: i64,
) -> Result<Vec<ReportRow>> {
    let c = pool.get().await?;
    let rows = c
        .query(
            &format!(
                "SELECT {REPORT_COLS} FROM sends
                 WHERE campaign_id = $1 AND account_id = $2 AND id > $3 ORDER BY id LIMIT $4"
            ),
            &[&id, &account, &after, &limit],
        )
        .await?;
    rows.iter().map(report_row).collect()
}

/// Every recipient of a campaign to `f`, in send id order.
pub(super) fn report(
    s: &PgStore,
    id: i64,
    f: &mut dyn FnMut(ReportRow) -> Result<()>,
) -> Result<()> {
    let account = s.campaign(id)?.account_id;
    let mut after = 0i64;
    loop {
        let rows =
            s.run(move |pool| async move { page(&pool, id, account, after, REPORT_PAGE).await })?;
        let full = rows.len() as i64 == REPORT_PAGE;
        for r in rows {
            after = r.send_id;
            f(r)?;
        }
        if !full {
            return Ok(());
        }
    }
}

pub(super) fn report_page(
    s: &PgStore,
    id: i64,
    after: i64,
    limit: usize,
) -> Result<Vec<ReportRow>> {
    let account = s.campaign(id)?.account_id;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    s.run(move |pool| async move { page(&pool, id, account, after, limit).await })
}

/// The dashboard's narrowed report page: `starts_with` on the address (the campaign's rows
/// through UNIQUE (campaign_id, address): the database's collation may not order a prefix as
/// a range), the state as text, send id order.
pub(super) fn report_search(
    s: &PgStore,
    id: i64,
    q: &crate::store::ReportSearch,
) -> Result<Vec<ReportRow>> {
    let account = s.campaign(id)?.account_id;
    let limit = i64::try_from(q.limit).unwrap_or(i64::MAX);
    let (after, prefix) = (q.after, q.prefix.clone());
    let status = q.status.map(|s| s.as_str().to_string());
    s.run(move |pool| async move {
        let c = pool.get().await?;
        let rows = c
            .query(
                &format!(
                    "SELECT {REPORT_COLS} FROM sends
                     WHERE campaign_id = $1 AND account_id = $2 AND id > $3
                       AND ($4::text IS NULL OR starts_with(address, $4::text))
                       AND ($5::text IS NULL OR status = $5::text)
                     ORDER BY id LIMIT $6"
                ),
                &[&id, &account, &after, &prefix, &status, &limit],
            )
            .await?;
        rows.iter().map(report_row).collect()
    })
}

pub(super) fn send_account(s: &PgStore, send_id: i64) -> Result<Option<i64>> {
    s.run(move |pool| async move {
        let c = pool.get().await?;
        Ok(
            c.query_opt("SELECT account_id FROM sends WHERE id = $1", &[&send_id])
                .await?
                .map(|r| r.get(0)),
        )
    })
}

pub(super) fn doubts(s: &PgStore, campaign_id: i64) -> Result<Vec<DoubtRow>> {
    let account = s.campaign(campaign_id)?.account_id;
    s.run(move |pool| async move {
        let c = pool.get().await?;
        let rows = c
            .query(
                "SELECT id, job_id, address, attempts, doubt_since, last_error FROM sends
                 WHERE campaign_id = $1 AND account_id = $2 AND status = 'in_doubt' ORDER BY id",
                &[&campaign_id, &account],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| DoubtRow {
                send_id: r.get(0),
                job_id: r.get(1),
                address: r.get(2),
                attempts: r.get(3),
                doubt_since: r.get(4),
                reason: r.get(5),
            })
            .collect())
    })
}

/// The rest of the cursor's campaign, then the account's next campaigns: the same two reads
/// as SQLite's, through the partial index `sends_doubt`.
pub(super) fn account_doubts(
    s: &PgStore,
    account_id: i64,
    after: (i64, i64),
    limit: usize,
) -> Result<Vec<AccountDoubtRow>> {
    let limit = limit as i64;
    s.run(move |pool| async move {
        let c = pool.get().await?;
        let mut rows: Vec<AccountDoubtRow> = c
            .query(
                "SELECT s.campaign_id, c.name, c.channel, s.id, s.job_id, s.address, s.attempts,
                        s.doubt_since, s.last_error
                 FROM sends s JOIN campaigns c ON c.id = s.campaign_id
                 WHERE s.campaign_id = $2 AND s.status = 'in_doubt' AND s.id > $3
                   AND s.account_id = $1
                 ORDER BY s.id LIMIT $4",
                &[&account_id, &after.0, &after.1, &limit],
            )
            .await?
            .iter()
            .map(pg_doubt_row)
            .collect();
        let left = limit - rows.len() as i64;
        if left > 0 {
            let next = c
                .query(
                    "SELECT s.campaign_id, c.name, c.channel, s.id, s.job_id, s.address,
                            s.attempts, s.doubt_since, s.last_error
                     FROM campaigns c JOIN sends s ON s.campaign_id = c.id
                     WHERE c.account_id = $1 AND c.id > $2 AND s.status = 'in_doubt'
                       AND s.account_id = $1
                     ORDER BY c.id, s.id LIMIT $3",
                    &[&account_id, &after.0, &left],
                )
                .await?;
            rows.extend(next.iter().map(pg_doubt_row));
        }
        Ok(rows)
    })
}

fn pg_doubt_row(r: &tokio_postgres::Row) -> AccountDoubtRow {
    AccountDoubtRow {
        campaign_id: r.get(0),
        campaign_name: r.get(1),
        channel: r.get(2),
        send_id: r.get(3),
        job_id: r.get(4),
        address: r.get(5),
        attempts: r.get(6),
        doubt_since: r.get(7),
        reason: r.get(8),
    }
}

/// One subscriber as a campaign sees it (see [`RecipientRow`]).
pub(super) fn recipient(s: &PgStore, campaign_id: i64, subscriber_id: i64) -> Result<RecipientRow> {
    let c = s.campaign(campaign_id)?;
    let filter = c
        .filter
        .as_deref()
        .map(|f| crate::domain::segment::Filter::parse_stored(f, campaign_id))
        .transpose()?;
    let compiled = super::segment::compile(filter.as_ref(), 5);
    let addr = match c.channel {
        Channel::Sms => "s.phone",
        Channel::Email => "s.email_norm",
    };
    let sql = format!(
        "SELECT s.id, {addr}, coalesce(se.vars, {CAPTURED_VARS}), se.job_id, se.status, s.status,
                NOT EXISTS (SELECT 1 FROM campaign_lists WHERE campaign_id = $1)
                OR EXISTS (SELECT 1 FROM campaign_lists cl JOIN list_members m
                           ON m.list_id = cl.list_id AND m.subscriber_id = s.id
                           WHERE cl.campaign_id = $1 AND m.status = 'subscribed'),
                EXISTS (SELECT 1 FROM suppressions su WHERE su.account_id = s.account_id
                        AND su.channel = $4 AND su.address = {addr}),
                {filter}
         FROM subscribers s
         LEFT JOIN sends se ON se.campaign_id = $1 AND se.subscriber_id = s.id
         WHERE s.id = $2 AND s.account_id = $3",
        filter = compiled.sql
    );
    let account = c.account_id;
    let channel = c.channel.as_str();
    let row = s.run(move |pool| async move {
        let cl = pool.get().await?;
        let row = cl
            .query_opt(
                &sql,
                &compiled.with(&[&campaign_id, &subscriber_id, &account, &channel]),
            )
            .await?;
        let Some(r) = row else { return Ok(None) };
        let job: Option<String> = r.get(3);
        let status: Option<String> = r.get(4);
        let status = status.as_deref().map(send_status).transpose()?;
        Ok(Some(RecipientRow {
            subscriber_id: r.get(0),
            address: r.get(1),
            vars: r.get(2),
            send: job.zip(status),
            subscriber_status: r.get(5),
            targeted: r.get(6),
            suppressed: r.get(7),
            matches_filter: r.get(8),
        }))
    })?;
    row.ok_or_else(|| {
        Error::not_found(format!(
            "subscriber {subscriber_id} is not in account {account} (campaign {campaign_id})"
        ))
    })
}

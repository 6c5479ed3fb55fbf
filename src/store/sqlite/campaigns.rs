//! Campaign management: creation, compare-and-set transitions, status counts, reports and the
//! in-doubt queue.

use super::codec::{self, BodyFormat};
use super::SqliteStore;
use crate::domain::address::Channel;
use crate::domain::model::{CampaignStatus, SendStatus};
use crate::domain::segment::Filter;
use crate::error::{Error, Result};
use crate::store::{
    AccountDoubtRow, Campaign, Campaigns, DoubtRow, NewCampaign, RecipientRow, ReportRow,
    ReportSearch, StatusCounts,
};
use rusqlite::{named_params, params, OptionalExtension, Transaction};
use std::collections::BTreeMap;

/// The columns of a report row, in [`report_row`]'s order.
const REPORT_COLS: &str =
    "id, job_id, address, status, attempts, provider_message_id, last_error, sent_at";

fn report_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ReportRow> {
    Ok(ReportRow {
        send_id: r.get(0)?,
        job_id: r.get(1)?,
        address: r.get(2)?,
        status: codec::get::<SendStatus>(r, 3, "sends")?.to_string(),
        attempts: r.get(4)?,
        provider_message_id: r.get(5)?,
        reason: r.get(6)?,
        sent_at: r.get(7)?,
    })
}

fn campaign_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Campaign> {
    let format: BodyFormat = codec::get(r, 12, "campaigns")?;
    let (body, html) = format.load(r.get(6)?, r.get(13)?);
    Ok(Campaign {
        id: r.get(0)?,
        account_id: r.get(1)?,
        name: r.get(2)?,
        channel: codec::get(r, 3, "campaigns")?,
        sender: r.get(4)?,
        subject: r.get(5)?,
        body,
        html,
        reply_to: r.get(14)?,
        filter: r.get(15)?,
        sms_footer: r.get(16)?,
        one_off: r.get::<_, String>(17)? != "campaign",
        transactional: r.get::<_, i64>(18)? != 0 || r.get::<_, String>(17)? != "campaign",
        status: codec::get(r, 7, "campaigns")?,
        scheduled_for: r.get(8)?,
        started_at: r.get(9)?,
        finished_at: r.get(10)?,
        list_complete: r.get::<_, i64>(11)? != 0,
    })
}

const CAMPAIGN_COLS: &str = "id, account_id, name, channel, sender, subject, body, status,
    scheduled_for, started_at, finished_at, list_complete, body_format, html, reply_to, filter,
    sms_footer, kind, transactional";

/// One subscriber as a campaign sees it (see [`RecipientRow`]); `filter` is the campaign's
/// compiled filter, a condition on `s`.
fn recipient_sql(channel: Channel, filter: &str) -> String {
    let addr = match channel {
        Channel::Sms => "s.phone",
        Channel::Email => "s.email_norm",
    };
    format!(
        "SELECT s.id, {addr}, coalesce(se.vars, {vars}), se.job_id, se.status, s.status,
                NOT EXISTS (SELECT 1 FROM campaign_lists WHERE campaign_id = :campaign)
                OR EXISTS (SELECT 1 FROM campaign_lists cl JOIN list_members m
                           ON m.list_id = cl.list_id AND m.subscriber_id = s.id
                           WHERE cl.campaign_id = :campaign AND m.status = 'subscribed'),
                EXISTS (SELECT 1 FROM suppressions su WHERE su.account_id = s.account_id
                        AND su.channel = :channel AND su.address = {addr}),
                {filter}
         FROM subscribers s
         LEFT JOIN sends se ON se.campaign_id = :campaign AND se.subscriber_id = s.id
         WHERE s.id = :subscriber AND s.account_id = :account",
        vars = super::ledger::CAPTURED_VARS,
    )
}

/// `sending -> sent` when the ledger has nothing queued, leased or in doubt and the list is
/// complete. A compare-and-set: never derived from "the last claim returned nothing".
/// `sending -> sent` when nothing is queued, leased or in doubt.
pub(super) const COMPLETE_IF_DONE: &str = "UPDATE campaigns SET status = 'sent', finished_at = ?2
     WHERE id = ?1 AND status = 'sending' AND list_complete = 1
       AND NOT EXISTS (SELECT 1 FROM sends WHERE campaign_id = ?1
                       AND status IN ('queued', 'leased'))
       AND NOT EXISTS (SELECT 1 FROM sends WHERE campaign_id = ?1
                       AND status = 'in_doubt')";

/// One count per send state of a campaign. The (campaign_id, subscriber_id) index visits a
/// campaign's rows in about the order they were inserted (sequential pages). Left alone, the
/// planner picks the (campaign_id, address) index, which visits them in random order: on a
/// campaign of a million rows, about twice as slow, and it evicts the writer's cache.
pub(super) const STATUS_COUNTS: &str =
    "SELECT status, n FROM campaign_counts WHERE campaign_id = ?1 AND n <> 0";

/// A report page's statement: campaign `?1`, account `?2`, after id `?3`, the prefix range
/// `?4`..`?5` (with `prefix`), the state `?6` (with `state`), at most `?7` rows.
fn report_sql(prefix: bool, state: Option<SendStatus>, in_state: i64) -> String {
    let campaign = report_scan(prefix, state, in_state);
    let mut sql =
        format!("SELECT {REPORT_COLS} FROM sends {campaign} AND account_id = ?2 AND id > ?3");
    if prefix {
        sql.push_str(" AND address >= ?4 AND address < ?5");
    }
    if state.is_some() {
        sql.push_str(" AND status = ?6");
    }
    sql.push_str(" ORDER BY id LIMIT ?7");
    sql
}

/// How a report page finds its campaign's sends (`?1`): the statement's text after `FROM sends`
/// up to its first condition, naming the index that reads fewest rows:
/// - with a prefix, the range of UNIQUE (campaign_id, address);
/// - a state with a partial index (`in_doubt`: sends_doubt; `failed`, `suppressed`:
///   sends_unsent of 0015) reads only that state's rows, in id order;
/// - `queued`/`leased` read sends_claim and sort, when there are at most
///   [`REPORT_SORT_AT_MOST`] of them (`in_state`, from the counters);
/// - otherwise `sends_campaign_order` (0014) walks the campaign in id order and stops at a
///   page (a common state: its rows are dense).
fn report_scan(prefix: bool, state: Option<SendStatus>, in_state: i64) -> &'static str {
    match state {
        _ if prefix => "WHERE campaign_id = ?1",
        Some(SendStatus::InDoubt) => "WHERE campaign_id = ?1 AND status = 'in_doubt'",
        Some(SendStatus::Failed | SendStatus::Suppressed) => {
            "WHERE campaign_id = ?1 AND status IN ('failed', 'suppressed')"
        }
        // Left to itself, the planner prefers UNIQUE (campaign_id, subscriber_id) here.
        Some(SendStatus::Queued | SendStatus::Leased) if in_state <= REPORT_SORT_AT_MOST => {
            "INDEXED BY sends_claim WHERE campaign_id = ?1 AND status IN ('queued', 'leased')"
        }
        _ => "WHERE campaign_id + 0 = ?1",
    }
}

/// The most queued or leased sends a report page sorts by id rather than walk the campaign.
const REPORT_SORT_AT_MOST: i64 = 50_000;

pub(super) fn complete_if_done(tx: &Transaction<'_>, campaign_id: i64, now: i64) -> Result<bool> {
    let n = tx
        .prepare_cached(COMPLETE_IF_DONE)?
        .execute(params![campaign_id, now])?;
    Ok(n == 1)
}

/// The rows in doubt of the cursor's campaign after its send id.
pub(super) const ACCOUNT_DOUBTS_SAME: &str = "SELECT s.campaign_id, c.name, c.channel, s.id, \
     s.job_id, s.address, s.attempts, s.doubt_since, s.last_error
     FROM sends s INDEXED BY sends_doubt JOIN campaigns c ON c.id = s.campaign_id
     WHERE s.campaign_id = ?2 AND s.status = 'in_doubt' AND s.id > ?3 AND s.account_id = ?1
     ORDER BY s.id LIMIT ?4";

/// The rows in doubt of the account's campaigns after the cursor's campaign. `CROSS JOIN`
/// keeps campaigns as the outer loop (rowid range), so each campaign's rows come from
/// `sends_doubt` already in order and the page stops at `LIMIT` without sorting.
pub(super) const ACCOUNT_DOUBTS_NEXT: &str = "SELECT s.campaign_id, c.name, c.channel, s.id, \
     s.job_id, s.address, s.attempts, s.doubt_since, s.last_error
     FROM campaigns c CROSS JOIN sends s INDEXED BY sends_doubt
     WHERE s.campaign_id = c.id AND c.account_id = ?1 AND c.id > ?2 AND s.status = 'in_doubt'
       AND s.account_id = ?1
     ORDER BY c.id, s.id LIMIT ?3";

fn doubt_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<AccountDoubtRow> {
    Ok(AccountDoubtRow {
        campaign_id: r.get(0)?,
        campaign_name: r.get(1)?,
        channel: r.get(2)?,
        send_id: r.get(3)?,
        job_id: r.get(4)?,
        address: r.get(5)?,
        attempts: r.get(6)?,
        doubt_since: r.get(7)?,
        reason: r.get(8)?,
    })
}

impl Campaigns for SqliteStore {
    fn create_campaign(&self, c: &NewCampaign<'_>) -> Result<i64> {
        self.write(|tx| {
            super::admin::require_account(tx, c.account_id)?;
            super::lists::require_lists(tx, c.account_id, c.lists)?;
            let now = crate::domain::clock::now_ms();
            let (body, format, html) = BodyFormat::store(c.body, c.html);
            tx.execute(
                "INSERT INTO campaigns (account_id, name, channel, sender, subject, body,
                                        body_format, html, reply_to, filter, sms_footer,
                                        transactional, created_at)
                 VALUES (:account, :name, :channel, :sender, :subject, :body, :format, :html,
                         :reply_to, :filter, :footer, :transactional, :now)",
                named_params! {
                    ":account": c.account_id,
                    ":name": c.name,
                    ":channel": c.channel,
                    ":sender": c.sender,
                    ":subject": c.subject,
                    ":body": body,
                    ":format": format,
                    ":html": html,
                    ":reply_to": c.reply_to,
                    ":filter": c.filter,
                    ":footer": c.sms_footer,
                    ":transactional": c.transactional,
                    ":now": now,
                },
            )?;
            let id = tx.last_insert_rowid();
            super::lists::target_lists(tx, id, c.lists)?;
            Ok(id)
        })
    }

    fn recipient(&self, campaign_id: i64, subscriber_id: i64) -> Result<RecipientRow> {
        let c = self.campaign(campaign_id)?;
        let filter = c
            .filter
            .as_deref()
            .map(|f| Filter::parse_stored(f, campaign_id))
            .transpose()?;
        let compiled = super::segment::compile(filter.as_ref());
        let sql = recipient_sql(c.channel, &compiled.sql);
        let fixed: [(&str, &dyn rusqlite::ToSql); 4] = [
            (":campaign", &campaign_id),
            (":subscriber", &subscriber_id),
            (":account", &c.account_id),
            (":channel", &c.channel),
        ];
        let params = compiled.with(&fixed);
        let row = self.read(|conn| {
            Ok(conn
                .query_row(&sql, params.as_slice(), |r| {
                    let job: Option<String> = r.get(3)?;
                    let status: Option<SendStatus> = codec::get(r, 4, "sends")?;
                    Ok(RecipientRow {
                        subscriber_id: r.get(0)?,
                        address: r.get(1)?,
                        vars: r.get(2)?,
                        send: job.zip(status),
                        subscriber_status: r.get(5)?,
                        targeted: r.get(6)?,
                        suppressed: r.get(7)?,
                        matches_filter: r.get(8)?,
                    })
                })
                .optional()?)
        })?;
        row.ok_or_else(|| {
            Error::not_found(format!(
                "subscriber {subscriber_id} is not in account {} (campaign {campaign_id})",
                c.account_id
            ))
        })
    }

    fn campaign(&self, id: i64) -> Result<Campaign> {
        self.read(|c| {
            c.query_row(
                &format!("SELECT {CAMPAIGN_COLS} FROM campaigns WHERE id = ?1"),
                [id],
                campaign_from_row,
            )
            .optional()?
            .ok_or_else(|| Error::not_found(format!("unknown campaign id {id}")))
        })
    }

    /// `draft -> approved`, scheduled for `at`. Content is frozen from here on (a trigger
    /// refuses any change to it).
    fn approve_campaign(&self, id: i64, at: i64) -> Result<Campaign> {
        let now = crate::domain::clock::now_ms();
        self.transition(
            id,
            "approve",
            &format!(
                "UPDATE campaigns SET status = 'approved', scheduled_for = ?2, approved_at = {now}
                 WHERE id = ?1 AND status = 'draft'"
            ),
            Some(at),
        )
    }

    /// `approved|sending -> paused`. Rows leased but not dispatched go back to the queue.
    fn pause_campaign(&self, id: i64) -> Result<Campaign> {
        let c = self.transition(
            id,
            "pause",
            "UPDATE campaigns SET status = 'paused' WHERE id = ?1 AND status IN ('approved', 'sending')",
            None,
        )?;
        let now = crate::domain::clock::now_ms();
        self.write(|tx| {
            tx.execute(
                "UPDATE sends SET status = 'queued', lease_token = NULL, lease_owner = NULL,
                        visible_at = ?2, updated_at = ?2
                 WHERE campaign_id = ?1 AND status = 'leased' AND dispatched_at IS NULL",
                params![id, now],
            )?;
            Ok(())
        })?;
        Ok(c)
    }

    /// `paused -> sending` (or back to `approved` if it had not started).
    fn resume_campaign(&self, id: i64) -> Result<Campaign> {
        self.transition(
            id,
            "resume",
            "UPDATE campaigns SET status = CASE WHEN started_at IS NULL THEN 'approved'
                                                ELSE 'sending' END
             WHERE id = ?1 AND status = 'paused'",
            None,
        )
    }

    /// Any non-terminal state -> `cancelled`. Queued and undispatched rows are cancelled; rows
    /// whose call may be in flight keep their lease (their outcome is still recorded), and the
    /// in-doubt ones stay in doubt.
    fn cancel_campaign(&self, id: i64) -> Result<Campaign> {
        let now = crate::domain::clock::now_ms();
        self.write(|tx| {
            let n = tx.execute(
                "UPDATE campaigns SET status = 'cancelled', finished_at = ?2
                 WHERE id = ?1 AND status IN ('draft', 'approved', 'sending', 'paused')",
                params![id, now],
            )?;
            let current = campaign_status(tx, id)?;
            if n == 0 {
                return Err(Error::conflict(format!(
                    "cannot cancel campaign {id}: it is {current}"
                )));
            }
            tx.execute(
                "UPDATE sends SET status = 'cancelled', lease_token = NULL, updated_at = ?2
                 WHERE campaign_id = ?1
                   AND (status = 'queued' OR (status = 'leased' AND dispatched_at IS NULL))",
                params![id, now],
            )?;
            Ok(())
        })?;
        self.campaign(id)
    }

    fn status_counts(&self, id: i64) -> Result<StatusCounts> {
        let c = self.campaign(id)?;
        self.read(|conn| {
            let mut counts: BTreeMap<&'static str, u64> =
                SendStatus::ALL.iter().map(|s| (s.as_str(), 0)).collect();
            // Kept by the triggers of 0014 in every transaction that changes a send: one
            // primary-key range, whatever the size of the campaign.
            let mut st = conn.prepare_cached(STATUS_COUNTS)?;
            let mut rows = st.query(params![id])?;
            let mut total = 0;
            while let Some(r) = rows.next()? {
                let s: SendStatus = codec::get(r, 0, "sends")?;
                let n: i64 = r.get(1)?;
                counts.insert(s.as_str(), n as u64);
                total += n as u64;
            }
            Ok(StatusCounts {
                campaign_id: id,
                status: c.status,
                list_complete: c.list_complete,
                total,
                counts,
            })
        })
    }

    /// Stream every recipient of a campaign to `f`, in send id order.
    fn report(&self, id: i64, f: &mut dyn FnMut(ReportRow) -> Result<()>) -> Result<()> {
        let c = self.campaign(id)?;
        self.read(|conn| {
            let mut st = conn.prepare(&format!(
                "SELECT {REPORT_COLS} FROM sends
                 WHERE campaign_id = ?1 AND account_id = ?2 ORDER BY id"
            ))?;
            let mut rows = st.query(params![id, c.account_id])?;
            while let Some(r) = rows.next()? {
                f(report_row(r)?)?;
            }
            Ok(())
        })
    }

    fn report_page(&self, id: i64, after: i64, limit: usize) -> Result<Vec<ReportRow>> {
        let c = self.campaign(id)?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(|conn| {
            let mut st = conn.prepare(&format!(
                "SELECT {REPORT_COLS} FROM sends
                 WHERE campaign_id + 0 = ?1 AND account_id = ?2 AND id > ?3 ORDER BY id LIMIT ?4"
            ))?;
            let rows = st
                .query_map(params![id, c.account_id, after, limit], report_row)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })
    }

    fn report_search(&self, id: i64, q: &ReportSearch) -> Result<Vec<ReportRow>> {
        let c = self.campaign(id)?;
        let limit = i64::try_from(q.limit).unwrap_or(i64::MAX);
        // The prefix is a range of UNIQUE (campaign_id, address) (sqlite_autoindex_sends_2);
        // U+10FFFF sorts after every character an address can hold (BINARY collation).
        let upper = q.prefix.as_ref().map(|p| format!("{p}\u{10FFFF}"));
        let in_state = match (&q.prefix, q.status) {
            (None, Some(state)) => self.read(|conn| {
                let n: Option<i64> = conn
                    .query_row(
                        "SELECT n FROM campaign_counts WHERE campaign_id = ?1 AND status = ?2",
                        params![id, state.as_str()],
                        |r| r.get(0),
                    )
                    .optional()?;
                Ok(n.unwrap_or(0))
            })?,
            _ => 0,
        };
        if q.prefix.is_none() && q.status.is_some() && in_state == 0 {
            // The counters (0014) say no send is in that state: nothing to walk the campaign for.
            return Ok(Vec::new());
        }
        let sql = report_sql(q.prefix.is_some(), q.status, in_state);
        let status = q.status.map(|s| s.as_str());
        self.read(|conn| {
            let mut st = conn.prepare(&sql)?;
            for (i, v) in [(4, q.prefix.as_deref()), (5, upper.as_deref()), (6, status)] {
                if sql.contains(&format!("?{i}")) {
                    st.raw_bind_parameter(i, v)?;
                }
            }
            st.raw_bind_parameter(1, id)?;
            st.raw_bind_parameter(2, c.account_id)?;
            st.raw_bind_parameter(3, q.after)?;
            st.raw_bind_parameter(7, limit)?;
            let mut rows = st.raw_query();
            let mut out = Vec::new();
            while let Some(r) = rows.next()? {
                out.push(report_row(r)?);
            }
            Ok(out)
        })
    }

    fn send_account(&self, send_id: i64) -> Result<Option<i64>> {
        self.read(|c| {
            Ok(c.query_row(
                "SELECT account_id FROM sends WHERE id = ?1",
                [send_id],
                |r| r.get(0),
            )
            .optional()?)
        })
    }

    fn doubts(&self, campaign_id: i64) -> Result<Vec<DoubtRow>> {
        let c = self.campaign(campaign_id)?;
        self.read(|conn| {
            let mut st = conn.prepare(
                "SELECT id, job_id, address, attempts, doubt_since, last_error FROM sends
                 WHERE campaign_id = ?1 AND account_id = ?2 AND status = 'in_doubt' ORDER BY id",
            )?;
            let rows = st
                .query_map(params![campaign_id, c.account_id], |r| {
                    Ok(DoubtRow {
                        send_id: r.get(0)?,
                        job_id: r.get(1)?,
                        address: r.get(2)?,
                        attempts: r.get(3)?,
                        doubt_since: r.get(4)?,
                        reason: r.get(5)?,
                    })
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })
    }

    /// Two range reads of `sends_doubt`: the rest of the cursor's campaign, then the next
    /// campaigns of the account (campaigns in id order, each one's rows in doubt in id order).
    fn account_doubts(
        &self,
        account_id: i64,
        after: (i64, i64),
        limit: usize,
    ) -> Result<Vec<AccountDoubtRow>> {
        let limit = limit as i64;
        self.read(|conn| {
            let mut rows = Vec::new();
            let mut st = conn.prepare_cached(ACCOUNT_DOUBTS_SAME)?;
            let same = st.query_map(params![account_id, after.0, after.1, limit], doubt_row)?;
            for r in same {
                rows.push(r?);
            }
            let left = limit - rows.len() as i64;
            if left > 0 {
                let mut st = conn.prepare_cached(ACCOUNT_DOUBTS_NEXT)?;
                let next = st.query_map(params![account_id, after.0, left], doubt_row)?;
                for r in next {
                    rows.push(r?);
                }
            }
            Ok(rows)
        })
    }

    /// An operator's decision on a row in doubt: it was delivered (`as_sent`), or it was not
    /// and may be sent again. Completes the campaign if that was the last open row.
    fn resolve_doubt(&self, send_id: i64, as_sent: bool) -> Result<()> {
        self.resolve_doubt_by(send_id, as_sent, "operator")
    }

    /// [`Campaigns::resolve_doubt`], recording who decided (`by` goes into the row's reason).
    fn resolve_doubt_by(&self, send_id: i64, as_sent: bool, by: &str) -> Result<()> {
        let now = crate::domain::clock::now_ms();
        self.write(|tx| {
            let status: Option<SendStatus> = tx
                .query_row("SELECT status FROM sends WHERE id = ?1", [send_id], |r| {
                    codec::get(r, 0, "sends")
                })
                .optional()?;
            let Some(status) = status else {
                return Err(Error::not_found(format!("unknown send id {send_id}")));
            };
            if status != SendStatus::InDoubt {
                return Err(Error::conflict(format!(
                    "send {send_id} is {status}, not in_doubt"
                )));
            }
            settle_doubt_tx(tx, send_id, None, as_sent, now, by)?;
            Ok(())
        })
    }
}

impl SqliteStore {
    /// Apply a compare-and-set transition; on 0 rows changed, explain why.
    fn transition(&self, id: i64, verb: &str, sql: &str, extra: Option<i64>) -> Result<Campaign> {
        self.write(|tx| {
            let n = match extra {
                Some(x) => tx.execute(sql, params![id, x])?,
                None => tx.execute(sql, params![id])?,
            };
            let current = campaign_status(tx, id)?;
            if n == 0 {
                return Err(Error::conflict(format!(
                    "cannot {verb} campaign {id}: it is {current}"
                )));
            }
            Ok(())
        })?;
        self.campaign(id)
    }
}

/// The status of a campaign that must exist (read after a compare-and-set, to say why it
/// changed nothing).
fn campaign_status(tx: &Transaction<'_>, id: i64) -> Result<CampaignStatus> {
    tx.query_row("SELECT status FROM campaigns WHERE id = ?1", [id], |r| {
        codec::get(r, 0, "campaigns")
    })
    .optional()?
    .ok_or_else(|| Error::not_found(format!("unknown campaign id {id}")))
}

/// Settle one row in doubt as sent (with the provider's id, if known) or queued again, then
/// complete the campaign if that was its last open row. Returns false if it was not in doubt.
pub(super) fn settle_doubt_tx(
    tx: &Transaction<'_>,
    send_id: i64,
    provider_id: Option<&str>,
    as_sent: bool,
    now: i64,
    by: &str,
) -> Result<bool> {
    let campaign_id: Option<i64> = tx
        .query_row(
            "SELECT campaign_id FROM sends WHERE id = ?1 AND status = 'in_doubt'",
            [send_id],
            |r| r.get(0),
        )
        .optional()?;
    let Some(campaign_id) = campaign_id else {
        return Ok(false);
    };
    if as_sent {
        tx.execute(
            "UPDATE sends SET status = 'sent', sent_at = :now, updated_at = :now,
                    doubt_since = NULL,
                    provider_message_id = coalesce(:provider_id, provider_message_id),
                    last_error = 'resolved as sent by ' || :by
             WHERE id = :id AND status = 'in_doubt'",
            named_params! {":id": send_id, ":now": now, ":provider_id": provider_id, ":by": by},
        )?;
    } else {
        tx.execute(
            "UPDATE sends SET status = 'queued', visible_at = ?2, updated_at = ?2,
                    doubt_since = NULL, dispatched_at = NULL,
                    last_error = 'requeued by ' || ?3 || ' after doubt'
             WHERE id = ?1 AND status = 'in_doubt'",
            params![send_id, now, by],
        )?;
    }
    complete_if_done(tx, campaign_id, now)?;
    Ok(true)
}

#[cfg(test)]
mod report_plans {
    use super::*;

    /// SQLite's plan (`EXPLAIN QUERY PLAN`, details joined) for a report page's statement.
    fn plan(c: &rusqlite::Connection, sql: &str) -> String {
        let mut st = c.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let mut rows = st.raw_query();
        let mut out = Vec::new();
        while let Some(r) = rows.next().unwrap() {
            out.push(r.get::<_, String>(3).unwrap());
        }
        out.join("; ")
    }

    /// Each way a report page reads a campaign uses the index it was written for (the bundled
    /// SQLite's planner, on the real schema): never the whole table, never the whole campaign
    /// for a rare state.
    #[test]
    fn report_pages_read_through_their_index() {
        let dir = tempfile::tempdir().unwrap();
        let opts = crate::store::OpenOptions {
            create: true,
            ..Default::default()
        };
        let store = SqliteStore::open(&dir.path().join("plans.db"), &opts).unwrap();
        store
            .read(|c| {
                let cases = [
                    (true, None, 0, "sqlite_autoindex_sends_2"),
                    (
                        true,
                        Some(SendStatus::Failed),
                        10,
                        "sqlite_autoindex_sends_2",
                    ),
                    (false, None, 0, "sends_campaign_order"),
                    (false, Some(SendStatus::Sent), 10, "sends_campaign_order"),
                    (false, Some(SendStatus::InDoubt), 10, "sends_doubt"),
                    (false, Some(SendStatus::Failed), 10, "sends_unsent"),
                    (false, Some(SendStatus::Suppressed), 10, "sends_unsent"),
                    (false, Some(SendStatus::Queued), 10, "sends_claim"),
                    (false, Some(SendStatus::Leased), 10, "sends_claim"),
                    (
                        false,
                        Some(SendStatus::Queued),
                        1_000_000,
                        "sends_campaign_order",
                    ),
                ];
                for (prefix, state, n, index) in cases {
                    let got = plan(c, &report_sql(prefix, state, n));
                    assert!(
                        got.contains(&format!("USING INDEX {index}")),
                        "prefix {prefix} state {state:?} ({n} rows): {got}"
                    );
                }
                Ok(())
            })
            .unwrap();
    }
}

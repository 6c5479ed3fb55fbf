//! Lists, memberships and a campaign's audience counts on SQLite (`Lists`), plus the
//! membership helpers the subscriber import and campaign creation call inside their own
//! transactions.

use super::codec;
use super::segment;
use super::SqliteStore;
use crate::domain::address::Channel;
use crate::domain::links::Links;
use crate::domain::segment::Filter;
use crate::domain::template::VarCounts;
use crate::error::{Error, Result};
use crate::store::{
    Audience, AudienceCounts, AudienceQuery, Campaigns, ListChange, ListRow, Lists, NewList,
};
use rusqlite::{named_params, params, Connection, OptionalExtension, Row, Transaction};
use std::collections::BTreeMap;

const LIST_COLS: &str = "l.id, l.account_id, l.name, l.description, l.optin, l.created_at,
    l.public, l.confirm_from, l.confirm_subject, l.confirm_body,
    (SELECT coalesce(sum(n), 0) FROM list_counts c WHERE c.list_id = l.id AND c.status = 'subscribed'),
    (SELECT coalesce(sum(n), 0) FROM list_counts c WHERE c.list_id = l.id AND c.status = 'unsubscribed'),
    (SELECT coalesce(sum(n), 0) FROM list_counts c WHERE c.list_id = l.id AND c.status = 'pending')";

fn list_from_row(r: &Row<'_>) -> rusqlite::Result<ListRow> {
    let count =
        |i: usize| -> rusqlite::Result<u64> { Ok(u64::try_from(r.get::<_, i64>(i)?).unwrap_or(0)) };
    Ok(ListRow {
        id: r.get(0)?,
        account_id: r.get(1)?,
        name: r.get(2)?,
        description: r.get(3)?,
        optin: codec::get(r, 4, "lists")?,
        created_at: r.get(5)?,
        public: r.get(6)?,
        confirm_from: r.get(7)?,
        confirm_subject: r.get(8)?,
        confirm_body: r.get(9)?,
        subscribed: count(10)?,
        unsubscribed: count(11)?,
        pending: count(12)?,
    })
}

/// `Ok` when every list in `lists` belongs to `account_id`; else `NotFound` naming the first
/// that does not.
pub(super) fn require_lists(tx: &Transaction<'_>, account_id: i64, lists: &[i64]) -> Result<()> {
    let mut st = tx.prepare_cached("SELECT 1 FROM lists WHERE id = ?1 AND account_id = ?2")?;
    for &id in lists {
        if !st.exists(params![id, account_id])? {
            return Err(Error::not_found(format!(
                "unknown list id {id} in account {account_id}"
            )));
        }
    }
    Ok(())
}

/// Make `subscriber_id` a member of each of `lists` (checked by [`require_lists`]): subscribed,
/// or pending on a double opt-in list, with its confirmation queued once (`optin.rs`; the
/// caller ran `optin::can_confirm`). An existing membership is kept as it is (someone who
/// unsubscribed from the list stays unsubscribed). Returns how many memberships were new.
pub(super) fn join_lists(
    tx: &Transaction<'_>,
    subscriber_id: i64,
    lists: &[i64],
    links: Option<&Links>,
) -> Result<u64> {
    let mut st = tx.prepare_cached(
        "INSERT INTO list_members (list_id, subscriber_id, status, created_at, updated_at)
         SELECT l.id, :sub, CASE l.optin WHEN 'double' THEN 'pending' ELSE 'subscribed' END,
                :now, :now
         FROM lists l WHERE l.id = :list
         ON CONFLICT DO NOTHING",
    )?;
    let now = crate::domain::clock::now_ms();
    let mut joined = 0;
    for &list in lists {
        joined +=
            st.execute(named_params! {":sub": subscriber_id, ":now": now, ":list": list})? as u64;
    }
    super::optin::queue_confirmations(tx, subscriber_id, lists, links)?;
    Ok(joined)
}

/// List `list_id` if it takes public signups.
pub(super) fn public_list(c: &Connection, list_id: i64) -> Result<Option<ListRow>> {
    Ok(c.query_row(
        &format!("SELECT {LIST_COLS} FROM lists l WHERE l.id = ?1 AND l.public = 1"),
        [list_id],
        list_from_row,
    )
    .optional()?)
}

/// Store a new draft's targets (checked by [`require_lists`]).
pub(super) fn target_lists(tx: &Transaction<'_>, campaign_id: i64, lists: &[i64]) -> Result<()> {
    let mut st = tx.prepare_cached(
        "INSERT INTO campaign_lists (campaign_id, list_id) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
    )?;
    for &list in lists {
        st.execute(params![campaign_id, list])?;
    }
    Ok(())
}

fn find_list(c: &Connection, account_id: i64, key: &str) -> Result<Option<ListRow>> {
    let key = key.trim();
    let by_id = key.parse::<i64>().ok();
    Ok(c.query_row(
        &format!(
            "SELECT {LIST_COLS} FROM lists l
             WHERE l.account_id = ?1 AND (l.id = ?2 OR l.name = ?3)
             ORDER BY l.id = ?2 DESC LIMIT 1"
        ),
        params![account_id, by_id, key],
        list_from_row,
    )
    .optional()?)
}

/// The audience counts of one query; see [`AudienceCounts`] for the buckets. `m` is the
/// targeted memberships (`:lists`, a JSON array of list ids) folded per subscriber; without
/// targeted lists every subscriber of the account is targeted (`:whole`). `filter` is the
/// compiled audience filter (`segment.rs`, its values bound), applied where list building
/// applies it: to the subscribers it would otherwise take. One statement, so one snapshot.
fn audience_sql(channel: Channel, filter: Option<&str>) -> String {
    let addr = match channel {
        Channel::Sms => "s.phone",
        Channel::Email => "s.email_norm",
    };
    let filtered = filter.map_or(String::new(), |f| {
        format!("WHEN NOT {f} THEN 'filtered_out'")
    });
    format!(
        "WITH m AS (
             SELECT lm.subscriber_id AS sid, max(lm.status = 'subscribed') AS sub,
                    max(lm.status = 'unsubscribed') AS unsub
             FROM json_each(:lists) cl JOIN list_members lm ON lm.list_id = cl.value
             GROUP BY lm.subscriber_id),
         t AS (
             SELECT {addr} AS addr,
                    CASE WHEN NOT coalesce(m.sub, :whole) AND m.unsub THEN 'unsubscribed'
                         WHEN NOT coalesce(m.sub, :whole) OR s.status <> 'confirmed'
                              THEN 'unconfirmed'
                         WHEN {addr} IS NULL THEN 'no_address'
                         {filtered}
                         ELSE 'ok' END AS k
             FROM subscribers s LEFT JOIN m ON m.sid = s.id
             WHERE s.account_id = :account AND s.removed_at IS NULL
               AND (:whole OR m.sid IS NOT NULL))
         SELECT coalesce(sum(k = 'unsubscribed'), 0), coalesce(sum(k = 'unconfirmed'), 0),
                coalesce(sum(k = 'no_address'), 0),
                coalesce(sum(k = 'ok'), 0) - count(DISTINCT CASE WHEN k = 'ok' THEN addr END),
                count(DISTINCT CASE WHEN k = 'ok' AND su.address IS NOT NULL THEN addr END),
                count(DISTINCT CASE WHEN k = 'ok' AND su.address IS NULL THEN addr END),
                coalesce(sum(k = 'filtered_out'), 0)
         FROM t LEFT JOIN suppressions su ON su.account_id = :account
                                         AND su.channel = :channel AND su.address = t.addr"
    )
}

/// The audience of [`Lists::variable_counts_for`] (`filter`: a compiled condition on `s`),
/// then its size and how many of it have each variable, read from the same JSON object the
/// list builder captures.
fn variable_counts_sql(channel: Channel, filter: &str) -> String {
    let addr = match channel {
        Channel::Sms => "s.phone",
        Channel::Email => "s.email_norm",
    };
    format!(
        "WITH a AS (
             SELECT s.id, s.attrs, s.name, s.email, s.phone FROM subscribers s
             WHERE s.account_id = :account AND s.status = 'confirmed' AND {addr} IS NOT NULL
               AND (:whole OR EXISTS (
                   SELECT 1 FROM json_each(:lists) cl JOIN list_members lm
                   ON lm.list_id = cl.value AND lm.subscriber_id = s.id
                   WHERE lm.status = 'subscribed'))
               AND {filter})
         SELECT NULL, count(*) FROM a
         UNION ALL
         SELECT j.key, count(DISTINCT s.id) FROM a s, json_each({vars}) j GROUP BY j.key",
        vars = super::ledger::CAPTURED_VARS,
    )
}

impl Lists for SqliteStore {
    fn list_members(
        &self,
        q: &crate::store::MemberPage<'_>,
    ) -> Result<Vec<crate::store::MemberRow>> {
        self.read(|c| super::pages::members(c, q))
    }

    fn link_state(
        &self,
        account_id: i64,
        channel: Channel,
        address: &str,
        lists: &[i64],
    ) -> Result<crate::store::LinkState> {
        self.read(|c| Ok(super::unsubscribe::state(c, account_id, channel, address, lists)?.1))
    }

    fn unsubscribe(
        &self,
        r: &crate::store::UnsubscribeRequest<'_>,
    ) -> Result<crate::store::UnsubscribeChange> {
        self.write(|tx| super::unsubscribe::apply(tx, r))
    }

    fn create_list(&self, l: &NewList<'_>) -> Result<i64> {
        let name = l.name.trim();
        if name.is_empty() {
            return Err(Error::invalid("the list name is empty"));
        }
        self.write(|tx| {
            super::admin::require_account(tx, l.account_id)?;
            let exists: Option<i64> = tx
                .query_row(
                    "SELECT id FROM lists WHERE account_id = ?1 AND name = ?2",
                    params![l.account_id, name],
                    |r| r.get(0),
                )
                .optional()?;
            if let Some(id) = exists {
                return Err(Error::conflict(format!(
                    "a list named {name:?} already exists in account {} (id {id})",
                    l.account_id
                )));
            }
            tx.execute(
                "INSERT INTO lists (account_id, name, description, optin, created_at, public,
                                    confirm_from, confirm_subject, confirm_body)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    l.account_id,
                    name,
                    l.description,
                    l.optin,
                    crate::domain::clock::now_ms(),
                    l.public,
                    l.confirm.from,
                    l.confirm.subject,
                    l.confirm.body,
                ],
            )?;
            Ok(tx.last_insert_rowid())
        })
    }

    fn update_list(&self, account_id: i64, list_id: i64, change: &ListChange<'_>) -> Result<()> {
        self.write(|tx| {
            require_lists(tx, account_id, &[list_id])?;
            tx.execute(
                "UPDATE lists SET public = coalesce(?2, public),
                        confirm_from = coalesce(?3, confirm_from),
                        confirm_subject = coalesce(?4, confirm_subject),
                        confirm_body = coalesce(?5, confirm_body)
                 WHERE id = ?1",
                params![
                    list_id,
                    change.public,
                    change.confirm.from,
                    change.confirm.subject,
                    change.confirm.body
                ],
            )?;
            Ok(())
        })
    }

    fn lists(&self, account_id: i64) -> Result<Vec<ListRow>> {
        self.account_exists(account_id)?;
        self.read(|c| {
            let mut st = c.prepare(&format!(
                "SELECT {LIST_COLS} FROM lists l WHERE l.account_id = ?1 ORDER BY l.name"
            ))?;
            let rows = st
                .query_map([account_id], list_from_row)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })
    }

    fn find_list(&self, account_id: i64, key: &str) -> Result<ListRow> {
        self.account_exists(account_id)?;
        self.read(|c| find_list(c, account_id, key))?
            .ok_or_else(|| {
                Error::not_found(format!(
                    "unknown list {:?} in account {account_id} (`sendonce list list --account \
                 {account_id}` shows them)",
                    key.trim()
                ))
            })
    }

    fn remove_list(&self, account_id: i64, list_id: i64) -> Result<u64> {
        self.write(|tx| {
            require_lists(tx, account_id, &[list_id])?;
            let busy: Vec<i64> = tx
                .prepare(
                    "SELECT c.id FROM campaign_lists cl JOIN campaigns c ON c.id = cl.campaign_id
                     WHERE cl.list_id = ?1 AND c.status NOT IN ('draft', 'sent', 'cancelled')
                     ORDER BY c.id",
                )?
                .query_map([list_id], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            if !busy.is_empty() {
                return Err(Error::conflict(format!(
                    "list {list_id} is targeted by campaign(s) {busy:?}, which are approved, \
                     sending or paused: cancel them or let them finish first"
                )));
            }
            let n = tx.execute("DELETE FROM list_members WHERE list_id = ?1", [list_id])?;
            tx.execute("DELETE FROM lists WHERE id = ?1", [list_id])?;
            Ok(n as u64)
        })
    }

    fn campaign_lists(&self, campaign_id: i64) -> Result<Vec<i64>> {
        self.read(|c| {
            let mut st = c.prepare(
                "SELECT list_id FROM campaign_lists WHERE campaign_id = ?1 ORDER BY list_id",
            )?;
            let ids = st
                .query_map([campaign_id], |r| r.get(0))?
                .collect::<rusqlite::Result<Vec<i64>>>()?;
            Ok(ids)
        })
    }

    fn audience_counts(&self, campaign_id: i64) -> Result<AudienceCounts> {
        let c = self.campaign(campaign_id)?;
        let lists = self.campaign_lists(campaign_id)?;
        let filter = c
            .filter
            .as_deref()
            .map(|f| Filter::parse_stored(f, campaign_id))
            .transpose()?;
        self.audience_counts_for(&AudienceQuery {
            account_id: c.account_id,
            channel: c.channel,
            lists: &lists,
            filter: filter.as_ref(),
        })
    }

    fn variable_counts_for(&self, q: &AudienceQuery<'_>) -> Result<VarCounts> {
        let compiled = segment::compile(q.filter);
        let sql = variable_counts_sql(q.channel, &compiled.sql);
        let lists = serde_json::Value::from(q.lists.to_vec()).to_string();
        let whole = q.lists.is_empty();
        let fixed: [(&str, &dyn rusqlite::ToSql); 3] = [
            (":lists", &lists),
            (":account", &q.account_id),
            (":whole", &whole),
        ];
        let params = compiled.with(&fixed);
        self.read(|c| {
            let mut counts = VarCounts {
                channel: q.channel,
                total: 0,
                present: BTreeMap::new(),
            };
            let mut st = c.prepare(&sql)?;
            let mut rows = st.query(params.as_slice())?;
            while let Some(r) = rows.next()? {
                let (key, n): (Option<String>, i64) = (r.get(0)?, r.get(1)?);
                let n = u64::try_from(n).unwrap_or(0);
                match key {
                    None => counts.total = n,
                    Some(k) => {
                        counts.present.insert(k, n);
                    }
                }
            }
            Ok(counts)
        })
    }

    fn audience_counts_for(&self, q: &AudienceQuery<'_>) -> Result<AudienceCounts> {
        let compiled = q.filter.map(|f| segment::compile(Some(f)));
        let sql = audience_sql(q.channel, compiled.as_ref().map(|f| f.sql.as_str()));
        let lists = serde_json::Value::from(q.lists.to_vec()).to_string();
        let whole = q.lists.is_empty();
        let fixed: [(&str, &dyn rusqlite::ToSql); 4] = [
            (":lists", &lists),
            (":account", &q.account_id),
            (":channel", &q.channel),
            (":whole", &whole),
        ];
        let params = match &compiled {
            Some(f) => f.with(&fixed),
            None => fixed.to_vec(),
        };
        self.read(|conn| {
            let n = |r: &Row<'_>, i: usize| -> rusqlite::Result<u64> {
                Ok(u64::try_from(r.get::<_, i64>(i)?).unwrap_or(0))
            };
            Ok(conn.query_row(&sql, params.as_slice(), |r| {
                Ok(AudienceCounts {
                    unsubscribed: n(r, 0)?,
                    unconfirmed: n(r, 1)?,
                    no_address: n(r, 2)?,
                    duplicates: n(r, 3)?,
                    suppressed: n(r, 4)?,
                    would_receive: n(r, 5)?,
                    filtered_out: n(r, 6)?,
                })
            })?)
        })
    }
}

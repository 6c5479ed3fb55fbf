//! SQLite's part of `Lists` that is not yet written once: a campaign's audience counts, which
//! compile the audience filter with `segment.rs` ([`AudienceSql`]); and the membership steps
//! the subscriber import and campaign creation (`admin.rs`, `campaigns.rs`) call inside their
//! own transactions, handed to the neutral ones of `store/lists.rs` and `store/optin.rs`.

use super::segment;
use super::tx::SqliteTx;
use super::SqliteStore;
use crate::domain::address::Channel;
use crate::domain::links::Links;
use crate::domain::template::VarCounts;
use crate::error::Result;
use crate::store::lists::AudienceSql;
use crate::store::{AudienceCounts, AudienceQuery};
use rusqlite::{Row, Transaction};
use std::collections::BTreeMap;

/// `store::lists::require_lists` (no row locks on SQLite).
pub(super) fn require_lists(tx: &Transaction<'_>, account_id: i64, lists: &[i64]) -> Result<()> {
    crate::store::lists::require_lists(&mut SqliteTx(tx), account_id, lists, false)
}

/// `store::lists::join_lists`.
pub(super) fn join_lists(
    tx: &Transaction<'_>,
    subscriber_id: i64,
    lists: &[i64],
    links: Option<&Links>,
) -> Result<u64> {
    crate::store::lists::join_lists(&mut SqliteTx(tx), subscriber_id, lists, links)
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

impl AudienceSql for SqliteStore {
    fn variable_sql_counts(&self, q: &AudienceQuery<'_>) -> Result<VarCounts> {
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

    fn audience_sql_counts(&self, q: &AudienceQuery<'_>) -> Result<AudienceCounts> {
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

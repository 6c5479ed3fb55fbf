//! PostgreSQL's part of `Lists` that is not yet written once: a campaign's audience counts,
//! which compile the audience filter with `segment.rs` ([`AudienceSql`]); and the membership
//! steps the subscriber import and campaign creation (`audience.rs`) await inside their own
//! transactions (the neutral ones are `store/lists.rs`'s, over `sql::Tx`).

use super::ledger::TxResult;
use super::segment;
use super::PgStore;
use crate::domain::address::Channel;
use crate::domain::template::VarCounts;
use crate::error::{Error, Result};
use crate::store::lists::AudienceSql;
use crate::store::{AudienceCounts, AudienceQuery};
use deadpool_postgres::Transaction;
use std::collections::BTreeMap;

/// `Ok` when every list in `lists` belongs to `account_id`; else `NotFound` naming the first
/// that does not. `lock` takes each list's row `FOR UPDATE` (no membership can be added to it
/// until the transaction ends).
pub(super) async fn require_lists(
    tx: &Transaction<'_>,
    account_id: i64,
    lists: &[i64],
    lock: bool,
) -> TxResult<()> {
    let sql = if lock {
        "SELECT 1 FROM lists WHERE id = $1 AND account_id = $2 FOR UPDATE"
    } else {
        "SELECT 1 FROM lists WHERE id = $1 AND account_id = $2"
    };
    for &id in lists {
        if tx.query_opt(sql, &[&id, &account_id]).await?.is_none() {
            return Err(
                Error::not_found(format!("unknown list id {id} in account {account_id}")).into(),
            );
        }
    }
    Ok(())
}

/// Make `subscriber_id` a member of each of `lists` (checked by [`require_lists`]):
/// subscribed, or pending on a double opt-in list (the caller queues its confirmation). An
/// existing membership is kept as it is (someone who unsubscribed from the list stays
/// unsubscribed). Returns how many memberships were new.
pub(super) async fn join_lists(
    tx: &Transaction<'_>,
    subscriber_id: i64,
    lists: &[i64],
) -> TxResult<u64> {
    let now = crate::domain::clock::now_ms();
    let mut joined = 0;
    for &list in lists {
        joined += tx
            .execute(
                "INSERT INTO list_members (list_id, subscriber_id, status, created_at, updated_at)
                 SELECT l.id, $1, CASE l.optin WHEN 'double' THEN 'pending' ELSE 'subscribed' END,
                        $2, $2
                 FROM lists l WHERE l.id = $3
                 ON CONFLICT DO NOTHING",
                &[&subscriber_id, &now, &list],
            )
            .await?;
    }
    Ok(joined)
}

/// Store a new draft's targets (checked by [`require_lists`]).
pub(super) async fn target_lists(
    tx: &Transaction<'_>,
    campaign_id: i64,
    lists: &[i64],
) -> TxResult<()> {
    for &list in lists {
        tx.execute(
            "INSERT INTO campaign_lists (campaign_id, list_id) VALUES ($1, $2)
             ON CONFLICT DO NOTHING",
            &[&campaign_id, &list],
        )
        .await?;
    }
    Ok(())
}

fn address_column(channel: Channel) -> &'static str {
    match channel {
        Channel::Sms => "s.phone",
        Channel::Email => "s.email_norm",
    }
}

/// The audience counts of one query ($1 the targeted list ids, $2 whether the whole account
/// is targeted, $3 account, $4 channel; `filter`, the compiled audience filter, from $5); see
/// `sqlite/lists.rs`.
fn audience_sql(channel: Channel, filter: Option<&str>) -> String {
    let addr = address_column(channel);
    let filtered = filter.map_or(String::new(), |f| {
        format!("WHEN NOT {f} THEN 'filtered_out'")
    });
    format!(
        "WITH m AS (
             SELECT lm.subscriber_id AS sid, bool_or(lm.status = 'subscribed') AS sub,
                    bool_or(lm.status = 'unsubscribed') AS unsub
             FROM list_members lm WHERE lm.list_id = ANY($1::bigint[])
             GROUP BY lm.subscriber_id),
         t AS (
             SELECT {addr} AS addr,
                    CASE WHEN NOT coalesce(m.sub, $2::boolean) AND m.unsub THEN 'unsubscribed'
                         WHEN NOT coalesce(m.sub, $2::boolean) OR s.status <> 'confirmed'
                              THEN 'unconfirmed'
                         WHEN {addr} IS NULL THEN 'no_address'
                         {filtered}
                         ELSE 'ok' END AS k
             FROM subscribers s LEFT JOIN m ON m.sid = s.id
             WHERE s.account_id = $3 AND s.removed_at IS NULL
               AND ($2::boolean OR m.sid IS NOT NULL))
         SELECT count(*) FILTER (WHERE k = 'unsubscribed'),
                count(*) FILTER (WHERE k = 'unconfirmed'),
                count(*) FILTER (WHERE k = 'no_address'),
                count(*) FILTER (WHERE k = 'ok') - count(DISTINCT CASE WHEN k = 'ok' THEN addr END),
                count(DISTINCT CASE WHEN k = 'ok' AND su.address IS NOT NULL THEN addr END),
                count(DISTINCT CASE WHEN k = 'ok' AND su.address IS NULL THEN addr END),
                count(*) FILTER (WHERE k = 'filtered_out')
         FROM t LEFT JOIN suppressions su ON su.account_id = $3
                                         AND su.channel = $4 AND su.address = t.addr"
    )
}

/// The template variables captured for a recipient, as `jsonb` (the expression of
/// `ledger.rs`'s `CAPTURED_VARS` before its `::text`).
const CAPTURED_VARS_JSONB: &str = "((s.attrs::jsonb - 'name' - 'email' - 'phone')
     || jsonb_strip_nulls(jsonb_build_object('name', s.name, 'email', s.email,
                                             'phone', s.phone)))";

/// The audience of `variable_counts_for` ($1 account, $2 whole, $3 lists; `filter`, a
/// compiled condition on `s`, from $4), then its size and how many of it have each variable.
fn variable_counts_sql(channel: Channel, filter: &str) -> String {
    let addr = address_column(channel);
    format!(
        "WITH a AS (
             SELECT s.id, s.attrs, s.name, s.email, s.phone FROM subscribers s
             WHERE s.account_id = $1 AND s.status = 'confirmed' AND {addr} IS NOT NULL
               AND ($2::boolean OR EXISTS (
                   SELECT 1 FROM list_members lm
                   WHERE lm.list_id = ANY($3::bigint[]) AND lm.subscriber_id = s.id
                     AND lm.status = 'subscribed'))
               AND {filter})
         SELECT NULL::text, count(*) FROM a
         UNION ALL
         SELECT j.key, count(DISTINCT s.id) FROM a s, jsonb_each({CAPTURED_VARS_JSONB}) j
         GROUP BY j.key"
    )
}

impl AudienceSql for PgStore {
    fn variable_sql_counts(&self, q: &AudienceQuery<'_>) -> Result<VarCounts> {
        let compiled = segment::compile(q.filter, 4);
        let sql = variable_counts_sql(q.channel, &compiled.sql);
        let (account, lists, channel) = (q.account_id, q.lists.to_vec(), q.channel);
        let whole = lists.is_empty();
        self.run(move |pool| async move {
            let c = pool.get().await?;
            let rows = c
                .query(&sql, &compiled.with(&[&account, &whole, &lists]))
                .await?;
            let mut counts = VarCounts {
                channel,
                total: 0,
                present: BTreeMap::new(),
            };
            for r in rows {
                let (key, n): (Option<String>, i64) = (r.get(0), r.get(1));
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
        let compiled = q.filter.map(|f| segment::compile(Some(f), 5));
        let sql = audience_sql(q.channel, compiled.as_ref().map(|f| f.sql.as_str()));
        let compiled = compiled.unwrap_or_else(|| segment::compile(None, 5));
        let (account, lists, channel) = (q.account_id, q.lists.to_vec(), q.channel.as_str());
        let whole = lists.is_empty();
        self.run(move |pool| async move {
            let c = pool.get().await?;
            let r = c
                .query_one(&sql, &compiled.with(&[&lists, &whole, &account, &channel]))
                .await?;
            let n = |i: usize| u64::try_from(r.get::<_, i64>(i)).unwrap_or(0);
            Ok(AudienceCounts {
                unsubscribed: n(0),
                unconfirmed: n(1),
                no_address: n(2),
                duplicates: n(3),
                suppressed: n(4),
                would_receive: n(5),
                filtered_out: n(6),
            })
        })
    }
}

//! `Lists` on PostgreSQL: the rules of `sqlite/lists.rs` and `sqlite/unsubscribe.rs`, statement
//! for statement (audience filters compiled by `segment.rs`), plus the membership helpers the
//! subscriber import and campaign creation call inside their own transactions.

use super::ledger::{transaction, TxResult};
use super::segment;
use super::PgStore;
use crate::domain::address::Channel;
use crate::domain::segment::Filter;
use crate::domain::template::VarCounts;
use crate::error::{Error, Result};
use crate::store::{
    Audience, AudienceCounts, AudienceQuery, Campaigns, LinkList, LinkState, ListChange, ListRow,
    Lists, NewList, OptIn, UnsubscribeChange, UnsubscribeRequest,
};
use deadpool_postgres::Transaction;
use std::collections::BTreeMap;

pub(super) const LIST_COLS: &str = "l.id, l.account_id, l.name, l.description, l.optin,
    l.created_at, l.public, l.confirm_from, l.confirm_subject, l.confirm_body,
    (SELECT count(*) FROM list_members m WHERE m.list_id = l.id AND m.status = 'subscribed'),
    (SELECT count(*) FROM list_members m WHERE m.list_id = l.id AND m.status = 'unsubscribed'),
    (SELECT count(*) FROM list_members m WHERE m.list_id = l.id AND m.status = 'pending')";

pub(super) fn list_from_row(r: &tokio_postgres::Row) -> Result<ListRow> {
    let count = |i: usize| u64::try_from(r.get::<_, i64>(i)).unwrap_or(0);
    let optin: String = r.get(4);
    Ok(ListRow {
        id: r.get(0),
        account_id: r.get(1),
        name: r.get(2),
        description: r.get(3),
        optin: OptIn::parse(&optin).map_err(|_| {
            Error::damaged(format!(
                "lists.optin holds {optin:?}, which is not a list opt-in mode"
            ))
        })?,
        created_at: r.get(5),
        public: r.get(6),
        confirm_from: r.get(7),
        confirm_subject: r.get(8),
        confirm_body: r.get(9),
        subscribed: count(10),
        unsubscribed: count(11),
        pending: count(12),
    })
}

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

/// The account's subscriber with `address` on `channel` (removed ones included).
async fn subscriber(
    tx: &Transaction<'_>,
    account_id: i64,
    channel: Channel,
    address: &str,
) -> TxResult<Option<i64>> {
    let sql = match channel {
        Channel::Email => "SELECT id FROM subscribers WHERE account_id = $1 AND email_norm = $2",
        Channel::Sms => "SELECT id FROM subscribers WHERE account_id = $1 AND phone = $2",
    };
    Ok(tx
        .query_opt(sql, &[&account_id, &address])
        .await?
        .map(|r| r.get(0)))
}

/// What an unsubscribe link covers now (`sqlite/unsubscribe.rs`'s `state`).
async fn link_state(
    tx: &Transaction<'_>,
    account_id: i64,
    channel: Channel,
    address: &str,
    lists: &[i64],
) -> TxResult<(Option<i64>, LinkState)> {
    let refused = || Error::not_found("this link names an account or list that is not its own");
    let exists: bool = tx
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM accounts WHERE id = $1)",
            &[&account_id],
        )
        .await?
        .get(0);
    if !exists {
        return Err(refused().into());
    }
    let sub = subscriber(tx, account_id, channel, address).await?;
    let mut out = Vec::with_capacity(lists.len());
    for &id in lists {
        let row = tx
            .query_opt("SELECT account_id, name FROM lists WHERE id = $1", &[&id])
            .await?;
        // A removed list (ids are never reused) has no members left: nothing to show or do.
        let Some(row) = row else { continue };
        let (owner, name): (i64, String) = (row.get(0), row.get(1));
        if owner != account_id {
            return Err(refused().into());
        }
        let status: Option<String> = match sub {
            Some(s) => tx
                .query_opt(
                    "SELECT status FROM list_members WHERE list_id = $1 AND subscriber_id = $2",
                    &[&id, &s],
                )
                .await?
                .map(|r| r.get(0)),
            None => None,
        };
        out.push(LinkList { id, name, status });
    }
    let suppressed: bool = tx
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM suppressions
                            WHERE account_id = $1 AND channel = $2 AND address = $3)",
            &[&account_id, &channel.as_str(), &address],
        )
        .await?
        .get(0);
    Ok((
        sub,
        LinkState {
            lists: out,
            suppressed,
        },
    ))
}

/// An owned [`UnsubscribeRequest`], to move onto the store's runtime.
struct Unsubscribe {
    account_id: i64,
    channel: Channel,
    address: String,
    lists: Vec<i64>,
    everything: bool,
    source: String,
}

/// The unsubscribe itself (`sqlite/unsubscribe.rs`'s `apply`).
async fn apply(tx: &Transaction<'_>, r: &Unsubscribe) -> TxResult<UnsubscribeChange> {
    let now = super::ledger::lock_opt_outs(tx, r.account_id).await?;
    let (sub, st) = link_state(tx, r.account_id, r.channel, &r.address, &r.lists).await?;
    let mut change = UnsubscribeChange::default();
    if let Some(sub) = sub {
        if r.everything {
            change.memberships = tx
                .execute(
                    "UPDATE list_members SET status = 'unsubscribed', updated_at = $2
                     WHERE subscriber_id = $1 AND status <> 'unsubscribed'",
                    &[&sub, &now],
                )
                .await?;
        } else {
            for l in &st.lists {
                change.memberships += tx
                    .execute(
                        "UPDATE list_members SET status = 'unsubscribed', updated_at = $3
                         WHERE list_id = $1 AND subscriber_id = $2 AND status <> 'unsubscribed'",
                        &[&l.id, &sub, &now],
                    )
                    .await?;
            }
            if change.memberships > 0 {
                withdraw_queued(tx, r.account_id, sub, now).await?;
            }
        }
    }
    if r.everything && !st.suppressed {
        change.suppressed = tx
            .execute(
                "INSERT INTO suppressions (account_id, channel, address, reason, source,
                                           created_at)
                 VALUES ($1, $2, $3, 'unsubscribed', $4, $5)
                 ON CONFLICT DO NOTHING",
                &[
                    &r.account_id,
                    &r.channel.as_str(),
                    &r.address,
                    &r.source,
                    &now,
                ],
            )
            .await?
            == 1;
    }
    Ok(change)
}

/// Rows of subscriber `sub` still queued in the account's list campaigns that no longer reach
/// it through any of their lists become `suppressed` (`sqlite/unsubscribe.rs`).
async fn withdraw_queued(
    tx: &Transaction<'_>,
    account_id: i64,
    sub: i64,
    now: i64,
) -> TxResult<u64> {
    Ok(tx
        .execute(
            "UPDATE sends SET status = 'suppressed', updated_at = $1,
                    last_error = 'unsubscribed from the campaign''s lists before it was sent'
             WHERE subscriber_id = $2 AND status = 'queued' AND doubt_since IS NULL
               AND campaign_id IN (
                   SELECT c.id FROM campaigns c
                   WHERE c.account_id = $3 AND c.status IN ('approved', 'sending', 'paused')
                     AND c.kind = 'campaign'
                     AND EXISTS (SELECT 1 FROM campaign_lists cl WHERE cl.campaign_id = c.id))
               AND NOT EXISTS (
                   SELECT 1 FROM campaign_lists cl JOIN list_members m ON m.list_id = cl.list_id
                   WHERE cl.campaign_id = sends.campaign_id AND m.subscriber_id = $2
                     AND m.status = 'subscribed')",
            &[&now, &sub, &account_id],
        )
        .await?)
}

impl Lists for PgStore {
    fn list_members(
        &self,
        q: &crate::store::MemberPage<'_>,
    ) -> Result<Vec<crate::store::MemberRow>> {
        self.member_page(q)
    }

    fn link_state(
        &self,
        account_id: i64,
        channel: Channel,
        address: &str,
        lists: &[i64],
    ) -> Result<LinkState> {
        let (address, lists) = (address.to_string(), lists.to_vec());
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                Ok(link_state(&tx, account_id, channel, &address, &lists).await?.1)
            })
        })
    }

    fn unsubscribe(&self, r: &UnsubscribeRequest<'_>) -> Result<UnsubscribeChange> {
        let r = Unsubscribe {
            account_id: r.account_id,
            channel: r.channel,
            address: r.address.to_string(),
            lists: r.lists.to_vec(),
            everything: r.everything,
            source: r.source.to_string(),
        };
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => apply(&tx, &r).await)
        })
    }

    fn create_list(&self, l: &NewList<'_>) -> Result<i64> {
        let name = l.name.trim().to_string();
        if name.is_empty() {
            return Err(Error::invalid("the list name is empty"));
        }
        let account = l.account_id;
        let description = l.description.map(str::to_string);
        let optin = l.optin.as_str();
        let public = l.public;
        let from = l.confirm.from.map(str::to_string);
        let subject = l.confirm.subject.map(str::to_string);
        let body = l.confirm.body.map(str::to_string);
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                if tx.query_opt("SELECT 1 FROM accounts WHERE id = $1", &[&account]).await?.is_none() {
                    return Err(Error::not_found(format!("unknown account id {account}")).into());
                }
                let id: Option<i64> = tx
                    .query_opt(
                        "INSERT INTO lists (account_id, name, description, optin, created_at,
                                            public, confirm_from, confirm_subject, confirm_body)
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                         ON CONFLICT (account_id, name) DO NOTHING RETURNING id",
                        &[&account, &name, &description, &optin,
                          &crate::domain::clock::now_ms(), &public, &from, &subject, &body],
                    )
                    .await?
                    .map(|r| r.get(0));
                match id {
                    Some(id) => Ok(id),
                    None => {
                        let id: i64 = tx
                            .query_one(
                                "SELECT id FROM lists WHERE account_id = $1 AND name = $2",
                                &[&account, &name],
                            )
                            .await?
                            .get(0);
                        Err(Error::conflict(format!(
                            "a list named {name:?} already exists in account {account} (id {id})"
                        ))
                        .into())
                    }
                }
            })
        })
    }

    fn update_list(&self, account_id: i64, list_id: i64, change: &ListChange<'_>) -> Result<()> {
        let public = change.public;
        let from = change.confirm.from.map(str::to_string);
        let subject = change.confirm.subject.map(str::to_string);
        let body = change.confirm.body.map(str::to_string);
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                require_lists(&tx, account_id, &[list_id], false).await?;
                tx.execute(
                    "UPDATE lists SET public = coalesce($2, public),
                            confirm_from = coalesce($3, confirm_from),
                            confirm_subject = coalesce($4, confirm_subject),
                            confirm_body = coalesce($5, confirm_body)
                     WHERE id = $1",
                    &[&list_id, &public, &from, &subject, &body],
                )
                .await?;
                Ok(())
            })
        })
    }

    fn lists(&self, account_id: i64) -> Result<Vec<ListRow>> {
        self.account_exists(account_id)?;
        self.run(move |pool| async move {
            let c = pool.get().await?;
            let rows = c
                .query(
                    &format!(
                        "SELECT {LIST_COLS} FROM lists l WHERE l.account_id = $1
                         ORDER BY l.name COLLATE \"C\""
                    ),
                    &[&account_id],
                )
                .await?;
            rows.iter().map(list_from_row).collect()
        })
    }

    fn find_list(&self, account_id: i64, key: &str) -> Result<ListRow> {
        self.account_exists(account_id)?;
        let key = key.trim().to_string();
        let by_id = key.parse::<i64>().ok();
        let k = key.clone();
        let found = self.run(move |pool| async move {
            let c = pool.get().await?;
            let row = c
                .query_opt(
                    &format!(
                        "SELECT {LIST_COLS} FROM lists l
                         WHERE l.account_id = $1 AND (l.id = $2 OR l.name = $3)
                         ORDER BY coalesce(l.id = $2, FALSE) DESC LIMIT 1"
                    ),
                    &[&account_id, &by_id, &k],
                )
                .await?;
            row.as_ref().map(list_from_row).transpose()
        })?;
        found.ok_or_else(|| {
            Error::not_found(format!(
                "unknown list {key:?} in account {account_id} (`sendonce list list --account \
                 {account_id}` shows them)"
            ))
        })
    }

    fn remove_list(&self, account_id: i64, list_id: i64) -> Result<u64> {
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                // The list's row locked: no membership joins it while it goes.
                require_lists(&tx, account_id, &[list_id], true).await?;
                // The targeting campaigns locked: none is approved while this decides.
                let rows = tx
                    .query(
                        "SELECT c.id, c.status FROM campaign_lists cl
                         JOIN campaigns c ON c.id = cl.campaign_id
                         WHERE cl.list_id = $1 ORDER BY c.id FOR UPDATE OF c",
                        &[&list_id],
                    )
                    .await?;
                let busy: Vec<i64> = rows
                    .iter()
                    .filter(|r| !matches!(r.get::<_, &str>(1), "draft" | "sent" | "cancelled"))
                    .map(|r| r.get(0))
                    .collect();
                if !busy.is_empty() {
                    return Err(Error::conflict(format!(
                        "list {list_id} is targeted by campaign(s) {busy:?}, which are approved, \
                         sending or paused: cancel them or let them finish first"
                    ))
                    .into());
                }
                let n = tx
                    .execute("DELETE FROM list_members WHERE list_id = $1", &[&list_id])
                    .await?;
                tx.execute("DELETE FROM lists WHERE id = $1", &[&list_id]).await?;
                Ok(n)
            })
        })
    }

    fn campaign_lists(&self, campaign_id: i64) -> Result<Vec<i64>> {
        self.run(move |pool| async move {
            let c = pool.get().await?;
            let rows = c
                .query(
                    "SELECT list_id FROM campaign_lists WHERE campaign_id = $1 ORDER BY list_id",
                    &[&campaign_id],
                )
                .await?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
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

    fn audience_counts_for(&self, q: &AudienceQuery<'_>) -> Result<AudienceCounts> {
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

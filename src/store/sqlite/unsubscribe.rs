//! Unsubscribe links on SQLite: what a link covers now (its lists, the address's memberships,
//! its suppression) and the unsubscribe itself, memberships and suppression in one
//! `BEGIN IMMEDIATE` transaction. Called by `Lists::link_state` and `Lists::unsubscribe`.

use crate::domain::address::Channel;
use crate::error::{Error, Result};
use crate::store::{LinkList, LinkState, UnsubscribeChange, UnsubscribeRequest};
use rusqlite::{named_params, params, Connection, OptionalExtension, Transaction};

/// The account's subscriber with `address` on `channel` (removed ones included: their
/// memberships are kept and may still say `subscribed`).
fn subscriber(
    c: &Connection,
    account_id: i64,
    channel: Channel,
    address: &str,
) -> Result<Option<i64>> {
    let sql = match channel {
        Channel::Email => "SELECT id FROM subscribers WHERE account_id = ?1 AND email_norm = ?2",
        Channel::Sms => "SELECT id FROM subscribers WHERE account_id = ?1 AND phone = ?2",
    };
    Ok(c.prepare_cached(sql)?
        .query_row(params![account_id, address], |r| r.get(0))
        .optional()?)
}

/// The link's lists that exist, each checked to be the account's (`NotFound` otherwise, and
/// for an account that does not exist), with the subscriber's membership of each.
pub(super) fn state(
    c: &Connection,
    account_id: i64,
    channel: Channel,
    address: &str,
    lists: &[i64],
) -> Result<(Option<i64>, LinkState)> {
    // One message for every refusal: the page says no more than "not valid" anyway.
    let refused = || Error::not_found("this link names an account or list that is not its own");
    let exists: bool = c
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM accounts WHERE id = ?1)")?
        .query_row([account_id], |r| r.get(0))?;
    if !exists {
        return Err(refused());
    }
    let sub = subscriber(c, account_id, channel, address)?;
    let mut list_st = c.prepare_cached("SELECT account_id, name FROM lists WHERE id = ?1")?;
    let mut member_st = c.prepare_cached(
        "SELECT status FROM list_members WHERE list_id = ?1 AND subscriber_id = ?2",
    )?;
    let mut out = Vec::with_capacity(lists.len());
    for &id in lists {
        let row: Option<(i64, String)> = list_st
            .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        // A removed list (ids are never reused) has no members left: nothing to show or do.
        let Some((owner, name)) = row else { continue };
        if owner != account_id {
            return Err(refused());
        }
        let status = match sub {
            Some(s) => member_st
                .query_row(params![id, s], |r| r.get::<_, String>(0))
                .optional()?,
            None => None,
        };
        out.push(LinkList { id, name, status });
    }
    let suppressed: bool = c
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM suppressions
                            WHERE account_id = ?1 AND channel = ?2 AND address = ?3)",
        )?
        .query_row(params![account_id, channel, address], |r| r.get(0))?;
    Ok((
        sub,
        LinkState {
            lists: out,
            suppressed,
        },
    ))
}

/// Apply `r` inside `tx`: the checks of [`state`], then memberships (and the suppression row
/// for everything). Changes only what is not already so.
pub(super) fn apply(tx: &Transaction<'_>, r: &UnsubscribeRequest<'_>) -> Result<UnsubscribeChange> {
    let (sub, st) = state(tx, r.account_id, r.channel, r.address, r.lists)?;
    let now = crate::domain::clock::now_ms();
    let mut change = UnsubscribeChange::default();
    if let Some(sub) = sub {
        if r.everything {
            change.memberships = tx.execute(
                "UPDATE list_members SET status = 'unsubscribed', updated_at = ?2
                 WHERE subscriber_id = ?1 AND status <> 'unsubscribed'",
                params![sub, now],
            )? as u64;
        } else {
            let mut up = tx.prepare_cached(
                "UPDATE list_members SET status = 'unsubscribed', updated_at = ?3
                 WHERE list_id = ?1 AND subscriber_id = ?2 AND status <> 'unsubscribed'",
            )?;
            for l in &st.lists {
                change.memberships += up.execute(params![l.id, sub, now])? as u64;
            }
            drop(up);
            if change.memberships > 0 {
                withdraw_queued(tx, r.account_id, sub, now)?;
            }
        }
    }
    if r.everything && !st.suppressed {
        change.suppressed = tx.execute(
            "INSERT INTO suppressions (account_id, channel, address, reason, source, created_at)
             VALUES (:account, :channel, :address, 'unsubscribed', :source, :now)
             ON CONFLICT DO NOTHING",
            named_params! {
                ":account": r.account_id,
                ":channel": r.channel,
                ":address": r.address,
                ":source": r.source,
                ":now": now,
            },
        )? == 1;
    }
    Ok(change)
}

/// Rows of subscriber `sub` still queued in the account's list campaigns (approved, sending or
/// paused) that no longer reach it through any of their lists become `suppressed`, in the
/// unsubscribe's transaction: a list unsubscribe stops mail that was about to go, not only the
/// next campaign. Hidden campaigns (a double opt-in confirmation for another list) are left. A row already leased is in flight and goes; a queued row that may already
/// have been delivered (`doubt_since`, retried under the same key) keeps its path.
fn withdraw_queued(tx: &Transaction<'_>, account_id: i64, sub: i64, now: i64) -> Result<u64> {
    Ok(tx.execute(
        "UPDATE sends SET status = 'suppressed', updated_at = :now,
                last_error = 'unsubscribed from the campaign''s lists before it was sent'
         WHERE subscriber_id = :sub AND status = 'queued' AND doubt_since IS NULL
           AND campaign_id IN (
               SELECT c.id FROM campaigns c
               WHERE c.account_id = :account AND c.status IN ('approved', 'sending', 'paused')
                 AND c.kind = 'campaign'
                 AND EXISTS (SELECT 1 FROM campaign_lists cl WHERE cl.campaign_id = c.id))
           AND NOT EXISTS (
               SELECT 1 FROM campaign_lists cl JOIN list_members m ON m.list_id = cl.list_id
               WHERE cl.campaign_id = sends.campaign_id AND m.subscriber_id = :sub
                 AND m.status = 'subscribed')",
        named_params! {":now": now, ":sub": sub, ":account": account_id},
    )? as u64)
}

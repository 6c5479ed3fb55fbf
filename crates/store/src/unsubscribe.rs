//! Unsubscribe links, written once over the seam (`sql::Tx`): what a link covers now (its
//! lists, the address's memberships, its suppression) and the unsubscribe itself, memberships
//! and suppression in one writing transaction (after the account's opt-out lock on
//! PostgreSQL). Called by `Lists::link_state` and `Lists::unsubscribe`.

use crate::sql::{args, Tx};
use crate::{LinkList, LinkState, UnsubscribeChange, UnsubscribeRequest};
use sendonce_domain::address::Channel;
use sendonce_domain::error::{Error, Result};

/// The account's subscriber with `address` on `channel` (removed ones included: their
/// memberships are kept and may still say `subscribed`).
fn subscriber(
    tx: &mut dyn Tx,
    account_id: i64,
    channel: Channel,
    address: &str,
) -> Result<Option<i64>> {
    let sql = match channel {
        Channel::Email => "SELECT id FROM subscribers WHERE account_id = ?1 AND email_norm = ?2",
        Channel::Sms => "SELECT id FROM subscribers WHERE account_id = ?1 AND phone = ?2",
    };
    tx.scalar_opt(sql, &args![account_id, address])
}

/// The link's lists that exist, each checked to be the account's (`NotFound` otherwise, and
/// for an account that does not exist), with the subscriber's membership of each.
pub(crate) fn state(
    tx: &mut dyn Tx,
    account_id: i64,
    channel: Channel,
    address: &str,
    lists: &[i64],
) -> Result<(Option<i64>, LinkState)> {
    // One message for every refusal: the page says no more than "not valid" anyway.
    let refused = || Error::not_found("this link names an account or list that is not its own");
    let exists: bool = tx.scalar(
        "SELECT EXISTS (SELECT 1 FROM accounts WHERE id = ?1)",
        &args![account_id],
    )?;
    if !exists {
        return Err(refused());
    }
    let sub = subscriber(tx, account_id, channel, address)?;
    let mut out = Vec::with_capacity(lists.len());
    for &id in lists {
        let row: Option<(i64, String)> = tx.query_opt(
            "SELECT account_id, name FROM lists WHERE id = ?1",
            &args![id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        // A removed list (ids are never reused) has no members left: nothing to show or do.
        let Some((owner, name)) = row else { continue };
        if owner != account_id {
            return Err(refused());
        }
        let status: Option<String> = match sub {
            Some(s) => tx.scalar_opt(
                "SELECT status FROM list_members WHERE list_id = ?1 AND subscriber_id = ?2",
                &args![id, s],
            )?,
            None => None,
        };
        out.push(LinkList { id, name, status });
    }
    let suppressed: bool = tx.scalar(
        "SELECT EXISTS (SELECT 1 FROM suppressions
                        WHERE account_id = ?1 AND channel = ?2 AND address = ?3)",
        &args![account_id, channel, address],
    )?;
    Ok((
        sub,
        LinkState {
            lists: out,
            suppressed,
        },
    ))
}

/// Apply `r` inside `tx`: the account's opt-out lock, the checks of [`state`], then
/// memberships (and the suppression row for everything). Changes only what is not already so.
pub(crate) fn apply(tx: &mut dyn Tx, r: &UnsubscribeRequest<'_>) -> Result<UnsubscribeChange> {
    let now = tx.dialect().lock_opt_outs(tx, r.account_id)?;
    let (sub, st) = state(tx, r.account_id, r.channel, r.address, r.lists)?;
    let mut change = UnsubscribeChange::default();
    if let Some(sub) = sub {
        if r.everything {
            change.memberships = tx.exec(
                "UPDATE list_members SET status = 'unsubscribed', updated_at = ?2
                 WHERE subscriber_id = ?1 AND status <> 'unsubscribed'",
                &args![sub, now],
            )?;
        } else {
            for l in &st.lists {
                change.memberships += tx.exec(
                    "UPDATE list_members SET status = 'unsubscribed', updated_at = ?3
                     WHERE list_id = ?1 AND subscriber_id = ?2 AND status <> 'unsubscribed'",
                    &args![l.id, sub, now],
                )?;
            }
            if change.memberships > 0 {
                withdraw_queued(tx, r.account_id, sub, now)?;
            }
        }
    }
    if r.everything && !st.suppressed {
        change.suppressed = tx.exec(
            "INSERT INTO suppressions (account_id, channel, address, reason, source, created_at)
             VALUES (?1, ?2, ?3, 'unsubscribed', ?4, ?5)
             ON CONFLICT DO NOTHING",
            &args![r.account_id, r.channel, r.address, r.source, now],
        )? == 1;
    }
    Ok(change)
}

/// Rows of subscriber `sub` still queued in the account's list campaigns (approved, sending or
/// paused) that no longer reach it through any of their lists become `suppressed`, in the
/// unsubscribe's transaction: a list unsubscribe stops mail that was about to go, not only the
/// next campaign. Stream rows (a double opt-in confirmation for another list) are left. A
/// row already leased is in flight and goes; a queued row that may already have been delivered
/// (`doubt_since`, retried under the same key) keeps its path.
fn withdraw_queued(tx: &mut dyn Tx, account_id: i64, sub: i64, now: i64) -> Result<u64> {
    tx.exec(
        "UPDATE sends SET status = 'suppressed', updated_at = ?1,
                last_error = 'unsubscribed from the campaign''s lists before it was sent'
         WHERE subscriber_id = ?2 AND status = 'queued' AND doubt_since IS NULL
           AND campaign_id IN (
               SELECT c.id FROM campaigns c
               WHERE c.account_id = ?3 AND c.status IN ('approved', 'sending', 'paused')
                 AND c.kind = 'campaign'
                 AND EXISTS (SELECT 1 FROM campaign_lists cl WHERE cl.campaign_id = c.id))
           AND NOT EXISTS (
               SELECT 1 FROM campaign_lists cl JOIN list_members m ON m.list_id = cl.list_id
               WHERE cl.campaign_id = sends.campaign_id AND m.subscriber_id = ?2
                 AND m.status = 'subscribed')",
        &args![now, sub, account_id],
    )
}

//! Double opt-in on SQLite: the confirmation message queued in the transaction that makes a
//! pending membership (a hidden one-row campaign of kind `api` targeting the list, its send
//! row with the confirm link in the captured variables, and the `list_confirmations` row that
//! makes it once per (list, subscriber)), and `Optin`: what a confirm link finds, confirming,
//! public lists.

use super::SqliteStore;
use crate::domain::address::Channel;
use crate::domain::links::{Links, Purpose, Target};
use crate::domain::{model, optin};
use crate::error::{Error, Result};
use crate::store::optin::Pending;
use crate::store::{Confirmation, ListRow, MemberKey, MemberState, NewSubscriber, Optin};
use rusqlite::{named_params, params, OptionalExtension, Transaction};

/// Refuse, before anything is written, a subscriber joining a double opt-in list among `lists`
/// when its confirmation could not be sent: no public URL and secret (`links`), a list with no
/// confirmation sender, or no email address (the subscriber's own, or the stored one of the
/// subscriber with this address).
pub(super) fn can_confirm(
    tx: &Transaction<'_>,
    account_id: i64,
    s: &NewSubscriber,
    lists: &[i64],
    links: Option<&Links>,
) -> Result<()> {
    let mut st = tx.prepare_cached(
        "SELECT name, confirm_from IS NOT NULL FROM lists WHERE id = ?1 AND optin = 'double'",
    )?;
    for &list in lists {
        let Some((name, has_from)) = st
            .query_row([list], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, bool>(1)?))
            })
            .optional()?
        else {
            continue;
        };
        if links.is_none() {
            return Err(Error::invalid(format!(
                "list {name:?} is double opt-in: its new members get a confirmation link, which \
                 needs the server's public URL (--public-url, SENDONCE_PUBLIC_URL or public_url \
                 in the config file) and {}; nothing was written",
                crate::domain::links::SECRET_ENV
            )));
        }
        if !has_from {
            return Err(Error::invalid(format!(
                "list {name:?} is double opt-in but has no confirmation sender: `sendonce list \
                 update --account {account_id} {list} --confirm-from ADDRESS`; nothing was \
                 written"
            )));
        }
        if s.email.is_none() && !stored_email(tx, account_id, s)? {
            return Err(Error::invalid(format!(
                "list {name:?} is double opt-in and confirmations go by email: this subscriber \
                 has no email address (SMS confirmation is not supported)"
            )));
        }
    }
    Ok(())
}

/// Whether the subscriber with `s`'s phone already has an email address.
fn stored_email(tx: &Transaction<'_>, account_id: i64, s: &NewSubscriber) -> Result<bool> {
    Ok(tx
        .prepare_cached(
            "SELECT 1 FROM subscribers WHERE account_id = ?1 AND phone = ?2
             AND email_norm IS NOT NULL",
        )?
        .exists(params![account_id, s.phone])?)
}

/// Queue a confirmation for every membership of `subscriber_id` in `lists` that is pending and
/// has none yet ([`can_confirm`] checked that each can be sent).
pub(super) fn queue_confirmations(
    tx: &Transaction<'_>,
    subscriber_id: i64,
    lists: &[i64],
    links: Option<&Links>,
) -> Result<u64> {
    let mut st = tx.prepare_cached(
        "SELECT l.id, l.account_id, l.name, l.confirm_from,
                coalesce(l.confirm_subject, :subject), coalesce(l.confirm_body, :body),
                s.email_norm, s.name
         FROM list_members m JOIN lists l ON l.id = m.list_id
         JOIN subscribers s ON s.id = m.subscriber_id
         WHERE m.subscriber_id = :sub AND m.list_id = :list AND m.status = 'pending'
           AND l.optin = 'double' AND l.confirm_from IS NOT NULL AND s.email_norm IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM list_confirmations c
                           WHERE c.list_id = m.list_id AND c.subscriber_id = m.subscriber_id)",
    )?;
    let mut queued = 0;
    for &list in lists {
        let row = st
            .query_row(
                named_params! {
                    ":subject": optin::DEFAULT_SUBJECT,
                    ":body": optin::DEFAULT_BODY,
                    ":sub": subscriber_id,
                    ":list": list,
                },
                |r| {
                    Ok(Pending {
                        list_id: r.get(0)?,
                        account_id: r.get(1)?,
                        list_name: r.get(2)?,
                        from: r.get(3)?,
                        subject: r.get(4)?,
                        body: r.get(5)?,
                        email: r.get(6)?,
                        name: r.get(7)?,
                    })
                },
            )
            .optional()?;
        let Some(p) = row else { continue };
        let Some(links) = links else {
            return Err(Error::internal(
                "a confirmation to queue without links (can_confirm should have refused)",
            ));
        };
        queue_one(tx, subscriber_id, &p, links)?;
        queued += 1;
    }
    Ok(queued)
}

/// The hidden campaign (draft while its list is attached, then sending with its list
/// complete), its one send row and the `list_confirmations` row.
fn queue_one(tx: &Transaction<'_>, subscriber_id: i64, p: &Pending, links: &Links) -> Result<()> {
    let now = crate::domain::clock::now_ms();
    let url = links.url(
        Purpose::Confirm,
        &Target {
            account_id: p.account_id,
            channel: Channel::Email,
            address: p.email.clone(),
            lists: vec![p.list_id],
            campaign_id: 0,
        },
    );
    tx.execute(
        "INSERT INTO campaigns (account_id, name, channel, sender, subject, body, body_format,
                                templated, status, scheduled_for, created_at, kind)
         VALUES (:account, :name, 'email', :from, :subject, :body, 'text', 1, 'draft', :now,
                 :now, 'api')",
        named_params! {
            ":account": p.account_id,
            ":name": format!("confirmation: list {} subscriber {subscriber_id}", p.list_id),
            ":from": p.from,
            ":subject": p.subject,
            ":body": p.body,
            ":now": now,
        },
    )?;
    let cid = tx.last_insert_rowid();
    // The list is attached while the campaign is a draft (campaign_lists is frozen after), so
    // the message's List-Unsubscribe names this list.
    super::lists::target_lists(tx, cid, &[p.list_id])?;
    tx.execute(
        "UPDATE campaigns SET status = 'sending', approved_at = ?2, started_at = ?2,
                list_complete = 1
         WHERE id = ?1 AND status = 'draft'",
        params![cid, now],
    )?;
    let scope = super::guard::key_scope(
        tx,
        &[
            ("lists_through", p.list_id),
            ("subscribers_through", subscriber_id),
        ],
    )?;
    tx.execute(
        "INSERT INTO sends (account_id, campaign_id, subscriber_id, job_id, address, vars,
                            status, visible_at, created_at, updated_at)
         VALUES (:account, :campaign, :sub, :job, :to, :vars, 'queued', :now, :now, :now)",
        named_params! {
            ":account": p.account_id,
            ":campaign": cid,
            ":sub": subscriber_id,
            ":job": model::confirm_job_id(&scope, p.list_id, subscriber_id),
            ":to": p.email,
            ":vars": optin::vars(&url, &p.list_name, &p.email, p.name.as_deref()),
            ":now": now,
        },
    )?;
    tx.execute(
        "INSERT INTO list_confirmations (list_id, subscriber_id, campaign_id, created_at)
         VALUES (?1, ?2, ?3, ?4)",
        params![p.list_id, subscriber_id, cid, now],
    )?;
    Ok(())
}

/// The list's name and the membership of the (not removed) subscriber with this address.
fn find(c: &rusqlite::Connection, key: &MemberKey<'_>) -> Result<Option<(Confirmation, i64)>> {
    let list: Option<String> = c
        .query_row(
            "SELECT name FROM lists WHERE id = ?1 AND account_id = ?2",
            params![key.list_id, key.account_id],
            |r| r.get(0),
        )
        .optional()?;
    let Some(list_name) = list else {
        return Ok(None);
    };
    let column = match key.channel {
        Channel::Email => "email_norm",
        Channel::Sms => "phone",
    };
    let member: Option<(i64, String)> = c
        .query_row(
            &format!(
                "SELECT s.id, m.status FROM subscribers s
                 JOIN list_members m ON m.subscriber_id = s.id AND m.list_id = ?3
                 WHERE s.account_id = ?1 AND s.{column} = ?2 AND s.removed_at IS NULL"
            ),
            params![key.account_id, key.address, key.list_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let (sid, state) = match member {
        Some((sid, st)) => (
            sid,
            Some(match st.as_str() {
                "pending" => MemberState::Pending,
                "subscribed" => MemberState::Subscribed,
                "unsubscribed" => MemberState::Unsubscribed,
                other => {
                    return Err(Error::damaged(format!(
                        "list_members.status holds {other:?}, which this version does not know"
                    )))
                }
            }),
        ),
        None => (0, None),
    };
    Ok(Some((Confirmation { list_name, state }, sid)))
}

impl Optin for SqliteStore {
    fn confirmation(&self, key: &MemberKey<'_>) -> Result<Option<Confirmation>> {
        self.read(|c| Ok(find(c, key)?.map(|(found, _)| found)))
    }

    fn confirm(&self, key: &MemberKey<'_>, now: i64) -> Result<Option<Confirmation>> {
        self.write(|tx| {
            let Some((found, sid)) = find(tx, key)? else {
                return Ok(None);
            };
            if found.state != Some(MemberState::Pending) {
                return Ok(Some(found));
            }
            let n = tx.execute(
                "UPDATE list_members SET status = 'subscribed', updated_at = ?3
                 WHERE list_id = ?1 AND subscriber_id = ?2 AND status = 'pending'",
                params![key.list_id, sid, now],
            )?;
            if n != 1 {
                return Err(Error::internal(
                    "the pending membership changed under its lock",
                ));
            }
            tx.execute(
                "UPDATE subscribers SET status = 'confirmed' WHERE id = ?1 AND status = 'pending'",
                [sid],
            )?;
            tx.execute(
                "UPDATE list_confirmations SET confirmed_at = ?3
                 WHERE list_id = ?1 AND subscriber_id = ?2 AND confirmed_at IS NULL",
                params![key.list_id, sid, now],
            )?;
            Ok(Some(found))
        })
    }

    fn public_list(&self, list_id: i64) -> Result<Option<ListRow>> {
        self.read(|c| super::lists::public_list(c, list_id))
    }
}

/// A new subscriber that arrives through double opt-in lists only is `pending` (whatever status
/// it was given) until it confirms one of them: campaigns to the whole account send only to
/// `confirmed` subscribers, so it gets nothing before it confirms. Someone already subscribed
/// who signs up to a double list keeps their status (this runs for new rows only).
pub(super) fn pending_until_confirmed(
    tx: &Transaction<'_>,
    subscriber_id: i64,
    lists: &[i64],
) -> Result<()> {
    if lists.is_empty() {
        return Ok(());
    }
    let ids = serde_json::to_string(lists)
        .map_err(|e| Error::internal(format!("list ids as JSON: {e}")))?;
    tx.prepare_cached(
        "UPDATE subscribers SET status = 'pending'
         WHERE id = ?1 AND status = 'confirmed'
           AND NOT EXISTS (SELECT 1 FROM json_each(?2) j JOIN lists l ON l.id = j.value
                           WHERE l.optin <> 'double')",
    )?
    .execute(rusqlite::params![subscriber_id, ids])?;
    Ok(())
}

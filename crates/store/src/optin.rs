//! Double opt-in and public signups (`Optin`), backend-neutral: what a confirm link finds
//! (the list and the membership's state), confirming a pending membership, and the lists that
//! take signups from the public form. The confirmation message itself is queued by
//! `Audience::add_subscriber_with` / `import_subscribers_with`, in the transaction that makes
//! the pending membership (its steps here: [`can_confirm`], [`queue_confirmations`],
//! [`pending_until_confirmed`]). Written once for both stores over `sql::Tx`.

use crate::admin::key_scope;
use crate::sql::{args, Db, Tx};
use crate::NewSubscriber;
use sendonce_domain::address::Channel;
use sendonce_domain::error::{Error, Result};
use sendonce_domain::links::{Links, Purpose, Target};
use sendonce_domain::{model, optin};

/// One pending membership of a double opt-in list that has never had a confirmation: what
/// queueing its confirmation needs (both stores read it in the transaction that makes it).
pub(crate) struct Pending {
    pub(crate) list_id: i64,
    pub(crate) account_id: i64,
    pub(crate) list_name: String,
    /// The list's confirmation sender, subject and body (the defaults where it has none).
    pub(crate) from: String,
    pub(crate) subject: String,
    pub(crate) body: String,
    pub(crate) email: String,
    pub(crate) name: Option<String>,
}

/// A membership's state, as a confirm link sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    Pending,
    Subscribed,
    Unsubscribed,
}

/// Who a confirm link names: the list of an account and an address on a channel.
#[derive(Debug, Clone)]
pub struct MemberKey<'a> {
    pub account_id: i64,
    pub list_id: i64,
    pub channel: Channel,
    /// Normalised address.
    pub address: &'a str,
}

/// What a confirm link finds: the list's name, and the membership's state (`None`: the
/// address is no member of the list any more, e.g. the subscriber was removed).
#[derive(Debug, Clone)]
pub struct Confirmation {
    pub list_name: String,
    pub state: Option<MemberState>,
}

/// Double opt-in confirmations.
pub trait Optin: Send + Sync {
    /// The list and membership a confirm link names, read only (`None`: no such list in the
    /// account).
    fn confirmation(&self, key: &MemberKey<'_>) -> Result<Option<Confirmation>>;
    /// Move the membership from pending to subscribed (a `pending` subscriber becomes
    /// `confirmed`), in one transaction; any other state is left as it is. Returns what the
    /// link found before the change (`None`: no such list in the account).
    fn confirm(&self, key: &MemberKey<'_>, now: i64) -> Result<Option<Confirmation>> {
        self.confirm_seen(key, now, &crate::Seen::default())
    }
    /// [`Optin::confirm`], writing who confirmed (the link's client) onto the consent
    /// records of the membership it confirms.
    fn confirm_seen(
        &self,
        key: &MemberKey<'_>,
        now: i64,
        seen: &crate::Seen,
    ) -> Result<Option<Confirmation>>;
    /// Public list `list_id` (its `public` flag set), whatever the account; `None` otherwise.
    fn public_list(&self, list_id: i64) -> Result<Option<crate::ListRow>>;
}

// ---- Written once over the seam (`sql::Tx`) ----

/// Refuse, before anything is written, a subscriber joining a double opt-in list among `lists`
/// when its confirmation could not be sent: no public URL and secret (`links`), a list with no
/// confirmation sender, or no email address (the subscriber's own, or the stored one of the
/// subscriber with this address).
pub(crate) fn can_confirm(
    tx: &mut dyn Tx,
    account_id: i64,
    s: &NewSubscriber,
    lists: &[i64],
    links: Option<&Links>,
) -> Result<()> {
    for &list in lists {
        let Some((name, has_from)) = tx.query_opt(
            "SELECT name, confirm_from IS NOT NULL FROM lists WHERE id = ?1 AND optin = 'double'",
            &args![list],
            |r| Ok((r.get::<String>(0)?, r.get::<bool>(1)?)),
        )?
        else {
            continue;
        };
        if links.is_none() {
            return Err(Error::invalid(format!(
                "list {name:?} is double opt-in: its new members get a confirmation link, which \
                 needs the server's public URL (--public-url, SENDONCE_PUBLIC_URL or public_url \
                 in the config file) and {}; nothing was written",
                sendonce_domain::links::SECRET_ENV
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
fn stored_email(tx: &mut dyn Tx, account_id: i64, s: &NewSubscriber) -> Result<bool> {
    tx.exists(
        "SELECT 1 FROM subscribers WHERE account_id = ?1 AND phone = ?2
         AND email_norm IS NOT NULL",
        &args![account_id, &s.phone],
    )
}

/// The membership of `subscriber_id` in `list` when it is pending in a double opt-in list that
/// can send its confirmation, and has none yet.
fn pending_confirmation(tx: &mut dyn Tx, subscriber_id: i64, list: i64) -> Result<Option<Pending>> {
    tx.query_opt(
        "SELECT l.id, l.account_id, l.name, l.confirm_from,
                coalesce(l.confirm_subject, ?1), coalesce(l.confirm_body, ?2),
                s.email_norm, s.name
         FROM list_members m JOIN lists l ON l.id = m.list_id
         JOIN subscribers s ON s.id = m.subscriber_id
         WHERE m.subscriber_id = ?3 AND m.list_id = ?4 AND m.status = 'pending'
           AND l.optin = 'double' AND l.confirm_from IS NOT NULL AND s.email_norm IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM list_confirmations c
                           WHERE c.list_id = m.list_id AND c.subscriber_id = m.subscriber_id)",
        &args![
            optin::DEFAULT_SUBJECT,
            optin::DEFAULT_BODY,
            subscriber_id,
            list
        ],
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
}

/// Queue a confirmation for every membership of `subscriber_id` in `lists` that is pending and
/// has none yet ([`can_confirm`] checked that each can be sent).
pub(crate) fn queue_confirmations(
    tx: &mut dyn Tx,
    subscriber_id: i64,
    lists: &[i64],
    links: Option<&Links>,
) -> Result<u64> {
    let mut queued = 0;
    for &list in lists {
        let Some(p) = pending_confirmation(tx, subscriber_id, list)? else {
            continue;
        };
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

/// One confirmation: its content (the list's confirmation templates, rendered when it is sent
/// with the row's variables), its row in the account's email stream with the confirm link in
/// the captured variables, and the `list_confirmations` row.
fn queue_one(tx: &mut dyn Tx, subscriber_id: i64, p: &Pending, links: &Links) -> Result<()> {
    let now = sendonce_domain::clock::now_ms();
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
    let stream = crate::messages::stream_for(tx, p.account_id, Channel::Email, now)?;
    let content: i64 = tx.scalar(
        "INSERT INTO message_contents (account_id, sender, subject, body, body_format,
                                       created_at, templated)
         VALUES (?1, ?2, ?3, ?4, 'text', ?5, TRUE) RETURNING id",
        &args![p.account_id, &p.from, &p.subject, &p.body, now],
    )?;
    let scope = key_scope(
        tx,
        &[
            ("lists_through", p.list_id),
            ("subscribers_through", subscriber_id),
        ],
    )?;
    let job = model::confirm_job_id(&scope, p.list_id, subscriber_id);
    let vars = optin::vars(&url, &p.list_name, &p.email, p.name.as_deref());
    tx.exec(
        "INSERT INTO sends (account_id, campaign_id, subscriber_id, job_id, address, vars,
                            status, visible_at, created_at, updated_at, message_id)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'queued', ?7, ?7, ?7, ?8)",
        &args![
            p.account_id,
            stream,
            subscriber_id,
            &job,
            &p.email,
            &vars,
            now,
            content
        ],
    )?;
    tx.exec(
        "INSERT INTO list_confirmations (list_id, subscriber_id, campaign_id, created_at)
         VALUES (?1, ?2, ?3, ?4)",
        &args![p.list_id, subscriber_id, stream, now],
    )?;
    Ok(())
}

/// A new subscriber that arrives through double opt-in lists only is `pending` (whatever status
/// it was given) until it confirms one of them: campaigns to the whole account send only to
/// `confirmed` subscribers, so it gets nothing before it confirms. Someone already subscribed
/// who signs up to a double list keeps their status (this runs for new rows only).
pub(crate) fn pending_until_confirmed(
    tx: &mut dyn Tx,
    subscriber_id: i64,
    lists: &[i64],
) -> Result<()> {
    if lists.is_empty() {
        return Ok(());
    }
    for &list in lists {
        if tx.exists(
            "SELECT 1 FROM lists WHERE id = ?1 AND optin <> 'double'",
            &args![list],
        )? {
            return Ok(());
        }
    }
    tx.exec(
        "UPDATE subscribers SET status = 'pending' WHERE id = ?1 AND status = 'confirmed'",
        &args![subscriber_id],
    )?;
    Ok(())
}

/// The list's name and the membership of the (not removed) subscriber with this address;
/// `lock` takes the membership row `FOR UPDATE` on PostgreSQL (where SQLite's write
/// transaction already serializes).
fn find(tx: &mut dyn Tx, key: &MemberKey<'_>, lock: bool) -> Result<Option<(Confirmation, i64)>> {
    let Some(list_name) = tx.scalar_opt::<String>(
        "SELECT name FROM lists WHERE id = ?1 AND account_id = ?2",
        &args![key.list_id, key.account_id],
    )?
    else {
        return Ok(None);
    };
    let column = match key.channel {
        Channel::Email => "email_norm",
        Channel::Sms => "phone",
    };
    let lock = match lock {
        true => (tx.dialect().for_update_of)("m"),
        false => String::new(),
    };
    let member: Option<(i64, String)> = tx.query_opt(
        &format!(
            "SELECT s.id, m.status FROM subscribers s
             JOIN list_members m ON m.subscriber_id = s.id AND m.list_id = ?3
             WHERE s.account_id = ?1 AND s.{column} = ?2 AND s.removed_at IS NULL{lock}"
        ),
        &args![key.account_id, key.address, key.list_id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let Some((sid, st)) = member else {
        return Ok(Some((
            Confirmation {
                list_name,
                state: None,
            },
            0,
        )));
    };
    let state = match st.as_str() {
        "pending" => MemberState::Pending,
        "subscribed" => MemberState::Subscribed,
        "unsubscribed" => MemberState::Unsubscribed,
        other => {
            return Err(Error::damaged(format!(
                "list_members.status holds {other:?}, which this version does not know"
            )))
        }
    };
    Ok(Some((
        Confirmation {
            list_name,
            state: Some(state),
        },
        sid,
    )))
}

/// Confirm the membership `key` names inside `tx` (see [`Optin::confirm`]).
fn confirm_in(
    tx: &mut dyn Tx,
    key: &MemberKey<'_>,
    now: i64,
    seen: &crate::Seen,
) -> Result<Option<Confirmation>> {
    let Some((found, sid)) = find(tx, key, true)? else {
        return Ok(None);
    };
    if found.state != Some(MemberState::Pending) {
        return Ok(Some(found));
    }
    let n = tx.exec(
        "UPDATE list_members SET status = 'subscribed', updated_at = ?3
         WHERE list_id = ?1 AND subscriber_id = ?2 AND status = 'pending'",
        &args![key.list_id, sid, now],
    )?;
    if n != 1 {
        return Err(Error::internal(
            "the pending membership changed under its lock",
        ));
    }
    tx.exec(
        "UPDATE subscribers SET status = 'confirmed' WHERE id = ?1 AND status = 'pending'",
        &args![sid],
    )?;
    tx.exec(
        "UPDATE list_confirmations SET confirmed_at = ?3
         WHERE list_id = ?1 AND subscriber_id = ?2 AND confirmed_at IS NULL",
        &args![key.list_id, sid, now],
    )?;
    crate::privacy::confirm_consent(tx, sid, key.list_id, seen, now)?;
    Ok(Some(found))
}

impl<S: Db> Optin for S {
    fn confirmation(&self, key: &MemberKey<'_>) -> Result<Option<Confirmation>> {
        self.read(|tx| Ok(find(tx, key, false)?.map(|(found, _)| found)))
    }

    fn confirm_seen(
        &self,
        key: &MemberKey<'_>,
        now: i64,
        seen: &crate::Seen,
    ) -> Result<Option<Confirmation>> {
        self.write(|tx| confirm_in(tx, key, now, seen))
    }

    fn public_list(&self, list_id: i64) -> Result<Option<crate::ListRow>> {
        self.read(|tx| crate::lists::public_list(tx, list_id))
    }
}

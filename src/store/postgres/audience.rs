//! `Audience` on PostgreSQL: accounts, subscribers added and imported (into lists, double
//! opt-in confirmations queued in the same transaction, removed subscribers revived) and
//! attribute names; the rules of `sqlite/admin.rs` and `sqlite/optin.rs`.

use super::ledger::{transaction, TxError, TxResult};
use super::PgStore;
use crate::domain::links::Links;
use crate::error::{Error, Result};
use crate::store::optin::Pending;
use crate::store::{Audience, ImportReport, NewSubscriber, SkippedRow};
use deadpool_postgres::Transaction;
use std::collections::BTreeSet;

impl Audience for PgStore {
    fn add_account(&self, name: &str) -> Result<i64> {
        let name = name.trim().to_string();
        if name.is_empty() {
            return Err(Error::invalid("the account name is empty"));
        }
        if name.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::invalid(format!(
                "the account name {name:?} is all digits: commands take an account by id or by \
                 name, so it would read as an id; add a letter"
            )));
        }
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                let now = crate::domain::clock::now_ms();
                let id: Option<i64> = tx
                    .query_opt(
                        "INSERT INTO accounts (name, created_at) VALUES ($1, $2)
                         ON CONFLICT (name) DO NOTHING RETURNING id",
                        &[&name, &now],
                    )
                    .await?
                    .map(|r| r.get(0));
                match id {
                    Some(id) => Ok(id),
                    None => {
                        let id: i64 = tx
                            .query_one("SELECT id FROM accounts WHERE name = $1", &[&name])
                            .await?
                            .get(0);
                        Err(Error::conflict(format!(
                            "an account named {name:?} already exists (id {id})"
                        ))
                        .into())
                    }
                }
            })
        })
    }

    fn add_subscriber_with(
        &self,
        account_id: i64,
        s: &NewSubscriber,
        lists: &[i64],
        links: Option<&Links>,
    ) -> Result<i64> {
        let (s, lists, links) = (s.clone(), lists.to_vec(), links.cloned());
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                require_account(&tx, account_id).await?;
                super::ledger::lock_subscribers(&tx, account_id, false).await?;
                super::lists::require_lists(&tx, account_id, &lists, true).await?;
                Ok(add_to_lists(&tx, account_id, &s, &lists, links.as_ref()).await?.0)
            })
        })
    }

    /// Import subscribers in one transaction. Rows are `(line, parsed)`; a parse error is an
    /// `Err` with its reason. All-or-nothing unless `skip_invalid`, which imports the valid rows
    /// and reports every skipped one (a refused row writes nothing: everything that refuses
    /// one is checked before its first write).
    fn import_subscribers_with(
        &self,
        account_id: i64,
        rows: Vec<(u64, Result<NewSubscriber>)>,
        skip_invalid: bool,
        lists: &[i64],
        links: Option<&Links>,
    ) -> Result<ImportReport> {
        let (lists, links) = (lists.to_vec(), links.cloned());
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                require_account(&tx, account_id).await?;
                super::ledger::lock_subscribers(&tx, account_id, false).await?;
                super::lists::require_lists(&tx, account_id, &lists, true).await?;
                let mut report = ImportReport { imported: 0, existing: 0, skipped: Vec::new() };
                for (line, row) in &rows {
                    let res = match row {
                        Ok(s) => add_to_lists(&tx, account_id, s, &lists, links.as_ref()).await,
                        Err(e) => Err(TxError::Other(Error::invalid(e.message.clone()))),
                    };
                    match res {
                        Ok((_, true)) => report.imported += 1,
                        Ok((_, false)) => report.existing += 1,
                        Err(TxError::Other(e)) if skip_invalid => {
                            report.skipped.push(SkippedRow { line: *line, reason: e.message })
                        }
                        Err(TxError::Other(e)) => {
                            // Returning the error rolls the whole import back.
                            return Err(Error::invalid(format!(
                                "line {line}: {}; nothing was imported (use --skip-invalid to \
                                 import the valid rows)",
                                e.message
                            ))
                            .into())
                        }
                        // The database's own error aborted the transaction: nothing more can
                        // run in it, whatever skip_invalid says.
                        Err(e) => return Err(e),
                    }
                }
                Ok(report)
            })
        })
    }

    /// Attribute names that subscribers of this account have (templates may use them).
    fn attribute_names(&self, account_id: i64) -> Result<BTreeSet<String>> {
        self.run(move |pool| async move {
            let c = pool.get().await?;
            let rows = c
                .query(
                    "SELECT DISTINCT j.key FROM subscribers s, json_each(s.attrs::json) j
                     WHERE s.account_id = $1 AND json_typeof(s.attrs::json) = 'object'",
                    &[&account_id],
                )
                .await?;
            Ok(rows.iter().map(|r| r.get::<_, String>(0)).collect())
        })
    }

    fn account_exists(&self, account_id: i64) -> Result<()> {
        self.run(move |pool| async move {
            let c = pool.get().await?;
            match c
                .query_opt("SELECT 1 FROM accounts WHERE id = $1", &[&account_id])
                .await?
            {
                Some(_) => Ok(()),
                None => Err(Error::not_found(format!("unknown account id {account_id}"))),
            }
        })
    }
}

async fn require_account(tx: &Transaction<'_>, account_id: i64) -> TxResult<()> {
    match tx
        .query_opt("SELECT 1 FROM accounts WHERE id = $1", &[&account_id])
        .await?
    {
        Some(_) => Ok(()),
        None => Err(Error::not_found(format!("unknown account id {account_id}")).into()),
    }
}

/// The subscriber of the account with `s`'s address, if any: `(id, removed)` (the lowest id
/// when the email and the phone name two subscribers).
async fn existing_subscriber(
    tx: &Transaction<'_>,
    account_id: i64,
    s: &NewSubscriber,
) -> TxResult<Option<(i64, bool)>> {
    let norm = s.email.as_ref().map(|e| e.1.clone());
    Ok(tx
        .query_opt(
            "SELECT id, removed_at IS NOT NULL FROM subscribers
             WHERE account_id = $1 AND (email_norm = $2 OR phone = $3)
             ORDER BY id LIMIT 1",
            &[&account_id, &norm, &s.phone],
        )
        .await?
        .map(|r| (r.get(0), r.get(1))))
}

/// Add `s` to the account and to `lists` (checked by `require_lists`). With lists, an address
/// that is already a (not removed) subscriber only joins the lists, its row left as it is:
/// `(id, false)`. Otherwise the row is inserted (or revived): `(id, true)`. As
/// `sqlite/admin.rs`'s `add_to_lists`.
async fn add_to_lists(
    tx: &Transaction<'_>,
    account_id: i64,
    s: &NewSubscriber,
    lists: &[i64],
    links: Option<&Links>,
) -> TxResult<(i64, bool)> {
    // Everything that would refuse a confirmation is checked before anything is written.
    can_confirm(tx, account_id, s, lists, links).await?;
    if !lists.is_empty() {
        if let Some((id, false)) = existing_subscriber(tx, account_id, s).await? {
            super::lists::join_lists(tx, id, lists).await?;
            queue_confirmations(tx, id, lists, links).await?;
            return Ok((id, false));
        }
    }
    let id = insert_subscriber(tx, account_id, s).await?;
    super::lists::join_lists(tx, id, lists).await?;
    queue_confirmations(tx, id, lists, links).await?;
    pending_until_confirmed(tx, id, lists).await?;
    Ok((id, true))
}

/// Insert one subscriber (or revive a removed one under its old id), naming the conflicting
/// address when it already exists.
async fn insert_subscriber(
    tx: &Transaction<'_>,
    account_id: i64,
    s: &NewSubscriber,
) -> TxResult<i64> {
    let existing = existing_subscriber(tx, account_id, s).await?;
    if let Some((id, true)) = existing {
        if revive_subscriber(tx, account_id, id, s).await? {
            return Ok(id);
        }
    }
    let norm = s.email.as_ref().map(|e| e.1.clone());
    if let Some((id, _)) = existing {
        let what = norm.or(s.phone.clone()).unwrap_or_default();
        return Err(Error::invalid(format!(
            "duplicate: {what} is already subscriber {id} of this account"
        ))
        .into());
    }
    let email = s.email.as_ref().map(|e| e.0.clone());
    let id: i64 = tx
        .query_one(
            "INSERT INTO subscribers (account_id, email, email_norm, phone, name, status, attrs,
                                      created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
            &[
                &account_id,
                &email,
                &norm,
                &s.phone,
                &s.name,
                &s.status,
                &s.attrs,
                &crate::domain::clock::now_ms(),
            ],
        )
        .await?
        .get(0);
    Ok(id)
}

/// A removed subscriber comes back under its old id (its past sends name it), and the
/// suppressions its removal added go. False if it was not removed after all.
async fn revive_subscriber(
    tx: &Transaction<'_>,
    account_id: i64,
    id: i64,
    s: &NewSubscriber,
) -> TxResult<bool> {
    let email = s.email.as_ref().map(|e| e.0.clone());
    let norm = s.email.as_ref().map(|e| e.1.clone());
    let n = tx
        .execute(
            "UPDATE subscribers SET email = $2, email_norm = $3, phone = $4, name = $5,
                    status = $6, attrs = $7, removed_at = NULL
             WHERE id = $1 AND removed_at IS NOT NULL",
            &[&id, &email, &norm, &s.phone, &s.name, &s.status, &s.attrs],
        )
        .await?;
    if n != 1 {
        return Ok(false);
    }
    tx.execute(
        "DELETE FROM suppressions WHERE account_id = $1 AND source = 'removal'
         AND ((channel = 'email' AND address = $2) OR (channel = 'sms' AND address = $3))",
        &[&account_id, &norm, &s.phone],
    )
    .await?;
    Ok(true)
}

/// Refuse, before anything is written, a subscriber joining a double opt-in list among `lists`
/// when its confirmation could not be sent (`sqlite/optin.rs`'s `can_confirm`, same messages).
async fn can_confirm(
    tx: &Transaction<'_>,
    account_id: i64,
    s: &NewSubscriber,
    lists: &[i64],
    links: Option<&Links>,
) -> TxResult<()> {
    for &list in lists {
        let Some(row) = tx
            .query_opt(
                "SELECT name, confirm_from IS NOT NULL FROM lists
                 WHERE id = $1 AND optin = 'double'",
                &[&list],
            )
            .await?
        else {
            continue;
        };
        let (name, has_from): (String, bool) = (row.get(0), row.get(1));
        if links.is_none() {
            return Err(Error::invalid(format!(
                "list {name:?} is double opt-in: its new members get a confirmation link, which \
                 needs the server's public URL (--public-url, SENDONCE_PUBLIC_URL or public_url \
                 in the config file) and {}; nothing was written",
                crate::domain::links::SECRET_ENV
            ))
            .into());
        }
        if !has_from {
            return Err(Error::invalid(format!(
                "list {name:?} is double opt-in but has no confirmation sender: `sendonce list \
                 update --account {account_id} {list} --confirm-from ADDRESS`; nothing was \
                 written"
            ))
            .into());
        }
        if s.email.is_none() {
            let stored = tx
                .query_opt(
                    "SELECT 1 FROM subscribers WHERE account_id = $1 AND phone = $2
                     AND email_norm IS NOT NULL",
                    &[&account_id, &s.phone],
                )
                .await?
                .is_some();
            if !stored {
                return Err(Error::invalid(format!(
                    "list {name:?} is double opt-in and confirmations go by email: this \
                     subscriber has no email address (SMS confirmation is not supported)"
                ))
                .into());
            }
        }
    }
    Ok(())
}

/// Queue a confirmation for every membership of `subscriber_id` in `lists` that is pending and
/// has none yet (`sqlite/optin.rs`'s `queue_confirmations`: a hidden one-row campaign of kind
/// `api` targeting the list, its send row, and the `list_confirmations` row).
async fn queue_confirmations(
    tx: &Transaction<'_>,
    subscriber_id: i64,
    lists: &[i64],
    links: Option<&Links>,
) -> TxResult<u64> {
    let mut queued = 0;
    for &list in lists {
        let Some(p) = pending_confirmation(tx, subscriber_id, list).await? else {
            continue;
        };
        let Some(links) = links else {
            return Err(Error::internal(
                "a confirmation to queue without links (can_confirm should have refused)",
            )
            .into());
        };
        queue_one(tx, subscriber_id, &p, links).await?;
        queued += 1;
    }
    Ok(queued)
}

/// The membership of `subscriber_id` in `list` when it is pending in a double opt-in list that
/// can send its confirmation, and has none yet.
async fn pending_confirmation(
    tx: &Transaction<'_>,
    subscriber_id: i64,
    list: i64,
) -> TxResult<Option<Pending>> {
    use crate::domain::optin;
    let row = tx
        .query_opt(
            "SELECT l.id, l.account_id, l.name, l.confirm_from,
                    coalesce(l.confirm_subject, $1), coalesce(l.confirm_body, $2),
                    s.email_norm, s.name
             FROM list_members m JOIN lists l ON l.id = m.list_id
             JOIN subscribers s ON s.id = m.subscriber_id
             WHERE m.subscriber_id = $3 AND m.list_id = $4 AND m.status = 'pending'
               AND l.optin = 'double' AND l.confirm_from IS NOT NULL
               AND s.email_norm IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM list_confirmations c
                               WHERE c.list_id = m.list_id
                                 AND c.subscriber_id = m.subscriber_id)",
            &[
                &optin::DEFAULT_SUBJECT,
                &optin::DEFAULT_BODY,
                &subscriber_id,
                &list,
            ],
        )
        .await?;
    Ok(row.map(|r| Pending {
        list_id: r.get(0),
        account_id: r.get(1),
        list_name: r.get(2),
        from: r.get(3),
        subject: r.get(4),
        body: r.get(5),
        email: r.get(6),
        name: r.get(7),
    }))
}

/// One confirmation: its hidden campaign, its one send row and the `list_confirmations` row.
async fn queue_one(
    tx: &Transaction<'_>,
    subscriber_id: i64,
    p: &Pending,
    links: &Links,
) -> TxResult<()> {
    use crate::domain::links::{Purpose, Target};
    use crate::domain::{model, optin};
    let now = crate::domain::clock::now_ms();
    let url = links.url(
        Purpose::Confirm,
        &Target {
            account_id: p.account_id,
            channel: crate::domain::address::Channel::Email,
            address: p.email.clone(),
            lists: vec![p.list_id],
            campaign_id: 0,
        },
    );
    let cid = confirmation_campaign(tx, subscriber_id, p, now).await?;
    let scope = super::admin::key_scope(
        &**tx,
        &[
            ("lists_through", p.list_id),
            ("subscribers_through", subscriber_id),
        ],
    )
    .await?;
    tx.execute(
        "INSERT INTO sends (account_id, campaign_id, subscriber_id, job_id, address, vars,
                            status, visible_at, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, 'queued', $7, $7, $7)",
        &[
            &p.account_id,
            &cid,
            &subscriber_id,
            &model::confirm_job_id(&scope, p.list_id, subscriber_id),
            &p.email,
            &optin::vars(&url, &p.list_name, &p.email, p.name.as_deref()),
            &now,
        ],
    )
    .await?;
    tx.execute(
        "INSERT INTO list_confirmations (list_id, subscriber_id, campaign_id, created_at)
         VALUES ($1, $2, $3, $4)",
        &[&p.list_id, &subscriber_id, &cid, &now],
    )
    .await?;
    Ok(())
}

/// The hidden campaign of one confirmation: a draft while its list is attached, then sending
/// with its list complete.
async fn confirmation_campaign(
    tx: &Transaction<'_>,
    subscriber_id: i64,
    p: &Pending,
    now: i64,
) -> TxResult<i64> {
    let cid: i64 = tx
        .query_one(
            "INSERT INTO campaigns (account_id, name, channel, sender, subject, body,
                                    body_format, templated, status, scheduled_for,
                                    created_at, kind)
             VALUES ($1, $2, 'email', $3, $4, $5, 'text', TRUE, 'draft', $6, $6, 'api')
             RETURNING id",
            &[
                &p.account_id,
                &format!(
                    "confirmation: list {} subscriber {subscriber_id}",
                    p.list_id
                ),
                &p.from,
                &p.subject,
                &p.body,
                &now,
            ],
        )
        .await?
        .get(0);
    // The list is attached while the campaign is a draft (campaign_lists is frozen after),
    // so the message's List-Unsubscribe names this list.
    super::lists::target_lists(tx, cid, &[p.list_id]).await?;
    tx.execute(
        "UPDATE campaigns SET status = 'sending', approved_at = $2, started_at = $2,
                list_complete = TRUE
         WHERE id = $1 AND status = 'draft'",
        &[&cid, &now],
    )
    .await?;
    Ok(cid)
}

/// A new subscriber that arrives through double opt-in lists only is `pending` (whatever status
/// it was given) until it confirms one of them (`sqlite/optin.rs`).
async fn pending_until_confirmed(
    tx: &Transaction<'_>,
    subscriber_id: i64,
    lists: &[i64],
) -> TxResult<()> {
    if lists.is_empty() {
        return Ok(());
    }
    tx.execute(
        "UPDATE subscribers SET status = 'pending'
         WHERE id = $1 AND status = 'confirmed'
           AND NOT EXISTS (SELECT 1 FROM lists l
                           WHERE l.id = ANY($2::bigint[]) AND l.optin <> 'double')",
        &[&subscriber_id, &lists],
    )
    .await?;
    Ok(())
}

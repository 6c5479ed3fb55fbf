//! `Optin` on PostgreSQL: what a confirm link finds, confirming (the membership row locked
//! `FOR UPDATE`, where SQLite's `BEGIN IMMEDIATE` serializes), public lists; the rules of
//! `sqlite/optin.rs`. Queueing confirmations is `Audience`'s (not here).

use super::ledger::{transaction, TxResult};
use super::lists::{list_from_row, LIST_COLS};
use super::PgStore;
use crate::domain::address::Channel;
use crate::error::{Error, Result};
use crate::store::{Confirmation, ListRow, MemberKey, MemberState, Optin};
use deadpool_postgres::Transaction;

/// An owned [`MemberKey`], to move onto the store's runtime.
struct Key {
    account_id: i64,
    list_id: i64,
    channel: Channel,
    address: String,
}

impl Key {
    fn new(k: &MemberKey<'_>) -> Key {
        Key {
            account_id: k.account_id,
            list_id: k.list_id,
            channel: k.channel,
            address: k.address.to_string(),
        }
    }
}

/// The list's name and the membership of the (not removed) subscriber with this address;
/// `lock` takes the membership row `FOR UPDATE`.
async fn find(
    tx: &Transaction<'_>,
    key: &Key,
    lock: bool,
) -> TxResult<Option<(Confirmation, i64)>> {
    let list: Option<String> = tx
        .query_opt(
            "SELECT name FROM lists WHERE id = $1 AND account_id = $2",
            &[&key.list_id, &key.account_id],
        )
        .await?
        .map(|r| r.get(0));
    let Some(list_name) = list else {
        return Ok(None);
    };
    let column = match key.channel {
        Channel::Email => "email_norm",
        Channel::Sms => "phone",
    };
    let lock = if lock { "FOR UPDATE OF m" } else { "" };
    let member: Option<(i64, String)> = tx
        .query_opt(
            &format!(
                "SELECT s.id, m.status FROM subscribers s
                 JOIN list_members m ON m.subscriber_id = s.id AND m.list_id = $3
                 WHERE s.account_id = $1 AND s.{column} = $2 AND s.removed_at IS NULL {lock}"
            ),
            &[&key.account_id, &key.address, &key.list_id],
        )
        .await?
        .map(|r| (r.get(0), r.get(1)));
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
                    ))
                    .into())
                }
            }),
        ),
        None => (0, None),
    };
    Ok(Some((Confirmation { list_name, state }, sid)))
}

impl Optin for PgStore {
    fn confirmation(&self, key: &MemberKey<'_>) -> Result<Option<Confirmation>> {
        let key = Key::new(key);
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                Ok(find(&tx, &key, false).await?.map(|(found, _)| found))
            })
        })
    }

    fn confirm(&self, key: &MemberKey<'_>, now: i64) -> Result<Option<Confirmation>> {
        let key = Key::new(key);
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                let Some((found, sid)) = find(&tx, &key, true).await? else {
                    return Ok(None);
                };
                if found.state != Some(MemberState::Pending) {
                    return Ok(Some(found));
                }
                let n = tx
                    .execute(
                        "UPDATE list_members SET status = 'subscribed', updated_at = $3
                         WHERE list_id = $1 AND subscriber_id = $2 AND status = 'pending'",
                        &[&key.list_id, &sid, &now],
                    )
                    .await?;
                if n != 1 {
                    return Err(Error::internal(
                        "the pending membership changed under its lock",
                    )
                    .into());
                }
                tx.execute(
                    "UPDATE subscribers SET status = 'confirmed' WHERE id = $1 AND status = 'pending'",
                    &[&sid],
                )
                .await?;
                tx.execute(
                    "UPDATE list_confirmations SET confirmed_at = $3
                     WHERE list_id = $1 AND subscriber_id = $2 AND confirmed_at IS NULL",
                    &[&key.list_id, &sid, &now],
                )
                .await?;
                Ok(Some(found))
            })
        })
    }

    fn public_list(&self, list_id: i64) -> Result<Option<ListRow>> {
        self.run(move |pool| async move {
            let c = pool.get().await?;
            let row = c
                .query_opt(
                    &format!("SELECT {LIST_COLS} FROM lists l WHERE l.id = $1 AND l.public"),
                    &[&list_id],
                )
                .await?;
            row.as_ref().map(list_from_row).transpose()
        })
    }
}

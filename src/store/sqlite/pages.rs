//! Keyset pages the dashboard reads on SQLite: a list's members (in id order, or an address
//! prefix through the account's address indexes; an account's suppressions are paged in
//! `store/suppressions.rs`). Each statement reads at most one page of index entries past its
//! start.

use crate::error::Result;
use crate::store::{prefix_bounds, MemberOrder, MemberPage, MemberRow, SubscriberRow};
use rusqlite::{named_params, Connection, Row};

const MEMBER_COLS: &str = "s.id, s.account_id, s.email, s.phone, s.name, s.status, s.attrs,
    s.created_at, s.email_norm, m.status";

fn member_from_row(r: &Row<'_>) -> rusqlite::Result<MemberRow> {
    Ok(MemberRow {
        subscriber: SubscriberRow {
            id: r.get(0)?,
            account_id: r.get(1)?,
            email: r.get(2)?,
            phone: r.get(3)?,
            name: r.get(4)?,
            status: r.get(5)?,
            attrs: r.get(6)?,
            created_at: r.get(7)?,
        },
        email_norm: r.get(8)?,
        membership: r.get(9)?,
    })
}

/// A page of a list's members (see `Lists::list_members`).
pub(super) fn members(c: &Connection, q: &MemberPage<'_>) -> Result<Vec<MemberRow>> {
    let limit = i64::try_from(q.limit).unwrap_or(i64::MAX);
    let (column, prefix, after) = match q.order {
        MemberOrder::Id { after } => {
            // A list's unsubscribed or pending members are few among many: read them through
            // list_members_state (0015) instead of walking the whole list.
            let rare = matches!(q.membership, Some(m) if m != "subscribed");
            let state = match rare {
                true => "m.status = :membership AND m.status <> 'subscribed'",
                false => "(:membership IS NULL OR m.status = :membership)",
            };
            let mut st = c.prepare_cached(&format!(
                "SELECT {MEMBER_COLS} FROM list_members m
                 JOIN subscribers s ON s.id = m.subscriber_id
                 WHERE m.list_id = :list AND {state} AND m.subscriber_id > :after
                   AND s.account_id = :account AND s.removed_at IS NULL
                 ORDER BY m.subscriber_id LIMIT :limit"
            ))?;
            let rows = st
                .query_map(
                    named_params! {
                        ":list": q.list_id, ":after": after, ":account": q.account_id,
                        ":membership": q.membership, ":limit": limit,
                    },
                    member_from_row,
                )?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            return Ok(rows);
        }
        MemberOrder::Email { prefix, after } => ("email_norm", prefix, after),
        MemberOrder::Phone { prefix, after } => ("phone", prefix, after),
    };
    let (low, high) = prefix_bounds(prefix, after);
    let mut st = c.prepare_cached(&format!(
        "SELECT {MEMBER_COLS} FROM subscribers s
         JOIN list_members m ON m.list_id = :list AND m.subscriber_id = s.id
         WHERE s.account_id = :account AND s.{column} >= :low AND s.{column} < :high
           AND s.{column} IS NOT :after AND s.removed_at IS NULL
           AND (:membership IS NULL OR m.status = :membership)
         ORDER BY s.{column} LIMIT :limit"
    ))?;
    let rows = st
        .query_map(
            named_params! {
                ":list": q.list_id, ":account": q.account_id, ":low": low, ":high": high,
                ":after": after, ":membership": q.membership, ":limit": limit,
            },
            member_from_row,
        )?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

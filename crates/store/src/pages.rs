//! Keyset pages the dashboard reads, written once over the seam (`sql::Tx`): a list's members
//! (in id order, or an address prefix through the account's address indexes). Each statement
//! reads at most one page of index entries past its start. A prefix search compares and orders text byte by byte on both
//! stores (`Dialect::byte_order`: SQLite's BINARY, PostgreSQL's "C" collation whatever the
//! database's, served by the "C" indexes of `postgres/0003_prefix_order`): under a linguistic
//! collation a prefix is not a range of the column's own order.

use crate::sql::{args, Row, Tx};
use crate::{prefix_bounds, MemberOrder, MemberPage, MemberRow, SubscriberRow};
use sendonce_domain::error::Result;

const MEMBER_COLS: &str = "s.id, s.account_id, s.email, s.phone, s.name, s.status, s.attrs,
    s.created_at, s.email_norm, m.status";

fn member_from_row(r: Row<'_>) -> Result<MemberRow> {
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

/// A list's members in subscriber id order. A list's unsubscribed or pending members are few
/// among many: they are read through `list_members_state` (0015) instead of walking the whole
/// list.
const MEMBERS_BY_ID: &str = "SELECT s.id, s.account_id, s.email, s.phone, s.name, s.status,
        s.attrs, s.created_at, s.email_norm, m.status
     FROM list_members m JOIN subscribers s ON s.id = m.subscriber_id
     WHERE m.list_id = ?1 AND (CAST(?4 AS TEXT) IS NULL OR m.status = ?4)
       AND m.subscriber_id > ?2 AND s.account_id = ?3 AND s.removed_at IS NULL
     ORDER BY m.subscriber_id LIMIT ?5";
const RARE_MEMBERS_BY_ID: &str = "SELECT s.id, s.account_id, s.email, s.phone, s.name,
        s.status, s.attrs, s.created_at, s.email_norm, m.status
     FROM list_members m JOIN subscribers s ON s.id = m.subscriber_id
     WHERE m.list_id = ?1 AND m.status = ?4 AND m.status <> 'subscribed'
       AND m.subscriber_id > ?2 AND s.account_id = ?3 AND s.removed_at IS NULL
     ORDER BY m.subscriber_id LIMIT ?5";

/// A page of a list's members (see `Lists::list_members`).
pub(crate) fn members(tx: &mut dyn Tx, q: &MemberPage<'_>) -> Result<Vec<MemberRow>> {
    let limit = i64::try_from(q.limit).unwrap_or(i64::MAX);
    let (column, prefix, after) = match q.order {
        MemberOrder::Id { after } => {
            let rare = matches!(q.membership, Some(m) if m != "subscribed");
            let sql = if rare {
                RARE_MEMBERS_BY_ID
            } else {
                MEMBERS_BY_ID
            };
            return tx.query(
                sql,
                &args![q.list_id, after, q.account_id, q.membership, limit],
                member_from_row,
            );
        }
        MemberOrder::Email { prefix, after } => ("email_norm", prefix, after),
        MemberOrder::Phone { prefix, after } => ("phone", prefix, after),
    };
    let (low, high) = prefix_bounds(prefix, after);
    let d = tx.dialect();
    let (c, starts) = (d.byte_order, (d.starts_with)(&format!("s.{column}"), "?5"));
    tx.query(
        &format!(
            "SELECT {MEMBER_COLS} FROM subscribers s
             JOIN list_members m ON m.list_id = ?1 AND m.subscriber_id = s.id
             WHERE s.account_id = ?2 AND s.{column}{c} >= ?3 AND s.{column}{c} < ?4{starts}
               AND s.{column} IS DISTINCT FROM CAST(?6 AS TEXT) AND s.removed_at IS NULL
               AND (CAST(?7 AS TEXT) IS NULL OR m.status = ?7)
             ORDER BY s.{column}{c} LIMIT ?8"
        ),
        &args![
            q.list_id,
            q.account_id,
            &low,
            &high,
            prefix,
            after,
            q.membership,
            limit
        ],
        member_from_row,
    )
}

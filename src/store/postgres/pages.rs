//! Keyset pages the dashboard reads on PostgreSQL, statement for statement those of
//! `sqlite/pages.rs`. A prefix search compares and orders in the "C" collation (byte order,
//! as SQLite), whatever the database's: under a linguistic collation a prefix is not a range
//! of the column's own order. The "C" indexes of `postgres/0003_prefix_order` serve those
//! ranges; `starts_with` keeps the match exact.

use super::PgStore;
use crate::error::Result;
use crate::store::{prefix_bounds, MemberOrder, MemberPage, MemberRow, SubscriberRow};
use tokio_postgres::Row;

const MEMBER_COLS: &str = "s.id, s.account_id, s.email, s.phone, s.name, s.status, s.attrs,
    s.created_at, s.email_norm, m.status";

fn member_from_row(r: &Row) -> MemberRow {
    MemberRow {
        subscriber: SubscriberRow {
            id: r.get(0),
            account_id: r.get(1),
            email: r.get(2),
            phone: r.get(3),
            name: r.get(4),
            status: r.get(5),
            attrs: r.get(6),
            created_at: r.get(7),
        },
        email_norm: r.get(8),
        membership: r.get(9),
    }
}

impl PgStore {
    /// A page of a list's members (see `Lists::list_members`).
    pub(super) fn member_page(&self, q: &MemberPage<'_>) -> Result<Vec<MemberRow>> {
        let (account, list) = (q.account_id, q.list_id);
        let membership = q.membership.map(str::to_string);
        let limit = i64::try_from(q.limit).unwrap_or(i64::MAX);
        let (column, prefix, after) = match q.order {
            MemberOrder::Id { after } => {
                return self.run(move |pool| async move {
                    let c = pool.get().await?;
                    let rows = c
                        .query(
                            &format!(
                                "SELECT {MEMBER_COLS} FROM list_members m
                                 JOIN subscribers s ON s.id = m.subscriber_id
                                 WHERE m.list_id = $1 AND m.subscriber_id > $2
                                   AND s.account_id = $3 AND s.removed_at IS NULL
                                   AND ($4::text IS NULL OR m.status = $4)
                                 ORDER BY m.subscriber_id LIMIT $5"
                            ),
                            &[&list, &after, &account, &membership, &limit],
                        )
                        .await?;
                    Ok(rows.iter().map(member_from_row).collect())
                })
            }
            MemberOrder::Email { prefix, after } => ("email_norm", prefix, after),
            MemberOrder::Phone { prefix, after } => ("phone", prefix, after),
        };
        let (low, high) = prefix_bounds(prefix, after);
        let (prefix, after) = (prefix.to_string(), after.map(str::to_string));
        self.run(move |pool| async move {
            let c = pool.get().await?;
            let rows = c
                .query(
                    &format!(
                        "SELECT {MEMBER_COLS} FROM subscribers s
                         JOIN list_members m ON m.list_id = $1 AND m.subscriber_id = s.id
                         WHERE s.account_id = $2 AND s.{column} COLLATE \"C\" >= $3
                           AND s.{column} COLLATE \"C\" < $4 AND starts_with(s.{column}, $5)
                           AND s.{column} IS DISTINCT FROM $6::text AND s.removed_at IS NULL
                           AND ($7::text IS NULL OR m.status = $7)
                         ORDER BY s.{column} COLLATE \"C\" LIMIT $8"
                    ),
                    &[
                        &list,
                        &account,
                        &low,
                        &high,
                        &prefix,
                        &after,
                        &membership,
                        &limit,
                    ],
                )
                .await?;
            Ok(rows.iter().map(member_from_row).collect())
        })
    }
}

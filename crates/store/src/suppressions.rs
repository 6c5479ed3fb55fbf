//! Suppression lists, backend-neutral (`Suppressions`): from the moment a suppression commits, no
//! claim leases that address. Written once for both stores over `sql::Tx`; listed in byte
//! order (SQLite's BINARY, PostgreSQL's "C" collation) whatever the database's collation.

use crate::prefix_bounds;
use crate::shared::{get_at, require_account};
use crate::sql::{args, Db, Row};
use sendonce_domain::address::{erased_form, Channel};
use sendonce_domain::crash;
use sendonce_domain::error::{Error, Result};

/// A suppression-list entry.
#[derive(Debug, Clone)]
pub struct Suppression {
    pub channel: Channel,
    pub address: String,
    pub reason: String,
    pub source: String,
    pub created_at: i64,
}

/// A keyset page of an account's suppressions: in (channel, address) order after `after`, or
/// with `search`, the addresses of one channel that start with a (normalised) prefix.
#[derive(Debug, Clone, Copy)]
pub struct SuppressionPage<'a> {
    pub account_id: i64,
    pub search: Option<(Channel, &'a str)>,
    pub after: Option<(Channel, &'a str)>,
    pub limit: usize,
}

/// An account's suppression list.
pub trait Suppressions: Send + Sync {
    /// Add an address; returns false if it was already there.
    fn suppress(
        &self,
        account_id: i64,
        channel: Channel,
        address: &str,
        reason: &str,
        source: &str,
    ) -> Result<bool>;
    /// Remove `address` from the list; an address `subscriber erase` erased is removed as
    /// well (its `sha256:` form), which lets it be added again.
    fn unsuppress(&self, account_id: i64, channel: Channel, address: &str) -> Result<()>;
    fn suppressions(&self, account_id: i64) -> Result<Vec<Suppression>>;
    /// One page of the account's suppressions (see [`SuppressionPage`]), through the primary
    /// key.
    fn suppressions_page(&self, q: &SuppressionPage<'_>) -> Result<Vec<Suppression>>;
    /// Whether `address` is on the account's suppression list for `channel` (itself, or its
    /// `sha256:` form when it was erased).
    fn is_suppressed(&self, account_id: i64, channel: Channel, address: &str) -> Result<bool>;
}

const COLS: &str = "channel, address, reason, source, created_at";

fn suppression_from_row(r: Row<'_>) -> Result<Suppression> {
    Ok(Suppression {
        channel: get_at(r, 0, "suppressions.channel")?,
        address: r.get(1)?,
        reason: r.get(2)?,
        source: r.get(3)?,
        created_at: r.get(4)?,
    })
}

impl<S: Db> Suppressions for S {
    /// Add an address to an account's suppression list (under the account's opt-out lock).
    /// Returns false if it was already there. From the moment this commits, no claim leases
    /// that address.
    fn suppress(
        &self,
        account_id: i64,
        channel: Channel,
        address: &str,
        reason: &str,
        source: &str,
    ) -> Result<bool> {
        self.write(|tx| {
            require_account(tx, account_id)?;
            tx.dialect().lock_opt_outs(tx, account_id)?;
            let n = tx.exec(
                "INSERT INTO suppressions (account_id, channel, address, reason, source, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT DO NOTHING",
                &args![
                    account_id,
                    channel,
                    address,
                    reason,
                    source,
                    sendonce_domain::clock::now_ms()
                ],
            )?;
            crash::point("suppression_insert");
            Ok(n == 1)
        })
    }

    fn unsuppress(&self, account_id: i64, channel: Channel, address: &str) -> Result<()> {
        self.write(|tx| {
            require_account(tx, account_id)?;
            let n = tx.exec(
                "DELETE FROM suppressions
                 WHERE account_id = ?1 AND channel = ?2 AND address IN (?3, ?4)",
                &args![account_id, channel, address, &erased_form(address)],
            )?;
            if n == 0 {
                return Err(Error::not_found(format!(
                    "{address} is not on the {channel} suppression list of account {account_id}"
                )));
            }
            Ok(())
        })
    }

    fn is_suppressed(&self, account_id: i64, channel: Channel, address: &str) -> Result<bool> {
        self.read(|tx| {
            tx.scalar(
                "SELECT EXISTS (SELECT 1 FROM suppressions
                 WHERE account_id = ?1 AND channel = ?2 AND address IN (?3, ?4))",
                &args![account_id, channel, address, &erased_form(address)],
            )
        })
    }

    /// A keyset page through the primary key (or, with a search, the "C"-ordered address
    /// index on PostgreSQL): each statement reads at most one page of index entries past its
    /// start.
    fn suppressions_page(&self, q: &SuppressionPage<'_>) -> Result<Vec<Suppression>> {
        let limit = i64::try_from(q.limit).unwrap_or(i64::MAX);
        let Some((channel, prefix)) = q.search else {
            let (channel, address) = q.after.map_or(("", ""), |(c, a)| (c.as_str(), a));
            return self.read(|tx| {
                tx.query(
                    "SELECT channel, address, reason, source, created_at FROM suppressions
                     WHERE account_id = ?1 AND (channel, address) > (?2, ?3)
                     ORDER BY channel, address LIMIT ?4",
                    &args![q.account_id, channel, address, limit],
                    suppression_from_row,
                )
            });
        };
        let after = q.after.filter(|(c, _)| *c == channel).map(|(_, a)| a);
        let (low, high) = prefix_bounds(prefix, after);
        self.read(|tx| {
            // In byte order, the range is exactly the addresses that start with the prefix
            // (the `substr` test keeps it so under any collation).
            let c = tx.dialect().byte_order;
            let sql = format!(
                "SELECT {COLS} FROM suppressions
                 WHERE account_id = ?1 AND channel = ?2 AND address{c} >= ?3
                   AND address{c} < ?4 AND substr(address, 1, length(CAST(?5 AS TEXT))) = ?5
                   AND address IS DISTINCT FROM CAST(?6 AS TEXT)
                 ORDER BY address{c} LIMIT ?7"
            );
            tx.query(
                &sql,
                &args![q.account_id, channel, &low, &high, prefix, after, limit],
                suppression_from_row,
            )
        })
    }

    fn suppressions(&self, account_id: i64) -> Result<Vec<Suppression>> {
        self.read(|tx| {
            require_account(tx, account_id)?;
            let c = tx.dialect().byte_order;
            tx.query(
                &format!(
                    "SELECT {COLS} FROM suppressions
                     WHERE account_id = ?1 ORDER BY channel{c}, address{c}"
                ),
                &args![account_id],
                suppression_from_row,
            )
        })
    }
}

//! What `sendonce bench` needs from a store beside the storage traits, written once over the
//! seam: seeding synthetic subscribers, memberships and suppressions, and counting a
//! campaign's sends. What only one backend runs is beside it: SQLite's limit loops
//! (`limit.rs`), PostgreSQL's original at-most-once loop (`original.rs`).

use sendonce_domain::error::{Error, Result};
use sendonce_store::sql::{args, Db};

/// Subscribers (or subscriber ids) inserted per seeding transaction (keeps SQLite's WAL small
/// while seeding).
const SEED_CHUNK: i64 = 50_000;

/// The bench's own writes and counts, for any store.
pub trait Bench {
    /// True when the database holds no account: the PostgreSQL bench writes only into such a
    /// database (it adds accounts, campaigns and a table of its own, and removes them after).
    fn bench_database_is_empty(&self) -> Result<bool>;

    /// Insert `n` confirmed email subscribers `reader<i>@bench.example` (i from 1) with a
    /// `city` attribute, in chunks of 50,000 per transaction. Returns how many were inserted.
    fn bench_seed_subscribers(&self, account_id: i64, n: u64) -> Result<u64>;

    /// Subscribe the account's subscribers to `lists` as overlapping windows: with the
    /// subscribers in id order cut into as many equal parts as there are lists, list k holds
    /// part k and the first third of part k+1 (the last list wraps to the first part). So a
    /// third of the subscribers are in two lists, everyone is in at least one, and there are
    /// 4/3 memberships per subscriber (1,333,332 for 1,000,000). Inserted in id ranges of
    /// 50,000 per transaction. Returns how many memberships were inserted.
    fn bench_seed_memberships(&self, account_id: i64, lists: &[i64]) -> Result<u64>;

    /// Suppress the address of every `every`-th subscriber of the account (opted out before
    /// the campaign), in one statement.
    fn bench_seed_suppressions(&self, account_id: i64, every: u64) -> Result<u64>;

    /// A campaign's sends counted row by row, per state (states with no send left out): what
    /// its counters (SQLite's `campaign_counts`) must say.
    fn bench_full_counts(&self, campaign_id: i64) -> Result<Vec<(String, u64)>>;

    /// Sends of a campaign in a given state (bench bookkeeping).
    fn bench_count(&self, campaign_id: i64, status: &str) -> Result<u64>;
}

impl<S: Db> Bench for S {
    fn bench_database_is_empty(&self) -> Result<bool> {
        let n: i64 = self.read(|tx| tx.scalar("SELECT count(*) FROM accounts", &[]))?;
        Ok(n == 0)
    }

    fn bench_seed_subscribers(&self, account_id: i64, n: u64) -> Result<u64> {
        let n = i64::try_from(n).map_err(|_| Error::invalid("too many subscribers"))?;
        let now = sendonce_domain::clock::now_ms();
        let mut inserted = 0;
        let mut done = 0;
        while done < n {
            let (first, last) = (done + 1, (done + SEED_CHUNK).min(n));
            inserted += self.write(|tx| {
                let sql = tx.dialect().seed_subscribers;
                tx.exec(sql, &args![account_id, first, last, now])
            })?;
            done = last;
        }
        Ok(inserted)
    }

    fn bench_seed_memberships(&self, account_id: i64, lists: &[i64]) -> Result<u64> {
        let (first, last, n): (Option<i64>, Option<i64>, i64) = self.read(|tx| {
            let span = tx.query_opt(
                "SELECT min(id), max(id), count(*) FROM subscribers WHERE account_id = ?1",
                &args![account_id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?;
            Ok(span.unwrap_or_default())
        })?;
        let (Some(first), Some(last)) = (first, last) else {
            return Ok(0);
        };
        let k = lists.len() as i64;
        if k == 0 || n < k {
            return Ok(0);
        }
        let part = n / k;
        let now = sendonce_domain::clock::now_ms();
        let mut inserted = 0;
        let mut lo = first;
        while lo <= last {
            let hi = (lo + SEED_CHUNK - 1).min(last);
            inserted += self.write(|tx| {
                let mut rows = 0;
                for (i, &list) in lists.iter().enumerate() {
                    rows += tx.exec(
                        "INSERT INTO list_members (list_id, subscriber_id, status, created_at,
                                                   updated_at)
                         SELECT ?1, id, 'subscribed', ?2, ?2 FROM subscribers
                         WHERE account_id = ?3 AND id BETWEEN ?4 AND ?5
                           AND ((id - ?6 - ?7) % ?8 + ?8) % ?8 < ?9
                         ORDER BY id",
                        &args![
                            list,
                            now,
                            account_id,
                            lo,
                            hi,
                            first,
                            i as i64 * part,
                            n,
                            part + part / 3
                        ],
                    )?;
                }
                Ok(rows)
            })?;
            lo = hi + 1;
        }
        Ok(inserted)
    }

    fn bench_seed_suppressions(&self, account_id: i64, every: u64) -> Result<u64> {
        let every = i64::try_from(every).map_err(|_| Error::invalid("too large a step"))?;
        let now = sendonce_domain::clock::now_ms();
        self.write(|tx| {
            tx.exec(
                "INSERT INTO suppressions (account_id, channel, address, reason, source, created_at)
                 SELECT account_id, 'email', email_norm, 'bench: opted out', 'manual', ?3
                 FROM subscribers
                 WHERE account_id = ?1 AND id % ?2 = 0 AND email_norm IS NOT NULL
                 ON CONFLICT DO NOTHING",
                &args![account_id, every, now],
            )
        })
    }

    fn bench_full_counts(&self, campaign_id: i64) -> Result<Vec<(String, u64)>> {
        self.read(|tx| {
            tx.query(
                "SELECT status, count(*) FROM sends WHERE campaign_id = ?1
                 GROUP BY status ORDER BY status",
                &args![campaign_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
        })
    }

    fn bench_count(&self, campaign_id: i64, status: &str) -> Result<u64> {
        self.read(|tx| {
            tx.scalar(
                "SELECT count(*) FROM sends WHERE campaign_id = ?1 AND status = ?2",
                &args![campaign_id, status],
            )
        })
    }
}

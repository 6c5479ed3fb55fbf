//! What only `sendonce bench --db postgres://…` measures on PostgreSQL (the seeding and
//! counting both stores share are `store/bench.rs`): the plans of the hot reads, and the
//! original design's at-most-once loop (`../shared/seeds/000_*`: claim with `FOR UPDATE SKIP
//! LOCKED`, mark sent before the call, commit) on a table of its own, so the bench can run it
//! beside the exactly-once pipeline on the same server in the same run.

use super::PgStore;
use crate::driver::OrDb as _;
use sendonce_domain::error::Result;

/// The original design's send table, as its article declares it: one row per (campaign,
/// subscriber), a status, a deterministic job id. The partial index is the one a careful user
/// of that design adds so that its claim does not rescan sent rows (its best case).
const ORIGINAL_TABLE: &str = "
    CREATE TABLE sendonce_bench_original (
        id            BIGSERIAL PRIMARY KEY,
        campaign_id   BIGINT NOT NULL,
        account_id    BIGINT NOT NULL,
        subscriber_id BIGINT NOT NULL,
        email         TEXT NOT NULL,
        job_id        TEXT NOT NULL,
        status        TEXT NOT NULL DEFAULT 'queued',
        updated_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
        UNIQUE (campaign_id, subscriber_id)
    );
    CREATE INDEX sendonce_bench_original_queued
        ON sendonce_bench_original (campaign_id, id) WHERE status = 'queued'";

/// The article's list building, on our subscribers (`email_norm` is its `email_lower`).
const ORIGINAL_BUILD: &str = "
    INSERT INTO sendonce_bench_original (campaign_id, account_id, subscriber_id, email, job_id)
    SELECT DISTINCT ON (s.email_norm)
           $1::bigint, $2::bigint, s.id, s.email, 'campaign:' || $1::bigint || ':' || s.id
      FROM subscribers s
     WHERE s.account_id = $2::bigint AND s.status = 'confirmed'
     ORDER BY s.email_norm, s.created_at
    ON CONFLICT (campaign_id, subscriber_id) DO NOTHING";

/// The article's claim, verbatim but for the batch size (a parameter here, 20 there).
const ORIGINAL_CLAIM: &str = "
    SELECT id, subscriber_id, email, job_id
      FROM sendonce_bench_original
     WHERE campaign_id = $1 AND status = 'queued'
     ORDER BY id
     LIMIT $2
     FOR UPDATE SKIP LOCKED";

/// The article's mark, before the call, in the claim's transaction.
const ORIGINAL_MARK: &str = "
    UPDATE sendonce_bench_original SET status = 'sent', updated_at = now()
     WHERE id = ANY($1)";

/// What one run of the original loop did.
#[derive(Debug, Clone, Copy, Default)]
pub struct OriginalLoop {
    /// Rows marked sent.
    pub rows: u64,
    /// Transactions committed (the last, empty claim included).
    pub commits: u64,
}

/// A statement, its partial indexes, and its parameters, for [`PgStore::hot_read_plans`].
type Statement<'a> = (
    &'static str,
    &'static str,
    &'static [&'static str],
    Vec<&'a (dyn tokio_postgres::types::ToSql + Sync)>,
);

/// A hot read of the send path, the plan PostgreSQL picked for it, and the partial indexes
/// meant to serve it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PgPlan {
    pub name: &'static str,
    /// `EXPLAIN`'s lines.
    pub plan: Vec<String>,
    /// The partial indexes the statement's predicates were written for, each to be entered by
    /// campaign.
    pub indexes: &'static [&'static str],
}

impl PgPlan {
    /// True when the plan reads `sends` other than through the partial indexes meant for it,
    /// each entered by campaign: a sequential scan, a scan of a full index of the campaign's
    /// rows (a million entries for a million-row campaign where the partial index holds only
    /// the unfinished ones), or a partial index walked without a campaign (every unfinished
    /// row of every campaign).
    pub fn reads_whole_campaign(&self) -> bool {
        let seq = self.plan.iter().any(|l| l.contains("Seq Scan on sends"));
        let missing = self.indexes.iter().any(|i| {
            let scan = format!(" using {i} on sends");
            let scans: Vec<usize> = (0..self.plan.len())
                .filter(|&n| self.plan[n].contains(&scan))
                .collect();
            scans.is_empty() || scans.iter().any(|&n| !self.by_campaign(n))
        });
        seq || missing
    }

    /// Whether the index scan on line `n` has `campaign_id` in its index condition (the line
    /// after it, in `EXPLAIN`'s layout).
    fn by_campaign(&self, n: usize) -> bool {
        self.plan
            .get(n + 1)
            .is_some_and(|l| l.contains("Index Cond:") && l.contains("campaign_id"))
    }
}

/// The values bound into [`hot_statements`].
struct HotParams {
    campaign_id: i64,
    account_id: i64,
    now: i64,
    batch: i64,
    channel: &'static str,
    /// The cancelled campaigns, as the JSON array the sweep binds.
    campaigns: String,
}

/// The hot reads of a campaign's unfinished rows, each with the partial indexes meant to serve
/// it and its parameters.
fn hot_statements(p: &HotParams) -> [Statement<'_>; 5] {
    let [claim_candidates, next_visible, reconcilable, complete_if_done, sweep_cancelled] =
        super::ledger::bench_statements();
    let id = &p.campaign_id;
    [
        (
            "claim: candidates",
            claim_candidates,
            &["sends_claim"],
            vec![id, &p.account_id, &p.channel, &p.now, &p.batch],
        ),
        ("next visible", next_visible, &["sends_claim"], vec![id]),
        (
            "reconcilable",
            reconcilable,
            &["sends_doubt"],
            vec![id, &p.now, &p.batch],
        ),
        (
            "complete if done",
            complete_if_done,
            &["sends_claim", "sends_doubt"],
            vec![id, &p.now],
        ),
        (
            "sweep cancelled",
            sweep_cancelled,
            &["sends_claim"],
            vec![&p.now, &p.campaigns],
        ),
    ]
}

impl PgStore {
    /// Make the original design's table and build its list for `campaign_id` from the
    /// account's subscribers. Returns the rows queued.
    pub fn bench_original_setup(&self, campaign_id: i64, account_id: i64) -> Result<u64> {
        self.run(move |pool| async move {
            let c = pool.get().await.db()?;
            c.batch_execute("DROP TABLE IF EXISTS sendonce_bench_original")
                .await
                .db()?;
            c.batch_execute(ORIGINAL_TABLE).await.db()?;
            let n = c
                .execute(ORIGINAL_BUILD, &[&campaign_id, &account_id])
                .await
                .db()?;
            c.batch_execute("ANALYZE sendonce_bench_original")
                .await
                .db()?;
            Ok(n)
        })
    }

    /// Put every row of the original design's table back to `queued` (between runs).
    pub fn bench_original_requeue(&self) -> Result<()> {
        self.run(|pool| async move {
            let c = pool.get().await.db()?;
            c.batch_execute("UPDATE sendonce_bench_original SET status = 'queued'")
                .await
                .db()?;
            // VACUUM runs outside any transaction: a statement of its own.
            c.batch_execute("VACUUM ANALYZE sendonce_bench_original")
                .await
                .db()?;
            Ok(())
        })
    }

    /// One worker of the original design: claim `batch` rows with `FOR UPDATE SKIP LOCKED`,
    /// mark them sent, commit, (the call would go here: the bench's provider does nothing),
    /// until a claim finds nothing.
    pub fn bench_original_loop(&self, campaign_id: i64, batch: usize) -> Result<OriginalLoop> {
        let limit = batch as i64;
        self.run(move |pool| async move {
            let mut c = pool.get().await.db()?;
            let mut done = OriginalLoop::default();
            loop {
                let tx = c.transaction().await.db()?;
                let rows = tx
                    .query(ORIGINAL_CLAIM, &[&campaign_id, &limit])
                    .await
                    .db()?;
                let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
                if !ids.is_empty() {
                    tx.execute(ORIGINAL_MARK, &[&ids]).await.db()?;
                }
                tx.commit().await.db()?;
                done.commits += 1;
                if ids.is_empty() {
                    return Ok(done);
                }
                done.rows += ids.len() as u64;
            }
        })
    }

    /// Remove what the bench wrote: every table's rows (the database was empty when it began,
    /// [`crate::Bench::bench_database_is_empty`]) and the original design's table.
    pub fn bench_clean(&self) -> Result<()> {
        self.run(|pool| async move {
            let c = pool.get().await.db()?;
            c.batch_execute("DROP TABLE IF EXISTS sendonce_bench_original")
                .await
                .db()?;
            let tables: Vec<String> = c
                .query(
                    "SELECT quote_ident(tablename) FROM pg_tables
                      WHERE schemaname = current_schema()
                        AND tablename NOT IN ('sendonce_schema', 'installation', 'guard')",
                    &[],
                )
                .await
                .db()?
                .iter()
                .map(|r| r.get(0))
                .collect();
            if !tables.is_empty() {
                c.batch_execute(&format!("TRUNCATE {} CASCADE", tables.join(", ")))
                    .await
                    .db()?;
            }
            Ok(())
        })
    }

    /// The plans PostgreSQL picks for the send path's reads of one campaign that a partial
    /// index must serve (`EXPLAIN`, nothing run; `sends` analyzed first), with the campaign's
    /// real values bound. See [`PgPlan::reads_whole_campaign`].
    pub fn hot_read_plans(&self, campaign_id: i64) -> Result<Vec<PgPlan>> {
        self.run(move |pool| async move {
            let c = pool.get().await.db()?;
            // The statistics autovacuum would have by now, so the plans are the ones a
            // running server settles on.
            c.batch_execute("ANALYZE sends").await.db()?;
            let account_id: i64 = c
                .query_one(
                    "SELECT account_id FROM campaigns WHERE id = $1",
                    &[&campaign_id],
                )
                .await
                .db()?
                .get(0);
            let p = HotParams {
                campaign_id,
                account_id,
                now: sendonce_domain::clock::now_ms(),
                batch: 500,
                channel: "email",
                campaigns: format!("[{campaign_id}]"),
            };
            let mut out = Vec::new();
            for (name, sql, indexes, params) in hot_statements(&p) {
                let plan = c
                    .query(&format!("EXPLAIN {sql}"), &params)
                    .await
                    .db()?
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                out.push(PgPlan {
                    name,
                    plan,
                    indexes,
                });
            }
            Ok(out)
        })
    }

    /// The server's version (`SHOW server_version`).
    pub fn server_version(&self) -> Result<String> {
        self.run(|pool| async move {
            let c = pool.get().await.db()?;
            Ok(c.query_one("SHOW server_version", &[]).await.db()?.get(0))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::PgPlan;

    fn plan(indexes: &'static [&'static str], text: &str) -> PgPlan {
        PgPlan {
            name: "t",
            plan: text.lines().map(str::to_string).collect(),
            indexes,
        }
    }

    /// Plans PostgreSQL 15 printed for the sweep of cancelled campaigns: as a subquery it
    /// walked the claim index on `visible_at` alone; with the ids bound, by campaign.
    #[test]
    fn a_partial_index_walked_without_a_campaign_reads_the_whole_table() {
        let subquery = plan(
            &["sends_claim"],
            "Update on sends
  ->  Nested Loop
        Join Filter: (sends.campaign_id = campaigns.id)
        ->  Index Scan using sends_claim on sends
              Index Cond: (visible_at <= '1796411655528'::bigint)
        ->  Index Scan using campaigns_status on campaigns
              Index Cond: (status = 'cancelled'::text)",
        );
        assert!(subquery.reads_whole_campaign());
        let bound = plan(
            &["sends_claim"],
            "Update on sends
  ->  Index Scan using sends_claim on sends
        Index Cond: ((campaign_id = ANY ('{1}'::bigint[])) AND (visible_at <= 5))",
        );
        assert!(!bound.reads_whole_campaign());
        let seq = plan(
            &[],
            "  ->  Seq Scan on sends\n        Filter: (campaign_id = 1)",
        );
        assert!(seq.reads_whole_campaign());
        let unique = plan(
            &["sends_claim"],
            "  ->  Index Scan using sends_campaign_id_address_key on sends
        Index Cond: (campaign_id = 1)",
        );
        assert!(unique.reads_whole_campaign());
    }
}

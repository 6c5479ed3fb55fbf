//! What `sendonce bench --db postgres://…` reads of the PostgreSQL store's own statements: the
//! plans of the hot reads and the server's version. The original design's loop it runs beside
//! the pipeline is in `sendonce-bench` (`crates/bench/src/original.rs`).

use super::PgStore;
use crate::driver::OrDb as _;
use sendonce_domain::error::Result;

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
            "  ->  Index Scan using sends_campaign_address on sends
        Index Cond: (campaign_id = 1)",
        );
        assert!(unique.reads_whole_campaign());
    }
}

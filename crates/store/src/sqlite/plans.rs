//! What `sendonce bench` reads of a SQLite store's own statements: the query plans of the hot
//! queries, and a WAL checkpoint between its sections. The bench's own loops (the "limit") are
//! in `sendonce-bench` (`crates/bench/src/limit.rs`).

use super::SqliteStore;
use crate::driver::OrDb as _;
use sendonce_domain::error::Result;

/// A hot statement of the send path and SQLite's plan for it (`EXPLAIN QUERY PLAN`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct QueryPlan {
    pub name: &'static str,
    /// The plan's lines, each indented two spaces per level below the top.
    pub plan: Vec<String>,
}

impl QueryPlan {
    /// A line that reads a whole table (not an index range, not a rowid range, not a virtual
    /// table such as `json_each`, not the rows of a bounded subquery): on a ledger of millions
    /// of rows, a bug.
    pub fn full_scans(&self) -> Vec<&str> {
        // A subquery SQLite runs as a co-routine is read back as `SCAN <its alias>`: its rows,
        // not a table's.
        let coroutines: Vec<&str> = self
            .plan
            .iter()
            .filter_map(|l| l.trim().strip_prefix("CO-ROUTINE "))
            .collect();
        self.plan
            .iter()
            .map(|l| l.trim())
            .filter(|l| {
                l.starts_with("SCAN ")
                    && !l.contains("VIRTUAL TABLE")
                    && !l.starts_with("SCAN (subquery")
                    && !coroutines.iter().any(|c| l[5..] == **c)
            })
            .collect()
    }
}

impl SqliteStore {
    /// The plan of every statement of the send path (claim, dispatch, record, list building,
    /// completion, status), with every parameter bound to NULL.
    pub fn hot_query_plans(&self) -> Result<Vec<QueryPlan>> {
        self.read(|c| {
            let mut out = Vec::new();
            let all = super::ledger::hot_queries()
                .into_iter()
                .chain(super::webhooks::hot_queries());
            for (name, sql) in all {
                let mut st = c.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).db()?;
                for i in 1..=st.parameter_count() {
                    st.raw_bind_parameter(i, rusqlite::types::Null).db()?;
                }
                let mut rows = st.raw_query();
                let mut depth: Vec<(i64, usize)> = Vec::new(); // (node id, level)
                let mut plan = Vec::new();
                while let Some(r) = rows.next().db()? {
                    let (id, parent, detail): (i64, i64, String) =
                        (r.get(0).db()?, r.get(1).db()?, r.get(3).db()?);
                    let level = depth
                        .iter()
                        .find(|(n, _)| *n == parent)
                        .map_or(0, |(_, l)| l + 1);
                    depth.push((id, level));
                    plan.push(format!("{}{detail}", "  ".repeat(level)));
                }
                out.push(QueryPlan { name, plan });
            }
            Ok(out)
        })
    }

    /// `PRAGMA wal_checkpoint(TRUNCATE)`: copy the WAL into the database and empty it.
    pub fn checkpoint_truncate(&self) -> Result<()> {
        let c = self.conn()?;
        c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .db()?;
        Ok(())
    }
}

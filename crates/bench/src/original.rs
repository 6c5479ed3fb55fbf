//! The original design's at-most-once loop (`../shared/seeds/000_*`: claim with `FOR UPDATE
//! SKIP LOCKED`, mark sent before the call, commit) on a table of its own, so `sendonce bench
//! --db postgres://…` can run it beside the exactly-once pipeline on the same server in the
//! same run. Statements outside the product, run on the PostgreSQL store's pool
//! (`PgStore::run`), which nothing else outside the store calls.

use sendonce_domain::error::Result;
use sendonce_store::driver::OrDb as _;
use sendonce_store::postgres::PgStore;

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

/// Make the original design's table and build its list for `campaign_id` from the
/// account's subscribers. Returns the rows queued.
pub fn setup(db: &PgStore, campaign_id: i64, account_id: i64) -> Result<u64> {
    db.run(move |pool| async move {
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
pub fn requeue(db: &PgStore) -> Result<()> {
    db.run(|pool| async move {
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
pub fn run_loop(db: &PgStore, campaign_id: i64, batch: usize) -> Result<OriginalLoop> {
    let limit = batch as i64;
    db.run(move |pool| async move {
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
/// [`crate::seed::Bench::bench_database_is_empty`]) and the original design's table.
pub fn clean(db: &PgStore) -> Result<()> {
    db.run(|pool| async move {
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

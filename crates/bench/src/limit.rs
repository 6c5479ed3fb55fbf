//! The limit loop of `sendonce bench`: the bare two markers (a lease, a fenced confirmation)
//! on the real `sends` table and on a minimal row of its own, which measure what SQLite itself
//! can do on this machine. Statements outside the product, run through the SQLite store's raw
//! transaction (`SqliteStore::raw_write`), which nothing else calls.

use rusqlite::named_params;
use sendonce_domain::error::Result;
use sendonce_store::driver::OrDb as _;
use sendonce_store::sqlite::SqliteStore;

/// One bare claim of the limit loop: ids and fence tokens of the rows leased.
#[derive(Debug, Default)]
pub struct BareClaim {
    pub ids: Vec<i64>,
}

/// The limit loop's first marker: lease up to `batch` due rows in one statement (the same
/// partial-index range scan as the real claim, no suppression check, no doubt handling).
pub fn bare_claim(
    db: &SqliteStore,
    campaign_id: i64,
    batch: usize,
    token: i64,
    now: i64,
    lease_ms: i64,
) -> Result<BareClaim> {
    db.raw_write(|tx| {
        let mut st = tx
            .prepare_cached(
                "UPDATE sends SET status = 'leased', lease_token = :token, visible_at = :until,
                    attempts = attempts + 1, claimed_at = :now, updated_at = :now
             WHERE id IN (SELECT id FROM sends
                          WHERE campaign_id = :campaign AND status IN ('queued', 'leased')
                            AND visible_at <= :now
                          ORDER BY visible_at, id LIMIT :batch)
             RETURNING id, job_id, address, vars",
            )
            .db()?;
        let rows = st
            .query(named_params! {
                ":campaign": campaign_id,
                ":now": now,
                ":token": token,
                ":until": now + lease_ms,
                ":batch": batch as i64,
            })
            .db()?;
        // Read the columns a sender needs (job id, address, variables), as the real
        // claim does.
        leased_ids(rows, batch, 3)
    })
}

/// The limit loop's second marker: the fenced confirmation of every row, one commit.
/// Returns how many rows the fence let through.
pub fn bare_confirm(db: &SqliteStore, ids: &[i64], token: i64, now: i64) -> Result<u64> {
    db.raw_write(|tx| {
        let mut st = tx
            .prepare_cached(
                "UPDATE sends SET status = 'sent', provider_message_id = :provider_id,
                    sent_at = :now, updated_at = :now, lease_token = NULL,
                    doubt_since = NULL, last_error = NULL
             WHERE id = :id AND lease_token = :token AND status = 'leased'",
            )
            .db()?;
        confirm_each(&mut st, ids, token, now)
    })
}

/// The minimal-row arm's table: the two markers' columns and nothing else (9 columns, one
/// partial claim index, no unique keys, no payload, no counters), with `n` queued rows of
/// campaign 1. Made only in the bench's own scratch file.
pub fn minimal_seed(db: &SqliteStore, n: u64) -> Result<()> {
    db.raw_write(|tx| {
        tx.execute_batch(
            "CREATE TABLE bench_minimal (
                 id INTEGER PRIMARY KEY, campaign_id INTEGER NOT NULL,
                 status TEXT NOT NULL, visible_at INTEGER NOT NULL, lease_token INTEGER,
                 attempts INTEGER NOT NULL DEFAULT 0, provider_message_id TEXT,
                 updated_at INTEGER NOT NULL, sent_at INTEGER);
             CREATE INDEX bench_minimal_claim ON bench_minimal(campaign_id, visible_at, id)
                 WHERE status IN ('queued', 'leased');",
        )
        .db()?;
        tx.execute(
            "WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?1)
             INSERT INTO bench_minimal (id, campaign_id, status, visible_at, updated_at)
             SELECT i, 1, 'queued', 0, 0 FROM seq",
            [n as i64],
        )
        .db()?;
        Ok(())
    })
}

/// [`bare_claim`] on the minimal row.
pub fn minimal_claim(
    db: &SqliteStore,
    batch: usize,
    token: i64,
    now: i64,
    lease_ms: i64,
) -> Result<BareClaim> {
    db.raw_write(|tx| {
        let mut st = tx
            .prepare_cached(
                "UPDATE bench_minimal SET status = 'leased', lease_token = :token,
                    visible_at = :until, attempts = attempts + 1, updated_at = :now
             WHERE id IN (SELECT id FROM bench_minimal
                          WHERE campaign_id = 1 AND status IN ('queued', 'leased')
                            AND visible_at <= :now
                          ORDER BY visible_at, id LIMIT :batch)
             RETURNING id",
            )
            .db()?;
        let rows = st
            .query(named_params! {
                ":now": now,
                ":token": token,
                ":until": now + lease_ms,
                ":batch": batch as i64,
            })
            .db()?;
        leased_ids(rows, batch, 0)
    })
}

/// [`bare_confirm`] on the minimal row.
pub fn minimal_confirm(db: &SqliteStore, ids: &[i64], token: i64, now: i64) -> Result<u64> {
    db.raw_write(|tx| {
        let mut st = tx
            .prepare_cached(
                "UPDATE bench_minimal SET status = 'sent', provider_message_id = :provider_id,
                    sent_at = :now, updated_at = :now, lease_token = NULL
             WHERE id = :id AND lease_token = :token AND status = 'leased'",
            )
            .db()?;
        confirm_each(&mut st, ids, token, now)
    })
}

/// The ids a limit loop's claim returned (its first column), reading the `payload` text
/// columns after it as a sender would.
fn leased_ids(mut rows: rusqlite::Rows<'_>, batch: usize, payload: usize) -> Result<BareClaim> {
    let mut out = BareClaim {
        ids: Vec::with_capacity(batch),
    };
    while let Some(r) = rows.next().db()? {
        out.ids.push(r.get(0).db()?);
        for i in 1..=payload {
            let _: String = r.get(i).db()?;
        }
    }
    Ok(out)
}

/// Run a limit loop's fenced confirmation `st` for every row of a claim, with a provider
/// message id the size of the null provider's; how many rows the fence let through.
fn confirm_each(
    st: &mut rusqlite::CachedStatement<'_>,
    ids: &[i64],
    token: i64,
    now: i64,
) -> Result<u64> {
    let mut n = 0;
    for &id in ids {
        let pid = format!("null-{id:036}");
        n += st
            .execute(named_params! {
                ":id": id,
                ":token": token,
                ":provider_id": pid,
                ":now": now,
            })
            .db()? as u64;
    }
    Ok(n)
}

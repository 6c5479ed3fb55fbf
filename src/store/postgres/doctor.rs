//! `sendonce doctor`'s reads of a PostgreSQL database: opened read-only (nothing migrated, a
//! schema older or newer than this binary's is the `open` finding), then each question asked on
//! its own so one failing query does not hide the others' answers. Nothing is written. What is
//! about files (integrity and foreign-key pragmas, modes, WAL, disk) does not apply here.

use super::{PgStore, SCHEMA_VERSION};
use crate::store::doctor::{InspectOptions, Inspection, Part, PerCampaign, Stuck};
use crate::store::{Admin, OpenOptions};

const NOT_APPLICABLE: &str = "not applicable on PostgreSQL";

fn per_campaign(rows: Vec<tokio_postgres::Row>) -> Vec<PerCampaign> {
    rows.iter()
        .map(|r| PerCampaign {
            campaign_id: r.get(0),
            rows: r.get::<_, i64>(1).max(0) as u64,
        })
        .collect()
}

/// One question on its own: its answer, or the error's words.
fn ask<T: Send + 'static, F, Fut>(store: &PgStore, f: F) -> Part<T>
where
    F: FnOnce(deadpool_postgres::Pool) -> Fut,
    Fut: std::future::Future<Output = crate::error::Result<T>> + Send + 'static,
{
    store.run(f).map_err(|e| e.message)
}

const SKIPPED: &str = "not read: the database did not open";

fn skipped<T>() -> Part<T> {
    Err(SKIPPED.to_string())
}

/// The inspection of a database that did not open (yet): every question unanswered.
fn unopened() -> Inspection {
    Inspection {
        opened: Ok(()),
        snapshot: false,
        application_id: Err(NOT_APPLICABLE.into()),
        schema_version: skipped(),
        check: skipped(),
        foreign_keys: Err(NOT_APPLICABLE.into()),
        expired_leases: skipped(),
        in_doubt: skipped(),
        stuck: skipped(),
        guard: None,
        server: Some(skipped()),
        ledger: Some(skipped()),
        addresses: None,
    }
}

/// Everything `doctor` asks of the database at `url`.
pub fn inspect(url: &str, opts: &InspectOptions) -> Inspection {
    let mut out = unopened();
    let ro = OpenOptions {
        read_only: true,
        pool_size: 1,
        ..Default::default()
    };
    let store = match PgStore::open(url, &ro) {
        Ok(s) => s,
        Err(e) => {
            out.opened = Err(e.message);
            return out;
        }
    };
    out.server = Some(ask(&store, |pool| async move {
        let c = pool.get().await?;
        Ok(c.query_one("SHOW server_version", &[]).await?.get(0))
    }));
    out.schema_version = ask(&store, |pool| async move {
        let c = pool.get().await?;
        let v: i32 = c
            .query_one("SELECT coalesce(max(version), 0) FROM sendonce_schema", &[])
            .await?
            .get(0);
        Ok(i64::from(v))
    });
    out.check = store.quick_check(opts.full).map_err(|e| e.message);
    out.expired_leases = expired_leases(&store, opts.now);
    out.in_doubt = in_doubt(&store);
    out.stuck = stuck(&store, opts.now.saturating_add(opts.far_ms));
    out.ledger = Some(ledger_states(&store));
    out.addresses = Some(addresses(&store));
    if out.schema_version == Ok(i64::from(SCHEMA_VERSION)) {
        out.guard = Some(store.guard_state().map_err(|e| e.message));
    }
    out
}

/// Leased rows whose lease expired before `now`, per campaign.
fn expired_leases(store: &PgStore, now: i64) -> Part<Vec<PerCampaign>> {
    ask(store, move |pool| async move {
        let c = pool.get().await?;
        let rows = c
            .query(
                "SELECT campaign_id, count(*) FROM sends
                 WHERE status = 'leased' AND visible_at < $1
                 GROUP BY campaign_id ORDER BY campaign_id",
                &[&now],
            )
            .await?;
        Ok(per_campaign(rows))
    })
}

/// Rows in doubt, per campaign.
fn in_doubt(store: &PgStore) -> Part<Vec<PerCampaign>> {
    ask(store, |pool| async move {
        let c = pool.get().await?;
        let rows = c
            .query(
                "SELECT campaign_id, count(*) FROM sends WHERE status = 'in_doubt'
                 GROUP BY campaign_id ORDER BY campaign_id",
                &[],
            )
            .await?;
        Ok(per_campaign(rows))
    })
}

/// Sending campaigns with nothing due before `far`: no row left to send on a complete list, or
/// the next one not visible until after `far`.
fn stuck(store: &PgStore, far: i64) -> Part<Vec<Stuck>> {
    ask(store, move |pool| async move {
        let c = pool.get().await?;
        let rows = c
            .query(
                "SELECT c.id, c.list_complete,
                        (SELECT count(*) FROM sends s
                          WHERE s.campaign_id = c.id AND s.status IN ('queued', 'leased')),
                        (SELECT min(visible_at) FROM sends s
                          WHERE s.campaign_id = c.id AND s.status IN ('queued', 'leased')),
                        (SELECT count(*) FROM sends s
                          WHERE s.campaign_id = c.id AND s.status = 'in_doubt')
                 FROM campaigns c WHERE c.status = 'sending' ORDER BY c.id",
                &[],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| Stuck {
                campaign_id: r.get(0),
                list_complete: r.get(1),
                due_rows: r.get::<_, i64>(2).max(0) as u64,
                next_visible_at: r.get(3),
                in_doubt: r.get::<_, i64>(4).max(0) as u64,
            })
            .filter(|s| match s.next_visible_at {
                None => s.list_complete,
                Some(t) => t > far,
            })
            .collect())
    })
}

/// `address_collisions` per kind (the step runs inside its migration: never pending here).
fn addresses(store: &PgStore) -> Part<Vec<(String, u64)>> {
    ask(store, |pool| async move {
        let c = pool.get().await?;
        let rows = c
            .query(
                "SELECT kind, count(*) FROM address_collisions GROUP BY kind
                 ORDER BY kind COLLATE \"C\"",
                &[],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1).max(0) as u64))
            .collect())
    })
}

/// Every send state with its number of rows.
fn ledger_states(store: &PgStore) -> Part<Vec<(String, u64)>> {
    ask(store, |pool| async move {
        let c = pool.get().await?;
        let rows = c
            .query(
                "SELECT status, count(*) FROM sends GROUP BY status ORDER BY status COLLATE \"C\"",
                &[],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1).max(0) as u64))
            .collect())
    })
}

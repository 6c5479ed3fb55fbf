//! What `sendonce doctor` reads from a database, backend-neutral: each part read on its own, so a
//! damaged file still answers what it can, and an error is a finding, never a crash.

use super::sql::{args, Tx};
use super::{GuardState, Target};
use sendonce_domain::error::Result;

/// One part of an inspection: what was read, or why it could not be (the backend's words).
pub type Part<T> = std::result::Result<T, String>;

/// A count per campaign.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PerCampaign {
    pub campaign_id: i64,
    pub rows: u64,
}

/// A campaign in `sending` that no row will move on soon.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Stuck {
    pub campaign_id: i64,
    /// Rows queued or leased (0: nothing left to claim).
    pub due_rows: u64,
    /// Rows in doubt (they keep the campaign in `sending` until resolved).
    pub in_doubt: u64,
    /// When the earliest queued or leased row becomes visible (None: none is left).
    pub next_visible_at: Option<i64>,
    pub list_complete: bool,
    /// It has a send window or SMS quiet hours (its rows may wait for them, up to
    /// `domain::window::HORIZON_MS`).
    pub windowed: bool,
}

/// What the database says about itself, read without writing anything.
#[derive(Debug, Clone)]
pub struct Inspection {
    /// Whether the file opened read-only and reads as a sendonce database; when not, why (and
    /// nothing below was read).
    pub opened: Part<()>,
    /// Opened as an immutable snapshot (a read-only file in a directory we cannot write).
    pub snapshot: bool,
    pub application_id: Part<i64>,
    pub schema_version: Part<i64>,
    /// `quick_check` (or `integrity_check`): the problems found, empty when sound.
    pub check: Part<Vec<String>>,
    /// `foreign_key_check`: one line per violation (at most [`MAX_LINES`]), and their count.
    pub foreign_keys: Part<(Vec<String>, u64)>,
    /// Rows still `leased` whose lease expired before `now`, per campaign.
    pub expired_leases: Part<Vec<PerCampaign>>,
    /// Rows `in_doubt`, per campaign.
    pub in_doubt: Part<Vec<PerCampaign>>,
    /// Campaigns in `sending` with nothing due before `now + far`.
    pub stuck: Part<Vec<Stuck>>,
    /// The clone guard, when the schema has it (None: older schema).
    pub guard: Option<Part<GuardState>>,
    /// The database server's version (PostgreSQL; None for a SQLite file).
    pub server: Option<Part<String>>,
    /// Ledger rows per send status, in byte order of the status (PostgreSQL; None for a
    /// SQLite file, whose count would scan the whole table).
    pub ledger: Option<Part<Vec<(String, u64)>>>,
    /// Rows of `address_collisions` per kind, in byte order, and `pending` when the address
    /// step of the upgrade has not run yet (None: a schema from before that step).
    pub addresses: Option<Part<Vec<(String, u64)>>>,
    /// Webhook endpoints the circuit breaker turned off: (id, account id) (None: a schema from
    /// before events out).
    pub broken_endpoints: Option<Part<Vec<(i64, i64)>>>,
}

/// Lines of a check's output kept in an inspection.
pub const MAX_LINES: usize = 20;

/// What to read and against which clock.
#[derive(Debug, Clone, Copy)]
pub struct InspectOptions {
    /// `integrity_check` instead of `quick_check`.
    pub full: bool,
    /// Now, in Unix milliseconds.
    pub now: i64,
    /// A campaign whose next row is due later than `now + far` counts as stuck.
    pub far_ms: i64,
}

/// What `doctor` has not read (yet): the database did not open.
pub(crate) fn skipped<T>() -> Part<T> {
    Err("not read: the database did not open".to_string())
}

/// The ledger's questions, asked the same way of both backends, each on its own so one that
/// fails does not hide the others' answers.
pub(crate) fn ask_ledger(tx: &mut dyn Tx, out: &mut Inspection, opts: &InspectOptions) {
    let per_campaign = |tx: &mut dyn Tx, sql: &str, now: Option<i64>| {
        let a = now.map_or_else(Vec::new, |now| args![now].to_vec());
        tx.query(sql, &a, |r| {
            Ok(PerCampaign {
                campaign_id: r.get(0)?,
                rows: r.get::<i64>(1)?.max(0) as u64,
            })
        })
        .map_err(|e| e.message)
    };
    out.expired_leases = per_campaign(
        tx,
        "SELECT campaign_id, count(*) FROM sends
         WHERE status = 'leased' AND visible_at < ?1 GROUP BY campaign_id ORDER BY campaign_id",
        Some(opts.now),
    );
    out.in_doubt = per_campaign(
        tx,
        "SELECT campaign_id, count(*) FROM sends
         WHERE status = 'in_doubt' GROUP BY campaign_id ORDER BY campaign_id",
        None,
    );
    out.stuck = stuck(tx, opts.now.saturating_add(opts.far_ms)).map_err(|e| e.message);
}

/// Sending campaigns with nothing due before `far`: no row left to send on a complete list, or
/// the next one not visible until after `far`. A stream is idle between messages by design.
fn stuck(tx: &mut dyn Tx, far: i64) -> Result<Vec<Stuck>> {
    let sql = format!(
        "SELECT c.id, c.list_complete,
                (SELECT count(*) FROM sends s
                  WHERE s.campaign_id = c.id AND s.status IN ('queued', 'leased')),
                (SELECT min(visible_at) FROM sends s
                  WHERE s.campaign_id = c.id AND s.status IN ('queued', 'leased')),
                (SELECT count(*) FROM sends s
                  WHERE s.campaign_id = c.id AND s.status = 'in_doubt'),
                {}
         FROM campaigns c WHERE c.status = 'sending' AND c.stream = FALSE ORDER BY c.id",
        crate::ledger::WINDOWED
    );
    let all = tx.query(&sql, &[], |r| {
        Ok(Stuck {
            campaign_id: r.get(0)?,
            list_complete: r.get(1)?,
            due_rows: r.get::<i64>(2)?.max(0) as u64,
            next_visible_at: r.get(3)?,
            in_doubt: r.get::<i64>(4)?.max(0) as u64,
            windowed: r.get(5)?,
        })
    })?;
    // A row held for its send window is due when the window opens, up to the horizon away.
    let limit = |s: &Stuck| match s.windowed {
        true => far.saturating_add(sendonce_domain::window::HORIZON_MS),
        false => far,
    };
    Ok(all
        .into_iter()
        .filter(|s| s.next_visible_at.map_or(s.list_complete, |t| t > limit(s)))
        .collect())
}

/// Rows per value of `column` of `table`, in byte order of the value (`address_collisions`
/// per kind, `sends` per status).
pub(crate) fn counts_by(tx: &mut dyn Tx, table: &str, column: &str) -> Part<Vec<(String, u64)>> {
    let sql = format!(
        "SELECT {column}, count(*) FROM {table} GROUP BY {column} ORDER BY {column}{}",
        tx.dialect().byte_order
    );
    tx.query(&sql, &[], |r| {
        Ok((r.get(0)?, r.get::<i64>(1)?.max(0) as u64))
    })
    .map_err(|e| e.message)
}

/// Webhook endpoints in `broken` (the circuit breaker's), in id order.
pub(crate) fn broken_endpoints(tx: &mut dyn Tx) -> Part<Vec<(i64, i64)>> {
    tx.query(
        "SELECT id, account_id FROM hook_endpoints WHERE status = 'broken' ORDER BY id",
        &[],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .map_err(|e| e.message)
}

/// Inspect the store at `target` (a SQLite file or a postgres:// URL) without writing to it.
/// An `Err` only for a target that is not a backend at all; every problem with the database
/// itself is inside the [`Inspection`].
pub fn inspect(target: &Target, opts: &InspectOptions) -> Result<Inspection> {
    Ok(match target {
        Target::Postgres(url) => super::postgres::doctor::inspect_database(url, opts),
        Target::File(path) => super::sqlite::inspect_file(path, opts),
    })
}

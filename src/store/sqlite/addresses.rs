//! The data step of migration 0017 on SQLite: the rows stored before one address had one form
//! are normalised (`store::normalise` decides), collisions and refused addresses are written to
//! `address_collisions`, and the `pending_steps` row goes, all in one `BEGIN IMMEDIATE`
//! transaction. Run by every writable `store::open`; a no-op (one read) once done.

use super::SqliteStore;
use crate::error::Result;
use crate::store::normalise::{
    self, Collision, QueuedSend, SubscriberChange, SubscriberKey, SuppressionChange, SuppressionKey,
};
use rusqlite::{params, OptionalExtension, Transaction};

/// The `pending_steps` row of this step.
const STEP: &str = "addresses_0017";

impl SqliteStore {
    /// Run the address step of schema 0017 if it is still pending. Returns how many report
    /// rows it wrote (None when there was nothing to do).
    pub fn finish_address_step(&self) -> Result<Option<usize>> {
        if !self.read(pending)? {
            return Ok(None);
        }
        let now = crate::domain::clock::now_ms();
        self.write(|tx| {
            // Another process may have run it while this one waited for the lock.
            if !pending(tx)? {
                return Ok(None);
            }
            let subscribers = read_subscribers(tx)?;
            let suppressions = read_suppressions(tx)?;
            let plan = normalise::plan(&subscribers, &suppressions);
            apply_subscribers(tx, &plan.subscribers, now)?;
            apply_suppressions(tx, &plan.suppressions)?;
            add_opt_outs(tx, &plan.opt_outs)?;
            let mut report = plan.report;
            report.extend(normalise_sends(tx, now)?);
            write_report(tx, &report, now)?;
            tx.execute("DELETE FROM pending_steps WHERE name = ?1", [STEP])?;
            if !report.is_empty() {
                tracing::warn!(
                    rows = report.len(),
                    "addresses normalised (schema 0017): collisions or refused addresses are in \
                     the table address_collisions (`sendonce doctor` counts them)"
                );
            }
            Ok(Some(report.len()))
        })
    }
}

fn pending(c: &rusqlite::Connection) -> Result<bool> {
    let has_table = c
        .query_row(
            "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'pending_steps'",
            [],
            |_| Ok(()),
        )
        .optional()?
        .is_some();
    if !has_table {
        return Ok(false);
    }
    Ok(c.query_row(
        "SELECT EXISTS (SELECT 1 FROM pending_steps WHERE name = ?1)",
        [STEP],
        |r| r.get(0),
    )?)
}

fn read_subscribers(tx: &Transaction<'_>) -> Result<Vec<SubscriberKey>> {
    let mut st = tx.prepare(
        "SELECT id, account_id, email_norm, phone, status, removed_at IS NOT NULL
         FROM subscribers ORDER BY id",
    )?;
    let rows = st
        .query_map([], |r| {
            Ok(SubscriberKey {
                id: r.get(0)?,
                account_id: r.get(1)?,
                email_norm: r.get(2)?,
                phone: r.get(3)?,
                status: r.get(4)?,
                removed: r.get(5)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

fn read_suppressions(tx: &Transaction<'_>) -> Result<Vec<SuppressionKey>> {
    let mut st = tx.prepare(
        "SELECT account_id, channel, address, reason, source, created_at FROM suppressions
         ORDER BY account_id, channel, address",
    )?;
    let rows = st
        .query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, i64>(5)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    rows.into_iter()
        .map(
            |(account_id, channel, address, reason, source, created_at)| {
                Ok(SuppressionKey {
                    account_id,
                    channel: channel.parse()?,
                    address,
                    reason,
                    source,
                    created_at,
                })
            },
        )
        .collect()
}

/// Retirements first (their memberships merged into the kept row, an `unsubscribed` one
/// winning), then the kept rows' new forms and statuses.
fn apply_subscribers(tx: &Transaction<'_>, changes: &[SubscriberChange], now: i64) -> Result<()> {
    for change in changes {
        if let SubscriberChange::Retire { id, into } = change {
            tx.execute(
                "UPDATE subscribers SET removed_at = coalesce(removed_at, ?2) WHERE id = ?1",
                params![id, now],
            )?;
            tx.execute(
                "INSERT INTO list_members (list_id, subscriber_id, status, created_at, updated_at)
                 SELECT list_id, ?2, status, created_at, ?3 FROM list_members
                 WHERE subscriber_id = ?1
                 ON CONFLICT (list_id, subscriber_id) DO UPDATE
                 SET status = 'unsubscribed', updated_at = excluded.updated_at
                 WHERE excluded.status = 'unsubscribed'",
                params![id, into, now],
            )?;
            tx.execute("DELETE FROM list_members WHERE subscriber_id = ?1", [id])?;
        }
    }
    for change in changes {
        if let SubscriberChange::Set {
            id,
            email_norm,
            phone,
            status,
        } = change
        {
            tx.execute(
                "UPDATE subscribers SET email_norm = ?2, phone = ?3, status = ?4 WHERE id = ?1",
                params![id, email_norm, phone, status],
            )?;
        }
    }
    Ok(())
}

fn apply_suppressions(tx: &Transaction<'_>, changes: &[SuppressionChange]) -> Result<()> {
    for c in changes {
        let k = &c.kept;
        for old in &c.old {
            tx.execute(
                "DELETE FROM suppressions WHERE account_id = ?1 AND channel = ?2 AND address = ?3",
                params![k.account_id, k.channel.as_str(), old],
            )?;
        }
        tx.execute(
            "INSERT INTO suppressions (account_id, channel, address, reason, source, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                k.account_id,
                k.channel.as_str(),
                k.address,
                k.reason,
                k.source,
                k.created_at
            ],
        )?;
    }
    Ok(())
}

fn add_opt_outs(tx: &Transaction<'_>, opt_outs: &[SuppressionKey]) -> Result<()> {
    for k in opt_outs {
        tx.execute(
            "INSERT INTO suppressions (account_id, channel, address, reason, source, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
            params![
                k.account_id,
                k.channel.as_str(),
                k.address,
                k.reason,
                k.source,
                k.created_at
            ],
        )?;
    }
    Ok(())
}

/// Queued sends: (id, account, campaign, address, channel), in id order.
type Queued = (i64, i64, i64, String, String);

fn queued_sends(tx: &Transaction<'_>) -> Result<Vec<Queued>> {
    let mut st = tx.prepare(
        "SELECT s.id, s.account_id, s.campaign_id, s.address, c.channel
         FROM sends s JOIN campaigns c ON c.id = s.campaign_id
         WHERE s.status = 'queued' ORDER BY s.id",
    )?;
    let rows = st
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?
        .collect::<rusqlite::Result<Vec<Queued>>>()?;
    Ok(rows)
}

/// Queued sends take the normal form of their address; one whose campaign already has a send
/// to that form is cancelled (the person gets the other one).
fn normalise_sends(tx: &Transaction<'_>, now: i64) -> Result<Vec<Collision>> {
    let mut report = Vec::new();
    for (id, account_id, campaign_id, address, channel) in queued_sends(tx)? {
        let send = QueuedSend {
            id,
            account_id,
            campaign_id,
            channel: channel.parse()?,
        };
        match normalise::normal(send.channel, &address) {
            Err(why) => report.push(send.refused(&address, &why)),
            Ok(n) if n == address => {}
            Ok(n) => report.extend(move_send(tx, &send, &n, now)?),
        }
    }
    Ok(report)
}

/// Give `send` the address `normal`, or cancel it when another send of its campaign has it.
fn move_send(
    tx: &Transaction<'_>,
    send: &QueuedSend,
    normal: &str,
    now: i64,
) -> Result<Option<Collision>> {
    let other: Option<i64> = tx
        .query_row(
            "SELECT id FROM sends WHERE campaign_id = ?1 AND address = ?2",
            params![send.campaign_id, normal],
            |r| r.get(0),
        )
        .optional()?;
    let Some(other) = other else {
        tx.execute(
            "UPDATE sends SET address = ?2, updated_at = ?3 WHERE id = ?1",
            params![send.id, normal, now],
        )?;
        return Ok(None);
    };
    tx.execute(
        "UPDATE sends SET status = 'cancelled', updated_at = ?2,
         last_error = 'cancelled when addresses were normalised: send ' || ?3 || ' of this campaign has the same address'
         WHERE id = ?1",
        params![send.id, now, other],
    )?;
    Ok(Some(send.cancelled(normal, other)))
}

fn write_report(tx: &Transaction<'_>, report: &[Collision], now: i64) -> Result<()> {
    let mut st = tx.prepare(
        "INSERT INTO address_collisions
         (account_id, channel, kind, address, kept_id, dropped_id, detail, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?;
    for c in report {
        st.execute(params![
            c.account_id,
            c.channel.as_str(),
            c.kind,
            c.address,
            c.kept_id,
            c.dropped_id,
            c.detail,
            now
        ])?;
    }
    Ok(())
}

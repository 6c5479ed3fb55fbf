//! The data step of the address migrations (SQLite's 0017, PostgreSQL's 0004), written once
//! over the seam: the rows stored before one address had one form are read, `store::normalise`
//! plans, and the plan, the queued sends' new forms and the report (`address_collisions`) are
//! written inside the caller's transaction (SQLite's `BEGIN IMMEDIATE` in
//! `SqliteStore::finish_address_step`, PostgreSQL's migration transaction in
//! `postgres/migrate.rs`).

use crate::normalise::{
    self, Collision, QueuedSend, SubscriberChange, SubscriberKey, SuppressionChange, SuppressionKey,
};
use crate::sql::{args, Tx};
use sendonce_domain::error::Result;

/// Run the step in `tx`; `schema` names the migration for the log (`0017`, `0004`). Returns
/// how many report rows it wrote.
pub(crate) fn normalise_addresses(tx: &mut dyn Tx, schema: &str) -> Result<usize> {
    let now = sendonce_domain::clock::now_ms();
    let subscribers = subscriber_keys(tx)?;
    let suppressions = suppression_keys(tx)?;
    let plan = normalise::plan(&subscribers, &suppressions);
    change_subscribers(tx, &plan.subscribers, now)?;
    change_suppressions(tx, &plan.suppressions)?;
    for k in &plan.opt_outs {
        insert_suppression(tx, k, " ON CONFLICT DO NOTHING")?;
    }
    let mut report = plan.report;
    report.extend(normalise_queued(tx, now)?);
    report_collisions(tx, &report, now)?;
    if !report.is_empty() {
        tracing::warn!(
            rows = report.len(),
            "addresses normalised (schema {schema}): collisions or refused addresses are in the \
             table address_collisions (`sendonce doctor` counts them)"
        );
    }
    Ok(report.len())
}

fn subscriber_keys(tx: &mut dyn Tx) -> Result<Vec<SubscriberKey>> {
    tx.query(
        "SELECT id, account_id, email_norm, phone, status, removed_at IS NOT NULL
         FROM subscribers ORDER BY id",
        &[],
        |r| {
            Ok(SubscriberKey {
                id: r.get(0)?,
                account_id: r.get(1)?,
                email_norm: r.get(2)?,
                phone: r.get(3)?,
                status: r.get(4)?,
                removed: r.get(5)?,
            })
        },
    )
}

/// The suppressions in (account, channel, address) order, addresses compared byte by byte.
fn suppression_keys(tx: &mut dyn Tx) -> Result<Vec<SuppressionKey>> {
    let sql = format!(
        "SELECT account_id, channel, address, reason, source, created_at FROM suppressions
         ORDER BY account_id, channel, address{}",
        tx.dialect().byte_order
    );
    tx.query(&sql, &[], |r| {
        Ok(SuppressionKey {
            account_id: r.get(0)?,
            channel: r.get::<String>(1)?.parse()?,
            address: r.get(2)?,
            reason: r.get(3)?,
            source: r.get(4)?,
            created_at: r.get(5)?,
        })
    })
}

/// Retirements first (their memberships merged into the kept row, an `unsubscribed` one
/// winning), then the kept rows' new forms and statuses.
fn change_subscribers(tx: &mut dyn Tx, changes: &[SubscriberChange], now: i64) -> Result<()> {
    for change in changes {
        if let SubscriberChange::Retire { id, into } = *change {
            tx.exec(
                "UPDATE subscribers SET removed_at = coalesce(removed_at, ?2) WHERE id = ?1",
                &args![id, now],
            )?;
            tx.exec(
                "INSERT INTO list_members (list_id, subscriber_id, status, created_at, updated_at)
                 SELECT list_id, ?2, status, created_at, ?3 FROM list_members
                 WHERE subscriber_id = ?1
                 ON CONFLICT (list_id, subscriber_id) DO UPDATE
                 SET status = 'unsubscribed', updated_at = excluded.updated_at
                 WHERE excluded.status = 'unsubscribed'",
                &args![id, into, now],
            )?;
            tx.exec(
                "DELETE FROM list_members WHERE subscriber_id = ?1",
                &args![id],
            )?;
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
            tx.exec(
                "UPDATE subscribers SET email_norm = ?2, phone = ?3, status = ?4 WHERE id = ?1",
                &args![*id, email_norm, phone, status],
            )?;
        }
    }
    Ok(())
}

/// Each group of suppressions becomes its one kept row.
fn change_suppressions(tx: &mut dyn Tx, changes: &[SuppressionChange]) -> Result<()> {
    for c in changes {
        let k = &c.kept;
        for old in &c.old {
            tx.exec(
                "DELETE FROM suppressions WHERE account_id = ?1 AND channel = ?2 AND address = ?3",
                &args![k.account_id, k.channel, old],
            )?;
        }
        insert_suppression(tx, k, "")?;
    }
    Ok(())
}

/// Insert the suppression `k`, the statement ending with `tail`.
fn insert_suppression(tx: &mut dyn Tx, k: &SuppressionKey, tail: &str) -> Result<()> {
    let sql = format!(
        "INSERT INTO suppressions (account_id, channel, address, reason, source, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6){tail}"
    );
    tx.exec(
        &sql,
        &args![
            k.account_id,
            k.channel,
            &k.address,
            &k.reason,
            &k.source,
            k.created_at
        ],
    )?;
    Ok(())
}

/// Queued sends take the normal form of their address; one whose campaign already has a send
/// to that form is cancelled (the person gets the other one).
fn normalise_queued(tx: &mut dyn Tx, now: i64) -> Result<Vec<Collision>> {
    let queued = tx.query(
        "SELECT s.id, s.account_id, s.campaign_id, s.address, c.channel
         FROM sends s JOIN campaigns c ON c.id = s.campaign_id
         WHERE s.status = 'queued' ORDER BY s.id",
        &[],
        |r| {
            let send = QueuedSend {
                id: r.get(0)?,
                account_id: r.get(1)?,
                campaign_id: r.get(2)?,
                channel: r.get::<String>(4)?.parse()?,
            };
            Ok((send, r.get::<String>(3)?))
        },
    )?;
    let mut report = Vec::new();
    for (send, address) in queued {
        match normalise::normal(send.channel, &address) {
            Err(why) => report.push(send.refused(&address, &why)),
            Ok(n) if n == address => {}
            Ok(n) => report.extend(readdress(tx, &send, &n, now)?),
        }
    }
    Ok(report)
}

/// Give `send` the address `normal`, or cancel it when another send of its campaign has it.
fn readdress(
    tx: &mut dyn Tx,
    send: &QueuedSend,
    normal: &str,
    now: i64,
) -> Result<Option<Collision>> {
    let other: Option<i64> = tx.scalar_opt(
        "SELECT id FROM sends WHERE campaign_id = ?1 AND address = ?2",
        &args![send.campaign_id, normal],
    )?;
    let Some(other) = other else {
        tx.exec(
            "UPDATE sends SET address = ?2, updated_at = ?3 WHERE id = ?1",
            &args![send.id, normal, now],
        )?;
        return Ok(None);
    };
    tx.exec(
        "UPDATE sends SET status = 'cancelled', updated_at = ?2,
         last_error = 'cancelled when addresses were normalised: send ' || CAST(?3 AS BIGINT)
         || ' of this campaign has the same address'
         WHERE id = ?1",
        &args![send.id, now, other],
    )?;
    Ok(Some(send.cancelled(normal, other)))
}

fn report_collisions(tx: &mut dyn Tx, report: &[Collision], now: i64) -> Result<()> {
    for c in report {
        tx.exec(
            "INSERT INTO address_collisions
             (account_id, channel, kind, address, kept_id, dropped_id, detail, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            &args![
                c.account_id,
                c.channel,
                c.kind,
                &c.address,
                c.kept_id,
                c.dropped_id,
                &c.detail,
                now
            ],
        )?;
    }
    Ok(())
}

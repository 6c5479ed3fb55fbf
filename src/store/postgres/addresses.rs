//! The data step of migration 0004 on PostgreSQL, the twin of SQLite's 0017 step
//! (`sqlite/addresses.rs`): rows normalised as `store::normalise` decides, collisions and
//! refused addresses written to `address_collisions`, inside the migration's transaction.

use crate::error::Result;
use crate::store::normalise::{
    self, Collision, QueuedSend, SubscriberChange, SubscriberKey, SuppressionChange, SuppressionKey,
};
use tokio_postgres::Transaction;

/// The version of `schema/postgres/` that brings this step.
pub(super) const VERSION: i32 = 4;

/// Run the step; returns how many report rows it wrote.
pub(super) async fn run(tx: &Transaction<'_>) -> Result<usize> {
    let now = crate::domain::clock::now_ms();
    let subscribers = read_subscribers(tx).await?;
    let suppressions = read_suppressions(tx).await?;
    let plan = normalise::plan(&subscribers, &suppressions);
    apply_subscribers(tx, &plan.subscribers, now).await?;
    apply_suppressions(tx, &plan.suppressions).await?;
    add_opt_outs(tx, &plan.opt_outs).await?;
    let mut report = plan.report;
    report.extend(normalise_sends(tx, now).await?);
    write_report(tx, &report, now).await?;
    if !report.is_empty() {
        tracing::warn!(
            rows = report.len(),
            "addresses normalised (schema 0004): collisions or refused addresses are in the \
             table address_collisions (`sendonce doctor` counts them)"
        );
    }
    Ok(report.len())
}

async fn read_subscribers(tx: &Transaction<'_>) -> Result<Vec<SubscriberKey>> {
    let rows = tx
        .query(
            "SELECT id, account_id, email_norm, phone, status, removed_at IS NOT NULL
             FROM subscribers ORDER BY id",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| SubscriberKey {
            id: r.get(0),
            account_id: r.get(1),
            email_norm: r.get(2),
            phone: r.get(3),
            status: r.get(4),
            removed: r.get(5),
        })
        .collect())
}

async fn read_suppressions(tx: &Transaction<'_>) -> Result<Vec<SuppressionKey>> {
    let rows = tx
        .query(
            "SELECT account_id, channel, address, reason, source, created_at FROM suppressions
             ORDER BY account_id, channel, address COLLATE \"C\"",
            &[],
        )
        .await?;
    rows.iter()
        .map(|r| {
            Ok(SuppressionKey {
                account_id: r.get(0),
                channel: r.get::<_, String>(1).parse()?,
                address: r.get(2),
                reason: r.get(3),
                source: r.get(4),
                created_at: r.get(5),
            })
        })
        .collect()
}

/// As on SQLite: retirements (memberships merged, `unsubscribed` winning) before the kept
/// rows' new forms.
async fn apply_subscribers(
    tx: &Transaction<'_>,
    changes: &[SubscriberChange],
    now: i64,
) -> Result<()> {
    for change in changes {
        if let SubscriberChange::Retire { id, into } = change {
            tx.execute(
                "UPDATE subscribers SET removed_at = coalesce(removed_at, $2) WHERE id = $1",
                &[id, &now],
            )
            .await?;
            tx.execute(
                "INSERT INTO list_members (list_id, subscriber_id, status, created_at, updated_at)
                 SELECT list_id, $2, status, created_at, $3 FROM list_members
                 WHERE subscriber_id = $1
                 ON CONFLICT (list_id, subscriber_id) DO UPDATE
                 SET status = 'unsubscribed', updated_at = excluded.updated_at
                 WHERE excluded.status = 'unsubscribed'",
                &[id, into, &now],
            )
            .await?;
            tx.execute("DELETE FROM list_members WHERE subscriber_id = $1", &[id])
                .await?;
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
                "UPDATE subscribers SET email_norm = $2, phone = $3, status = $4 WHERE id = $1",
                &[id, email_norm, phone, status],
            )
            .await?;
        }
    }
    Ok(())
}

async fn apply_suppressions(tx: &Transaction<'_>, changes: &[SuppressionChange]) -> Result<()> {
    for c in changes {
        let k = &c.kept;
        let channel = k.channel.as_str();
        tx.execute(
            "DELETE FROM suppressions WHERE account_id = $1 AND channel = $2
             AND address = ANY($3)",
            &[&k.account_id, &channel, &c.old],
        )
        .await?;
        tx.execute(
            "INSERT INTO suppressions (account_id, channel, address, reason, source, created_at)
             VALUES ($1, $2, $3, $4, $5, $6)",
            &[
                &k.account_id,
                &channel,
                &k.address,
                &k.reason,
                &k.source,
                &k.created_at,
            ],
        )
        .await?;
    }
    Ok(())
}

async fn add_opt_outs(tx: &Transaction<'_>, opt_outs: &[SuppressionKey]) -> Result<()> {
    for k in opt_outs {
        tx.execute(
            "INSERT INTO suppressions (account_id, channel, address, reason, source, created_at)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
            &[
                &k.account_id,
                &k.channel.as_str(),
                &k.address,
                &k.reason,
                &k.source,
                &k.created_at,
            ],
        )
        .await?;
    }
    Ok(())
}

/// The queued sends with their address as stored, in id order.
async fn queued_sends(tx: &Transaction<'_>) -> Result<Vec<(QueuedSend, String)>> {
    let rows = tx
        .query(
            "SELECT s.id, s.account_id, s.campaign_id, s.address, c.channel
             FROM sends s JOIN campaigns c ON c.id = s.campaign_id
             WHERE s.status = 'queued' ORDER BY s.id",
            &[],
        )
        .await?;
    rows.iter()
        .map(|r| {
            let send = QueuedSend {
                id: r.get(0),
                account_id: r.get(1),
                campaign_id: r.get(2),
                channel: r.get::<_, String>(4).parse()?,
            };
            Ok((send, r.get(3)))
        })
        .collect()
}

/// Queued sends take the normal form of their address; one whose campaign already has a send
/// to that form is cancelled (the person gets the other one).
async fn normalise_sends(tx: &Transaction<'_>, now: i64) -> Result<Vec<Collision>> {
    let mut report = Vec::new();
    for (send, address) in queued_sends(tx).await? {
        match normalise::normal(send.channel, &address) {
            Err(why) => report.push(send.refused(&address, &why)),
            Ok(n) if n == address => {}
            Ok(n) => report.extend(move_send(tx, &send, &n, now).await?),
        }
    }
    Ok(report)
}

/// Give `send` the address `normal`, or cancel it when another send of its campaign has it.
async fn move_send(
    tx: &Transaction<'_>,
    send: &QueuedSend,
    normal: &str,
    now: i64,
) -> Result<Option<Collision>> {
    let other = tx
        .query_opt(
            "SELECT id FROM sends WHERE campaign_id = $1 AND address = $2",
            &[&send.campaign_id, &normal],
        )
        .await?
        .map(|o| o.get::<_, i64>(0));
    let Some(other) = other else {
        tx.execute(
            "UPDATE sends SET address = $2, updated_at = $3 WHERE id = $1",
            &[&send.id, &normal, &now],
        )
        .await?;
        return Ok(None);
    };
    tx.execute(
        "UPDATE sends SET status = 'cancelled', updated_at = $2,
         last_error = 'cancelled when addresses were normalised: send ' || $3::BIGINT
         || ' of this campaign has the same address'
         WHERE id = $1",
        &[&send.id, &now, &other],
    )
    .await?;
    Ok(Some(send.cancelled(normal, other)))
}

async fn write_report(tx: &Transaction<'_>, report: &[Collision], now: i64) -> Result<()> {
    for c in report {
        tx.execute(
            "INSERT INTO address_collisions
             (account_id, channel, kind, address, kept_id, dropped_id, detail, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                &c.account_id,
                &c.channel.as_str(),
                &c.kind,
                &c.address,
                &c.kept_id,
                &c.dropped_id,
                &c.detail,
                &now,
            ],
        )
        .await?;
    }
    Ok(())
}

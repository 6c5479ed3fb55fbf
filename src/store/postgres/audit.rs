//! `Audit` on PostgreSQL: the crash-suite checker's snapshot (its three reads in one
//! REPEATABLE READ, READ ONLY transaction: one consistent view, as SQLite's BEGIN gives) and
//! the ledger invariants, the same checks as `sqlite/audit.rs`.

use super::PgStore;
use crate::domain::address::Channel;
use crate::error::{Error, Result};
use crate::store::{Admin, Audit, AuditRow, AuditSnapshot, Campaigns};
use std::collections::HashMap;

impl Audit for PgStore {
    fn audit_snapshot(&self, campaign_id: i64) -> Result<AuditSnapshot> {
        let c = self.campaign(campaign_id)?;
        let (account, channel) = (c.account_id, c.channel);
        let campaign_status = c.status.to_string();
        self.run(move |pool| async move {
            let mut cl = pool.get().await?;
            let tx = cl
                .build_transaction()
                .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()
                .await?;
            let addr = match channel {
                Channel::Sms => "phone",
                Channel::Email => "email_norm",
            };
            let eligible = tx
                .query(
                    &format!(
                        "SELECT DISTINCT {addr} FROM subscribers
                         WHERE account_id = $1 AND status = 'confirmed' AND {addr} IS NOT NULL"
                    ),
                    &[&account],
                )
                .await?
                .iter()
                .map(|r| r.get(0))
                .collect();
            let mut rows = HashMap::new();
            for r in tx
                .query(
                    "SELECT job_id, address, status, attempts, claimed_at FROM sends
                     WHERE campaign_id = $1 AND account_id = $2",
                    &[&campaign_id, &account],
                )
                .await?
            {
                let status: String = r.get(2);
                let status = crate::domain::model::SendStatus::parse(&status)
                    .ok_or_else(|| Error::damaged(format!("send status {status:?}")))?;
                let row = AuditRow {
                    job_id: r.get(0),
                    address: r.get(1),
                    status: status.to_string(),
                    attempts: r.get(3),
                    claimed_at: r.get(4),
                };
                rows.insert(row.job_id.clone(), row);
            }
            let suppressed_at = tx
                .query(
                    "SELECT address, created_at FROM suppressions
                     WHERE account_id = $1 AND channel = $2",
                    &[&account, &channel.as_str()],
                )
                .await?
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect();
            tx.commit().await?;
            Ok(AuditSnapshot {
                campaign_id,
                account_id: account,
                campaign_status,
                eligible,
                rows,
                suppressed_at,
            })
        })
    }

    /// Ledger invariants; each violation is described in one line. Empty means all hold.
    fn invariant_violations(&self, campaign_id: i64) -> Result<Vec<String>> {
        const CHECKS: &[(&str, &str)] = &[
            (
                "leased rows without a fence token",
                "SELECT count(*) FROM sends WHERE campaign_id = $1 AND status = 'leased' AND lease_token IS NULL",
            ),
            (
                "sent rows without sent_at",
                "SELECT count(*) FROM sends WHERE campaign_id = $1 AND status = 'sent' AND sent_at IS NULL",
            ),
            (
                "in-doubt rows without doubt_since",
                "SELECT count(*) FROM sends WHERE campaign_id = $1 AND status = 'in_doubt' AND doubt_since IS NULL",
            ),
            (
                "rows sharing one address",
                "SELECT count(*) FROM (SELECT address FROM sends WHERE campaign_id = $1
                                       GROUP BY address HAVING count(*) > 1) AS shared",
            ),
            (
                "open rows in a finished campaign",
                "SELECT count(*) FROM sends s JOIN campaigns c ON c.id = s.campaign_id
                 WHERE s.campaign_id = $1 AND c.status = 'sent'
                   AND s.status IN ('queued', 'leased', 'in_doubt')",
            ),
            (
                "rows of another account",
                "SELECT count(*) FROM sends s JOIN campaigns c ON c.id = s.campaign_id
                 WHERE s.campaign_id = $1 AND s.account_id <> c.account_id",
            ),
            (
                "rows whose subscriber belongs to another account",
                "SELECT count(*) FROM sends s JOIN subscribers u ON u.id = s.subscriber_id
                 WHERE s.campaign_id = $1 AND s.account_id <> u.account_id",
            ),
        ];
        let mut out = Vec::new();
        let integrity = self.integrity_check()?;
        if integrity != "ok" {
            out.push(format!("integrity_check: {integrity}"));
        }
        let found = self.run(move |pool| async move {
            let c = pool.get().await?;
            let mut found = Vec::new();
            for (what, sql) in CHECKS {
                let n: i64 = c
                    .query_one(*sql, &[&campaign_id])
                    .await
                    .map_err(|e| Error::db(format!("{what}: {}", Error::from(e))))?
                    .get(0);
                if n > 0 {
                    found.push(format!("{what}: {n}"));
                }
            }
            Ok(found)
        })?;
        out.extend(found);
        Ok(out)
    }
}

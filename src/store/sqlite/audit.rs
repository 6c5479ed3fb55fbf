//! Read-only queries for the crash-suite checker (`sendonce check`): a snapshot of what the
//! ledger says, and the ledger invariants that must hold after every restart.

use super::codec;
use super::SqliteStore;
use crate::domain::address::Channel;
use crate::domain::model::SendStatus;
use crate::error::{Error, Result};
use crate::store::{Admin, Audit, AuditRow, AuditSnapshot, Campaigns};
use rusqlite::params;
use std::collections::HashMap;

impl Audit for SqliteStore {
    fn audit_snapshot(&self, campaign_id: i64) -> Result<AuditSnapshot> {
        let c = self.campaign(campaign_id)?;
        self.read(|conn| {
            conn.execute_batch("BEGIN")?; // one consistent snapshot for all three reads
            let run = || -> Result<AuditSnapshot> {
                let addr = match c.channel {
                    Channel::Sms => "phone",
                    Channel::Email => "email_norm",
                };
                let mut st = conn.prepare(&format!(
                    "SELECT DISTINCT {addr} FROM subscribers
                     WHERE account_id = ?1 AND status = 'confirmed' AND {addr} IS NOT NULL"
                ))?;
                let eligible = st
                    .query_map([c.account_id], |r| r.get(0))?
                    .collect::<rusqlite::Result<Vec<String>>>()?;
                let mut st = conn.prepare(
                    "SELECT job_id, address, status, attempts, claimed_at FROM sends
                     WHERE campaign_id = ?1 AND account_id = ?2",
                )?;
                let rows = st
                    .query_map(params![campaign_id, c.account_id], |r| {
                        Ok(AuditRow {
                            job_id: r.get(0)?,
                            address: r.get(1)?,
                            status: codec::get::<SendStatus>(r, 2, "sends")?.to_string(),
                            attempts: r.get(3)?,
                            claimed_at: r.get(4)?,
                        })
                    })?
                    .map(|r| r.map(|row| (row.job_id.clone(), row)))
                    .collect::<rusqlite::Result<HashMap<_, _>>>()?;
                let mut st = conn.prepare(
                    "SELECT address, created_at FROM suppressions WHERE account_id = ?1 AND channel = ?2",
                )?;
                let suppressed_at = st
                    .query_map(params![c.account_id, c.channel], |r| {
                        Ok((r.get(0)?, r.get(1)?))
                    })?
                    .collect::<rusqlite::Result<HashMap<String, i64>>>()?;
                Ok(AuditSnapshot {
                    campaign_id,
                    account_id: c.account_id,
                    campaign_status: c.status.to_string(),
                    eligible,
                    rows,
                    suppressed_at,
                })
            };
            let out = run();
            conn.execute_batch("COMMIT")?;
            out
        })
    }

    /// Ledger invariants; each violation is described in one line. Empty means all hold.
    fn invariant_violations(&self, campaign_id: i64) -> Result<Vec<String>> {
        let checks: &[(&str, &str)] = &[
            (
                "leased rows without a fence token",
                "SELECT count(*) FROM sends WHERE campaign_id = ?1 AND status = 'leased' AND lease_token IS NULL",
            ),
            (
                "sent rows without sent_at",
                "SELECT count(*) FROM sends WHERE campaign_id = ?1 AND status = 'sent' AND sent_at IS NULL",
            ),
            (
                "in-doubt rows without doubt_since",
                "SELECT count(*) FROM sends WHERE campaign_id = ?1 AND status = 'in_doubt' AND doubt_since IS NULL",
            ),
            (
                "rows sharing one address",
                "SELECT count(*) FROM (SELECT address FROM sends WHERE campaign_id = ?1
                                       GROUP BY address HAVING count(*) > 1)",
            ),
            (
                "open rows in a finished campaign",
                "SELECT count(*) FROM sends s JOIN campaigns c ON c.id = s.campaign_id
                 WHERE s.campaign_id = ?1 AND c.status = 'sent'
                   AND s.status IN ('queued', 'leased', 'in_doubt')",
            ),
            (
                "rows of another account",
                "SELECT count(*) FROM sends s JOIN campaigns c ON c.id = s.campaign_id
                 WHERE s.campaign_id = ?1 AND s.account_id <> c.account_id",
            ),
            (
                "rows whose subscriber belongs to another account",
                "SELECT count(*) FROM sends s JOIN subscribers u ON u.id = s.subscriber_id
                 WHERE s.campaign_id = ?1 AND s.account_id <> u.account_id",
            ),
        ];
        let mut out = Vec::new();
        let integrity = self.integrity_check()?;
        if integrity != "ok" {
            out.push(format!("integrity_check: {integrity}"));
        }
        self.read(|conn| {
            for (what, sql) in checks {
                let n: i64 = conn
                    .query_row(sql, [campaign_id], |r| r.get(0))
                    .map_err(|e| Error::db(format!("{what}: {e}")))?;
                if n > 0 {
                    out.push(format!("{what}: {n}"));
                }
            }
            Ok(())
        })?;
        Ok(out)
    }
}

//! What the crash-suite checker reads (`Audit`): a snapshot of the ledger and the ledger
//! invariants that must hold after every restart. Written once for both stores over
//! `sql::Tx`; the snapshot's reads share one transaction (`Dialect::begin_snapshot`).

use crate::segment;
use crate::shared::get_at;
use crate::sql::{args, Db, Tx};
use crate::{Admin, Campaign, Campaigns};
use sendonce_domain::address::Channel;
use sendonce_domain::error::{Error, Result};
use sendonce_domain::model::SendStatus;
use sendonce_domain::segment::Filter;
use std::collections::HashMap;

/// One ledger row as the checker sees it.
#[derive(Debug, Clone)]
pub struct AuditRow {
    pub job_id: String,
    pub address: String,
    pub status: String,
    pub attempts: i64,
    pub claimed_at: Option<i64>,
}

/// Everything the checker compares against the provider's log, for one campaign.
#[derive(Debug, Clone)]
pub struct AuditSnapshot {
    pub campaign_id: i64,
    pub account_id: i64,
    pub campaign_status: String,
    /// Distinct normalised addresses of the campaign's audience for its channel: the confirmed
    /// subscribers its lists hold as subscribed (the account's, when it targets no list) that
    /// pass its filter.
    pub eligible: Vec<String>,
    /// Ledger rows by job id.
    pub rows: HashMap<String, AuditRow>,
    /// Suppressed address -> when the suppression was written (inside its transaction).
    pub suppressed_at: HashMap<String, i64>,
}

/// Read-only queries for `sendonce check`.
pub trait Audit: Send + Sync {
    fn audit_snapshot(&self, campaign_id: i64) -> Result<AuditSnapshot>;
    /// Every row of every account's transactional stream (the API's messages), by job id.
    fn stream_rows(&self) -> Result<HashMap<String, AuditRow>>;
    /// Every broken ledger invariant of a campaign, described (empty when sound).
    fn invariant_violations(&self, campaign_id: i64) -> Result<Vec<String>>;
}

/// The ledger invariants: what each broken one is called, and the count of rows that break it.
const CHECKS: &[(&str, &str)] = &[
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
                               GROUP BY address HAVING count(*) > 1) AS shared",
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

/// The snapshot's three reads (inside one transaction: one consistent view).
fn snapshot(tx: &mut dyn Tx, c: &Campaign) -> Result<AuditSnapshot> {
    let addr = match c.channel {
        Channel::Sms => "phone",
        Channel::Email => "email_norm",
    };
    // The campaign's audience as list building picks it: its lists' subscribed members (every
    // confirmed subscriber of the account when it targets none), through its filter.
    let filter = c
        .filter
        .as_deref()
        .map(|f| Filter::parse_stored(f, c.id))
        .transpose()?;
    let compiled = filter
        .as_ref()
        .map(|f| segment::compile(tx.dialect(), Some(f), 3));
    let sql = format!(
        "SELECT DISTINCT s.{addr} FROM subscribers s
         WHERE s.account_id = ?1 AND s.status = 'confirmed' AND s.{addr} IS NOT NULL
           AND (NOT EXISTS (SELECT 1 FROM campaign_lists cl WHERE cl.campaign_id = ?2)
                OR s.id IN (SELECT m.subscriber_id FROM campaign_lists cl
                            JOIN list_members m ON m.list_id = cl.list_id
                            WHERE cl.campaign_id = ?2 AND m.status = 'subscribed')) {}",
        compiled
            .as_ref()
            .map_or(String::new(), |f| format!("AND {}", f.sql))
    );
    let fixed = args![c.account_id, c.id];
    let all = compiled.as_ref().map_or(fixed.to_vec(), |f| f.with(&fixed));
    let eligible: Vec<String> = tx.query(&sql, &all, |r| r.get(0))?;
    let rows = audit_rows(
        tx,
        "WHERE campaign_id = ?1 AND account_id = ?2",
        &args![c.id, c.account_id],
    )?;
    let mut suppressed_at = HashMap::new();
    tx.each(
        "SELECT address, created_at FROM suppressions WHERE account_id = ?1 AND channel = ?2",
        &args![c.account_id, c.channel],
        &mut |r| {
            suppressed_at.insert(r.get(0)?, r.get(1)?);
            Ok(())
        },
    )?;
    Ok(AuditSnapshot {
        campaign_id: c.id,
        account_id: c.account_id,
        campaign_status: c.status.to_string(),
        eligible,
        rows,
        suppressed_at,
    })
}

/// The rows `filter` picks, by job id.
fn audit_rows(
    tx: &mut dyn Tx,
    filter: &str,
    args: &[crate::sql::Arg<'_>],
) -> Result<HashMap<String, AuditRow>> {
    let mut rows = HashMap::new();
    tx.each(
        &format!("SELECT job_id, address, status, attempts, claimed_at FROM sends {filter}"),
        args,
        &mut |r| {
            let row = AuditRow {
                job_id: r.get(0)?,
                address: r.get(1)?,
                status: get_at::<SendStatus>(r, 2, "sends.status")?.to_string(),
                attempts: r.get(3)?,
                claimed_at: r.get(4)?,
            };
            rows.insert(row.job_id.clone(), row);
            Ok(())
        },
    )?;
    Ok(rows)
}

impl<S: Db + Admin + Campaigns> Audit for S {
    fn stream_rows(&self) -> Result<HashMap<String, AuditRow>> {
        self.read(|tx| {
            audit_rows(
                tx,
                "WHERE campaign_id IN (SELECT id FROM campaigns WHERE stream = TRUE)",
                &[],
            )
        })
    }

    fn audit_snapshot(&self, campaign_id: i64) -> Result<AuditSnapshot> {
        let c = self.campaign(campaign_id)?;
        self.read(|tx| {
            tx.exec(tx.dialect().begin_snapshot, &[])?;
            let out = snapshot(tx, &c);
            tx.exec("COMMIT", &[])?;
            out
        })
    }

    /// Ledger invariants; each violation is described in one line. Empty means all hold.
    fn invariant_violations(&self, campaign_id: i64) -> Result<Vec<String>> {
        let mut out = Vec::new();
        let integrity = self.integrity_check()?;
        if integrity != "ok" {
            out.push(format!("integrity_check: {integrity}"));
        }
        self.read(|tx| {
            for (what, sql) in CHECKS {
                let n: i64 = tx
                    .scalar(sql, &args![campaign_id])
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

//! The crash-suite checker: compares a provider's delivery log with the ledger and counts lost,
//! duplicated, unexpected and after-opt-out messages (`sendonce check`).

use crate::provider::deliverylog::DeliveryLine;
use sendonce_domain::error::Result;
use sendonce_store::{Audit, AuditRow, AuditSnapshot, Store};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

/// The verdict for a set of campaigns. Pass means lost = duplicated = unexpected =
/// sent_after_optout = ledger_mismatch = 0 and no invariant violation.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Report {
    /// Distinct addresses that should hear from each campaign (confirmed subscribers).
    pub eligible: u64,
    /// Requests the provider logged (replays included).
    pub attempted: u64,
    /// Distinct job ids the provider accepted at least once.
    pub delivered: u64,
    /// Eligible, never delivered, and neither suppressed, failed nor parked in doubt.
    pub lost: u64,
    /// Job ids with more than one request (retries with the same key included).
    pub duplicated_before_dedup: u64,
    /// Job ids the provider delivered more than once (after its own key dedup).
    pub duplicated: u64,
    /// Deliveries for a job id neither in the campaigns nor in a stream, or to an address not
    /// the row's.
    pub unexpected: u64,
    /// Job ids of the transactional streams (API messages) the provider accepted: checked for
    /// duplicates and for a ledger that disagrees, whatever campaigns were asked for.
    pub messages: u64,
    /// Delivered although the opt-out committed before that row's claim.
    pub sent_after_optout: u64,
    /// Delivered, but the ledger says it never was (queued, suppressed, cancelled, failed).
    pub ledger_mismatch: u64,
    /// Ledger rows in doubt now.
    pub in_doubt: u64,
    /// Of those, the ones the provider did deliver (the doubt was warranted either way).
    pub in_doubt_delivered: u64,
    /// Rows sent after more than one provider call.
    pub recovered: u64,
    pub suppressed: u64,
    pub failed: u64,
    /// Ledger invariants that do not hold (integrity_check included).
    pub invariant_violations: Vec<String>,
    /// Up to 20 examples of each problem, for debugging.
    pub examples: Vec<String>,
    pub pass: bool,
}

impl Report {
    pub fn table(&self) -> String {
        let rows: [(&str, String); 16] = [
            ("eligible", self.eligible.to_string()),
            ("attempted", self.attempted.to_string()),
            ("delivered", self.delivered.to_string()),
            ("lost", self.lost.to_string()),
            (
                "duplicated (before dedup)",
                self.duplicated_before_dedup.to_string(),
            ),
            ("duplicated", self.duplicated.to_string()),
            ("unexpected", self.unexpected.to_string()),
            ("messages", self.messages.to_string()),
            ("sent_after_optout", self.sent_after_optout.to_string()),
            ("ledger_mismatch", self.ledger_mismatch.to_string()),
            ("in_doubt", self.in_doubt.to_string()),
            ("in_doubt (delivered)", self.in_doubt_delivered.to_string()),
            ("recovered", self.recovered.to_string()),
            ("suppressed", self.suppressed.to_string()),
            ("failed", self.failed.to_string()),
            (
                "invariants",
                if self.invariant_violations.is_empty() {
                    "ok".into()
                } else {
                    self.invariant_violations.join("; ")
                },
            ),
        ];
        let mut t = String::new();
        for (k, v) in rows {
            t.push_str(&format!("{k:<26} {v}\n"));
        }
        t.push_str(&format!(
            "{:<26} {}",
            "verdict",
            if self.pass { "PASS" } else { "FAIL" }
        ));
        for e in &self.examples {
            t.push_str(&format!("\n  {e}"));
        }
        t
    }
}

/// Requests and deliveries (replays not counted) per job id in the delivery log.
type PerJob<'a> = HashMap<&'a str, (u64, u64)>;

impl Report {
    /// Keep `s` as an example of a problem (the first 20).
    fn example(&mut self, s: String) {
        if self.examples.len() < 20 {
            self.examples.push(s);
        }
    }
}

/// Check campaigns against the provider's delivery logs (outbox or fake-provider JSONL files).
pub fn check_logs(store: &Store, campaigns: &[i64], logs: &[PathBuf]) -> Result<Report> {
    let mut lines = Vec::new();
    for l in logs {
        lines.extend(crate::provider::deliverylog::read_lines(l)?);
    }
    check(store, campaigns, &lines)
}

/// Check campaigns against the provider's delivery log lines.
pub fn check(store: &dyn Audit, campaigns: &[i64], lines: &[DeliveryLine]) -> Result<Report> {
    let mut r = Report::default();
    let mut snaps = Vec::new();
    for &c in campaigns {
        snaps.push(store.audit_snapshot(c)?);
        for v in store.invariant_violations(c)? {
            r.invariant_violations.push(format!("campaign {c}: {v}"));
        }
    }
    // A stream named with --campaign is checked once, as a campaign.
    let mut streams = store.stream_rows()?;
    streams.retain(|job, _| !snaps.iter().any(|s| s.rows.contains_key(job)));
    let per_job = read_log(&mut r, &snaps, &streams, lines);
    for s in &snaps {
        check_campaign(&mut r, s, &per_job);
    }
    check_messages(&mut r, &streams, &per_job);
    r.pass = r.lost == 0
        && r.duplicated == 0
        && r.unexpected == 0
        && r.sent_after_optout == 0
        && r.ledger_mismatch == 0
        && r.invariant_violations.is_empty();
    Ok(r)
}

/// Count the log's requests and deliveries per job, and the deliveries no campaign row owns
/// (or owns for another address).
fn read_log<'a>(
    r: &mut Report,
    snaps: &[AuditSnapshot],
    streams: &HashMap<String, AuditRow>,
    lines: &'a [DeliveryLine],
) -> PerJob<'a> {
    let mut per_job: PerJob<'a> = HashMap::new();
    r.attempted = lines.len() as u64;
    for l in lines {
        let e = per_job.entry(l.job_id.as_str()).or_default();
        e.0 += 1;
        if !l.replay {
            e.1 += 1;
        }
        let owner = snaps
            .iter()
            .find_map(|s| s.rows.get(&l.job_id))
            .or_else(|| streams.get(&l.job_id));
        match owner {
            None => {
                r.unexpected += 1;
                r.example(format!("unexpected job {} to {}", l.job_id, l.to));
            }
            Some(row) if row.address != l.to.to_lowercase() => {
                r.unexpected += 1;
                r.example(format!(
                    "job {} delivered to {} instead of {}",
                    l.job_id, l.to, row.address
                ));
            }
            Some(_) => {}
        }
    }
    per_job
}

/// One campaign: every eligible address against the log, then the rows of addresses no longer
/// eligible (still deliveries to check).
fn check_campaign(r: &mut Report, s: &AuditSnapshot, per_job: &PerJob<'_>) {
    let by_address: HashMap<&str, &AuditRow> = s
        .rows
        .values()
        .map(|row| (row.address.as_str(), row))
        .collect();
    r.eligible += s.eligible.len() as u64;
    let mut seen = HashSet::new();
    for addr in &s.eligible {
        seen.insert(addr.as_str());
        check_address(r, s, addr, by_address.get(addr.as_str()).copied(), per_job);
    }
    for row in s.rows.values() {
        if !seen.contains(row.address.as_str()) {
            if let Some(&(_, d)) = per_job.get(row.job_id.as_str()) {
                if d > 1 {
                    r.duplicated += 1;
                }
            }
        }
    }
}

/// The streams' messages the log holds: each delivered at most once, and never while the ledger
/// says it was not (a message has no audience to be lost from: the stream crash suite counts
/// every accepted key itself).
fn check_messages(r: &mut Report, streams: &HashMap<String, AuditRow>, per_job: &PerJob<'_>) {
    for row in streams.values() {
        let Some(&(_, delivered)) = per_job.get(row.job_id.as_str()) else {
            continue;
        };
        if delivered > 0 {
            r.messages += 1;
        }
        if delivered > 1 {
            r.duplicated += 1;
            r.example(format!(
                "message {} delivered {delivered} times",
                row.job_id
            ));
        }
        if delivered > 0 && matches!(row.status.as_str(), "suppressed" | "cancelled" | "failed") {
            r.ledger_mismatch += 1;
            r.example(format!(
                "message {} delivered but the ledger says {}",
                row.job_id, row.status
            ));
        }
    }
}

/// One eligible address: delivered how often, and does the ledger agree.
fn check_address(
    r: &mut Report,
    s: &AuditSnapshot,
    addr: &str,
    row: Option<&AuditRow>,
    per_job: &PerJob<'_>,
) {
    let (requests, delivered) = row
        .and_then(|row| per_job.get(row.job_id.as_str()).copied())
        .unwrap_or((0, 0));
    if delivered > 0 {
        r.delivered += 1;
    }
    if requests > 1 {
        r.duplicated_before_dedup += 1;
    }
    if delivered > 1 {
        r.duplicated += 1;
        r.example(format!("{addr} delivered {delivered} times"));
    }
    let status = row.map(|row| row.status.as_str()).unwrap_or("absent");
    match status {
        "in_doubt" => {
            r.in_doubt += 1;
            if delivered > 0 {
                r.in_doubt_delivered += 1;
            }
        }
        "suppressed" => r.suppressed += 1,
        "failed" => r.failed += 1,
        "sent" if row.is_some_and(|row| row.attempts > 1) => r.recovered += 1,
        _ => {}
    }
    if delivered == 0 {
        let excused = matches!(status, "in_doubt" | "suppressed" | "failed")
            || (status == "absent" && s.suppressed_at.contains_key(addr));
        if !excused {
            r.lost += 1;
            r.example(format!("{addr} never delivered (ledger: {status})"));
        }
        return;
    }
    if matches!(
        status,
        "queued" | "suppressed" | "cancelled" | "failed" | "absent"
    ) {
        r.ledger_mismatch += 1;
        r.example(format!("{addr} delivered but the ledger says {status}"));
    }
    if let (Some(row), Some(&opt_out)) = (row, s.suppressed_at.get(addr)) {
        if row.claimed_at.is_some_and(|claimed| opt_out < claimed) {
            r.sent_after_optout += 1;
            r.example(format!("{addr} delivered after its opt-out"));
        }
    }
}

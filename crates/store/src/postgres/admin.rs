//! `Admin` on PostgreSQL. The SQLite-only parts and what they are here:
//! - `journal_mode`: `wal` with the server's `synchronous_commit` (PostgreSQL always logs
//!   ahead); `wal_bytes`: 0 (the server's WAL is the server's to bound, not ours).
//! - `integrity_check` / `quick_check`: no `PRAGMA integrity_check` here; the equivalent is the
//!   schema version, the installation and guard rows, and the ledger invariants the claim relies
//!   on (checked by query), `ok` / empty when sound.
//! - The clone guard: a server database is not a file that can be copied beside a live one,
//!   so there is no owner place and no watermark file: `guard_state` reports the claim
//!   generation with `enforced: false`, `claim_ownership` records nothing, `adopt` and
//!   `backup_to` refuse with an error that names PostgreSQL's own tools.

use super::{migrate::SCHEMA_VERSION, PgStore};
use crate::sql::Db;
use crate::{Admin, GuardState, Place, Watermark};
use sendonce_domain::error::{Error, Result};
use std::path::Path;

impl PgStore {
    /// The problems the consistency check finds (empty: sound). Without `full`, only what
    /// an index answers (a worker runs it before every start; the row scans of a
    /// million-row ledger are for `doctor --full` and `integrity_check`).
    fn problems(&self, full: bool) -> Result<Vec<String>> {
        const ONE: [(&str, &str); 2] = [
            (
                "SELECT count(*) FROM installation WHERE singleton = 1",
                "the installation row is missing",
            ),
            (
                "SELECT count(*) FROM guard WHERE singleton = 1",
                "the guard row is missing",
            ),
        ];
        // The first two scan every row; the last is answered by the `sends_doubt` index.
        const NONE: [(&str, &str); 3] = [
            (
                "SELECT count(*) FROM sends WHERE status = 'sent' AND sent_at IS NULL",
                "rows sent without a sent_at",
            ),
            (
                "SELECT count(*) FROM sends s JOIN campaigns c ON c.id = s.campaign_id
                 WHERE s.account_id <> c.account_id",
                "rows whose account is not their campaign's",
            ),
            (
                "SELECT count(*) FROM sends WHERE status = 'in_doubt' AND doubt_since IS NULL",
                "rows in doubt without doubt_since",
            ),
        ];
        self.read(|tx| {
            let mut found = Vec::new();
            let version: i64 =
                tx.scalar("SELECT coalesce(max(version), 0) FROM sendonce_schema", &[])?;
            if version != i64::from(SCHEMA_VERSION) {
                found.push(format!(
                    "schema version {version}, this sendonce expects {SCHEMA_VERSION}"
                ));
            }
            for (sql, problem) in ONE {
                if tx.scalar::<i64>(sql, &[])? != 1 {
                    found.push(problem.to_string());
                }
            }
            for (sql, problem) in &NONE[if full { 0 } else { 2 }..] {
                let n: i64 = tx.scalar(sql, &[])?;
                if n != 0 {
                    found.push(format!("{n} {problem}"));
                }
            }
            Ok(found)
        })
    }
}

impl Admin for PgStore {
    fn path(&self) -> &Path {
        self.shown()
    }

    fn integrity_check(&self) -> Result<String> {
        let found = self.problems(true)?;
        Ok(match found.is_empty() {
            true => "ok".to_string(),
            false => found.join("; "),
        })
    }

    fn journal_mode(&self) -> Result<String> {
        let sync: String =
            self.read(|tx| tx.scalar("SELECT current_setting('synchronous_commit')", &[]))?;
        Ok(format!("wal (PostgreSQL, synchronous_commit={sync})"))
    }

    /// A transaction id can be assigned (it cannot on a read-only standby or a read-only
    /// session), then an empty commit.
    fn check_writable(&self) -> Result<()> {
        if self.read_only {
            return Err(Error::invalid(format!(
                "{} was opened read-only",
                self.shown().display()
            )));
        }
        self.write(|tx| tx.exec("SELECT pg_current_xact_id()", &[]).map(|_| ()))
    }

    fn guard_state(&self) -> Result<GuardState> {
        let here = Place {
            host: crate::admin::host_id(),
            path: self.shown().display().to_string(),
        };
        self.read(|tx| {
            let installation: String =
                tx.scalar("SELECT id FROM installation WHERE singleton = 1", &[])?;
            let g = tx.query_opt(
                "SELECT (SELECT CASE WHEN is_called THEN last_value ELSE 0 END
                         FROM claim_generation),
                        heartbeat_at, adopted_at FROM guard WHERE singleton = 1",
                &[],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?;
            let (generation, heartbeat_at, adopted_at) =
                g.ok_or_else(|| Error::damaged("the guard row is missing"))?;
            Ok(GuardState {
                installation,
                owner: None,
                here,
                generation,
                heartbeat_at,
                adopted_at,
                watermark: Watermark::Missing,
                watermark_path: String::new(),
                enforced: false,
                moved_to: None,
                moved_at: None,
            })
        })
    }

    fn quick_check(&self, full: bool) -> Result<Vec<String>> {
        self.problems(full)
    }
}

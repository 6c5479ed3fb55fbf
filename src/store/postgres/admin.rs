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
use crate::error::{Error, Result};
use crate::store::{Admin, GuardState, Place, Watermark};
use std::path::Path;

impl PgStore {
    /// The problems the consistency check finds (empty: sound). Without `full`, only what
    /// an index answers (a worker runs it before every start; the row scans of a
    /// million-row ledger are for `doctor --full` and `integrity_check`).
    fn problems(&self, full: bool) -> Result<Vec<String>> {
        self.run(move |pool| async move {
            let c = pool.get().await?;
            let mut found = Vec::new();
            let version: i32 = c
                .query_one("SELECT coalesce(max(version), 0) FROM sendonce_schema", &[])
                .await?
                .get(0);
            if version != SCHEMA_VERSION {
                found.push(format!(
                    "schema version {version}, this sendonce expects {SCHEMA_VERSION}"
                ));
            }
            let checks: &[(&str, &str)] = &[
                (
                    "SELECT count(*) FROM installation WHERE singleton = 1",
                    "the installation row is missing",
                ),
                (
                    "SELECT count(*) FROM guard WHERE singleton = 1",
                    "the guard row is missing",
                ),
            ];
            for (sql, problem) in checks {
                let n: i64 = c.query_one(*sql, &[]).await?.get(0);
                if n != 1 {
                    found.push(problem.to_string());
                }
            }
            let bad: &[(&str, &str)] = &[
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
            // The first two scan every row; the last is answered by the `sends_doubt` index.
            let bad = if full { bad } else { &bad[2..] };
            for (sql, problem) in bad {
                let n: i64 = c.query_one(*sql, &[]).await?.get(0);
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
        self.run(|pool| async move {
            let c = pool.get().await?;
            let sync: String = c
                .query_one("SELECT current_setting('synchronous_commit')", &[])
                .await?
                .get(0);
            Ok(format!("wal (PostgreSQL, synchronous_commit={sync})"))
        })
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
        self.run(|pool| async move {
            let mut c = pool.get().await?;
            let tx = c.transaction().await?;
            tx.execute("SELECT pg_current_xact_id()", &[]).await?;
            tx.commit().await?;
            Ok(())
        })
    }

    fn guard_state(&self) -> Result<GuardState> {
        let here = Place {
            host: crate::store::admin::host_id(),
            path: self.shown().display().to_string(),
        };
        self.run(move |pool| async move {
            let c = pool.get().await?;
            let installation: String = c
                .query_one("SELECT id FROM installation WHERE singleton = 1", &[])
                .await?
                .get(0);
            let g = c
                .query_one(
                    "SELECT (SELECT CASE WHEN is_called THEN last_value ELSE 0 END
                             FROM claim_generation),
                            heartbeat_at, adopted_at FROM guard WHERE singleton = 1",
                    &[],
                )
                .await?;
            Ok(GuardState {
                installation,
                owner: None,
                here,
                generation: g.get(0),
                heartbeat_at: g.get(1),
                adopted_at: g.get(2),
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

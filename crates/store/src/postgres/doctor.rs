//! `sendonce doctor`'s reads of a PostgreSQL database: opened read-only (nothing migrated, a
//! schema older or newer than this binary's is the `open` finding), then each question asked on
//! its own so one failing query does not hide the others' answers. Nothing is written. What is
//! about files (integrity and foreign-key pragmas, modes, WAL, disk) does not apply here.

use super::{PgStore, SCHEMA_VERSION};
use crate::doctor::{self, skipped, InspectOptions, Inspection};
use crate::sql::Db;
use crate::{Admin, OpenOptions};

const NOT_APPLICABLE: &str = "not applicable on PostgreSQL";

/// The inspection of a database that did not open (yet): every question unanswered.
fn unopened() -> Inspection {
    Inspection {
        opened: Ok(()),
        snapshot: false,
        application_id: Err(NOT_APPLICABLE.into()),
        schema_version: skipped(),
        check: skipped(),
        foreign_keys: Err(NOT_APPLICABLE.into()),
        expired_leases: skipped(),
        in_doubt: skipped(),
        stuck: skipped(),
        guard: None,
        server: Some(skipped()),
        ledger: Some(skipped()),
        addresses: None,
        broken_endpoints: None,
    }
}

/// Everything `doctor` asks of the database at `url` (the address step runs inside its
/// migration: never pending here).
pub fn inspect_database(url: &str, opts: &InspectOptions) -> Inspection {
    let mut out = unopened();
    let ro = OpenOptions {
        read_only: true,
        pool_size: 1,
        ..Default::default()
    };
    let store = match PgStore::open(url, &ro) {
        Ok(s) => s,
        Err(e) => {
            out.opened = Err(e.message);
            return out;
        }
    };
    out.server = Some(store.server_version().map_err(|e| e.message));
    out.schema_version = store
        .read(|tx| tx.scalar("SELECT coalesce(max(version), 0) FROM sendonce_schema", &[]))
        .map_err(|e| e.message);
    out.check = store.quick_check(opts.full).map_err(|e| e.message);
    let asked = store.read(|tx| {
        doctor::ask_ledger(tx, &mut out, opts);
        out.ledger = Some(doctor::counts_by(tx, "sends", "status"));
        out.addresses = Some(doctor::counts_by(tx, "address_collisions", "kind"));
        if out.schema_version.as_ref().is_ok_and(|v| *v >= 11) {
            out.broken_endpoints = Some(doctor::broken_endpoints(tx));
        }
        Ok(())
    });
    if let Err(e) = asked {
        out.expired_leases = Err(e.message);
    }
    if out.schema_version == Ok(i64::from(SCHEMA_VERSION)) {
        out.guard = Some(store.guard_state().map_err(|e| e.message));
    }
    out
}

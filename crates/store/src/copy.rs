//! What `sendonce migrate-store` moves between stores, backend-neutral: a table's rows as plain
//! cells (`sqlite/export.rs` reads them, `postgres/import.rs` writes them), the order the
//! tables are copied in, and the checksum of the ledger both sides compute.

use serde::Serialize;
use std::collections::BTreeMap;

/// One value as SQLite stores it; the importer converts it to the target column's type.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

/// What the exporter streams to the importer, in this order per table: `Table`, any number of
/// `Rows`, `End`; then `Done` after the last table. A stream that stops without `Done` (the
/// reader failed) is rolled back.
#[derive(Debug)]
pub enum Chunk {
    Table {
        name: &'static str,
        columns: Vec<String>,
    },
    Rows(Vec<Vec<Cell>>),
    End {
        name: &'static str,
        rows: u64,
    },
    Done,
}

/// Rows per `Chunk::Rows`.
pub const BATCH: usize = 2000;
/// Bytes of text and blobs after which a `Chunk::Rows` goes even with fewer rows, so that the
/// copy's memory stays bounded whatever the rows hold (a message's attachments are megabytes).
pub const BATCH_BYTES: usize = 16 << 20;

/// Every table of the store, parents before children (foreign keys are checked on insert).
/// `installation` and `guard` are single rows the target already has: they are replaced.
pub const TABLES: &[&str] = &[
    "installation",
    "guard",
    "guard_epochs",
    "accounts",
    "subscribers",
    "campaigns",
    "templates",
    "message_contents",
    "message_attachments",
    "sends",
    "suppressions",
    "rate_buckets",
    "lists",
    "list_members",
    "campaign_lists",
    "api_tokens",
    "api_messages",
    "list_confirmations",
    "consents",
    "webhook_events",
    "admins",
    "admin_sessions",
    "events",
    "hook_endpoints",
    "hook_deliveries",
    "hook_attempts",
];

/// What the source holds, counted before the copy and compared with the target's own count
/// inside the copy's transaction.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Census {
    /// Rows per table.
    pub rows: BTreeMap<String, u64>,
    /// SHA-256 of every send's id, status, attempts, fence token, dispatch marker and doubt
    /// time, in id order ([`SendsChecksum`]).
    pub sends_checksum: String,
    pub installation: String,
    /// The claim counter of the source (`guard.generation`).
    pub generation: i64,
    /// The highest id each `AUTOINCREMENT` table ever gave (SQLite's `sqlite_sequence`): ids of
    /// removed rows are never given again there (a removed list's id stays in
    /// `campaign_lists`), so the target's identities start past these too, not only past the
    /// highest id that remains.
    pub sequences: BTreeMap<String, i64>,
}

/// The ledger's checksum, fed one send at a time in id order, the same on both stores.
pub struct SendsChecksum(sha2::Sha256);

impl Default for SendsChecksum {
    fn default() -> Self {
        use sha2::Digest;
        SendsChecksum(sha2::Sha256::new())
    }
}

impl SendsChecksum {
    /// The columns, in this order, that [`SendsChecksum::add`] takes.
    pub const COLUMNS: &'static str =
        "id, status, attempts, lease_token, visible_at, dispatched_at, doubt_since";

    /// One send: its id, status, then attempts, lease_token, visible_at, dispatched_at and
    /// doubt_since (the rest of [`SendsChecksum::COLUMNS`]).
    pub fn add(&mut self, id: i64, status: &str, rest: [Option<i64>; 5]) {
        use sha2::Digest;
        let mut line = format!("{id}|{status}");
        for v in rest {
            line.push('|');
            match v {
                Some(v) => line.push_str(&v.to_string()),
                None => line.push('-'),
            }
        }
        line.push('\n');
        self.0.update(line.as_bytes());
    }

    pub fn finish(self) -> String {
        use sha2::Digest;
        self.0
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// What a verified copy wrote into the target.
#[derive(Debug, Clone, Serialize)]
pub struct Imported {
    /// Rows per table, as counted in the target before the commit.
    pub rows: BTreeMap<String, u64>,
    pub sends_checksum: String,
    pub installation: String,
}

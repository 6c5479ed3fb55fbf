-- 0017_addresses: one form per address (issue 37, F5/F6). New addresses are NFC, without
-- invisible code points, with an ASCII (IDNA) domain, and phone numbers E.164 as
-- libphonenumber parses them. The rows written before are brought to that form by a step in
-- Rust (src/store/normalise.rs; SQL cannot normalise Unicode), run by the first writable open
-- after this migration, in one immediate transaction that also deletes its `pending_steps`
-- row. Append-only.

-- Data steps a migration leaves to the binary: a row here is a step still to run.
CREATE TABLE pending_steps (
    name       TEXT PRIMARY KEY,
    created_at INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO pending_steps (name, created_at)
    VALUES ('addresses_0017', CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));

-- What the step found: two rows that became one address (`subscriber`, `suppression`,
-- `send`), and stored addresses the new rules refuse (`invalid`, left as they were).
-- `sendonce doctor` counts them; an opt-out always won (see src/store/normalise.rs).
CREATE TABLE address_collisions (
    id         INTEGER PRIMARY KEY,
    account_id INTEGER NOT NULL,
    channel    TEXT NOT NULL CHECK (channel IN ('email', 'sms')),
    kind       TEXT NOT NULL CHECK (kind IN ('subscriber', 'suppression', 'send', 'invalid')),
    address    TEXT NOT NULL,
    kept_id    INTEGER,
    dropped_id INTEGER,
    detail     TEXT NOT NULL,
    created_at INTEGER NOT NULL
);

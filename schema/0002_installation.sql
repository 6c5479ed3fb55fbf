-- 0002_installation: the id of this database file, created once with the file (or when an
-- older file is first upgraded). It is part of every campaign job id and so of every provider
-- idempotency key: two databases never share a key, while a copy of a file (a restored backup)
-- keeps its id and its keys. Append-only: never edit a released migration.

CREATE TABLE installation (
    singleton   INTEGER PRIMARY KEY CHECK (singleton = 1),
    id          TEXT NOT NULL CHECK (length(id) = 32 AND id NOT GLOB '*[^0-9a-f]*'),
    created_at  INTEGER NOT NULL
);

INSERT INTO installation (singleton, id, created_at)
VALUES (1, lower(hex(randomblob(16))),
        CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));

-- The installation id may never change: a new id would give every row a new key.
CREATE TRIGGER installation_fixed
BEFORE UPDATE ON installation
BEGIN
    SELECT RAISE(ABORT, 'the installation id never changes');
END;

CREATE TRIGGER installation_kept
BEFORE DELETE ON installation
BEGIN
    SELECT RAISE(ABORT, 'the installation id is never deleted');
END;

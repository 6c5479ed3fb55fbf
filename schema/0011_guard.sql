-- 0011_guard: which installation owns this file, and how far its ledger has gone.
-- Append-only: never edit a released migration.
--
-- `host` and `path` name the place that owns the file (the machine's id and the file's absolute
-- path). A copy of the file carries them, so a worker started on a copy finds another place
-- named here and refuses to claim until an operator runs `sendonce adopt`. NULL on a file made
-- before this migration: the first worker (or `init`, `adopt`) records its own place.
--
-- `generation` counts the claim transactions that leased rows. After each one the store writes
-- it to a sidecar file beside the database (`<db>-watermark`); a database whose
-- generation is behind its sidecar has gone back in time (a lost WAL, a snapshot restored under
-- the installation) and refuses to send. `heartbeat_at` is the time of the last such claim.
--
-- `replay_since` / `replay_through`: set by `adopt` on a file that went back in time. Every row
-- of a campaign with id <= replay_through that was not finished then (and every row its list
-- building adds later) may have been sent by the lost timeline since replay_since, so it is
-- treated as possibly delivered: retried only with the same key inside an idempotent provider's
-- window, otherwise parked in doubt.
CREATE TABLE guard (
    singleton      INTEGER PRIMARY KEY CHECK (singleton = 1),
    host           TEXT,
    path           TEXT,
    generation     INTEGER NOT NULL DEFAULT 0 CHECK (generation >= 0),
    heartbeat_at   INTEGER,
    adopted_at     INTEGER,
    replay_since   INTEGER,
    replay_through INTEGER,
    CHECK ((host IS NULL) = (path IS NULL))
);

INSERT INTO guard (singleton) VALUES (1);

-- One row per `adopt` that found the file gone back in time: the highest ids it had then. The
-- lost timeline may have used the ids above them for other campaigns, subscribers, lists and
-- API messages, so a job made from any of them gets the scope `INSTALLATION~L` instead of
-- `INSTALLATION`, where L is the highest `label` among the epochs whose ids it is above: a
-- new recipient never shares a provider key with a message the lost timeline sent to someone
-- else. The label is the claim counter the adopt set (from the watermark, outside the file),
-- so restoring the same backup twice never reuses a label: the second lost timeline had
-- claimed further.
CREATE TABLE guard_epochs (
    epoch               INTEGER PRIMARY KEY,
    label               INTEGER NOT NULL,
    adopted_at          INTEGER NOT NULL,
    campaigns_through   INTEGER NOT NULL,
    subscribers_through INTEGER NOT NULL,
    lists_through       INTEGER NOT NULL,
    messages_through    INTEGER NOT NULL
);
-- List building reads it for every row it inserts: by index, never a scan.
CREATE INDEX guard_epochs_campaigns ON guard_epochs(campaigns_through);
CREATE INDEX guard_epochs_subscribers ON guard_epochs(subscribers_through);

CREATE TRIGGER guard_kept
BEFORE DELETE ON guard
BEGIN
    SELECT RAISE(ABORT, 'the guard row is never deleted');
END;

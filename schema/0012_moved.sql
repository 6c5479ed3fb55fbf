-- 0012_moved: the file's data was copied to another store by `sendonce migrate-store`.
-- Append-only: never edit a released migration.
--
-- `moved_to` is where the data went: the PostgreSQL URL WITHOUT its password (never a secret in
-- the file). `moved_at` is when the verified copy committed. A worker refuses a moved file
-- (exit 5, naming `--db <moved_to>`), and the claim transaction refuses too, so a worker that
-- was already running claims nothing more. Read-only commands (status, report) still work.
ALTER TABLE guard ADD COLUMN moved_to TEXT;
ALTER TABLE guard ADD COLUMN moved_at INTEGER;

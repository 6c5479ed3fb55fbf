-- 0023_webhook_sources: `webhook_events` takes the events of the bounce sources of issue 45:
-- Mailgun, SendGrid, Brevo and Amazon SES through SNS (`POST /hooks/{source}/{account}`);
-- 'dsn' is taken now for the delivery status notifications the MTA will pipe in (the DSN part of
-- issue 45, not built yet), so that it needs no second rebuild of this table. Only
-- the check on `source` changes. SQLite cannot change a CHECK with ALTER TABLE, so the table is
-- rebuilt by its documented procedure: the new table made, every row copied with its id, the
-- old one dropped, the new one renamed (legacy_alter_table on, as 0016 does, so a view an
-- operator made over the table does not stop the upgrade), and 0010's index made again. Same
-- columns in the same order (0019's `provider_message_id` last), same rows, same ids, same keys.
-- Append-only.
CREATE TABLE webhook_events_0023 (
    id           INTEGER PRIMARY KEY,
    account_id   INTEGER NOT NULL REFERENCES accounts(id),
    source       TEXT NOT NULL CHECK (source IN ('twilio', 'postmark', 'resend', 'standard',
                                                 'mailgun', 'sendgrid', 'brevo', 'ses', 'dsn')),
    event_id     TEXT NOT NULL CHECK (length(event_id) BETWEEN 1 AND 512),
    body_sha256  TEXT NOT NULL,
    kind         TEXT NOT NULL,
    job_id       TEXT,
    address      TEXT,
    delivery     TEXT CHECK (delivery IN ('sent', 'failed')),
    action       TEXT NOT NULL CHECK (action IN ('suppressed', 'unsuppressed', 'settled_sent',
                                                 'settled_failed', 'recorded', 'ignored')),
    received_at  INTEGER NOT NULL,
    provider_message_id TEXT
        CHECK (provider_message_id IS NULL OR length(provider_message_id) BETWEEN 1 AND 512),
    UNIQUE (account_id, source, event_id)
);
INSERT INTO webhook_events_0023 (id, account_id, source, event_id, body_sha256, kind, job_id,
                                 address, delivery, action, received_at, provider_message_id)
    SELECT id, account_id, source, event_id, body_sha256, kind, job_id, address, delivery,
           action, received_at, provider_message_id
    FROM webhook_events ORDER BY id;
DROP TABLE webhook_events;
PRAGMA legacy_alter_table = ON;
ALTER TABLE webhook_events_0023 RENAME TO webhook_events;
PRAGMA legacy_alter_table = OFF;
-- As 0010 made it (DROP TABLE took it with the old table).
CREATE INDEX webhook_events_job ON webhook_events(account_id, job_id, delivery)
    WHERE job_id IS NOT NULL AND delivery IS NOT NULL;

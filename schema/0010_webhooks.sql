-- 0010_webhooks: events received from providers' webhooks (`POST /hooks/{source}/{account}`).
-- Append-only. One row per (account, source, provider event id): a replay with the same id and
-- the same body (`body_sha256`) changes nothing, the same id with another body is refused.
-- `action` says what the event did when it was applied: suppressed / unsuppressed an address,
-- settled a row in doubt (settled_sent / settled_failed), recorded a delivery report for a row
-- not in doubt yet (the claim consults it: a row whose lease expired after dispatch is settled
-- by it instead of being parked in doubt), or ignored it (an event that changes nothing here).
-- `delivery` is the delivery outcome the event reports for `job_id`, if any.
-- No secret, signature or header is stored.
CREATE TABLE webhook_events (
    id           INTEGER PRIMARY KEY,
    account_id   INTEGER NOT NULL REFERENCES accounts(id),
    source       TEXT NOT NULL CHECK (source IN ('twilio', 'postmark', 'resend', 'standard')),
    event_id     TEXT NOT NULL CHECK (length(event_id) BETWEEN 1 AND 512),
    body_sha256  TEXT NOT NULL,
    kind         TEXT NOT NULL,
    job_id       TEXT,
    address      TEXT,
    delivery     TEXT CHECK (delivery IN ('sent', 'failed')),
    action       TEXT NOT NULL CHECK (action IN ('suppressed', 'unsuppressed', 'settled_sent',
                                                 'settled_failed', 'recorded', 'ignored')),
    received_at  INTEGER NOT NULL,
    UNIQUE (account_id, source, event_id)
);
-- The claim asks, for a row whose lease expired after dispatch, whether a delivery report
-- for its job came in: one search of this index.
CREATE INDEX webhook_events_job ON webhook_events(account_id, job_id, delivery)
    WHERE job_id IS NOT NULL AND delivery IS NOT NULL;

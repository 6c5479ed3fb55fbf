-- 0007_api_messages: transactional messages sent through the HTTP API (`POST /v1/messages`),
-- each with its Idempotency-Key. Append-only.

-- What a campaign row is: a campaign people manage, a one-off notification (`sendonce notify`,
-- its own state file) or the hidden one-row campaign of one API message. Only 'campaign' rows
-- are listed.
ALTER TABLE campaigns ADD COLUMN kind TEXT NOT NULL DEFAULT 'campaign'
    CHECK (kind IN ('campaign', 'notify', 'api'));

-- One row per (account, Idempotency-Key). The first request inserts it with its campaign and
-- send row in one transaction, then stores the answer it gave; a request with the same key and
-- the same body gets that answer again, with another body a 422, and while the first has not
-- answered yet a 409. Kept for good (at least the 24 h the API promises).
CREATE TABLE api_messages (
    id              INTEGER PRIMARY KEY,
    account_id      INTEGER NOT NULL REFERENCES accounts(id),
    idempotency_key TEXT NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    request_hash    TEXT NOT NULL,       -- SHA-256 (hex) of the request as parsed
    campaign_id     INTEGER REFERENCES campaigns(id),
    send_id         INTEGER REFERENCES sends(id),
    response_status INTEGER,             -- NULL until the first request has answered
    response_body   TEXT,
    created_at      INTEGER NOT NULL,
    UNIQUE (account_id, idempotency_key)
);
-- Inserting a send or a campaign makes SQLite look for rows referring to it (foreign keys):
-- these make that a search, not a scan of every message on the send path.
CREATE INDEX api_messages_send ON api_messages(send_id);
CREATE INDEX api_messages_campaign ON api_messages(campaign_id);

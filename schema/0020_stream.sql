-- 0020_stream: transactional messages of the HTTP API become rows of a per-account stream
-- instead of one hidden campaign each. A stream is a campaign row with `stream` = 1 (kind
-- 'api'), one per (account, channel), made with the account's first message; it is always
-- `sending` and never completes, so the worker claims its due rows in batches as it claims a
-- campaign's, with the same lease, dispatch marker, fence, suppression check, in-doubt rule
-- and provider key. Each of its send rows carries its own content (`message_contents`,
-- `sends.message_id`); a campaign's rows have none. Because a stream holds many messages to
-- one address, `sends` is rebuilt (as 0016 did, and for the same reasons with the same
-- procedure) with its two uniqueness rules moved from table constraints to unique indexes
-- that also take `message_id` (0 for a campaign row): one row per (campaign, address) and per
-- (campaign, subscriber) for campaigns, as before; one per message in a stream. The hidden
-- campaigns of existing API messages are folded into their account's stream: each message's
-- content is copied out, its send row keeps its id, job id (so its provider idempotency key)
-- and state, `api_messages` keeps its ids and keys (a retried Idempotency-Key still replays),
-- and the hidden campaigns go. Double opt-in confirmations keep their hidden campaigns (kind
-- 'api', `stream` = 0). Append-only.

ALTER TABLE campaigns ADD COLUMN stream INTEGER NOT NULL DEFAULT 0 CHECK (stream IN (0, 1));

-- The content of one stream message, stored once (a retry reads the same row, so it sends the
-- same bytes). `body_format` as for campaigns: 'html' when the text part is generated from
-- the HTML stored in `body`.
CREATE TABLE message_contents (
    id          INTEGER PRIMARY KEY,
    account_id  INTEGER NOT NULL REFERENCES accounts(id),
    sender      TEXT,
    reply_to    TEXT,
    subject     TEXT,
    body        TEXT NOT NULL CHECK (length(body) > 0),
    body_format TEXT NOT NULL CHECK (body_format = 'text' OR body_format = 'html'),
    html        TEXT CHECK (html IS NULL OR length(html) > 0),
    created_at  INTEGER NOT NULL
);

-- One stream per (account, channel) with API messages, named for nobody (streams are never
-- listed): created at the first of its messages, started then, never finished.
INSERT INTO campaigns (account_id, name, channel, body, templated, status, scheduled_for,
                       approved_at, started_at, list_complete, created_at, kind, transactional,
                       stream)
    SELECT k.account_id, 'stream: ' || k.channel, k.channel, 'the stream''s messages carry their own content',
           0, 'sending', min(m.created_at), min(m.created_at), min(m.created_at), 1,
           min(m.created_at), 'api', 1, 1
    FROM api_messages m JOIN campaigns k ON k.id = m.campaign_id
    GROUP BY k.account_id, k.channel;

-- Each API message's content, under the message's own id.
INSERT INTO message_contents (id, account_id, sender, reply_to, subject, body, body_format,
                              html, created_at)
    SELECT m.id, m.account_id, k.sender, k.reply_to, k.subject, k.body, k.body_format, k.html,
           m.created_at
    FROM api_messages m JOIN campaigns k ON k.id = m.campaign_id;

CREATE TABLE sends_0020 (
    id                  INTEGER PRIMARY KEY,
    account_id          INTEGER NOT NULL REFERENCES accounts(id),
    campaign_id         INTEGER NOT NULL REFERENCES campaigns(id),
    subscriber_id       INTEGER NOT NULL REFERENCES subscribers(id),
    job_id              TEXT NOT NULL,
    address             TEXT NOT NULL,   -- normalised: lower-case email or E.164 phone
    vars                TEXT NOT NULL,   -- template variables captured at list building (JSON)
    status              TEXT NOT NULL DEFAULT 'queued'
                        CHECK (status = 'queued' OR status = 'leased' OR status = 'sent'
                               OR status = 'failed' OR status = 'suppressed'
                               OR status = 'in_doubt' OR status = 'cancelled'),
    visible_at          INTEGER NOT NULL, -- queued: ready time; leased: lease expiry
    lease_token         INTEGER,          -- fence: confirmations must present it
    lease_owner         TEXT,
    attempts            INTEGER NOT NULL DEFAULT 0,  -- provider calls dispatched
    claimed_at          INTEGER,          -- claim that started the current delivery chain
    dispatched_at       INTEGER,          -- dispatch marker of the current lease
    doubt_since         INTEGER,          -- earliest dispatch whose outcome is unknown
    provider_message_id TEXT,
    last_error          TEXT,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL,
    sent_at             INTEGER,
    message_id          INTEGER REFERENCES message_contents(id) -- a stream row's content
);
-- Every row, in id order; an API message's row moves to its account's stream with its content.
INSERT INTO sends_0020 (id, account_id, campaign_id, subscriber_id, job_id, address, vars,
                        status, visible_at, lease_token, lease_owner, attempts, claimed_at,
                        dispatched_at, doubt_since, provider_message_id, last_error, created_at,
                        updated_at, sent_at, message_id)
    SELECT s.id, s.account_id, coalesce(st.id, s.campaign_id), s.subscriber_id, s.job_id,
           s.address, s.vars, s.status, s.visible_at, s.lease_token, s.lease_owner, s.attempts,
           s.claimed_at, s.dispatched_at, s.doubt_since, s.provider_message_id, s.last_error,
           s.created_at, s.updated_at, s.sent_at, m.id
    FROM sends s
    LEFT JOIN api_messages m ON m.send_id = s.id
    LEFT JOIN campaigns k ON k.id = m.campaign_id
    LEFT JOIN campaigns st ON st.stream = 1 AND st.account_id = k.account_id
                          AND st.channel = k.channel
    ORDER BY s.id;
DROP TABLE sends;
PRAGMA legacy_alter_table = ON;
ALTER TABLE sends_0020 RENAME TO sends;
PRAGMA legacy_alter_table = OFF;
-- The uniqueness rules (before: UNIQUE (campaign_id, subscriber_id), UNIQUE (campaign_id,
-- address)), then 0016's indexes and triggers (DROP TABLE took them with the old table).
CREATE UNIQUE INDEX sends_campaign_address ON sends(campaign_id, address, coalesce(message_id, 0));
CREATE UNIQUE INDEX sends_campaign_subscriber
    ON sends(campaign_id, subscriber_id, coalesce(message_id, 0));
CREATE INDEX sends_claim ON sends(campaign_id, visible_at, id) WHERE status IN ('queued', 'leased');
CREATE INDEX sends_doubt ON sends(campaign_id) WHERE status = 'in_doubt';
CREATE INDEX sends_campaign_order ON sends(campaign_id + 0, id);
CREATE INDEX sends_unsent ON sends(campaign_id, status) WHERE status IN ('failed', 'suppressed');
CREATE TRIGGER sends_count_insert AFTER INSERT ON sends BEGIN
    INSERT INTO campaign_counts (campaign_id, status, n) VALUES (new.campaign_id, new.status, 1)
        ON CONFLICT (campaign_id, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER sends_count_update AFTER UPDATE OF status, campaign_id ON sends
    WHEN old.status IS NOT new.status OR old.campaign_id IS NOT new.campaign_id BEGIN
    UPDATE campaign_counts SET n = n - 1
        WHERE campaign_id = old.campaign_id AND status = old.status;
    INSERT INTO campaign_counts (campaign_id, status, n) VALUES (new.campaign_id, new.status, 1)
        ON CONFLICT (campaign_id, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER sends_count_delete AFTER DELETE ON sends BEGIN
    UPDATE campaign_counts SET n = n - 1
        WHERE campaign_id = old.campaign_id AND status = old.status;
END;

-- The hidden campaigns of API messages, now empty, go with their counts; the messages name
-- their stream.
CREATE TEMP TABLE folded_0020 AS
    SELECT DISTINCT campaign_id AS id FROM api_messages WHERE campaign_id IS NOT NULL;
UPDATE api_messages SET campaign_id = (
    SELECT st.id FROM campaigns k JOIN campaigns st
        ON st.stream = 1 AND st.account_id = k.account_id AND st.channel = k.channel
    WHERE k.id = api_messages.campaign_id)
WHERE campaign_id IS NOT NULL;
DELETE FROM campaign_counts WHERE campaign_id IN (SELECT id FROM folded_0020);
DELETE FROM campaigns WHERE id IN (SELECT id FROM folded_0020);
DROP TABLE folded_0020;
INSERT INTO campaign_counts (campaign_id, status, n)
    SELECT s.campaign_id, s.status, count(*) FROM sends s JOIN campaigns k ON k.id = s.campaign_id
    WHERE k.stream = 1 GROUP BY s.campaign_id, s.status;

CREATE UNIQUE INDEX campaigns_stream ON campaigns(account_id, channel) WHERE stream = 1;

-- 0024_events: events out (issue 42). Every change an application may want to hear about is
-- written into `events` by a trigger in the transaction that makes the change, whatever code
-- path made it: a send confirmed, failed, suppressed or parked in doubt; a subscriber who
-- subscribed, confirmed, unsubscribed or bounced (to the account or to a list); a campaign
-- started, paused, resumed, finished or cancelled; a suppression added or removed. Delivery
-- reports (delivered, bounced, complained) are written by the store's webhook code, which knows
-- what the provider said. `id` is the feed's order: one writer at a time (BEGIN IMMEDIATE), so
-- a later commit always has a larger id; the pruning never deletes the newest event, so an id
-- is never reused. No foreign key on account_id either (checked on every insert; the trigger's
-- row always has its send's, subscriber's, campaign's or suppression's account). `txid` is PostgreSQL's (see its 0011), 0 here.
-- `api_messages.metadata`: the client's own JSON object, returned in its events.
-- `hook_endpoints`: an account's webhook receivers. The signing secret is not stored: it is
-- derived from the link secret and `salt` (see docs/events.md). `hook_deliveries`: one row per
-- (endpoint, event), leased and fenced like a send. Append-only.
CREATE TABLE events (
    id          INTEGER PRIMARY KEY,
    txid        INTEGER NOT NULL DEFAULT 0,
    account_id  INTEGER NOT NULL,
    type        TEXT NOT NULL,
    subject     TEXT NOT NULL,
    at          INTEGER NOT NULL,
    send_id     INTEGER,
    subscriber_id INTEGER,
    data        TEXT NOT NULL DEFAULT '{}'
);
-- No index by account: its upkeep cost every send a fifth more CPU (`sendonce bench --only
-- throughput`); readers scan by id and keep their account's (`store::events`).

CREATE TRIGGER sends_event AFTER UPDATE OF status ON sends
    WHEN old.status IS NOT new.status
     AND new.status IN ('sent', 'failed', 'suppressed', 'in_doubt') BEGIN
    INSERT INTO events (account_id, type, subject, at, send_id, data)
    VALUES (new.account_id, 'send.' || new.status, new.job_id, new.updated_at, new.id,
            json_object('previous', old.status, 'attempts', new.attempts,
                        'provider_message_id', new.provider_message_id,
                        'error', new.last_error));
END;

-- List building inserts the rows of addresses already suppressed as `suppressed`.
CREATE TRIGGER sends_event_insert AFTER INSERT ON sends
    WHEN new.status = 'suppressed' BEGIN
    INSERT INTO events (account_id, type, subject, at, send_id, data)
    VALUES (new.account_id, 'send.suppressed', new.job_id, new.updated_at, new.id,
            json_object('previous', NULL, 'attempts', new.attempts,
                        'provider_message_id', NULL, 'error', new.last_error));
END;

CREATE TRIGGER campaigns_event AFTER UPDATE OF status ON campaigns
    WHEN old.status IS NOT new.status AND new.kind = 'campaign'
     AND new.status IN ('sending', 'paused', 'sent', 'cancelled') BEGIN
    INSERT INTO events (account_id, type, subject, at, data)
    VALUES (new.account_id,
            CASE new.status WHEN 'sending' THEN
                CASE old.status WHEN 'paused' THEN 'campaign.resumed' ELSE 'campaign.started' END
            WHEN 'paused' THEN 'campaign.paused' WHEN 'sent' THEN 'campaign.finished'
            ELSE 'campaign.cancelled' END,
            'campaign:' || new.id,
            CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER),
            json_object('campaign_id', new.id, 'name', new.name, 'previous', old.status));
END;

CREATE TRIGGER subscribers_event_insert AFTER INSERT ON subscribers
    WHEN new.status = 'confirmed' BEGIN
    INSERT INTO events (account_id, type, subject, at, subscriber_id, data)
    VALUES (new.account_id, 'subscriber.subscribed', 'subscriber:' || new.id, new.created_at,
            new.id, json_object('subscriber_id', new.id, 'list_id', NULL, 'previous', NULL));
END;

CREATE TRIGGER subscribers_event_update AFTER UPDATE OF status ON subscribers
    WHEN old.status IS NOT new.status
     AND new.status IN ('confirmed', 'unsubscribed', 'bounced') BEGIN
    INSERT INTO events (account_id, type, subject, at, subscriber_id, data)
    VALUES (new.account_id,
            CASE new.status WHEN 'confirmed' THEN
                CASE old.status WHEN 'pending' THEN 'subscriber.confirmed'
                ELSE 'subscriber.subscribed' END
            ELSE 'subscriber.' || new.status END,
            'subscriber:' || new.id,
            CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER), new.id,
            json_object('subscriber_id', new.id, 'list_id', NULL, 'previous', old.status));
END;

CREATE TRIGGER list_members_event_insert AFTER INSERT ON list_members
    WHEN new.status = 'subscribed' BEGIN
    INSERT INTO events (account_id, type, subject, at, subscriber_id, data)
    SELECT l.account_id, 'subscriber.subscribed', 'subscriber:' || new.subscriber_id,
           new.updated_at, new.subscriber_id,
           json_object('subscriber_id', new.subscriber_id, 'list_id', new.list_id,
                       'previous', NULL)
    FROM lists l WHERE l.id = new.list_id;
END;

CREATE TRIGGER list_members_event_update AFTER UPDATE OF status ON list_members
    WHEN old.status IS NOT new.status AND new.status IN ('subscribed', 'unsubscribed') BEGIN
    INSERT INTO events (account_id, type, subject, at, subscriber_id, data)
    SELECT l.account_id,
           CASE new.status WHEN 'unsubscribed' THEN 'subscriber.unsubscribed'
           ELSE CASE old.status WHEN 'pending' THEN 'subscriber.confirmed'
                ELSE 'subscriber.subscribed' END END,
           'subscriber:' || new.subscriber_id, new.updated_at, new.subscriber_id,
           json_object('subscriber_id', new.subscriber_id, 'list_id', new.list_id,
                       'previous', old.status)
    FROM lists l WHERE l.id = new.list_id;
END;

CREATE TRIGGER suppressions_event_insert AFTER INSERT ON suppressions BEGIN
    INSERT INTO events (account_id, type, subject, at, data)
    VALUES (new.account_id, 'suppression.added',
            'suppression:' || new.channel || ':' || new.address, new.created_at,
            json_object('channel', new.channel, 'address', new.address,
                        'reason', new.reason, 'source', new.source));
END;

CREATE TRIGGER suppressions_event_delete AFTER DELETE ON suppressions BEGIN
    INSERT INTO events (account_id, type, subject, at, data)
    VALUES (old.account_id, 'suppression.removed',
            'suppression:' || old.channel || ':' || old.address,
            CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER),
            json_object('channel', old.channel, 'address', old.address,
                        'reason', old.reason, 'source', old.source));
END;

ALTER TABLE api_messages ADD COLUMN metadata TEXT CHECK (metadata IS NULL OR json_valid(metadata));

CREATE TABLE hook_endpoints (
    id             INTEGER PRIMARY KEY,
    account_id     INTEGER NOT NULL REFERENCES accounts(id),
    url            TEXT NOT NULL CHECK (length(url) BETWEEN 1 AND 2048),
    types          TEXT NOT NULL DEFAULT '',   -- space-separated types or `prefix.*`; '' = all
    ordered        INTEGER NOT NULL DEFAULT 0 CHECK (ordered IN (0, 1)),
    salt           TEXT NOT NULL,
    old_salt       TEXT,                       -- the secret before the last rotation...
    old_until      INTEGER,                    -- ...also signs until then
    status         TEXT NOT NULL DEFAULT 'enabled'
                   CHECK (status IN ('enabled', 'disabled', 'broken')),
    cursor_txid    INTEGER NOT NULL DEFAULT 0, -- the last event fanned out to it
    cursor_id      INTEGER NOT NULL DEFAULT 0,
    failing_since  INTEGER,                    -- first failure since the last success
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
);
CREATE INDEX hook_endpoints_account ON hook_endpoints(account_id, id);

-- AUTOINCREMENT: an id is never given again (a removed endpoint's leased delivery must not
-- hand its id and lease token to another delivery while its call is in flight).
CREATE TABLE hook_deliveries (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    endpoint_id  INTEGER NOT NULL REFERENCES hook_endpoints(id),
    event_id     INTEGER NOT NULL,
    subject      TEXT NOT NULL,
    status       TEXT NOT NULL DEFAULT 'pending'
                 CHECK (status IN ('pending', 'leased', 'delivered', 'dropped')),
    attempts     INTEGER NOT NULL DEFAULT 0,
    visible_at   INTEGER NOT NULL,            -- pending: due time; leased: lease expiry
    lease_token  INTEGER,
    last_status  INTEGER,                     -- the receiver's HTTP status, NULL: no answer
    last_error   TEXT,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    UNIQUE (endpoint_id, event_id)
);
CREATE INDEX hook_deliveries_due ON hook_deliveries(visible_at)
    WHERE status IN ('pending', 'leased');
CREATE INDEX hook_deliveries_subject ON hook_deliveries(endpoint_id, subject, event_id)
    WHERE status IN ('pending', 'leased');

CREATE TABLE hook_attempts (
    id           INTEGER PRIMARY KEY,
    delivery_id  INTEGER NOT NULL REFERENCES hook_deliveries(id),
    at           INTEGER NOT NULL,
    status       INTEGER,                     -- HTTP status, NULL: no answer
    error        TEXT,
    ms           INTEGER NOT NULL
);
CREATE INDEX hook_attempts_delivery ON hook_attempts(delivery_id, id);

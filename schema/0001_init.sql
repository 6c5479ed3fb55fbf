-- 0001_init: accounts, subscribers, campaigns, the send ledger and suppressions.
-- Append-only: never edit a released migration; add a new file instead.
-- Times are integer Unix milliseconds (UTC).

CREATE TABLE accounts (
    id          INTEGER PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE CHECK (length(name) > 0),
    created_at  INTEGER NOT NULL
);

CREATE TABLE subscribers (
    id          INTEGER PRIMARY KEY,
    account_id  INTEGER NOT NULL REFERENCES accounts(id),
    email       TEXT,               -- as given (trimmed)
    email_norm  TEXT,               -- lower-cased: what dedup and suppression use
    phone       TEXT,               -- E.164
    name        TEXT,
    status      TEXT NOT NULL DEFAULT 'confirmed'
                CHECK (status IN ('pending', 'confirmed', 'unsubscribed', 'bounced')),
    attrs       TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(attrs)),
    created_at  INTEGER NOT NULL,
    CHECK (email_norm IS NOT NULL OR phone IS NOT NULL)
);
CREATE UNIQUE INDEX subscribers_email ON subscribers(account_id, email_norm) WHERE email_norm IS NOT NULL;
CREATE UNIQUE INDEX subscribers_phone ON subscribers(account_id, phone) WHERE phone IS NOT NULL;

CREATE TABLE campaigns (
    id            INTEGER PRIMARY KEY,
    account_id    INTEGER NOT NULL REFERENCES accounts(id),
    name          TEXT NOT NULL,
    channel       TEXT NOT NULL CHECK (channel IN ('email', 'sms')),
    sender        TEXT,
    subject       TEXT,
    body          TEXT NOT NULL CHECK (length(body) > 0),
    templated     INTEGER NOT NULL DEFAULT 1, -- 0: subject and body are sent verbatim (notify)
    status        TEXT NOT NULL DEFAULT 'draft'
                  CHECK (status IN ('draft', 'approved', 'sending', 'paused', 'sent', 'cancelled')),
    scheduled_for INTEGER,          -- set at approval
    approved_at   INTEGER,
    started_at    INTEGER,          -- first approved -> sending transition
    finished_at   INTEGER,
    list_cursor   INTEGER NOT NULL DEFAULT 0,  -- last subscriber id the list build has passed
    list_complete INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL
);
CREATE INDEX campaigns_status ON campaigns(status, scheduled_for);

-- Content is frozen once a campaign leaves draft: a retry must send byte-identical content.
CREATE TRIGGER campaigns_content_frozen
BEFORE UPDATE OF channel, sender, subject, body, account_id ON campaigns
WHEN OLD.status <> 'draft'
BEGIN
    SELECT RAISE(ABORT, 'campaign content is frozen after approval');
END;

-- The per-recipient ledger. status meanings are in ARCHITECTURE.md.
CREATE TABLE sends (
    id                  INTEGER PRIMARY KEY,
    account_id          INTEGER NOT NULL REFERENCES accounts(id),
    campaign_id         INTEGER NOT NULL REFERENCES campaigns(id),
    subscriber_id       INTEGER NOT NULL REFERENCES subscribers(id),
    job_id              TEXT NOT NULL,
    address             TEXT NOT NULL,   -- normalised: lower-case email or E.164 phone
    vars                TEXT NOT NULL,   -- template variables captured at list building (JSON)
    status              TEXT NOT NULL DEFAULT 'queued'
                        CHECK (status IN ('queued', 'leased', 'sent', 'failed', 'suppressed', 'in_doubt', 'cancelled')),
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
    UNIQUE (campaign_id, subscriber_id),
    UNIQUE (campaign_id, address)
);
-- The claim is one range scan of this partial index (see design: one visible_at column).
CREATE INDEX sends_claim ON sends(campaign_id, visible_at, id) WHERE status IN ('queued', 'leased');
CREATE INDEX sends_doubt ON sends(campaign_id) WHERE status = 'in_doubt';

CREATE TABLE suppressions (
    account_id  INTEGER NOT NULL REFERENCES accounts(id),
    channel     TEXT NOT NULL CHECK (channel IN ('email', 'sms')),
    address     TEXT NOT NULL,
    reason      TEXT NOT NULL,
    source      TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (account_id, channel, address)
) WITHOUT ROWID;

-- Durable token buckets for provider rate limits, shared by every process on the file. The
-- refill accounts for the time that passed while no process was running.
CREATE TABLE rate_buckets (
    name        TEXT PRIMARY KEY,
    tokens      REAL NOT NULL,
    updated_at  INTEGER NOT NULL
) WITHOUT ROWID;

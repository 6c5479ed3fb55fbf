-- 0004_lists: subscriber lists per account, memberships with their own status, and the lists
-- a campaign targets. A campaign with no row in campaign_lists goes to every confirmed
-- subscriber of its account (as before). Append-only.

-- AUTOINCREMENT: a removed list's id is never given to a new list, so a draft that targeted
-- the removed list (its campaign_lists row stays) never starts targeting someone else's list.
CREATE TABLE lists (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    account_id  INTEGER NOT NULL REFERENCES accounts(id),
    name        TEXT NOT NULL CHECK (length(name) > 0),
    description TEXT,
    optin       TEXT NOT NULL DEFAULT 'single' CHECK (optin IN ('single', 'double')),
    created_at  INTEGER NOT NULL,
    UNIQUE (account_id, name)
);

CREATE TABLE list_members (
    list_id       INTEGER NOT NULL REFERENCES lists(id),
    subscriber_id INTEGER NOT NULL REFERENCES subscribers(id),
    status        TEXT NOT NULL CHECK (status IN ('subscribed', 'unsubscribed', 'pending')),
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    PRIMARY KEY (list_id, subscriber_id)
) WITHOUT ROWID;
CREATE INDEX list_members_subscriber ON list_members(subscriber_id);

-- list_id has no foreign key on purpose: removing a list keeps the rows of the campaigns that
-- targeted it (a sent campaign's record; a draft then targets nobody through it).
CREATE TABLE campaign_lists (
    campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
    list_id     INTEGER NOT NULL,
    PRIMARY KEY (campaign_id, list_id)
) WITHOUT ROWID;

-- A campaign's targets are frozen with its content once it leaves draft.
CREATE TRIGGER campaign_lists_frozen_insert
BEFORE INSERT ON campaign_lists
WHEN (SELECT status FROM campaigns WHERE id = NEW.campaign_id) <> 'draft'
BEGIN
    SELECT RAISE(ABORT, 'campaign lists are frozen after approval');
END;

CREATE TRIGGER campaign_lists_frozen_update
BEFORE UPDATE ON campaign_lists
WHEN (SELECT status FROM campaigns WHERE id = OLD.campaign_id) <> 'draft'
  OR (SELECT status FROM campaigns WHERE id = NEW.campaign_id) <> 'draft'
BEGIN
    SELECT RAISE(ABORT, 'campaign lists are frozen after approval');
END;

CREATE TRIGGER campaign_lists_frozen_delete
BEFORE DELETE ON campaign_lists
WHEN (SELECT status FROM campaigns WHERE id = OLD.campaign_id) <> 'draft'
BEGIN
    SELECT RAISE(ABORT, 'campaign lists are frozen after approval');
END;

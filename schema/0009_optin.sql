-- 0009_optin: double opt-in confirmations and public signup forms. Append-only.

-- A list takes signups from its public form (`POST /subscribe`, `GET /subscribe/{list}`) only
-- when `public` is 1. The confirmation message of a double opt-in list: its sender, subject
-- and text body templates (`{{ confirm_url }}`, `{{ list.name }}`); NULL subject or body: the
-- defaults in src/domain/optin.rs. A double opt-in list without a sender takes no members.
ALTER TABLE lists ADD COLUMN public INTEGER NOT NULL DEFAULT 0 CHECK (public IN (0, 1));
ALTER TABLE lists ADD COLUMN confirm_from TEXT;
ALTER TABLE lists ADD COLUMN confirm_subject TEXT;
ALTER TABLE lists ADD COLUMN confirm_body TEXT;

-- One row per (list, subscriber) that was ever sent a confirmation message: written in the
-- transaction that makes the pending membership, with the hidden one-row campaign (kind 'api')
-- and the send row that carry the message. The primary key is what makes it once: adding a
-- pending subscriber again finds the row and queues nothing. `confirmed_at` is set when the
-- link is used. list_id has no foreign key, as in campaign_lists: removing a list keeps the
-- record (list ids are never reused).
CREATE TABLE list_confirmations (
    list_id       INTEGER NOT NULL,
    subscriber_id INTEGER NOT NULL REFERENCES subscribers(id),
    campaign_id   INTEGER NOT NULL REFERENCES campaigns(id),
    created_at    INTEGER NOT NULL,
    confirmed_at  INTEGER,
    PRIMARY KEY (list_id, subscriber_id)
) WITHOUT ROWID;
CREATE INDEX list_confirmations_campaign ON list_confirmations(campaign_id);

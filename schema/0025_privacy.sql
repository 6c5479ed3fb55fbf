-- 0025_privacy: consent records, one row per opt-in (a form, the API, an import or an
-- operator's add with the basis they declared), and the confirmation of a double opt-in
-- written onto the row it confirms. `ip` is kept as the `[privacy] consent_ip` policy says
-- (store, truncate, omit) at the time of the opt-in. `list_id` NULL: the opt-in named no
-- list (the account). No foreign key on list_id, as in campaign_lists: a removed list keeps
-- its records. `subscriber erase` deletes a subscriber's records (docs/privacy.md).
-- Append-only.
CREATE TABLE consents (
    id                 INTEGER PRIMARY KEY,
    account_id         INTEGER NOT NULL REFERENCES accounts(id),
    subscriber_id      INTEGER NOT NULL REFERENCES subscribers(id),
    list_id            INTEGER,
    source             TEXT NOT NULL
                       CHECK (source IN ('form', 'api', 'import', 'cli', 'dashboard')),
    basis              TEXT,   -- the lawful basis declared (import, API, operator)
    ip                 TEXT,   -- the client's address, per the policy
    user_agent         TEXT,
    text_shown         TEXT,   -- the form's or list's text the person saw
    created_at         INTEGER NOT NULL,
    confirmed_at       INTEGER, -- double opt-in: when the link was used
    confirm_ip         TEXT,
    confirm_user_agent TEXT
);
CREATE INDEX consents_subscriber ON consents(subscriber_id, list_id);

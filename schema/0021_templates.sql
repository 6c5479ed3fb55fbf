-- 0021_templates: stored templates and attachments for the HTTP API's messages.
--
-- A template is saved under a name; each save of a name is a new version, and a version never
-- changes, so a message rendered from it can always be traced to the exact source. A message
-- made from a template is rendered when it is accepted and its content stored as every stream
-- message's is (`message_contents`): a retry sends the same bytes whatever is saved later.
-- `message_contents.template_id` names the version it came from.
--
-- An attachment is stored once per message, in the order the request gave it, and read by the
-- claim with the message's content; a retry reads the same rows. Append-only.

CREATE TABLE templates (
    id          INTEGER PRIMARY KEY,
    account_id  INTEGER NOT NULL REFERENCES accounts(id),
    name        TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 64),
    version     INTEGER NOT NULL CHECK (version >= 1),
    subject     TEXT,
    text        TEXT,
    html        TEXT,
    created_at  INTEGER NOT NULL,
    CHECK (text IS NOT NULL OR html IS NOT NULL),
    UNIQUE (account_id, name, version)
);

ALTER TABLE message_contents ADD COLUMN template_id INTEGER REFERENCES templates(id);

CREATE TABLE message_attachments (
    message_id   INTEGER NOT NULL REFERENCES message_contents(id),
    position     INTEGER NOT NULL CHECK (position >= 0),
    filename     TEXT NOT NULL CHECK (length(filename) > 0),
    content_type TEXT NOT NULL,
    content_id   TEXT,
    data         BLOB NOT NULL,
    PRIMARY KEY (message_id, position)
) WITHOUT ROWID;

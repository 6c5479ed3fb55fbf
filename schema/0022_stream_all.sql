-- 0022_stream_all: double opt-in confirmations and `sendonce notify`'s notifications join the
-- account's stream, as API messages did in 0020: no hidden one-row campaign each any more.
--
-- A stream row's content is no longer stored under its API message's id: it has its own id
-- (`sends.message_id`), so a row that is no API message (a confirmation, a notification) has
-- content too. Two new columns say what the content is:
--   `templated`  1 when the subject and body are templates rendered per row with the row's
--                captured variables (a confirmation: its list's text and the row's confirm
--                link), 0 when they are the literal text (API messages, notifications);
--   `notify_key` the notification a content belongs to (`<channel>:<key>`), shared by its
--                recipients' rows, so a retried `notify` finds the content of its first call.
-- Each hidden campaign of a confirmation (kind 'api', not a stream) or a notification (kind
-- 'notify') is folded into its account's stream for its channel (made if the account has
-- none): its content is copied out, each of its rows keeps its id, job id (so its provider
-- idempotency key), state and variables, `list_confirmations` names the stream, and the
-- hidden campaign goes with its counts and list. Append-only.

ALTER TABLE message_contents ADD COLUMN templated INTEGER NOT NULL DEFAULT 0
    CHECK (templated IN (0, 1));
ALTER TABLE message_contents ADD COLUMN notify_key TEXT;
CREATE UNIQUE INDEX message_contents_notify ON message_contents(account_id, notify_key)
    WHERE notify_key IS NOT NULL;

-- The campaigns to fold: confirmations (kind 'api' that are no stream) and notifications.
CREATE TEMP TABLE hidden_0022 AS
    SELECT id, account_id, channel, kind, name, status, created_at FROM campaigns
    WHERE stream = 0 AND kind IN ('api', 'notify');

-- A stream is always sending: a hidden campaign an operator paused or cancelled (or one not
-- started) must not send from it. Its rows not yet called are cancelled; one that may have
-- gone (dispatched, or a retry of one that may have) is in doubt, never sent again.
UPDATE sends SET
    status = CASE WHEN doubt_since IS NULL AND (status = 'queued' OR dispatched_at IS NULL)
                  THEN 'cancelled' ELSE 'in_doubt' END,
    doubt_since = CASE WHEN doubt_since IS NULL AND (status = 'queued' OR dispatched_at IS NULL)
                       THEN NULL ELSE coalesce(doubt_since, dispatched_at) END,
    lease_token = NULL,
    updated_at = CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)
WHERE status IN ('queued', 'leased')
  AND campaign_id IN (SELECT id FROM hidden_0022 WHERE status NOT IN ('sending', 'sent'));

-- A stream for every (account, channel) that has hidden campaigns and no stream yet.
INSERT INTO campaigns (account_id, name, channel, body, templated, status, scheduled_for,
                       approved_at, started_at, list_complete, created_at, kind, transactional,
                       stream)
    SELECT h.account_id, 'stream: ' || h.channel, h.channel,
           'the stream''s messages carry their own content', 0, 'sending', min(h.created_at),
           min(h.created_at), min(h.created_at), 1, min(h.created_at), 'api', 1, 1
    FROM hidden_0022 h
    WHERE NOT EXISTS (SELECT 1 FROM campaigns st WHERE st.stream = 1
                      AND st.account_id = h.account_id AND st.channel = h.channel)
    GROUP BY h.account_id, h.channel;

-- Each hidden campaign's content gets the next free content id, in campaign order.
CREATE TEMP TABLE folded_0022 AS
    SELECT h.id AS hidden, st.id AS stream,
           (SELECT coalesce(max(id), 0) FROM message_contents)
               + row_number() OVER (ORDER BY h.id) AS content
    FROM hidden_0022 h
    JOIN campaigns st ON st.stream = 1 AND st.account_id = h.account_id
                     AND st.channel = h.channel;

INSERT INTO message_contents (id, account_id, sender, reply_to, subject, body, body_format,
                              html, created_at, templated, notify_key)
    SELECT f.content, k.account_id, k.sender, k.reply_to, k.subject, k.body, k.body_format,
           k.html, k.created_at, k.templated,
           CASE WHEN k.kind = 'notify' THEN k.channel || ':' || substr(k.name, 8) END
    FROM folded_0022 f JOIN campaigns k ON k.id = f.hidden;

-- The rows move with their ids, job ids, states and variables (the counters' trigger moves
-- their counts to the stream).
UPDATE sends SET campaign_id = f.stream, message_id = f.content
    FROM folded_0022 f WHERE sends.campaign_id = f.hidden;
UPDATE list_confirmations SET campaign_id = f.stream
    FROM folded_0022 f WHERE list_confirmations.campaign_id = f.hidden;

-- A campaign's lists are frozen once it leaves draft (0004's triggers): the empty hidden
-- campaign goes back to draft first, so its list row can go with it.
UPDATE campaigns SET status = 'draft' WHERE id IN (SELECT hidden FROM folded_0022);
DELETE FROM campaign_lists WHERE campaign_id IN (SELECT hidden FROM folded_0022);
DELETE FROM campaign_counts WHERE campaign_id IN (SELECT hidden FROM folded_0022);
DELETE FROM campaigns WHERE id IN (SELECT hidden FROM folded_0022);
DROP TABLE folded_0022;
DROP TABLE hidden_0022;

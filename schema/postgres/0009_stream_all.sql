-- 0009_stream_all: double opt-in confirmations and `sendonce notify`'s notifications join the
-- account's stream, as API messages did in 0007; SQLite's schema/0022_stream_all.sql says why
-- and how. A content has its own id (not its API message's), `templated` (rendered per row
-- with the row's variables: a confirmation) and `notify_key` (`<channel>:<key>`, the
-- notification it belongs to). Each hidden campaign (kind 'api' that is no stream, or kind
-- 'notify') is folded into its account's stream for its channel, its rows keeping their ids,
-- job ids, states and variables. Append-only.
ALTER TABLE message_contents ADD COLUMN templated BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE message_contents ADD COLUMN notify_key TEXT;
CREATE UNIQUE INDEX message_contents_notify ON message_contents(account_id, notify_key)
    WHERE notify_key IS NOT NULL;

-- API messages stored their content under their own id: the sequence starts past them.
SELECT setval(pg_get_serial_sequence('message_contents', 'id'),
              greatest((SELECT max(id) FROM message_contents), 1),
              (SELECT max(id) FROM message_contents) IS NOT NULL);

CREATE TEMP TABLE hidden_0009 ON COMMIT DROP AS
    SELECT id, account_id, channel, kind, name, status, created_at FROM campaigns
    WHERE NOT stream AND kind IN ('api', 'notify');

-- A stream is always sending: a hidden campaign an operator paused or cancelled (or one not
-- started) must not send from it. Its rows not yet called are cancelled; one that may have
-- gone is in doubt, never sent again.
UPDATE sends SET
    status = CASE WHEN doubt_since IS NULL AND (status = 'queued' OR dispatched_at IS NULL)
                  THEN 'cancelled' ELSE 'in_doubt' END,
    doubt_since = CASE WHEN doubt_since IS NULL AND (status = 'queued' OR dispatched_at IS NULL)
                       THEN NULL ELSE coalesce(doubt_since, dispatched_at) END,
    lease_token = NULL,
    updated_at = (extract(epoch FROM clock_timestamp()) * 1000)::bigint
WHERE status IN ('queued', 'leased')
  AND campaign_id IN (SELECT id FROM hidden_0009 WHERE status NOT IN ('sending', 'sent'));

INSERT INTO campaigns (account_id, name, channel, body, templated, status, scheduled_for,
                       approved_at, started_at, list_complete, created_at, kind, transactional,
                       stream)
    SELECT h.account_id, 'stream: ' || h.channel, h.channel,
           'the stream''s messages carry their own content', FALSE, 'sending',
           min(h.created_at), min(h.created_at), min(h.created_at), TRUE, min(h.created_at),
           'api', TRUE, TRUE
    FROM hidden_0009 h
    WHERE NOT EXISTS (SELECT 1 FROM campaigns st WHERE st.stream
                      AND st.account_id = h.account_id AND st.channel = h.channel)
    GROUP BY h.account_id, h.channel;

CREATE TEMP TABLE folded_0009 ON COMMIT DROP AS
    SELECT h.id AS hidden, st.id AS stream,
           nextval(pg_get_serial_sequence('message_contents', 'id')) AS content
    FROM hidden_0009 h
    JOIN campaigns st ON st.stream AND st.account_id = h.account_id AND st.channel = h.channel
    ORDER BY h.id;

INSERT INTO message_contents (id, account_id, sender, reply_to, subject, body, body_format,
                              html, created_at, templated, notify_key)
    SELECT f.content, k.account_id, k.sender, k.reply_to, k.subject, k.body, k.body_format,
           k.html, k.created_at, k.templated,
           CASE WHEN k.kind = 'notify' THEN k.channel || ':' || substr(k.name, 8) END
    FROM folded_0009 f JOIN campaigns k ON k.id = f.hidden;

UPDATE sends s SET campaign_id = f.stream, message_id = f.content
    FROM folded_0009 f WHERE s.campaign_id = f.hidden;
UPDATE list_confirmations lc SET campaign_id = f.stream
    FROM folded_0009 f WHERE lc.campaign_id = f.hidden;

-- A campaign's lists are frozen once it leaves draft: the empty hidden campaign goes back to
-- draft first, so its list row can go with it.
UPDATE campaigns SET status = 'draft' WHERE id IN (SELECT hidden FROM folded_0009);
DELETE FROM campaign_lists WHERE campaign_id IN (SELECT hidden FROM folded_0009);
DELETE FROM campaigns WHERE id IN (SELECT hidden FROM folded_0009);

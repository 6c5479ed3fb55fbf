-- 0008_unsubscribe: campaigns marked transactional (receipts, password resets: no
-- List-Unsubscribe, and approvable without a public unsubscribe URL). API messages
-- (kind 'api') and notifications (kind 'notify') count as transactional whatever this says.
-- Append-only.

ALTER TABLE campaigns ADD COLUMN transactional INTEGER NOT NULL DEFAULT 0
    CHECK (transactional IN (0, 1));

-- Frozen after approval like the rest of the content (0001, 0005): the approval checked it.
CREATE TRIGGER campaigns_content_frozen_0008
BEFORE UPDATE OF transactional ON campaigns
WHEN OLD.status <> 'draft'
BEGIN
    SELECT RAISE(ABORT, 'campaign content is frozen after approval');
END;

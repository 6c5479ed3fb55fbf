-- 0005_content: HTML bodies, Reply-To, audience filters and the SMS opt-out footer.
-- Append-only.

-- body_format 'text': `body` is the text template and `html`, when set, the HTML alternative.
-- body_format 'html': `body` is the HTML template and the text part is generated from each
-- recipient's rendered HTML (0001 made `body` NOT NULL, so it holds the HTML then).
ALTER TABLE campaigns ADD COLUMN body_format TEXT NOT NULL DEFAULT 'text'
    CHECK (body_format IN ('text', 'html'));
ALTER TABLE campaigns ADD COLUMN html TEXT CHECK (html IS NULL OR length(html) > 0);
ALTER TABLE campaigns ADD COLUMN reply_to TEXT;
-- An audience filter on subscriber attributes (src/domain/segment.rs); NULL: everyone targeted.
ALTER TABLE campaigns ADD COLUMN filter TEXT;
-- Appended to every SMS of the campaign: copied from the account at create, then frozen.
ALTER TABLE campaigns ADD COLUMN sms_footer TEXT;

-- The footer an account's new SMS campaigns get ("Reply STOP to opt out"); NULL: none.
ALTER TABLE accounts ADD COLUMN sms_footer TEXT;

-- The new content columns are frozen after approval like the old ones (0001).
CREATE TRIGGER campaigns_content_frozen_0005
BEFORE UPDATE OF body_format, html, reply_to, filter, sms_footer ON campaigns
WHEN OLD.status <> 'draft'
BEGIN
    SELECT RAISE(ABORT, 'campaign content is frozen after approval');
END;

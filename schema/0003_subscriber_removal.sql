-- 0003_subscriber_removal: `subscriber remove` of someone with past sends keeps the ledger
-- rows (they reference the subscriber) and blanks the subscriber instead: no name, no
-- attributes, status 'unsubscribed', removed_at set. Removed subscribers are listed nowhere
-- and never sent to; adding the same address again brings the row back. Append-only.

ALTER TABLE subscribers ADD COLUMN removed_at INTEGER;

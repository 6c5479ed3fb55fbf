-- 0026_windows: send windows and SMS quiet hours (docs/campaigns.md, "Send windows").
-- An account has a zone (`tz`, an IANA name, UTC until set), an optional default send window
-- and SMS quiet hours (08:00-21:00 unless changed; NULL: off). A campaign copies them at
-- create, with its own overrides, as it copies the SMS footer: `send_window` and `sms_hours`
-- are local-time windows `HH:MM-HH:MM` honoured at claim in each recipient's zone, `tz` the
-- zone used when a recipient's is unknown. Campaigns made before this migration have none.
-- Append-only.
ALTER TABLE accounts ADD COLUMN tz TEXT NOT NULL DEFAULT 'UTC';
ALTER TABLE accounts ADD COLUMN send_window TEXT;
ALTER TABLE accounts ADD COLUMN sms_hours TEXT DEFAULT '08:00-21:00';
ALTER TABLE campaigns ADD COLUMN tz TEXT;
ALTER TABLE campaigns ADD COLUMN send_window TEXT;
ALTER TABLE campaigns ADD COLUMN sms_hours TEXT;

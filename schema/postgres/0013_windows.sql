-- 0013_windows: send windows and SMS quiet hours (SQLite's schema/0026_windows.sql, which
-- explains them). Append-only.
ALTER TABLE accounts ADD COLUMN tz TEXT NOT NULL DEFAULT 'UTC';
ALTER TABLE accounts ADD COLUMN send_window TEXT;
ALTER TABLE accounts ADD COLUMN sms_hours TEXT DEFAULT '08:00-21:00';
ALTER TABLE campaigns ADD COLUMN tz TEXT;
ALTER TABLE campaigns ADD COLUMN send_window TEXT;
ALTER TABLE campaigns ADD COLUMN sms_hours TEXT;

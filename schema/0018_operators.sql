-- 0018_operators: a dashboard admin's role (issue 37). `account` (every admin made before this
-- migration, and the default): sees and acts for its own account only. `operator`: besides its
-- account, sees the server-wide settings (the database, the default provider, every account's
-- webhook secrets and the doctor's findings) on the dashboard's Settings page. Made with
-- `sendonce admin create --operator`; shown by `admin list`. Append-only.
ALTER TABLE admins ADD COLUMN role TEXT NOT NULL DEFAULT 'account'
    CHECK (role = 'account' OR role = 'operator');

-- 0005_operators: a dashboard admin's role, as SQLite's 0018_operators (existing admins are
-- account admins; `operator` also sees server-wide settings). Append-only.
ALTER TABLE admins ADD COLUMN role TEXT NOT NULL DEFAULT 'account'
    CHECK (role = 'account' OR role = 'operator');

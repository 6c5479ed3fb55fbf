-- 0013_logins: the dashboard's admins (`sendonce admin create`) and their sessions. An admin
-- belongs to one account and sees only its data. The password is kept only as an Argon2id PHC
-- string; a session only as the SHA-256 of its cookie. A removed admin keeps its row
-- (`removed_at`) and can no longer log in; its sessions are deleted. Append-only.
CREATE TABLE admins (
    id            INTEGER PRIMARY KEY,
    account_id    INTEGER NOT NULL REFERENCES accounts(id),
    name          TEXT NOT NULL UNIQUE,
    password_hash TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    removed_at    INTEGER
);
CREATE INDEX admins_account ON admins(account_id);
CREATE TABLE admin_sessions (
    id           INTEGER PRIMARY KEY,
    admin_id     INTEGER NOT NULL REFERENCES admins(id),
    hash         BLOB NOT NULL UNIQUE,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    -- Updated at most once a minute per session, not on every request.
    last_seen_at INTEGER NOT NULL
);
CREATE INDEX admin_sessions_admin ON admin_sessions(admin_id);

-- 0006_tokens: API tokens of `sendonce serve`, one account each. The token itself is never
-- stored: only its SHA-256 (`hash`, the lookup key) and the first characters people see in
-- lists (`prefix`, e.g. 'so_ab12cd'). A revoked token keeps its row (`revoked_at`) and never
-- authenticates again. Append-only.
CREATE TABLE api_tokens (
    id           INTEGER PRIMARY KEY,
    account_id   INTEGER NOT NULL REFERENCES accounts(id),
    name         TEXT NOT NULL,
    scope        TEXT NOT NULL CHECK (scope IN ('send', 'read', 'admin')),
    prefix       TEXT NOT NULL,
    hash         BLOB NOT NULL UNIQUE,
    created_at   INTEGER NOT NULL,
    -- Updated at most once a minute per token (src/domain/token.rs), not on every request.
    last_used_at INTEGER,
    revoked_at   INTEGER
);
CREATE INDEX api_tokens_account ON api_tokens(account_id);

-- Sessions of one key, newest first: signing in keeps at most a few per
-- key (access.MaxSessionsPerKey), so a key cannot grow the table without
-- bound.

-- +goose Up
CREATE INDEX web_sessions_key ON web_sessions (key_id, created_at DESC);

-- +goose Down
DROP INDEX web_sessions_key;

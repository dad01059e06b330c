-- Web UI sessions: signing in with an API key makes a session whose
-- cookie holds a random token; only its SHA-256 is stored. A session acts
-- as its key (revoking or expiring the key ends it) until expires_at.

-- +goose Up
CREATE TABLE web_sessions (
    hash       BYTEA PRIMARY KEY,
    key_id     UUID NOT NULL REFERENCES api_keys (id),
    csrf       TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX web_sessions_expires ON web_sessions (expires_at);

-- +goose Down
DROP TABLE web_sessions;

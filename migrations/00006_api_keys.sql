-- API keys: every RPC acts as the principal of one key, in the key's
-- tenant, with the key's role. A key is 256 random bits, shown once; only
-- its SHA-256 is stored (a slow hash buys nothing against a key of full
-- entropy), with a visible prefix to recognise it.

-- +goose Up
CREATE TABLE api_keys (
    id         UUID PRIMARY KEY,
    tenant_id  UUID NOT NULL REFERENCES tenants (id),
    principal  TEXT NOT NULL,
    role       TEXT NOT NULL CHECK (role IN ('reader', 'editor', 'admin')),
    prefix     TEXT NOT NULL UNIQUE,
    hash       BYTEA NOT NULL UNIQUE,
    created_at TIMESTAMPTZ NOT NULL,
    created_by TEXT NOT NULL,
    expires_at TIMESTAMPTZ,
    revoked_at TIMESTAMPTZ
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id, created_at);

-- +goose Down
DROP TABLE api_keys;

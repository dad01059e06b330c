-- Event sources (docs/events.md, "Signed webhooks"): a tenant admin
-- defines a source; deliveries to /api/v1/hooks/TENANT:NAME are verified
-- with its secret before anything is read or written, and become events of
-- the tenant with the source's name as their source (an event's id is
-- taken once per tenant and source).
--
-- secret is a reference (secret://env/NAME or secret://file/PATH), never
-- a value: the API process resolves it under its --secret-env and
-- --secret-dir grants for the source's namespace, as a worker resolves a
-- step's.

-- +goose Up
CREATE TABLE event_sources (
    id         UUID PRIMARY KEY,
    tenant_id  UUID NOT NULL REFERENCES tenants (id),
    name       TEXT NOT NULL,
    namespace  TEXT NOT NULL,
    kind       TEXT NOT NULL CHECK (kind IN ('github', 'stripe', 'hmac')),
    secret     TEXT NOT NULL CHECK (secret LIKE 'secret://%'),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, name)
);

-- +goose Down
DROP TABLE event_sources;

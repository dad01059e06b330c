-- The history of definitions as a tenant's storage, and the remote
-- workers of a key, bounded (README, "Bounds a tenant cannot pass").
--
-- tenants.max_history_bytes and tenant_job_usage.history_bytes: what the
-- versions of a tenant's definitions kept besides the live ones, and the
-- audit rows of its jobs' changes (their before and after), take; 0 is no
-- quota. An update writes a version and an audit row of two definitions,
-- which no other quota counted: a loop of updates grew the database
-- without bound. Counted from migration on (orrery migrate recount-usage
-- counts what is there).
--
-- workers.key_id: the API key a remote worker's row belongs to (NULL for
-- worker processes), so that the worker names a key runs, and the slots
-- they declare together, are bounded (docs/remote-workers.md).

-- +goose Up
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS max_history_bytes BIGINT NOT NULL DEFAULT 0 CHECK (max_history_bytes >= 0);
ALTER TABLE tenant_job_usage ADD COLUMN IF NOT EXISTS history_bytes BIGINT NOT NULL DEFAULT 0;
ALTER TABLE workers ADD COLUMN IF NOT EXISTS key_id UUID;
CREATE INDEX IF NOT EXISTS workers_key ON workers (key_id) WHERE key_id IS NOT NULL;

-- +goose Down
DROP INDEX IF EXISTS workers_key;
ALTER TABLE workers DROP COLUMN IF EXISTS key_id;
ALTER TABLE tenant_job_usage DROP COLUMN IF EXISTS history_bytes;
ALTER TABLE tenants DROP COLUMN IF EXISTS max_history_bytes;

-- Remote workers (docs/remote-workers.md): processes of any language that
-- claim attempts over WorkerService. A gateway (every API node) turns the
-- River job of a remote task into an offer; a claim deletes the offers it
-- takes and starts their attempts on the remote worker, each under a
-- lease of its own (tasks.lease_expires_at, unused since 00015, renewed
-- by the worker's heartbeats that name it). Worker keys (role 'worker')
-- may claim, renew and report for the types and namespaces they hold.

-- +goose Up
CREATE TABLE remote_offers (
    task_id     UUID PRIMARY KEY,
    attempt     INT NOT NULL,       -- the attempt a claim starts
    tenant_id   UUID NOT NULL,
    queue       TEXT NOT NULL,      -- the task's (QUEUE@TENANT_ID)
    worker_type TEXT NOT NULL,
    namespace   TEXT NOT NULL,
    priority    INT NOT NULL,
    offered_at  TIMESTAMPTZ NOT NULL
);
CREATE INDEX remote_offers_claim ON remote_offers (queue, worker_type, priority, offered_at);

-- The attempts running under a lease of their own (remote ones), for the
-- reaper once it lapses; deadline_at is such an attempt's start plus its
-- step's timeout, past which its lease is not renewed.
ALTER TABLE tasks ADD COLUMN deadline_at TIMESTAMPTZ;
-- A task with a deadline_at runs remotely; lease_expires_at values written
-- before 00015 (never cleared) mean nothing without one.
CREATE INDEX tasks_own_lease ON tasks (lease_expires_at) INCLUDE (id, fencing_token)
    WHERE status = 'running' AND deadline_at IS NOT NULL;

-- A remote worker's row: its tenant (NULL: a worker process of the
-- cluster's own) and the types it serves.
ALTER TABLE workers ADD COLUMN tenant_id UUID;
ALTER TABLE workers ADD COLUMN types JSONB NOT NULL DEFAULT '[]';

ALTER TABLE api_keys DROP CONSTRAINT api_keys_role;
ALTER TABLE api_keys ADD CONSTRAINT api_keys_role CHECK (role IN ('none', 'reader', 'editor', 'admin', 'worker'));
ALTER TABLE api_keys ADD COLUMN worker_types JSONB NOT NULL DEFAULT '[]';
ALTER TABLE api_keys ADD COLUMN worker_namespaces JSONB NOT NULL DEFAULT '[]';

-- +goose Down
ALTER TABLE api_keys DROP COLUMN worker_namespaces;
ALTER TABLE api_keys DROP COLUMN worker_types;
ALTER TABLE api_keys DROP CONSTRAINT api_keys_role;
ALTER TABLE api_keys ADD CONSTRAINT api_keys_role CHECK (role IN ('none', 'reader', 'editor', 'admin'));
ALTER TABLE workers DROP COLUMN types;
ALTER TABLE workers DROP COLUMN tenant_id;
DROP INDEX tasks_own_lease;
ALTER TABLE tasks DROP COLUMN deadline_at;
DROP TABLE remote_offers;

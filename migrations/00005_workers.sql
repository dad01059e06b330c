-- Worker processes under a lease, as nodes are. A River job that a worker
-- fetched but whose attempt it never started (it died or stopped between
-- River's fetch and the start) is found through this table once the
-- worker's lease lapses, and delivered again.

-- +goose Up
CREATE TABLE workers (
    id               UUID PRIMARY KEY,         -- the process's River client id
    name             TEXT NOT NULL,            -- shown on attempts and in the cluster view
    queues           JSONB NOT NULL,           -- {"queue": concurrency}
    started_at       TIMESTAMPTZ NOT NULL,
    heartbeat_at     TIMESTAMPTZ NOT NULL,
    lease_expires_at TIMESTAMPTZ NOT NULL,
    -- When the reaper last redelivered what this worker had fetched; a
    -- lapsed worker with swept_at < lease_expires_at is still to sweep.
    swept_at         TIMESTAMPTZ
);
CREATE INDEX workers_lease ON workers (lease_expires_at);

-- A redelivered task's River job carries the stranded job's id (a unique
-- key of its own), through the outbox too.
ALTER TABLE dispatch_outbox ADD COLUMN redelivers BIGINT NOT NULL DEFAULT 0;

-- Runs that overlap: queue holds back (few): the reaper looks for those
-- whose job has no active run left.
CREATE INDEX runs_queued ON runs (job_id) WHERE status = 'queued';

-- +goose Down
DROP INDEX runs_queued;
ALTER TABLE dispatch_outbox DROP COLUMN redelivers;
DROP TABLE workers;

-- Schedules as operators need them.
--
-- Fair firing: the scheduler takes due jobs tenant by tenant (weighted),
-- so that one tenant's backlog of firings does not hold another's due
-- instants behind it. job_schedules learns each job's tenant (a job never
-- changes tenant), and an index gives each tenant's due jobs in fire-time
-- order (store DueJobsFair).
--
-- Outside a transaction, re-runnable as 00017: a fill that stopped half way
-- is completed by running it again. Nodes older than this migration do not
-- write the column: every serve process is stopped before this runs
-- (README, upgrading).

-- Backfills: a range of a job's instants fired as runs with trigger
-- backfill, a few at a time, by the scheduler of the job's shard (fenced
-- as its firing is); cursor_at moves in the transaction that writes the
-- runs, so a crash neither doubles nor loses an instant.
--
-- Alerts learn the kind paused (pause_after_failures paused the job). The
-- check constraint is named as PostgreSQL named it in 00013
-- (alerts_kind_check; CockroachDB named it check_kind).

-- +goose NO TRANSACTION

-- +goose Up
ALTER TABLE job_schedules ADD COLUMN IF NOT EXISTS tenant_id UUID;

UPDATE job_schedules AS s SET tenant_id = j.tenant_id FROM jobs AS j WHERE j.id = s.job_id AND s.tenant_id IS NULL;

ALTER TABLE job_schedules ALTER COLUMN tenant_id SET NOT NULL;

CREATE INDEX IF NOT EXISTS job_schedules_tenant_due ON job_schedules (tenant_id, next_fire_at) WHERE next_fire_at IS NOT NULL;

ALTER TABLE alerts DROP CONSTRAINT IF EXISTS alerts_kind_check;
ALTER TABLE alerts DROP CONSTRAINT IF EXISTS check_kind;
ALTER TABLE alerts ADD CONSTRAINT alerts_kind_check CHECK (kind IN ('missed', 'stuck', 'failure', 'dead_letter', 'paused'));

CREATE TABLE IF NOT EXISTS backfills (
    id             UUID PRIMARY KEY,
    tenant_id      UUID NOT NULL,
    job_id         UUID NOT NULL REFERENCES jobs (id),
    shard          INT NOT NULL,
    from_at        TIMESTAMPTZ NOT NULL,
    to_at          TIMESTAMPTZ NOT NULL,
    redo           TEXT NOT NULL CHECK (redo IN ('none', 'failed', 'all')),
    max_concurrent INT NOT NULL CHECK (max_concurrent > 0),
    newest_first   BOOL NOT NULL,
    -- Oldest first: the instants after cursor_at are left; newest first,
    -- those before it. NULL: none done yet.
    cursor_at      TIMESTAMPTZ,
    total          INT NOT NULL,           -- the range's instants when it was asked for
    created        INT NOT NULL DEFAULT 0, -- runs written
    existing       INT NOT NULL DEFAULT 0, -- instants that had a run already, left alone
    retried        INT NOT NULL DEFAULT 0, -- runs retried (redo)
    status         TEXT NOT NULL CHECK (status IN ('running', 'done', 'cancelled')),
    reason         TEXT NOT NULL DEFAULT '',
    created_at     TIMESTAMPTZ NOT NULL,
    created_by     TEXT NOT NULL,
    finished_at    TIMESTAMPTZ
);

-- The backfill that wrote a run (NULL for every other run): its runs do
-- not count for the job's overlap policy (max_concurrent bounds them).
ALTER TABLE runs ADD COLUMN IF NOT EXISTS backfill_id UUID;

CREATE INDEX IF NOT EXISTS backfills_running ON backfills (shard, created_at) WHERE status = 'running';
CREATE INDEX IF NOT EXISTS backfills_job ON backfills (job_id, created_at DESC);

-- +goose Down
ALTER TABLE runs DROP COLUMN IF EXISTS backfill_id;
DROP TABLE IF EXISTS backfills;
DELETE FROM alerts WHERE kind = 'paused';
ALTER TABLE alerts DROP CONSTRAINT IF EXISTS alerts_kind_check;
ALTER TABLE alerts ADD CONSTRAINT alerts_kind_check CHECK (kind IN ('missed', 'stuck', 'failure', 'dead_letter'));
DROP INDEX IF EXISTS job_schedules_tenant_due;
ALTER TABLE job_schedules DROP COLUMN IF EXISTS tenant_id;

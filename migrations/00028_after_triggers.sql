-- Jobs started by another job's outcome (spec.schedule.after).
--
-- job_triggers: a row per job whose schedule has after, written with its
-- definition (create, update, delete): the upstream job by tenant,
-- namespace and name (it may not exist yet, or be deleted and created
-- again under its name), and the outcomes that start a run.
--
-- upstream_finishes: a row written by the statement that ends a run of a
-- job some trigger names (the statements that write run_finishes); the
-- scheduler of the upstream run's shard turns it into the downstream runs
-- and deletes it in one transaction, so a crash between an upstream's end
-- and its downstream runs neither loses nor doubles one. A queue: small.
--
-- runs.upstream: what the expressions of a run an upstream started read
-- as run.upstream; runs.trigger learns upstream (the check constraint as
-- PostgreSQL named it in 00003; CockroachDB named it check_trigger),
-- added NOT VALID and validated apart, so that runs is not locked while
-- it is read: outside a transaction (each statement its own, as 00024),
-- re-runnable, so that a migration that stopped half way is completed by
-- running it again.

-- +goose NO TRANSACTION

-- +goose Up
CREATE TABLE IF NOT EXISTS job_triggers (
    job_id             UUID PRIMARY KEY REFERENCES jobs (id),
    tenant_id          UUID NOT NULL,
    upstream_namespace TEXT NOT NULL,
    upstream_name      TEXT NOT NULL,
    outcomes           TEXT[] NOT NULL
);
CREATE INDEX IF NOT EXISTS job_triggers_upstream ON job_triggers (tenant_id, upstream_namespace, upstream_name);

CREATE TABLE IF NOT EXISTS upstream_finishes (
    run_id      UUID NOT NULL,
    finished_at TIMESTAMPTZ NOT NULL,
    shard       INT NOT NULL,
    status      TEXT NOT NULL,
    PRIMARY KEY (run_id, finished_at)
);
CREATE INDEX IF NOT EXISTS upstream_finishes_shard ON upstream_finishes (shard, finished_at);

ALTER TABLE runs ADD COLUMN IF NOT EXISTS upstream JSONB;
ALTER TABLE runs DROP CONSTRAINT IF EXISTS runs_trigger_check;
ALTER TABLE runs DROP CONSTRAINT IF EXISTS check_trigger;
ALTER TABLE runs ADD CONSTRAINT runs_trigger_check CHECK (trigger IN ('schedule', 'manual', 'backfill', 'replay', 'upstream')) NOT VALID;
ALTER TABLE runs VALIDATE CONSTRAINT runs_trigger_check;

-- +goose Down
-- Refused while runs of trigger upstream exist: they are history.
ALTER TABLE runs DROP CONSTRAINT IF EXISTS runs_trigger_check;
ALTER TABLE runs ADD CONSTRAINT runs_trigger_check CHECK (trigger IN ('schedule', 'manual', 'backfill', 'replay'));
ALTER TABLE runs DROP COLUMN IF EXISTS upstream;
DROP TABLE IF EXISTS upstream_finishes;
DROP TABLE IF EXISTS job_triggers;

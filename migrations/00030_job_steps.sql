-- A step that runs another job (run.job, docs/workflows.md "A step that
-- runs another job"; the design in docs/dynamic-workflows.md).
--
-- tasks.job_step marks the task of such a step (written with its run, as
-- conditional and fan_out are): released, it starts its child run in the
-- releasing transaction instead of going to a worker pool, and is
-- running, with child_run_id, until the child run ends.
--
-- runs.parent_task_id is the task whose release started the run (trigger
-- parent); one child run per task, ever (runs_parent_task): a task
-- released again (a retry of its run) attaches to the child it started.
-- runs.depth counts the parents above a run, bounded at run time.
--
-- A child run's end is an upstream_finishes event as an upstream's is:
-- the scheduler of its shard ends the parent step in one transaction with
-- the event's deletion. An event whose transaction keeps failing is set
-- aside (tries, retry_at, last_error) so that the others go on.
--
-- job_calls: the jobs a job's steps run, by namespace and name, written
-- with its definition (as job_triggers is), read to refuse a cycle of
-- jobs running each other at apply, and, with the key of the writer whose
-- right apply checked, to check that right again when a step starts.
--
-- Outside a transaction, as 00028: each statement may run again after a
-- crash part way.

-- +goose NO TRANSACTION
-- +goose Up
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS job_step BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS child_run_id UUID;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS parent_task_id UUID;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS depth INT NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX IF NOT EXISTS runs_parent_task ON runs (parent_task_id) WHERE parent_task_id IS NOT NULL;

CREATE TABLE IF NOT EXISTS job_calls (
    job_id            UUID NOT NULL REFERENCES jobs (id),
    tenant_id         UUID NOT NULL,
    callee_namespace  TEXT NOT NULL,
    callee_name       TEXT NOT NULL,
    -- the key of the writer whose right to run the callee apply checked,
    -- checked again when a step starts (NULL: written without a key)
    author_key        UUID,
    PRIMARY KEY (job_id, callee_namespace, callee_name)
);
CREATE INDEX IF NOT EXISTS job_calls_callee ON job_calls (tenant_id, callee_namespace, callee_name);

-- An event of a run's end that its step cannot take (an error that stays)
-- is set aside, retried later, so that it holds up no other.
ALTER TABLE upstream_finishes ADD COLUMN IF NOT EXISTS tries INT NOT NULL DEFAULT 0;
ALTER TABLE upstream_finishes ADD COLUMN IF NOT EXISTS retry_at TIMESTAMPTZ;
ALTER TABLE upstream_finishes ADD COLUMN IF NOT EXISTS last_error TEXT NOT NULL DEFAULT '';

ALTER TABLE runs DROP CONSTRAINT IF EXISTS runs_trigger_check;
ALTER TABLE runs DROP CONSTRAINT IF EXISTS check_trigger;
ALTER TABLE runs ADD CONSTRAINT runs_trigger_check CHECK (trigger IN ('schedule', 'manual', 'backfill', 'replay', 'upstream', 'parent')) NOT VALID;
ALTER TABLE runs VALIDATE CONSTRAINT runs_trigger_check;

-- +goose Down
-- Refused while runs of trigger parent exist: they are history.
ALTER TABLE runs DROP CONSTRAINT IF EXISTS runs_trigger_check;
ALTER TABLE runs ADD CONSTRAINT runs_trigger_check CHECK (trigger IN ('schedule', 'manual', 'backfill', 'replay', 'upstream'));
ALTER TABLE upstream_finishes DROP COLUMN IF EXISTS last_error;
ALTER TABLE upstream_finishes DROP COLUMN IF EXISTS retry_at;
ALTER TABLE upstream_finishes DROP COLUMN IF EXISTS tries;
DROP TABLE IF EXISTS job_calls;
DROP INDEX IF EXISTS runs_parent_task;
ALTER TABLE runs DROP COLUMN IF EXISTS depth;
ALTER TABLE runs DROP COLUMN IF EXISTS parent_task_id;
ALTER TABLE tasks DROP COLUMN IF EXISTS child_run_id;
ALTER TABLE tasks DROP COLUMN IF EXISTS job_step;

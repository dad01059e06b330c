-- Trees of runs (docs/workflows.md, "Trees of runs").
--
-- runs.root_run_id: the run no run started, of the tree a run belongs to
-- through job steps and after-triggers; NULL on a root (and on runs
-- written before this migration, counted as roots).
--
-- run_trees: one row a root whose tree has grown, the runs of the tree
-- besides the root (runs), bounded by the tenant's max_runs_per_tree (0:
-- the default, 1,000; else 1 to 100,000). The scheduler's transactions
-- that add runs to a tree take its row FOR UPDATE, so the count is exact.
--
-- call_starts: a job step released, its child run to start. The
-- releasing transaction writes it (with the step waiting); the scheduler
-- of the child job's shard starts the child runs 100 to a transaction and
-- deletes the rows, so that no report writes runs and no two
-- transactions race for one job's instants. Set aside as upstream_finishes
-- are when a transaction keeps failing.
--
-- run_cancels: a child run to cancel with its parent, past the 100 runs
-- one cancelling transaction cancels; the scheduler of its shard takes
-- them 100 to a transaction.
--
-- Outside a transaction, as 00030: each statement may run again.

-- +goose NO TRANSACTION
-- +goose Up
ALTER TABLE runs ADD COLUMN IF NOT EXISTS root_run_id UUID;

CREATE TABLE IF NOT EXISTS run_trees (
    root_run_id UUID PRIMARY KEY,
    tenant_id   UUID NOT NULL,
    runs        INT NOT NULL CHECK (runs >= 0),
    created_at  TIMESTAMPTZ NOT NULL
);

CREATE TABLE IF NOT EXISTS call_starts (
    task_id     UUID PRIMARY KEY,
    tenant_id   UUID NOT NULL,
    shard       INT NOT NULL,   -- the child job's
    job_id      UUID NOT NULL,  -- the child job
    run_id      UUID NOT NULL,  -- the step's run
    params      JSONB,          -- the step's params, evaluated (typed against the job when the run is written)
    root_run_id UUID NOT NULL,
    depth       INT NOT NULL,   -- the child run's
    created_at  TIMESTAMPTZ NOT NULL,
    tries       INT NOT NULL DEFAULT 0,
    retry_at    TIMESTAMPTZ,
    last_error  TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS call_starts_shard ON call_starts (shard, created_at);

CREATE TABLE IF NOT EXISTS run_cancels (
    run_id     UUID PRIMARY KEY,
    shard      INT NOT NULL,
    reason     TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX IF NOT EXISTS run_cancels_shard ON run_cancels (shard, created_at);

ALTER TABLE tenants ADD COLUMN IF NOT EXISTS max_runs_per_tree INT NOT NULL DEFAULT 0
    CHECK (max_runs_per_tree >= 0 AND max_runs_per_tree <= 100000);

-- +goose Down
ALTER TABLE tenants DROP COLUMN IF EXISTS max_runs_per_tree;
DROP TABLE IF EXISTS run_cancels;
DROP TABLE IF EXISTS call_starts;
DROP TABLE IF EXISTS run_trees;
ALTER TABLE runs DROP COLUMN IF EXISTS root_run_id;

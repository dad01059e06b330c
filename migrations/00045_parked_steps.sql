-- Parked steps (docs/parked-steps.md): steps the engine runs without a
-- worker, each waiting until its time (sleep). A parked step's task is
-- running, with an attempt on record and no worker, lease or slot, as a
-- job step's (tasks.job_step is set for both: the engine starts them, no
-- worker does); its row here says what ends it. The scheduler node of
-- its shard (its job's) takes the due rows and ends their attempts under
-- the fencing token each holds, deleting them in the same transaction; a
-- cancel deletes them with the running task's end.

-- +goose Up
CREATE TABLE parked_steps (
    task_id       UUID PRIMARY KEY REFERENCES tasks (id) ON DELETE CASCADE,
    tenant_id     UUID NOT NULL,
    run_id        UUID NOT NULL,
    shard         INT NOT NULL,
    kind          TEXT NOT NULL CHECK (kind IN ('sleep')),
    fencing_token BIGINT NOT NULL, -- the task's, as its park wrote it
    wake_at       TIMESTAMPTZ,     -- its time (a sleep's end); NULL: none
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX parked_steps_due ON parked_steps (shard, wake_at) WHERE wake_at IS NOT NULL;
CREATE INDEX parked_steps_run ON parked_steps (run_id);

-- +goose Down
DROP TABLE parked_steps;

-- Approval steps (docs/parked-steps.md, "approval"): a parked step that
-- people end. Its parked row holds its message, rendered when it parked;
-- each decision on its current attempt is a row of step_decisions, keyed
-- by the attempt's fencing token and the principal, so that one
-- principal decides once per attempt and a retried step starts with
-- none. runs.triggered_by is the principal who triggered a run by hand
-- (or by a backfill), whom an approval with separate: true refuses.

-- +goose Up
ALTER TABLE parked_steps DROP CONSTRAINT IF EXISTS parked_steps_kind_check;
ALTER TABLE parked_steps ADD CONSTRAINT parked_steps_kind_check CHECK (kind IN ('sleep', 'wait', 'approval'));
ALTER TABLE parked_steps ADD COLUMN message TEXT;
ALTER TABLE runs ADD COLUMN triggered_by TEXT;
CREATE TABLE step_decisions (
    task_id       UUID NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    fencing_token BIGINT NOT NULL, -- the attempt decided on
    principal     TEXT NOT NULL,
    tenant_id     UUID NOT NULL,
    decision      TEXT NOT NULL CHECK (decision IN ('approve', 'reject')),
    comment       TEXT NOT NULL DEFAULT '',
    decided_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, fencing_token, principal)
);

-- +goose Down
-- Refused while approvals are parked: cancel their runs first.
DROP TABLE step_decisions;
ALTER TABLE runs DROP COLUMN triggered_by;
ALTER TABLE parked_steps DROP COLUMN message;
ALTER TABLE parked_steps DROP CONSTRAINT parked_steps_kind_check;
ALTER TABLE parked_steps ADD CONSTRAINT parked_steps_kind_check CHECK (kind IN ('sleep', 'wait'));

-- Waiting steps (docs/parked-steps.md, "wait"): a parked step that an
-- event of its type ends, or its timeout (wake_at). The events step finds
-- the waits an event may end by (tenant_id, event_type): an index probe,
-- never a scan of every parked step.

-- +goose Up
ALTER TABLE parked_steps DROP CONSTRAINT IF EXISTS parked_steps_kind_check;
ALTER TABLE parked_steps ADD CONSTRAINT parked_steps_kind_check CHECK (kind IN ('sleep', 'wait'));
ALTER TABLE parked_steps ADD COLUMN event_type TEXT;
CREATE INDEX parked_steps_waits ON parked_steps (tenant_id, event_type, created_at) WHERE event_type IS NOT NULL;

-- +goose Down
-- Refused while waits are parked: cancel their runs first.
DROP INDEX parked_steps_waits;
ALTER TABLE parked_steps DROP COLUMN event_type;
ALTER TABLE parked_steps DROP CONSTRAINT parked_steps_kind_check;
ALTER TABLE parked_steps ADD CONSTRAINT parked_steps_kind_check CHECK (kind IN ('sleep'));

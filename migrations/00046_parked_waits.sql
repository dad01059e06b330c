-- Waiting steps (docs/parked-steps.md, "wait"): a parked step that an
-- event of its type ends, or its timeout (wake_at). The events step finds
-- the waits an event may end by (tenant_id, event_type): an index probe,
-- never a scan of every parked step: an index probe per event and key.

-- +goose Up
ALTER TABLE parked_steps DROP CONSTRAINT IF EXISTS parked_steps_kind_check;
ALTER TABLE parked_steps ADD CONSTRAINT parked_steps_kind_check CHECK (kind IN ('sleep', 'wait'));
-- match_key: a match of the form event.PATH == EXPR is indexed by PATH
-- and EXPR's value at the park (dag/expr, matchkey.go); an event offers
-- the keys of its fields, and only the waits with one of them, or with
-- none, are asked their match.
-- match_path is PATH alone: the events step reads the paths in use for a
-- tenant's type (a skip scan of parked_steps_paths) and offers an event's
-- keys at those paths only.
ALTER TABLE parked_steps ADD COLUMN event_type TEXT, ADD COLUMN match_key TEXT, ADD COLUMN match_path TEXT;
CREATE INDEX parked_steps_waits ON parked_steps (tenant_id, event_type, match_key) WHERE event_type IS NOT NULL;
CREATE INDEX parked_steps_paths ON parked_steps (tenant_id, event_type, match_path) WHERE match_path IS NOT NULL;

-- +goose Down
-- Refused while waits are parked: cancel their runs first.
DROP INDEX parked_steps_paths;
DROP INDEX parked_steps_waits;
ALTER TABLE parked_steps DROP COLUMN event_type, DROP COLUMN match_key, DROP COLUMN match_path;
ALTER TABLE parked_steps DROP CONSTRAINT parked_steps_kind_check;
ALTER TABLE parked_steps ADD CONSTRAINT parked_steps_kind_check CHECK (kind IN ('sleep'));

-- A run's W3C traceparent (package tracing): the processes that work on
-- the run continue its trace. NULL when traces are off.

-- +goose Up
ALTER TABLE runs ADD COLUMN trace_parent TEXT;

-- +goose Down
ALTER TABLE runs DROP COLUMN trace_parent;

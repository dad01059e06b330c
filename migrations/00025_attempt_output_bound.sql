-- Outputs (docs/workflows.md): an attempt's output is what later steps'
-- expressions read, at most 64 KiB; output_truncated marks one that was
-- cut, so that an expression reading it fails rather than reading part
-- of it. A command's standard error is its log, apart from its output.

-- +goose Up
ALTER TABLE attempts ADD COLUMN output_truncated BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE attempts ADD COLUMN log TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE attempts DROP COLUMN log;
ALTER TABLE attempts DROP COLUMN output_truncated;

-- A run's params (docs/workflows.md): the values a trigger gave, typed
-- against the job version's declaration, with its defaults filled in (a
-- scheduled run's are the defaults). NULL when the job declares none.

-- +goose Up
ALTER TABLE runs ADD COLUMN params jsonb;

-- +goose Down
ALTER TABLE runs DROP COLUMN params;

-- A run whose task failed for good ends "failed" (docs/lifecycle.md, "Run
-- statuses"); until this version it ended "dead_lettered", and a filter on
-- failed runs missed it. The runs that ended so, and the events of such
-- ends not yet taken, read as failed from now on. The value stays allowed:
-- a worker of the version before writes it during a rolling upgrade, and
-- every reader takes it as failed (lifecycle.RunStatus.Ended).

-- +goose Up
UPDATE runs SET status = 'failed' WHERE status = 'dead_lettered';
UPDATE run_finishes SET status = 'failed' WHERE status = 'dead_lettered';
UPDATE upstream_finishes SET status = 'failed' WHERE status = 'dead_lettered';

-- +goose Down
-- Nothing: which failed runs had a dead-lettered task is in their tasks
-- (tasks.status), and the version before reads "failed" too.

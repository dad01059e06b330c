-- +goose Up
-- Every run and attempt row is updated soon after it is written (a run
-- starts, an attempt finishes). Such an update is HOT (no index entry
-- written) only if no indexed column changes and the new version fits on
-- the same page; leave room for it. runs_tenant_job duplicated what the
-- (job_id, scheduled_for) key serves (a job's runs, newest first) at the
-- cost of one more index entry per run written and per run finished.
DROP INDEX runs_tenant_job;
ALTER TABLE runs SET (fillfactor = 70);
ALTER TABLE attempts SET (fillfactor = 70);

-- +goose Down
ALTER TABLE attempts RESET (fillfactor);
ALTER TABLE runs RESET (fillfactor);
CREATE INDEX runs_tenant_job ON runs (tenant_id, job_id, scheduled_for DESC);

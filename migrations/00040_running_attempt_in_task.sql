-- A running attempt lives in its task's row (docs/lifecycle.md, section
-- 6): the start writes the attempt's id, start and worker beside the
-- number, token and lease it already wrote there, and the attempts row is
-- written once, when the attempt ends. attempts becomes the history of
-- ended attempts, appended to and (a late report aside) never updated: it
-- no longer needs room on its pages for updates.
--
-- Stop every serve and worker across this migration: a process of the
-- version before starts attempts without writing them to the task's row
-- (a newer process cannot end them) and ends only attempts rows that a
-- newer process no longer writes at the start.

-- +goose Up
ALTER TABLE tasks ADD COLUMN attempt_id UUID,
    ADD COLUMN attempt_started_at TIMESTAMPTZ,
    ADD COLUMN attempt_worker TEXT NOT NULL DEFAULT '';

UPDATE tasks AS t SET attempt_id = a.id, attempt_started_at = a.started_at, attempt_worker = a.worker
FROM attempts AS a
WHERE a.task_id = t.id AND a.fencing_token = t.fencing_token AND a.outcome = 'running' AND t.status = 'running';

DELETE FROM attempts AS a USING tasks AS t
WHERE a.task_id = t.id AND a.id = t.attempt_id AND t.status = 'running';

ALTER TABLE attempts RESET (fillfactor);

-- Every attempt, ended or running, as the attempts table showed them
-- before: what the run views and an operator's queries read.
CREATE VIEW every_attempt AS
SELECT id, task_id, tenant_id, number, fencing_token, worker, started_at, finished_at, outcome, exit_reason, failure_class,
       error, output, late_outcome, late_error, late_at, output_truncated, log
FROM attempts
UNION ALL
SELECT attempt_id, id, tenant_id, attempt, fencing_token, attempt_worker, attempt_started_at, NULL, 'running', '', '',
       '', '', '', '', NULL, false, ''
FROM tasks
WHERE status = 'running' AND attempt_id IS NOT NULL;

-- +goose Down
DROP VIEW every_attempt;
ALTER TABLE attempts SET (fillfactor = 70);

INSERT INTO attempts (id, task_id, tenant_id, number, fencing_token, worker, started_at)
SELECT t.attempt_id, t.id, t.tenant_id, t.attempt, t.fencing_token, t.attempt_worker, t.attempt_started_at
FROM tasks AS t
WHERE t.status = 'running' AND t.attempt_id IS NOT NULL;

ALTER TABLE tasks DROP COLUMN attempt_worker, DROP COLUMN attempt_started_at, DROP COLUMN attempt_id;

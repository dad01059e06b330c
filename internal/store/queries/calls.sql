-- Steps that run other jobs (run.job): see migrations/00030_job_steps.sql
-- and package run (calls.go).

-- ChildRuns reads the runs tasks started (one per task, ever): a task
-- released again attaches to its own.
-- name: ChildRuns :many
SELECT r.id, r.parent_task_id::uuid AS parent_task_id, r.status, r.tenant_id
FROM runs AS r WHERE r.parent_task_id = ANY(@task_ids::uuid[]);

-- CalleeJobs locks (FOR SHARE, in id order) the live jobs steps run, by
-- tenant, namespace and name (parallel arrays): a change of one waits
-- for the start, or the start for it.
-- name: CalleeJobs :many
SELECT j.id, j.tenant_id, j.namespace, j.name, j.version, j.shard, j.spec
FROM jobs AS j
WHERE (j.tenant_id, j.namespace, j.name) IN (
    SELECT unnest(@tenant_ids::uuid[]), unnest(@namespaces::text[]), unnest(@names::text[]))
  AND j.status <> 'deleted'
ORDER BY j.id
FOR SHARE;

-- StartCalls moves job steps to running on their child runs (no worker,
-- no lease, no slot: the child run's tasks hold those), each with a new
-- attempt and fencing token, its attempt on record in the task's row (as
-- StartAttempts does).
-- name: StartCalls :many
WITH req AS (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@child_run_ids::uuid[]) AS child_run_id, unnest(@attempt_ids::uuid[]) AS attempt_id
), t AS (
    UPDATE tasks
    SET status = 'running', attempt = tasks.attempt + 1, fencing_token = tasks.fencing_token + 1, child_run_id = req.child_run_id,
        worker_id = NULL, lease_expires_at = NULL, deadline_at = NULL, admitted_at = NULL,
        started_at = COALESCE(tasks.started_at, now()), released_at = COALESCE(tasks.released_at, now()), ready_at = COALESCE(tasks.ready_at, now()),
        attempt_id = req.attempt_id, attempt_started_at = now(), attempt_worker = @worker::text
    FROM req
    WHERE tasks.id = req.id AND tasks.status IN ('waiting', 'queued') AND tasks.job_step
    RETURNING tasks.id, tasks.tenant_id, tasks.run_id, tasks.attempt, tasks.fencing_token
)
SELECT t.id, t.run_id, t.fencing_token::bigint AS fencing_token FROM t;

-- CallsEnded reads the running job steps whose child runs ended, each
-- end (@run_ids[i], @finished_ats[i]) the child's latest: an end undone
-- since (the child retried) ends nothing. With @latest, whatever the
-- child's end (the ends are not given).
-- name: CallsEnded :many
SELECT t.id, t.run_id, t.fencing_token, c.id AS child_run_id, c.status, c.reason,
       c.finished_at::timestamptz AS child_finished_at, cj.namespace AS child_namespace, cj.name AS child_job
FROM (SELECT unnest(@run_ids::uuid[]) AS run_id, unnest(@finished_ats::timestamptz[]) AS finished_at) AS e
JOIN runs AS c ON c.id = e.run_id AND (@latest::bool OR c.finished_at = e.finished_at) AND c.status NOT IN ('queued', 'pending', 'running')
JOIN jobs AS cj ON cj.id = c.job_id
JOIN tasks AS t ON t.id = c.parent_task_id AND t.status = 'running' AND t.child_run_id = c.id
ORDER BY t.run_id, t.id;

-- DeleteJobCalls and InsertJobCalls make a job's job_calls rows the jobs
-- its steps run (parallel arrays), in the transaction that writes its
-- definition.
-- name: DeleteJobCalls :exec
DELETE FROM job_calls WHERE job_id = @job_id;

-- name: InsertJobCalls :exec
INSERT INTO job_calls (job_id, tenant_id, callee_namespace, callee_name, author_key)
SELECT @job_id, @tenant_id, unnest(@namespaces::text[]), unnest(@names::text[]), sqlc.narg(author_key)::uuid
ON CONFLICT DO NOTHING;

-- CallAuthors reads the jobs jobs' steps run, with the key whose right to
-- run each was checked when the job was last written.
-- name: CallAuthors :many
SELECT job_id, callee_namespace, callee_name, author_key FROM job_calls WHERE job_id = ANY(@job_ids::uuid[]);

-- CallChain follows job_calls from jobs (namespace/name) through the
-- tenant's live jobs, at most 100 links deep and not beyond @self_namespace
-- /@self_name (the job being written: a job that meets itself would run
-- itself for ever). At most 10,000 rows (the caller refuses to guess past).
-- name: CallChain :many
WITH RECURSIVE chain (namespace, name, caller_namespace, caller_name, depth) AS (
    SELECT unnest(@namespaces::text[]), unnest(@names::text[]), ''::text, ''::text, 0
    UNION
    SELECT c.callee_namespace, c.callee_name, ch.namespace, ch.name, ch.depth + 1
    FROM chain AS ch
    JOIN jobs AS j ON j.tenant_id = @tenant_id AND j.namespace = ch.namespace AND j.name = ch.name AND j.status <> 'deleted'
    JOIN job_calls AS c ON c.job_id = j.id
    WHERE ch.depth < 100 AND NOT (ch.namespace = @self_namespace::text AND ch.name = @self_name::text)
)
SELECT namespace::text AS namespace, name::text AS name, caller_namespace::text AS caller_namespace, caller_name::text AS caller_name, depth::int AS depth
FROM chain ORDER BY depth, namespace, name
LIMIT 10000;

-- Callers lists the live jobs whose steps run a job.
-- name: Callers :many
SELECT j.namespace, j.name FROM job_calls AS c JOIN jobs AS j ON j.id = c.job_id
WHERE c.tenant_id = @tenant_id AND c.callee_namespace = @namespace AND c.callee_name = @name AND j.status <> 'deleted'
ORDER BY j.namespace, j.name;

-- InsertCallStarts writes the calls of job steps released (parallel
-- arrays), their child runs to start; a step released again while its
-- call waits keeps the one it has.
-- name: InsertCallStarts :exec
INSERT INTO call_starts (task_id, tenant_id, shard, job_id, run_id, params, root_run_id, depth, created_at)
SELECT unnest(@task_ids::uuid[]), unnest(@tenant_ids::uuid[]), unnest(@shards::int[]), unnest(@job_ids::uuid[]),
       unnest(@run_ids::uuid[]), NULLIF(unnest(@params::text[]), '')::jsonb, unnest(@root_run_ids::uuid[]), unnest(@depths::int[]), now()
ON CONFLICT (task_id) DO NOTHING;

-- HasCallStarts says whether some call of the shards waits (the
-- scheduler's cheap look before a transaction).
-- name: HasCallStarts :one
SELECT EXISTS (SELECT 1 FROM call_starts WHERE shard = ANY(@shards::int[]) AND (retry_at IS NULL OR retry_at <= now()))::bool;

-- TakeCallStarts takes the oldest calls of the shards, at most @batch,
-- with the step's task as it is now (its status, job_step).
-- name: TakeCallStarts :many
SELECT c.task_id, c.tenant_id, c.shard, c.job_id, c.run_id, c.params, c.root_run_id, c.depth,
       t.status AS task_status, t.job_step
FROM call_starts AS c JOIN tasks AS t ON t.id = c.task_id
WHERE c.shard = ANY(@shards::int[]) AND (c.retry_at IS NULL OR c.retry_at <= now())
ORDER BY c.created_at, c.task_id
LIMIT @batch
FOR UPDATE OF c SKIP LOCKED;

-- name: DeleteCallStarts :exec
DELETE FROM call_starts WHERE task_id = ANY(@task_ids::uuid[]);

-- SetAsideCallStart puts off a call whose transaction failed alone.
-- name: SetAsideCallStart :exec
UPDATE call_starts SET tries = tries + 1, last_error = @error,
    retry_at = now() + INTERVAL '1 second' * LEAST(600, power(2, LEAST(tries + 1, 10)))
WHERE task_id = @task_id;

-- CallJobs locks (FOR SHARE, in id order) the live jobs of calls to
-- start, by id.
-- name: CallJobs :many
SELECT j.id, j.tenant_id, j.namespace, j.name, j.version, j.shard, j.spec
FROM jobs AS j
WHERE j.id = ANY(@ids::uuid[]) AND j.status <> 'deleted'
ORDER BY j.id
FOR SHARE;

-- LockOpenRuns locks, of runs, those still open, in id order
-- (the runs whose calls start: a run cancelled meanwhile is seen so).
-- name: LockOpenRuns :many
SELECT id FROM runs WHERE id = ANY(@ids::uuid[]) AND finished_at IS NULL ORDER BY id FOR UPDATE;

-- EnsureRunTrees writes the count rows of trees that have none (parallel
-- arrays), to be locked next.
-- name: EnsureRunTrees :exec
INSERT INTO run_trees (root_run_id, tenant_id, runs, created_at)
SELECT unnest(@root_run_ids::uuid[]), unnest(@tenant_ids::uuid[]), 0, now()
ON CONFLICT (root_run_id) DO NOTHING;

-- LockRunTrees locks trees' counts in root order.
-- name: LockRunTrees :many
SELECT root_run_id, runs FROM run_trees WHERE root_run_id = ANY(@root_run_ids::uuid[]) ORDER BY root_run_id FOR UPDATE;

-- AddRunTreeRuns counts runs added to trees (parallel arrays).
-- name: AddRunTreeRuns :exec
UPDATE run_trees SET runs = run_trees.runs + u.n
FROM (SELECT unnest(@root_run_ids::uuid[]) AS root_run_id, unnest(@ns::int[]) AS n) AS u
WHERE run_trees.root_run_id = u.root_run_id;

-- TreeBounds are the tenants' own bounds on a tree's runs (the others
-- take the default).
-- name: TreeBounds :many
SELECT id, max_runs_per_tree FROM tenants WHERE id = ANY(@ids::uuid[]) AND max_runs_per_tree > 0;

-- InsertRunCancels writes child runs to cancel later (parallel arrays).
-- name: InsertRunCancels :exec
INSERT INTO run_cancels (run_id, shard, reason, created_at)
SELECT unnest(@run_ids::uuid[]), unnest(@shards::int[]), unnest(@reasons::text[]), now()
ON CONFLICT (run_id) DO NOTHING;

-- name: HasRunCancels :one
SELECT EXISTS (SELECT 1 FROM run_cancels WHERE shard = ANY(@shards::int[]))::bool;

-- TakeRunCancels takes the oldest cancels of the shards, at most @batch.
-- name: TakeRunCancels :many
SELECT run_id, reason FROM run_cancels
WHERE shard = ANY(@shards::int[])
ORDER BY created_at, run_id
LIMIT @batch
FOR UPDATE SKIP LOCKED;

-- name: DeleteRunCancels :exec
DELETE FROM run_cancels WHERE run_id = ANY(@run_ids::uuid[]);

-- OpenChildRunsWithShard lists the unfinished runs tasks started (to
-- cancel with their parents), with their shards (to cancel later).
-- name: OpenChildRunsWithShard :many
SELECT r.id, r.shard FROM runs AS r
WHERE r.parent_task_id = ANY(@task_ids::uuid[]) AND r.status IN ('queued', 'pending', 'running')
ORDER BY r.id;

-- WaitingJobSteps lists, of tasks, the job steps still waiting.
-- name: WaitingJobSteps :many
SELECT id FROM tasks WHERE id = ANY(@ids::uuid[]) AND status = 'waiting' AND job_step;

-- LockRunsToCancel locks, of runs, those still open whose parent step is
-- still cancelled (not released again since: its run retried) that no
-- other transaction holds (SKIP LOCKED), in id order, with their open
-- tasks' count (the pending cancels' sweep waits for nothing: a run busy
-- now is cancelled at a later pass).
-- name: LockRunsToCancel :many
SELECT r.id, (SELECT count(*) FROM tasks AS t WHERE t.run_id = r.id
              AND t.status IN ('waiting', 'queued', 'running', 'retrying', 'expanded'))::int AS open_tasks
FROM runs AS r
WHERE r.id = ANY(@ids::uuid[]) AND r.finished_at IS NULL
  AND EXISTS (SELECT 1 FROM tasks AS p WHERE p.id = r.parent_task_id AND p.status = 'cancelled')
ORDER BY r.id FOR UPDATE OF r SKIP LOCKED;

-- LockOpenTasksOfRuns locks the open tasks of runs that no other
-- transaction holds (SKIP LOCKED), in id order, and returns their runs.
-- name: LockOpenTasksOfRuns :many
SELECT run_id FROM tasks
WHERE run_id = ANY(@run_ids::uuid[]) AND status IN ('waiting', 'queued', 'running', 'retrying', 'expanded')
ORDER BY id FOR UPDATE SKIP LOCKED;

-- NoLongerToCancel lists, of runs, those a pending cancel has nothing
-- more to do for: ended (cancelled here, or before), pruned, or whose
-- parent step was released again.
-- name: NoLongerToCancel :many
SELECT u.id::uuid AS id FROM unnest(@ids::uuid[]) AS u (id)
LEFT JOIN runs AS r ON r.id = u.id
LEFT JOIN tasks AS p ON p.id = r.parent_task_id
WHERE r.id IS NULL OR r.finished_at IS NOT NULL OR p.status IS DISTINCT FROM 'cancelled';

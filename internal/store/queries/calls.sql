-- Steps that run other jobs (run.job): see migrations/00030_job_steps.sql
-- and package run (calls.go).

-- ChildRuns reads the runs tasks started (one per task, ever): a task
-- released again attaches to its own.
-- name: ChildRuns :many
SELECT r.id, r.parent_task_id::uuid AS parent_task_id, r.status, r.tenant_id
FROM runs AS r WHERE r.parent_task_id = ANY(@task_ids::uuid[]);

-- OpenChildRuns lists the unfinished runs tasks started (to cancel with
-- their parents).
-- name: OpenChildRuns :many
SELECT r.id FROM runs AS r
WHERE r.parent_task_id = ANY(@task_ids::uuid[]) AND r.status IN ('queued', 'pending', 'running')
ORDER BY r.id;

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
-- attempt and fencing token, its attempt on record.
-- name: StartCalls :many
WITH req AS (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@child_run_ids::uuid[]) AS child_run_id, unnest(@attempt_ids::uuid[]) AS attempt_id
), t AS (
    UPDATE tasks
    SET status = 'running', attempt = tasks.attempt + 1, fencing_token = tasks.fencing_token + 1, child_run_id = req.child_run_id,
        worker_id = NULL, lease_expires_at = NULL, deadline_at = NULL, admitted_at = NULL,
        started_at = COALESCE(tasks.started_at, now()), released_at = COALESCE(tasks.released_at, now()), ready_at = COALESCE(tasks.ready_at, now())
    FROM req
    WHERE tasks.id = req.id AND tasks.status IN ('waiting', 'queued') AND tasks.job_step
    RETURNING tasks.id, tasks.tenant_id, tasks.run_id, tasks.attempt, tasks.fencing_token, req.attempt_id
), a AS (
    INSERT INTO attempts (id, task_id, tenant_id, number, fencing_token, worker, started_at)
    SELECT t.attempt_id, t.id, t.tenant_id, t.attempt, t.fencing_token, @worker::text, now() FROM t
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

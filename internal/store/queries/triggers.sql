-- Jobs started by another job's outcome (schedule.after): see
-- migrations/00028_after_triggers.sql and package scheduler (downstream.go).

-- SetJobTrigger writes a job's schedule.after, in the transaction that
-- writes its definition (holding its jobs row).
-- name: SetJobTrigger :exec
INSERT INTO job_triggers (job_id, tenant_id, upstream_namespace, upstream_name, outcomes)
VALUES (@job_id, @tenant_id, @upstream_namespace, @upstream_name, @outcomes::text[])
ON CONFLICT (job_id) DO UPDATE SET upstream_namespace = EXCLUDED.upstream_namespace,
    upstream_name = EXCLUDED.upstream_name, outcomes = EXCLUDED.outcomes;

-- name: DeleteJobTrigger :exec
DELETE FROM job_triggers WHERE job_id = @job_id;

-- AfterChain follows schedule.after upstream from a job (namespace/name)
-- through the tenant's live jobs, at most 100 links: a job that meets
-- itself would start runs of itself for ever.
-- name: AfterChain :many
WITH RECURSIVE chain (namespace, name, depth) AS (
    SELECT @namespace::text, @name::text, 0
    UNION
    SELECT g.upstream_namespace, g.upstream_name, c.depth + 1
    FROM chain AS c
    JOIN jobs AS j ON j.tenant_id = @tenant_id AND j.namespace = c.namespace AND j.name = c.name AND j.status <> 'deleted'
    JOIN job_triggers AS g ON g.job_id = j.id
    WHERE c.depth < 100
)
SELECT namespace, name, depth FROM chain ORDER BY depth;

-- Downstreams lists the live jobs that start on a job's runs' ends.
-- name: Downstreams :many
SELECT j.id, j.namespace, j.name, j.status, g.outcomes
FROM job_triggers AS g JOIN jobs AS j ON j.id = g.job_id
WHERE g.tenant_id = @tenant_id AND g.upstream_namespace = @namespace AND g.upstream_name = @name AND j.status <> 'deleted'
ORDER BY j.namespace, j.name;

-- TakeUpstreamFinishes locks a batch of the shards' upstream finish
-- events (oldest first) with their runs and jobs.
-- name: TakeUpstreamFinishes :many
SELECT e.run_id, e.finished_at, e.status, r.tenant_id, r.job_id, r.job_version, r.upstream AS run_upstream,
       uj.namespace, uj.name, r.parent_task_id, r.reason, r.depth, COALESCE(r.root_run_id, r.id)::uuid AS root_run_id
FROM upstream_finishes AS e JOIN runs AS r ON r.id = e.run_id JOIN jobs AS uj ON uj.id = r.job_id
WHERE e.shard = ANY(@shards::int[]) AND (e.retry_at IS NULL OR e.retry_at <= now())
ORDER BY e.finished_at, e.run_id
LIMIT @batch
FOR UPDATE OF e SKIP LOCKED;

-- DownstreamJobs locks (FOR SHARE, in id order) the live jobs whose
-- schedule.after names one of the upstream jobs (tenant, namespace, name
-- given in parallel arrays): a change of one waits for the step, or the
-- step for it.
-- name: DownstreamJobs :many
SELECT j.id, j.tenant_id, j.namespace, j.name, j.status, j.version, j.shard, j.spec,
       g.upstream_namespace, g.upstream_name, g.outcomes
FROM job_triggers AS g JOIN jobs AS j ON j.id = g.job_id
WHERE (g.tenant_id, g.upstream_namespace, g.upstream_name) IN (
    SELECT unnest(@tenant_ids::uuid[]), unnest(@namespaces::text[]), unnest(@names::text[]))
  AND j.status <> 'deleted'
ORDER BY j.id
FOR SHARE OF j;

-- name: DeleteUpstreamFinishes :exec
DELETE FROM upstream_finishes AS e
WHERE (e.run_id, e.finished_at) IN (SELECT unnest(@run_ids::uuid[]), unnest(@finished_ats::timestamptz[]));

-- LeafOutputs reads the outputs of a run's succeeded steps that no step
-- needs (its last steps), each its latest succeeded attempt's, for
-- run.upstream.
-- name: LeafOutputs :many
SELECT DISTINCT ON (t.step) t.step, a.output, a.output_truncated
FROM tasks AS t JOIN attempts AS a ON a.task_id = t.id AND a.outcome = 'succeeded'
WHERE t.run_id = @run_id AND t.status = 'succeeded' AND t.group_id IS NULL
  AND NOT EXISTS (SELECT 1 FROM task_edges AS e WHERE e.parent_id = t.id)
ORDER BY t.step, a.number DESC;

-- LeafGroups lists a run's succeeded fan-outs that no step needs (its
-- last steps that fan out): their items' outputs are run.upstream's too.
-- name: LeafGroups :many
SELECT t.id, t.step FROM tasks AS t
WHERE t.run_id = @run_id AND t.fan_out AND t.status = 'succeeded'
  AND NOT EXISTS (SELECT 1 FROM task_edges AS e WHERE e.parent_id = t.id)
ORDER BY t.step;

-- HasUpstreamFinishes: whether the shards have upstream finish events (a
-- probe before a transaction of the downstream step).
-- name: HasUpstreamFinishes :one
SELECT EXISTS (SELECT 1 FROM upstream_finishes WHERE shard = ANY(@shards::int[]) AND (retry_at IS NULL OR retry_at <= now()))::bool;

-- SetAsideUpstreamFinish puts off an event whose transaction failed alone,
-- by 2^tries seconds (at most 10 minutes), with the error.
-- name: SetAsideUpstreamFinish :exec
UPDATE upstream_finishes SET tries = tries + 1, last_error = @error,
    retry_at = now() + least(power(2, tries), 600) * interval '1 second'
WHERE run_id = @run_id AND finished_at = @finished_at;

-- LockSchedules locks the schedule rows of jobs (in id order), after
-- their jobs rows, as job.Lock does.
-- name: LockSchedules :exec
SELECT job_id FROM job_schedules WHERE job_id = ANY(@job_ids::uuid[]) ORDER BY job_id FOR UPDATE;

-- name: DeleteUpstreamFinishesOfRuns :exec
DELETE FROM upstream_finishes WHERE run_id = ANY(@run_ids::uuid[]);

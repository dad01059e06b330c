-- CheckShardFence passes only while this node owns the shard at the epoch
-- it claimed, with a live lease. Every write made for a shard runs it first,
-- in the same transaction (DESIGN invariant 3).
-- name: CheckShardFence :one
SELECT epoch FROM shards
WHERE id = @shard AND owner_node = @node::uuid AND epoch = @epoch AND lease_expires_at > now();

-- ShardHeads returns, for each of the given shards that has an active job
-- with a fire time, the earliest such time: one index probe per shard.
-- name: ShardHeads :many
SELECT s.shard::int AS shard, h.next_fire_at::timestamptz AS next_fire_at, now()::timestamptz AS now
FROM unnest(@shards::int[]) AS s (shard)
CROSS JOIN LATERAL (
    SELECT j.next_fire_at FROM jobs AS j
    WHERE j.shard = s.shard AND j.status = 'active' AND j.next_fire_at IS NOT NULL
    ORDER BY j.next_fire_at
    LIMIT 1
) AS h;

-- DueJobs locks a batch of one shard's due jobs, oldest first.
-- name: DueJobs :many
SELECT id, tenant_id, namespace, name, version, spec, next_fire_at FROM jobs
WHERE shard = @shard AND status = 'active' AND next_fire_at <= now()
ORDER BY next_fire_at
LIMIT @batch
FOR UPDATE;

-- name: ActiveRuns :many
SELECT job_id, id, status FROM runs
WHERE job_id = ANY(@job_ids::uuid[]) AND status IN ('queued', 'pending', 'running')
ORDER BY scheduled_for;

-- InsertRuns inserts many runs; a (job, instant) that already has a run
-- is left alone (DESIGN invariant 2) and not returned.
-- name: InsertRuns :many
INSERT INTO runs (id, tenant_id, job_id, job_version, shard, scheduled_for, trigger, status, reason, created_at, finished_at)
SELECT u.id, u.tenant_id, u.job_id, u.job_version, u.shard, u.scheduled_for, u.trigger, u.status, u.reason, now(),
       CASE WHEN u.status = 'skipped' THEN now() END
FROM (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@tenant_ids::uuid[]) AS tenant_id, unnest(@job_ids::uuid[]) AS job_id,
           unnest(@job_versions::bigint[]) AS job_version, unnest(@shards::int[]) AS shard,
           unnest(@scheduled_fors::timestamptz[]) AS scheduled_for, unnest(@triggers::text[]) AS trigger,
           unnest(@statuses::text[]) AS status, unnest(@reasons::text[]) AS reason
) AS u
ON CONFLICT (job_id, scheduled_for) DO NOTHING
RETURNING id;

-- name: InsertTasks :exec
INSERT INTO tasks (id, tenant_id, run_id, step, status, parents_remaining, queue, priority, trigger_rule, created_at, released_at)
SELECT u.id, u.tenant_id, u.run_id, u.step, u.status, u.parents_remaining, u.queue, u.priority, u.trigger_rule, now(),
       CASE WHEN u.status = 'queued' THEN now() END
FROM (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@tenant_ids::uuid[]) AS tenant_id, unnest(@run_ids::uuid[]) AS run_id,
           unnest(@steps::text[]) AS step, unnest(@statuses::text[]) AS status,
           unnest(@parents_remaining::int[]) AS parents_remaining, unnest(@queues::text[]) AS queue,
           unnest(@priorities::int[]) AS priority, unnest(@trigger_rules::text[]) AS trigger_rule
) AS u;

-- name: InsertEdges :exec
INSERT INTO task_edges (parent_id, child_id)
SELECT unnest(@parents::uuid[]), unnest(@children::uuid[]);

-- AdvanceJobs moves each job's next fire time (NULL when done is true:
-- a one-time job that fired, or a cron that never matches again).
-- name: AdvanceJobs :exec
UPDATE jobs SET next_fire_at = CASE WHEN u.done THEN NULL ELSE u.next END
FROM (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@nexts::timestamptz[]) AS next, unnest(@done::bool[]) AS done
) AS u
WHERE jobs.id = u.id;

-- name: CancelRuns :many
UPDATE runs SET status = 'cancelled', reason = @reason, finished_at = now()
WHERE id = ANY(@ids::uuid[]) AND status IN ('queued', 'pending', 'running')
RETURNING id;

-- CancelTasksOfRuns stops every unfinished task of the runs; bumping the
-- fencing token turns a running attempt's later report into a stale one.
-- name: CancelTasksOfRuns :many
UPDATE tasks SET status = 'cancelled', finished_at = now(), fencing_token = fencing_token + 1,
    lease_owner = NULL, lease_expires_at = NULL
WHERE run_id = ANY(@run_ids::uuid[]) AND status IN ('waiting', 'queued', 'running', 'retrying')
RETURNING id;

-- name: CloseRunningAttempts :exec
UPDATE attempts SET finished_at = now(), outcome = 'failed', exit_reason = @exit_reason, failure_class = @failure_class, error = @error
WHERE task_id = ANY(@task_ids::uuid[]) AND outcome = 'running';

-- name: SetShardLag :exec
UPDATE shards SET lag_seconds = @lag_seconds WHERE id = @shard AND owner_node = @node::uuid;

-- ExpiredRuns picks, in the given shards, finished runs older than their
-- tenant's retention (run_retention_seconds, else @default_seconds; never
-- under @floor_seconds), that hold no dead letter to replay nor open task, oldest
-- first within a shard, and locks them (SKIP LOCKED: a run being replayed
-- or read for update is left for a later pass). One ordered range scan of
-- runs_finished per shard, stopped once the batch is full: a sort of every
-- expired run of every shard (ORDER BY shard, finished_at over shard =
-- ANY) took seconds per batch with 10,000,000 old runs and starved the
-- firing beside it. @min_seconds is the smallest retention of any tenant,
-- so that the index bounds each scan.
-- name: ExpiredRuns :many
SELECT e.id, e.tenant_id, e.job_id, e.job_version, e.shard, e.scheduled_for, e.trigger, e.status, e.reason,
       e.created_at, e.started_at, e.finished_at, e.params, e.event, e.upstream, e.triggered_by
FROM unnest(@shards::int[]) AS s (shard)
CROSS JOIN LATERAL (
    SELECT r.id, r.tenant_id, r.job_id, r.job_version, r.shard, r.scheduled_for, r.trigger, r.status, r.reason,
           r.created_at, r.started_at, r.finished_at, r.params, r.event, r.upstream, r.triggered_by
    FROM runs AS r
    JOIN tenants AS t ON t.id = r.tenant_id
    WHERE r.shard = s.shard
      AND r.finished_at IS NOT NULL
      AND r.finished_at < now() - INTERVAL '1 second' * @min_seconds::float8
      AND r.finished_at < now() - INTERVAL '1 second' * GREATEST(COALESCE(t.run_retention_seconds, @default_seconds::bigint), @floor_seconds::bigint)::float8
      -- A dead letter waits for a replay, unless its run was cancelled
      -- (then nothing replays it), or it is a fan-out's (a group or an
      -- item: retried with its run, not replayed; such a run is pruned as
      -- a cancelled one is). A task of a cancelled run replayed before
      -- replays refused them is open though the run is finished.
      AND NOT EXISTS (SELECT 1 FROM tasks AS d WHERE d.run_id = r.id
                      AND (d.status IN ('waiting', 'queued', 'running', 'retrying', 'expanded')
                           OR (d.status = 'dead_lettered' AND r.status <> 'cancelled'
                               AND NOT d.fan_out AND d.group_id IS NULL)))
    ORDER BY r.finished_at
    LIMIT @batch
    FOR UPDATE OF r SKIP LOCKED
) AS e
LIMIT @batch;

-- name: MinRunRetention :one
SELECT COALESCE(min(run_retention_seconds), 0)::bigint FROM tenants;

-- name: TasksOfRuns :many
SELECT * FROM tasks WHERE run_id = ANY(@run_ids::uuid[]) ORDER BY run_id, created_at, id;

-- name: AttemptsOfTasks :many
SELECT * FROM attempts WHERE task_id = ANY(@task_ids::uuid[]) ORDER BY task_id, number;

-- name: DeleteAttemptsOfTasks :exec
DELETE FROM attempts WHERE task_id = ANY(@task_ids::uuid[]);

-- name: DeleteEdgesOfTasks :exec
-- Every edge joins two tasks of one run: by parent is all of them.
DELETE FROM task_edges WHERE parent_id = ANY(@task_ids::uuid[]);

-- name: DeleteTasksOfRuns :exec
DELETE FROM tasks WHERE run_id = ANY(@run_ids::uuid[]);

-- name: DeleteRuns :exec
DELETE FROM runs WHERE id = ANY(@run_ids::uuid[]);

-- DeleteRunTrees drops the counts of the trees whose roots are pruned
-- (a run left in such a tree starts no count again: a new root's tree
-- would be another).
-- name: DeleteRunTrees :exec
DELETE FROM run_trees WHERE root_run_id = ANY(@run_ids::uuid[]);

-- ShardHeads returns, for each of the given shards that has a job with a
-- fire time, the earliest such time: one index probe per shard
-- (job_schedules_due; a job that is not active has none).
-- name: ShardHeads :many
SELECT s.shard::int AS shard, h.next_fire_at::timestamptz AS next_fire_at, now()::timestamptz AS now
FROM unnest(@shards::int[]) AS s (shard)
CROSS JOIN LATERAL (
    SELECT js.next_fire_at FROM job_schedules AS js
    WHERE js.shard = s.shard AND js.next_fire_at IS NOT NULL
    ORDER BY js.next_fire_at
    LIMIT 1
) AS h;

-- DueJobs locks a batch of the given shards' due schedule rows, oldest
-- first: an index range scan per shard over due jobs only. The jobs rows
-- are read by the next statement (FiringJobs), not joined here: under READ
-- COMMITTED, a lock that had to wait for a definition change rechecks the
-- row it locked but keeps the joined rows it read before waiting, and the
-- firing would run the old definition. (Under SERIALIZABLE the lock fails
-- instead, with a serialization error, when the change committed after
-- the transaction's snapshot: a definition change always writes the
-- schedule row, SetJobSchedule in its transaction; the firing is
-- retried.) now is
-- the database's clock (the same in every row of one transaction).
-- name: DueJobs :many
SELECT job_id, next_fire_at, shard, now()::timestamptz AS now
FROM job_schedules
WHERE shard = ANY(@shards::int[]) AND next_fire_at <= now()
ORDER BY next_fire_at
LIMIT @batch
FOR UPDATE;

-- DueJobsFair is DueJobs taken tenant by tenant: each tenant's due jobs
-- (oldest first, at most a batch of them: an index range scan per tenant,
-- job_schedules_tenant_due, over due jobs only) are ranked, and the batch
-- takes them in order of rank over weight, so that with every tenant
-- backlogged each gets a share of the batch proportional to its weight,
-- and a tenant with a few due jobs has them in the next batch, whatever
-- another's backlog. The window runs on at most a batch per tenant; the
-- chosen schedule rows are then locked, by their primary key (an IN
-- over the ranking was planned as a hash join over the whole table), and
-- one that a definition change moved since is left out (READ COMMITTED
-- rechecks the WHERE on the row it locked).
-- SeveralTenantsDue reports whether more than one tenant has a due job in
-- the shards (one index probe per tenant, job_schedules_tenant_due): with
-- one, oldest first is fair already, and DueJobs is the cheaper query.
-- name: SeveralTenantsDue :one
SELECT (count(*) > 1)::bool FROM (
    SELECT 1 FROM tenants AS t
    WHERE EXISTS (SELECT 1 FROM job_schedules AS js
                  WHERE js.tenant_id = t.id AND js.next_fire_at <= now() AND js.shard = ANY(@shards::int[]))
    LIMIT 2
) AS d;

-- name: DueJobsFair :many
WITH ranked AS (
    SELECT d.job_id, d.next_fire_at, (d.rank - 1)::float8 / t.weight AS turn
    FROM tenants AS t
    CROSS JOIN LATERAL (
        SELECT x.job_id, x.next_fire_at, row_number() OVER (ORDER BY x.next_fire_at) AS rank
        FROM (
            SELECT js.job_id, js.next_fire_at FROM job_schedules AS js
            WHERE js.tenant_id = t.id AND js.next_fire_at <= now() AND js.shard = ANY(@shards::int[])
            ORDER BY js.next_fire_at
            LIMIT @batch
        ) AS x
    ) AS d
    ORDER BY turn, d.next_fire_at
    LIMIT @batch
)
SELECT js.job_id, js.next_fire_at, js.shard, now()::timestamptz AS now
FROM job_schedules AS js
WHERE js.job_id = ANY(ARRAY(SELECT job_id FROM ranked)) AND js.next_fire_at <= now()
ORDER BY js.next_fire_at
FOR UPDATE OF js;

-- FiringJobs reads the definitions of the jobs whose schedule rows the
-- firing transaction locked (DueJobs). A definition change writes the
-- schedule row too, so under READ COMMITTED (a new snapshot per
-- statement) each is the last committed; under SERIALIZABLE, DueJobs
-- failed if it was not.
-- name: FiringJobs :many
SELECT id, tenant_id, namespace, name, version, spec FROM jobs WHERE id = ANY(@ids::uuid[]);

-- ActiveRuns are the runs the overlap policy weighs: a backfill's are
-- not among them (its max_concurrent bounds them).
-- name: ActiveRuns :many
SELECT job_id, id, status FROM runs
WHERE job_id = ANY(@job_ids::uuid[]) AND finished_at IS NULL AND status IN ('queued', 'pending', 'running') AND backfill_id IS NULL
  AND trigger <> 'parent' -- a child run is its caller's: its job's overlap policy neither holds it nor sees it
  AND NOT debouncing -- a debounced run waiting for its triggers to pause is not started yet
ORDER BY scheduled_for;

-- InsertRuns inserts many runs; a (job, instant) that already has a run
-- is left alone (invariant 2, docs/invariants.md) and not returned. A run
-- written skipped or cancelled (a record: an older instant of one pass
-- under cancel_previous) is finished as it is written. The
-- runs written, and the tasks the caller writes with them (@task_counts),
-- are added to what their tenants hold (tenant_run_usage), in key order.
-- name: InsertRuns :many
WITH u AS (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@tenant_ids::uuid[]) AS tenant_id, unnest(@job_ids::uuid[]) AS job_id,
           unnest(@job_versions::bigint[]) AS job_version, unnest(@shards::int[]) AS shard,
           unnest(@shard_epochs::bigint[]) AS shard_epoch,
           unnest(@scheduled_fors::timestamptz[]) AS scheduled_for, unnest(@triggers::text[]) AS trigger,
           unnest(@statuses::text[]) AS status, unnest(@reasons::text[]) AS reason,
           unnest(@trace_parents::text[]) AS trace_parent, unnest(@watched::bool[]) AS watched,
           unnest(@task_counts::bigint[]) AS task_count, unnest(@params::text[]) AS params,
           unnest(@backfill_ids::uuid[]) AS backfill_id, unnest(@upstreams::text[]) AS upstream,
           unnest(@parent_task_ids::uuid[]) AS parent_task_id, unnest(@depths::int[]) AS depth,
           unnest(@root_run_ids::uuid[]) AS root_run_id, unnest(@events::text[]) AS event, unnest(@event_ids::uuid[]) AS event_id,
           unnest(@triggered_bys::text[]) AS triggered_by, unnest(@concurrency_keys::text[]) AS ckeys
), w AS (
    INSERT INTO runs (id, tenant_id, job_id, job_version, shard, node_id, shard_epoch, scheduled_for, trigger, status, reason, created_at, finished_at,
                      trace_parent, watched, params, backfill_id, upstream, parent_task_id, depth, root_run_id, event, event_id, triggered_by,
                      concurrency_keys)
    SELECT u.id, u.tenant_id, u.job_id, u.job_version, u.shard, sqlc.narg(node_id)::uuid, NULLIF(u.shard_epoch, -1),
           u.scheduled_for, u.trigger, u.status, u.reason, now(),
           CASE WHEN u.status IN ('skipped', 'cancelled', 'failed') THEN now() END, NULLIF(u.trace_parent, ''), u.watched, NULLIF(u.params, '')::jsonb,
           NULLIF(u.backfill_id, '00000000-0000-0000-0000-000000000000'::uuid), NULLIF(u.upstream, '')::jsonb,
           NULLIF(u.parent_task_id, '00000000-0000-0000-0000-000000000000'::uuid), u.depth,
           NULLIF(u.root_run_id, '00000000-0000-0000-0000-000000000000'::uuid),
           NULLIF(u.event, '')::jsonb, NULLIF(u.event_id, '00000000-0000-0000-0000-000000000000'::uuid),
           -- who is behind it: the trigger's principal, else its tree's
           -- root run's, its backfill's creator, its event's publisher
           COALESCE(NULLIF(u.triggered_by, ''),
                    CASE WHEN u.root_run_id <> '00000000-0000-0000-0000-000000000000'::uuid
                         THEN (SELECT rr.triggered_by FROM runs AS rr WHERE rr.id = u.root_run_id) END,
                    CASE WHEN u.backfill_id <> '00000000-0000-0000-0000-000000000000'::uuid
                         THEN (SELECT b.created_principal FROM backfills AS b WHERE b.id = u.backfill_id) END,
                    CASE WHEN u.event_id <> '00000000-0000-0000-0000-000000000000'::uuid
                         THEN (SELECT ev.published_by FROM events AS ev WHERE ev.id = u.event_id) END),
           -- its keys, one text joined by the record separator (chr(30))
           string_to_array(NULLIF(u.ckeys, ''), chr(30))
    FROM u
    ON CONFLICT (job_id, scheduled_for) DO NOTHING
    RETURNING id
), ended AS (
    -- a child run written failed or cancelled (its concurrency key): the
    -- event of its end, which ends its parent's step
    INSERT INTO upstream_finishes (run_id, finished_at, shard, status)
    SELECT u.id, now(), u.shard, u.status FROM u JOIN w ON w.id = u.id
    WHERE u.status IN ('failed', 'cancelled') AND u.parent_task_id <> '00000000-0000-0000-0000-000000000000'::uuid
    ON CONFLICT DO NOTHING
), c AS (
    INSERT INTO tenant_run_usage (tenant_id, shard, runs, tasks)
    SELECT u.tenant_id, u.shard, count(*), sum(u.task_count) FROM u JOIN w ON w.id = u.id
    GROUP BY u.tenant_id, u.shard ORDER BY u.tenant_id, u.shard
    ON CONFLICT (tenant_id, shard) DO UPDATE
    SET runs = tenant_run_usage.runs + EXCLUDED.runs, tasks = tenant_run_usage.tasks + EXCLUDED.tasks
)
SELECT id FROM w;

-- name: InsertTasks :exec
INSERT INTO tasks (id, tenant_id, run_id, step, status, parents_remaining, queue, priority, trigger_rule, created_at, released_at, ready_at,
                   admitted_at, conditional, fan_out, job_step, res_cpu, res_memory, res_gpu, res_custom)
SELECT u.id, u.tenant_id, u.run_id, u.step, u.status, u.parents_remaining, u.queue, u.priority, u.trigger_rule, now(),
       CASE WHEN u.status = 'queued' THEN now() END, CASE WHEN u.status = 'queued' THEN now() END,
       CASE WHEN u.status = 'queued' AND u.admitted THEN now() END, u.conditional, u.fan_out, u.job_step,
       u.res_cpu, u.res_memory, u.res_gpu, NULLIF(u.res_custom, '')::jsonb
FROM (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@tenant_ids::uuid[]) AS tenant_id, unnest(@run_ids::uuid[]) AS run_id,
           unnest(@steps::text[]) AS step, unnest(@statuses::text[]) AS status,
           unnest(@parents_remaining::int[]) AS parents_remaining, unnest(@queues::text[]) AS queue,
           unnest(@priorities::int[]) AS priority, unnest(@trigger_rules::text[]) AS trigger_rule,
           unnest(@admitted::bool[]) AS admitted, unnest(@conditionals::bool[]) AS conditional,
           unnest(@fan_outs::bool[]) AS fan_out, unnest(@job_steps::bool[]) AS job_step,
           unnest(@res_cpus::bigint[]) AS res_cpu, unnest(@res_memories::bigint[]) AS res_memory,
           unnest(@res_gpus::bigint[]) AS res_gpu, unnest(@res_customs::text[]) AS res_custom
) AS u;

-- name: InsertEdges :exec
INSERT INTO task_edges (parent_id, child_id)
SELECT unnest(@parents::uuid[]), unnest(@children::uuid[]);

-- AdvanceJobs moves each job's next fire time (NULL when done is true:
-- a one-time job that fired, or a cron that never matches again).
-- name: AdvanceJobs :exec
UPDATE job_schedules SET next_fire_at = CASE WHEN u.done THEN NULL ELSE u.next END
FROM (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@nexts::timestamptz[]) AS next, unnest(@done::bool[]) AS done
) AS u
WHERE job_schedules.job_id = u.id;

-- name: CancelRuns :many
WITH r AS (
    UPDATE runs SET status = 'cancelled', reason = @reason, finished_at = now(), debouncing = false,
        started_at = COALESCE(started_at, (SELECT min(t.started_at) FROM tasks AS t WHERE t.run_id = runs.id))
    WHERE id = ANY(@ids::uuid[]) AND status IN ('queued', 'pending', 'running')
    RETURNING id, job_id, shard, status, watched, finished_at, parent_task_id
), e AS (
    INSERT INTO run_finishes (run_id, shard, status, finished_at)
    SELECT r.id, r.shard, r.status, r.finished_at FROM r WHERE r.watched
    ON CONFLICT (run_id) DO UPDATE SET status = EXCLUDED.status, finished_at = EXCLUDED.finished_at
), uf AS (
    -- a run of a job some schedule.after names, or a child run (its
    -- parent step ends with it, unless @parent_cancelled: the step was
    -- cancelled, and its children with it): the event of its end
    INSERT INTO upstream_finishes (run_id, finished_at, shard, status)
    SELECT r.id, r.finished_at, r.shard, r.status FROM r JOIN jobs AS uj ON uj.id = r.job_id
    WHERE (r.parent_task_id IS NOT NULL AND NOT @parent_cancelled::bool)
       OR EXISTS (SELECT 1 FROM job_triggers AS g
                  WHERE g.tenant_id = uj.tenant_id AND g.upstream_namespace = uj.namespace AND g.upstream_name = uj.name)
    ON CONFLICT DO NOTHING
)
SELECT id FROM r;

-- CancelTasksOfRuns stops every unfinished task of the runs, and puts the
-- attempts that were running on record as failed with the given exit
-- reason, class and error; bumping the fencing token turns a running
-- attempt's later report into a stale one (RecordLateReport finds its row
-- by the token it ran under). k locks the tasks and reads what they were:
-- a start that commits while this waits for its row is seen running. A
-- parked step's row is deleted with it. flow_keys are the keys a keyed
-- step's task held, held_on the key a held one waited for
-- (docs/flow-control.md): its caller promotes them.
-- name: CancelTasksOfRuns :many
WITH k AS (
    SELECT id, status AS was FROM tasks
    WHERE run_id = ANY(@run_ids::uuid[]) AND status IN ('waiting', 'queued', 'running', 'retrying', 'expanded')
    FOR UPDATE
), t AS (
    UPDATE tasks SET status = 'cancelled', finished_at = now(), fencing_token = tasks.fencing_token + 1
    FROM k
    WHERE tasks.id = k.id
    RETURNING tasks.id, k.was, tasks.tenant_id, tasks.attempt_id, tasks.attempt, tasks.fencing_token - 1 AS token,
              tasks.attempt_worker, tasks.attempt_started_at, tasks.flow_keys, tasks.flow_limits, tasks.flow_wait
), a AS (
    INSERT INTO attempts (id, task_id, tenant_id, number, fencing_token, worker, started_at,
                          finished_at, outcome, exit_reason, failure_class, error)
    SELECT t.attempt_id, t.id, t.tenant_id, t.attempt, t.token, t.attempt_worker, t.attempt_started_at,
           now(), 'failed', @exit_reason::text, @failure_class::text, @error::text
    FROM t WHERE t.was = 'running'
), p AS (
    -- a parked step's row goes with its task's end (docs/parked-steps.md)
    DELETE FROM parked_steps WHERE task_id IN (SELECT t.id FROM t WHERE t.was = 'running')
)
SELECT t.id, t.tenant_id,
       (CASE WHEN t.flow_wait IS NULL AND t.was IN ('queued', 'running', 'retrying') THEN t.flow_keys END)::text[] AS flow_keys,
       t.flow_limits::int[] AS flow_limits,
       COALESCE(CASE WHEN t.was = 'waiting' THEN t.flow_wait END, '')::text AS held_on
FROM t;

-- name: SetShardLags :exec
UPDATE shards SET lag_seconds = u.lag
FROM (SELECT unnest(@ids::int[]) AS id, unnest(@lags::float8[]) AS lag) AS u
WHERE shards.id = u.id AND shards.owner_node = @node::uuid;

-- ListRuns pages through a tenant's runs, newest instant first, by
-- (scheduled_for, id) keyset; a scoped caller sees the runs of what it
-- was granted, as in ListJobs. A run's status is its view: a pending run
-- with a started task is running, since first_start (its first task's
-- start: the start writes the task only; the run's end writes the run's
-- started_at).
-- name: ListRuns :many
SELECT r.id, r.tenant_id, r.job_id, r.job_version, r.shard, r.scheduled_for, r.trigger,
       (CASE WHEN r.status = 'pending' AND s.first_start IS NOT NULL THEN 'running' ELSE r.status END)::text AS status, r.reason,
       r.created_at, r.started_at, s.first_start, r.finished_at, j.namespace, j.name AS job_name,
       COALESCE(e.first_error, '')::text AS first_error
FROM runs AS r JOIN jobs AS j ON j.id = r.job_id
LEFT JOIN LATERAL (
    SELECT t.started_at AS first_start FROM tasks AS t
    WHERE t.run_id = r.id AND r.status = 'pending' AND t.started_at IS NOT NULL
    ORDER BY t.started_at LIMIT 1
) AS s ON true
LEFT JOIN LATERAL (
    SELECT left(t.last_error, 300) AS first_error FROM tasks AS t
    WHERE t.run_id = r.id AND r.status IN ('failed', 'dead_lettered') AND t.status = 'dead_lettered'
    ORDER BY t.finished_at LIMIT 1
) AS e ON true
WHERE r.tenant_id = @tenant_id
  AND (sqlc.narg(job_id)::uuid IS NULL OR r.job_id = sqlc.narg(job_id)::uuid)
  AND (sqlc.narg(namespace)::text IS NULL OR j.namespace = sqlc.narg(namespace)::text)
  AND (sqlc.narg(trigger)::text IS NULL OR r.trigger = sqlc.narg(trigger)::text)
  AND (sqlc.narg(status)::text IS NULL
       OR (CASE WHEN r.status = 'pending' AND s.first_start IS NOT NULL THEN 'running'
                WHEN r.status = 'dead_lettered' THEN 'failed' ELSE r.status END) = sqlc.narg(status)::text)
  AND (sqlc.narg(since)::timestamptz IS NULL OR r.scheduled_for >= sqlc.narg(since)::timestamptz)
  AND (sqlc.narg(until)::timestamptz IS NULL OR r.scheduled_for < sqlc.narg(until)::timestamptz)
  AND (NOT @scoped::bool OR j.namespace = ANY(@scope_namespaces::text[])
       OR j.namespace || '/' || j.name = ANY(@scope_jobs::text[]))
  AND (r.scheduled_for, r.id) < (@before_at::timestamptz, @before_id::uuid)
ORDER BY r.scheduled_for DESC, r.id DESC
LIMIT @page_size;

-- GetRun reads a run's view, as ListRuns.
-- name: GetRun :one
SELECT r.id, r.tenant_id, r.job_id, r.job_version, r.shard, r.scheduled_for, r.trigger,
       (CASE WHEN r.status = 'pending' AND s.first_start IS NOT NULL THEN 'running' ELSE r.status END)::text AS status, r.reason,
       r.created_at, r.started_at, s.first_start, r.finished_at, j.namespace, j.name AS job_name, r.params, r.upstream, r.event,
       pt.run_id AS parent_run_id, COALESCE(pt.step, '')::text AS parent_step,
       COALESCE(pj.namespace, '')::text AS parent_namespace, COALESCE(pj.name, '')::text AS parent_job,
       COALESCE(r.triggered_by, '')::text AS triggered_by, COALESCE(r.concurrency_keys, '{}')::text[] AS concurrency_keys,
       r.debounce_key, r.debounce_at, r.debounce_count, r.debouncing
FROM runs AS r JOIN jobs AS j ON j.id = r.job_id
LEFT JOIN tasks AS pt ON pt.id = r.parent_task_id
LEFT JOIN runs AS pr ON pr.id = pt.run_id
LEFT JOIN jobs AS pj ON pj.id = pr.job_id
LEFT JOIN LATERAL (
    SELECT t.started_at AS first_start FROM tasks AS t
    WHERE t.run_id = r.id AND r.status = 'pending' AND t.started_at IS NOT NULL
    ORDER BY t.started_at LIMIT 1
) AS s ON true
WHERE r.tenant_id = @tenant_id AND r.id = @id;

-- RunTasks reads a run's tasks but the items of its fan-outs (their
-- groups stand for them: ItemCounts, GroupItems).
-- name: RunTasks :many
SELECT * FROM tasks WHERE run_id = @run_id AND group_id IS NULL ORDER BY created_at, id;

-- RunAttempts reads the attempts of a run's tasks (not of the items of
-- its fan-outs), ended and running (every_attempt). The tasks' ids go in
-- as a list, which reaches both halves of the view as an index probe (a
-- join to tasks read every running task of the database).
-- name: RunAttempts :many
SELECT a.* FROM every_attempt AS a
WHERE a.task_id = ANY(ARRAY(SELECT t.id FROM tasks AS t WHERE t.run_id = @run_id AND t.group_id IS NULL))
ORDER BY a.task_id, a.number;

-- ItemCounts counts the items of a run's fan-outs by group and status.
-- name: ItemCounts :many
SELECT group_id::uuid AS group_id, status, count(*)::int AS n FROM tasks
WHERE run_id = @run_id AND group_id IS NOT NULL
GROUP BY group_id, status;

-- GroupItems reads a page of a group's items, from index @from_index.
-- name: GroupItems :many
SELECT * FROM tasks WHERE group_id = @group_id::uuid AND item_index >= @from_index::int
ORDER BY item_index LIMIT @max_items;

-- TasksAttempts reads the attempts of tasks, ended and running.
-- name: TasksAttempts :many
SELECT * FROM every_attempt WHERE task_id = ANY(@task_ids::uuid[]) ORDER BY task_id, number;

-- name: InsertRunAudit :exec
INSERT INTO audit_log (id, tenant_id, at, actor, action, target_kind, target_id, target_name, before, after)
VALUES (@id, @tenant_id, now(), @actor, @action, @target_kind, @target_id, @target_name, @before, @after);

-- ListDeadLetters pages through dead-lettered tasks, newest first; a
-- scoped caller sees those of what it was granted, as in ListJobs. The
-- dead-lettered tasks of a cancelled run are not dead letters: the run
-- ended, nothing replays them.
-- name: ListDeadLetters :many
SELECT t.id, t.run_id, t.step, t.attempt, t.queue, t.last_error, t.finished_at, r.job_id, r.scheduled_for,
       j.namespace, j.name AS job_name
FROM tasks AS t JOIN runs AS r ON r.id = t.run_id JOIN jobs AS j ON j.id = r.job_id
WHERE t.tenant_id = @tenant_id AND t.status = 'dead_lettered' AND r.status <> 'cancelled'
  AND NOT t.fan_out AND t.group_id IS NULL
  AND (sqlc.narg(job_id)::uuid IS NULL OR r.job_id = sqlc.narg(job_id)::uuid)
  AND (NOT @scoped::bool OR j.namespace = ANY(@scope_namespaces::text[])
       OR j.namespace || '/' || j.name = ANY(@scope_jobs::text[]))
  AND (t.finished_at, t.id) < (@before_at::timestamptz, @before_id::uuid)
ORDER BY t.finished_at DESC, t.id DESC
LIMIT @page_size;

-- DeadLetterRuns groups the dead letters asked for by run, with the
-- number of tasks of each run (what reading its graph costs).
-- name: DeadLetterRuns :many
SELECT t.run_id, array_agg(t.id ORDER BY t.id)::uuid[] AS task_ids,
       (SELECT count(*) FROM tasks AS a WHERE a.run_id = t.run_id)::bigint AS tasks
FROM tasks AS t
JOIN runs AS r ON r.id = t.run_id
WHERE t.tenant_id = @tenant_id AND t.status = 'dead_lettered' AND t.id = ANY(@ids::uuid[]) AND r.status <> 'cancelled'
  AND NOT t.fan_out AND t.group_id IS NULL
GROUP BY t.run_id
ORDER BY t.run_id;

-- LockRunsForReplay locks runs in key order (before their tasks, as
-- finishing a task does) and returns their statuses.
-- name: LockRunsForReplay :many
SELECT id, status FROM runs WHERE id = ANY(@ids::uuid[]) ORDER BY id FOR UPDATE;

-- RunGraphs reads the tasks of runs with their parents.
-- name: RunGraphs :many
SELECT t.id, t.run_id, t.tenant_id, t.status, t.trigger_rule, t.parents_remaining, t.queue, t.priority, t.attempt,
       t.step, t.conditional, t.fan_out, t.job_step, t.group_id,
       COALESCE((SELECT array_agg(e.parent_id ORDER BY e.parent_id) FROM task_edges AS e WHERE e.child_id = t.id), '{}')::uuid[] AS parents
FROM tasks AS t
WHERE t.run_id = ANY(@run_ids::uuid[])
ORDER BY t.run_id, t.created_at, t.id;

-- ReplayTasks puts dead letters back in line: queued, or waiting (with
-- nothing to wait for) when their step has a condition, which the caller
-- then decides again as for any release.
-- name: ReplayTasks :many
UPDATE tasks SET status = CASE WHEN conditional OR job_step THEN 'waiting' ELSE 'queued' END, finished_at = NULL, last_error = '',
    ready_at = now(), admitted_at = NULL
WHERE tenant_id = @tenant_id AND status = 'dead_lettered' AND id = ANY(@ids::uuid[]) AND NOT fan_out AND group_id IS NULL
RETURNING id, tenant_id, run_id, attempt, queue, priority, step, conditional, fan_out, job_step;

-- WaitAgain makes tasks below a replayed one wait for their parents again,
-- with the count lifecycle.Replay derived.
-- name: WaitAgain :exec
UPDATE tasks SET status = 'waiting', finished_at = NULL, parents_remaining = u.remaining, flow_wait = NULL, flow_keys = NULL, flow_limits = NULL
FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@remaining::int[]) AS remaining) AS u
WHERE tasks.id = u.id AND tasks.status IN ('waiting', 'upstream_failed');

-- RetryTasks makes tasks of a retried run wait again for the parents
-- that run again (lifecycle.Retry), whatever their end: their attempt
-- numbers and fencing tokens go on.
-- name: RetryTasks :exec
UPDATE tasks SET status = 'waiting', finished_at = NULL, last_error = '', parents_remaining = u.remaining,
    admitted_at = NULL, ready_at = NULL, flow_wait = NULL, flow_keys = NULL, flow_limits = NULL
FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@remaining::int[]) AS remaining) AS u
WHERE tasks.id = u.id AND tasks.status NOT IN ('succeeded', 'skipped');

-- RetryRun reopens a finished run that failed or was cancelled, for a
-- retry from where it failed; no row when it is not one.
-- name: RetryRun :one
UPDATE runs SET status = 'running', finished_at = NULL, reason = ''
WHERE id = @id AND status IN ('failed', 'dead_lettered', 'cancelled')
RETURNING id;

-- QueueRetriedRun reopens a finished run to run again (a retry; with
-- @rerun a rerun, of a run that succeeded too) as queued for its
-- concurrency keys, with @reason: its tasks released when a promotion
-- starts it (RootTasks). No row when it is not one.
-- name: QueueRetriedRun :one
UPDATE runs SET status = 'queued', finished_at = NULL, reason = @reason
WHERE id = @id AND (status IN ('failed', 'dead_lettered', 'cancelled') OR (@rerun::bool AND status = 'succeeded'))
RETURNING id;

-- RerunRun reopens a finished run that had tasks, succeeded or not, to
-- run again from the start (a backfill's redo all); no row when it is not
-- one.
-- name: RerunRun :one
UPDATE runs SET status = 'running', finished_at = NULL, reason = ''
WHERE id = @id AND status IN ('succeeded', 'failed', 'dead_lettered', 'cancelled')
RETURNING id;

-- RerunTasks makes every task of a rerun wait again, succeeded and skipped
-- ones too, @remaining[i] parents each (0: released next, in the same
-- transaction); a fan-out group's count of succeeded items is cleared, so
-- that its release runs every item again (ReopenItems).
-- name: RerunTasks :exec
UPDATE tasks SET status = 'waiting', finished_at = NULL, last_error = '', parents_remaining = u.remaining,
    admitted_at = NULL, ready_at = NULL, flow_wait = NULL, flow_keys = NULL, flow_limits = NULL,
    items_succeeded = CASE WHEN tasks.items_total IS NULL THEN tasks.items_succeeded ELSE 0 END
FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@remaining::int[]) AS remaining) AS u
WHERE tasks.id = u.id;

-- name: ReopenRuns :exec
UPDATE runs SET status = 'running', finished_at = NULL, reason = ''
WHERE id = ANY(@ids::uuid[]) AND status IN ('failed', 'dead_lettered');

-- LockRun serializes the transactions that finish tasks of one run, so
-- the last of them sees every task terminal and finishes the run.
-- LockRuns locks runs in key order (a batch of reports: before their
-- tasks).
-- name: LockRuns :exec
SELECT id FROM runs WHERE id = ANY(@ids::uuid[]) ORDER BY id FOR UPDATE;

-- name: LockRun :one
SELECT id, job_id FROM runs WHERE id = @id FOR UPDATE;

-- name: LockRunOfTask :one
SELECT r.id FROM runs AS r JOIN tasks AS t ON t.run_id = r.id WHERE t.id = @task_id FOR UPDATE OF r;

-- JobsWithStrandedQueuedRuns lists jobs holding a run back (overlap:
-- queue) while no run of theirs is active: the report that should have
-- started it overlapped the firing transaction that held it back, and under
-- READ COMMITTED could not see it. The reaper starts them. Jobs come in
-- id order after @after, so that the reaper's passes go round them all.
-- name: JobsWithStrandedQueuedRuns :many
SELECT DISTINCT q.job_id FROM runs AS q
WHERE q.held AND q.finished_at IS NULL AND q.status = 'queued' AND q.job_id > @after::uuid
  AND NOT q.debouncing -- (debounced: its shard's scheduler starts it)
  AND (q.concurrency_keys IS NOT NULL -- held for its keys: promoteKeyed counts whether they have room
       OR NOT EXISTS (
    SELECT 1 FROM runs AS a
    WHERE a.job_id = q.job_id AND a.finished_at IS NULL AND a.status IN ('pending', 'running')
  ))
ORDER BY q.job_id
LIMIT @batch;

-- RunEdges are the parent -> child edges among a run's tasks.
-- name: RunEdges :many
SELECT e.parent_id, e.child_id
FROM tasks AS t JOIN task_edges AS e ON e.parent_id = t.id
WHERE t.run_id = @run_id;

-- DeadLettersByNamespace counts dead letters (as ListDeadLetters sees
-- them) per namespace name, across tenants (the metrics' gauge), through
-- the tasks_dead index.
-- name: DeadLettersByNamespace :many
SELECT j.namespace, count(*)::bigint AS dead
FROM tasks AS t JOIN runs AS r ON r.id = t.run_id JOIN jobs AS j ON j.id = r.job_id
WHERE t.status = 'dead_lettered' AND r.status <> 'cancelled' AND NOT t.fan_out AND t.group_id IS NULL
GROUP BY j.namespace;

-- RunStepStatuses reads the steps of runs and their statuses (a job's
-- history grid; a fan-out by its group, not its items), at most max_rows
-- of them.
-- name: RunStepStatuses :many
SELECT run_id, step, status FROM tasks WHERE run_id = ANY(@run_ids::uuid[]) AND group_id IS NULL
ORDER BY run_id, step
LIMIT @max_rows;

-- The overview (RunService.SummarizeRuns) reads a tenant's runs of a
-- window of scheduled instants (through runs_tenant_time). A namespace or
-- the caller's scope narrows them to the jobs JobIDsIn names (job_ids,
-- with narrowed): a lookup of each run's job costs more than the counts.

-- JobIDsIn are the ids of a tenant's jobs (deleted ones too) in a
-- namespace and in a scope (as ListRuns narrows).
-- name: JobIDsIn :many
SELECT j.id FROM jobs AS j
WHERE j.tenant_id = @tenant_id
  AND (sqlc.narg(namespace)::text IS NULL OR j.namespace = sqlc.narg(namespace)::text)
  AND (NOT @scoped::bool OR j.namespace = ANY(@scope_namespaces::text[])
       OR j.namespace || '/' || j.name = ANY(@scope_jobs::text[]))
ORDER BY j.id
LIMIT @max_rows;

-- RunsByHour counts the window's runs by the hour (UTC) of their instant
-- and status.
-- name: RunsByHour :many
-- One range read per hour, so that the counts are hashed by a key the
-- planner can size (a key computed from each run's instant was sorted).
-- first_hour is since truncated to the hour (an hour is 3600 s in every
-- zone, so the series is UTC's hours).
SELECT h.hour::timestamptz AS hour, r.status, count(*)::int AS runs
FROM generate_series(@first_hour::timestamptz, @until::timestamptz, interval '1 hour') AS h (hour)
JOIN runs AS r ON r.tenant_id = @tenant_id
  AND r.scheduled_for >= greatest(h.hour, @since::timestamptz)
  AND r.scheduled_for < least(h.hour + interval '1 hour', @until::timestamptz)
WHERE NOT @narrowed::bool OR r.job_id = ANY(@job_ids::uuid[])
GROUP BY 1, 2
ORDER BY 1, 2;

-- FailingJobs are the window's jobs with failed or dead-lettered runs,
-- most failures first.
-- name: FailingJobs :many
SELECT j.namespace, j.name, f.failures, f.last_failure
FROM (
    SELECT r.job_id, count(*)::int AS failures, max(r.scheduled_for)::timestamptz AS last_failure
    FROM runs AS r
    WHERE r.tenant_id = @tenant_id AND r.scheduled_for >= @since AND r.scheduled_for < @until
      AND r.status IN ('failed', 'dead_lettered')
      AND (NOT @narrowed::bool OR r.job_id = ANY(@job_ids::uuid[]))
    GROUP BY r.job_id
) AS f JOIN jobs AS j ON j.id = f.job_id
ORDER BY f.failures DESC, j.namespace, j.name
LIMIT @max_rows;

-- SlowestStarts are the window's scheduled runs that started longest
-- after their instant (a run's start is written when it ends).
-- name: SlowestStarts :many
SELECT s.id, j.namespace, j.name, s.scheduled_for, s.started_at
FROM (
    SELECT r.id, r.job_id, r.scheduled_for, r.started_at::timestamptz AS started_at
    FROM runs AS r
    WHERE r.tenant_id = @tenant_id AND r.scheduled_for >= @since AND r.scheduled_for < @until
      AND r.trigger = 'schedule' AND r.started_at IS NOT NULL
      AND (NOT @narrowed::bool OR r.job_id = ANY(@job_ids::uuid[]))
    ORDER BY r.started_at - r.scheduled_for DESC, r.id
    LIMIT @max_rows
) AS s JOIN jobs AS j ON j.id = s.job_id
ORDER BY s.started_at - s.scheduled_for DESC, s.id;

-- LateJobs are the tenant's active jobs whose next instant is past by
-- more than the slack: the scheduler has not fired it.
-- name: LateJobs :many
SELECT j.namespace, j.name, s.next_fire_at::timestamptz AS next_fire_at
FROM job_schedules AS s JOIN jobs AS j ON j.id = s.job_id
WHERE j.tenant_id = @tenant_id AND j.status = 'active' AND s.next_fire_at < @before
  AND (sqlc.narg(namespace)::text IS NULL OR j.namespace = sqlc.narg(namespace)::text)
  AND (NOT @scoped::bool OR j.namespace = ANY(@scope_namespaces::text[])
       OR j.namespace || '/' || j.name = ANY(@scope_jobs::text[]))
ORDER BY s.next_fire_at, j.id
LIMIT @max_rows;

-- Job-level concurrency keys (docs/flow-control.md).

-- LockConcurrencyKeys takes a transaction-scoped advisory lock per key, in
-- key order: the writers of runs holding a key, and the promoters of runs
-- queued for it, decide one after the other.
-- name: LockConcurrencyKeys :exec
SELECT pg_advisory_xact_lock(hashtextextended(s.k, 8191)) FROM (
    SELECT DISTINCT unnest(@keys::text[]) AS k ORDER BY 1
) AS s;

-- KeyHolders counts, for each key, the runs holding it: not finished,
-- pending or running.
-- name: KeyHolders :many
SELECT k.key::text AS key, (SELECT count(*) FROM runs AS r
    WHERE r.concurrency_keys @> ARRAY[k.key] AND r.finished_at IS NULL AND r.concurrency_keys IS NOT NULL
      AND r.status IN ('pending', 'running'))::int AS n
FROM (SELECT DISTINCT unnest(@keys::text[]) AS key) AS k;

-- OldestHolders are the oldest runs holding a key (cancel_running makes
-- room by cancelling them), at most @n.
-- name: OldestHolders :many
SELECT r.id FROM runs AS r
WHERE r.concurrency_keys @> ARRAY[@key::text] AND r.finished_at IS NULL AND r.concurrency_keys IS NOT NULL
  AND r.status IN ('pending', 'running')
ORDER BY r.created_at, r.id
LIMIT @n;

-- QueuedKeyedRuns are a job's runs queued for their keys, the oldest
-- first, at most @n (the reaper's look, which knows no ended run).
-- name: QueuedKeyedRuns :many
SELECT r.id, r.job_version, r.concurrency_keys::text[] AS concurrency_keys FROM runs AS r
WHERE r.job_id = @job_id AND r.held AND r.finished_at IS NULL AND r.status = 'queued' AND r.concurrency_keys IS NOT NULL
ORDER BY r.scheduled_for, r.id
LIMIT @n;

-- PromoteRuns starts queued runs (a promoter that finds one started
-- meanwhile leaves it).
-- name: PromoteRuns :many
UPDATE runs SET status = 'pending', reason = ''
WHERE id = ANY(@ids::uuid[]) AND status = 'queued'
RETURNING id;

-- QueuedForKeys are the runs queued for any of @keys (those an ended run
-- held), the oldest first, at most @n.
-- name: QueuedForKeys :many
SELECT r.id, r.job_id, r.job_version, r.concurrency_keys::text[] AS concurrency_keys FROM runs AS r
WHERE r.concurrency_keys && @keys::text[] AND r.finished_at IS NULL AND r.concurrency_keys IS NOT NULL
  AND r.held AND r.status = 'queued'
ORDER BY r.scheduled_for, r.id
LIMIT @n;


-- RunsKeys are the concurrency keys of the runs of @ids that hold any
-- (a retry or a replay asks them for room again).
-- name: RunsKeys :many
SELECT id, job_id, job_version, concurrency_keys::text[] AS concurrency_keys FROM runs
WHERE id = ANY(@ids::uuid[]) AND concurrency_keys IS NOT NULL
ORDER BY id;

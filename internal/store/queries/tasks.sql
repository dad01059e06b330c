-- StartAttempts moves queued or retrying tasks to running, each for the
-- attempt its River job was made for (bumping the fencing token, under the
-- worker's lease), with the attempt on record in the task's row (its id,
-- start and worker: the attempts row is written when it ends), and
-- returns what the executors need: one statement for a batch of starts. A task missing from the
-- answer had a stale River job (it moved on, or was cancelled). The run is
-- not written: a pending run with a started task is running, and its
-- started_at is its first task's (see the run views in runs.sql), both
-- written with the run's end.
-- name: StartAttempts :many
WITH req AS (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@prev_attempts::int[]) AS prev, unnest(@attempt_ids::uuid[]) AS attempt_id
), t AS (
    UPDATE tasks
    SET status = 'running', attempt = tasks.attempt + 1, fencing_token = tasks.fencing_token + 1,
        worker_id = @worker_id::uuid, lease_expires_at = NULL, deadline_at = NULL, started_at = COALESCE(tasks.started_at, now()), admitted_at = COALESCE(tasks.admitted_at, now()),
        attempt_id = req.attempt_id, attempt_started_at = now(), attempt_worker = @worker::text
    FROM req
    WHERE tasks.id = req.id AND tasks.status IN ('queued', 'retrying') AND tasks.attempt = req.prev
    RETURNING tasks.id, tasks.tenant_id, tasks.run_id, tasks.step, tasks.attempt, tasks.fencing_token, tasks.released_at, req.attempt_id,
              tasks.item, tasks.item_index, tasks.res_cpu, tasks.res_memory
)
SELECT t.id, t.tenant_id, te.name AS tenant, t.run_id, t.step, t.attempt, t.fencing_token,
       ru.job_id, ru.job_version, ru.scheduled_for, ru.trigger, j.namespace, j.name, now()::timestamptz AS started_at,
       t.released_at, ru.trace_parent, ru.params, ru.upstream, ru.event, t.attempt_id::uuid AS attempt_id, t.item, t.item_index,
       t.res_cpu, t.res_memory
FROM t
JOIN runs AS ru ON ru.id = t.run_id
JOIN jobs AS j ON j.id = ru.job_id
JOIN tenants AS te ON te.id = t.tenant_id;

-- OwnRunningAttempt reads the attempt @attempt of a task when it runs on
-- worker @worker_id: a start of that worker's that committed while its
-- answer was lost (a connection cut at COMMIT), found again when the
-- start is tried once more. The columns are StartAttempts'.
-- name: OwnRunningAttempt :one
SELECT k.id, k.tenant_id, te.name AS tenant, k.run_id, k.step, k.attempt, k.fencing_token,
       ru.job_id, ru.job_version, ru.scheduled_for, ru.trigger, j.namespace, j.name, k.attempt_started_at::timestamptz AS started_at,
       k.released_at, ru.trace_parent, ru.params, ru.upstream, ru.event, k.attempt_id::uuid AS attempt_id, k.item, k.item_index,
       k.res_cpu, k.res_memory
FROM tasks AS k
JOIN runs AS ru ON ru.id = k.run_id
JOIN jobs AS j ON j.id = ru.job_id
JOIN tenants AS te ON te.id = k.tenant_id
WHERE k.id = @id AND k.status = 'running' AND k.attempt = @attempt AND k.worker_id = @worker_id::uuid;

-- StepOutputs reads what expressions read of steps of runs: each task's
-- status and, while it stands succeeded, the output of its latest
-- succeeded attempt (a step that succeeded and then was skipped or waits
-- again in a rerun has none; a fan-out's group has none: its items' are
-- read by ItemOutputs) (one primary key probe
-- of tasks by (run_id, step), one index probe of attempts). The pairs are
-- @run_ids[i], @steps[i].
-- name: StepOutputs :many
SELECT k.run_id::uuid AS run_id, k.step::text AS step, t.id, t.fan_out, t.status, COALESCE(a.output, '')::text AS output,
       COALESCE(a.output_truncated, false)::bool AS output_truncated
FROM (SELECT unnest(@run_ids::uuid[]) AS run_id, unnest(@steps::text[]) AS step) AS k
JOIN tasks AS t ON t.run_id = k.run_id AND t.step = k.step
LEFT JOIN LATERAL (
    SELECT x.output, x.output_truncated FROM attempts AS x
    WHERE x.task_id = t.id AND x.outcome = 'succeeded' AND t.status = 'succeeded'
    ORDER BY x.number DESC LIMIT 1
) AS a ON true;

-- JobVersionSpecs reads the specs of several job versions: one primary
-- key probe each (the LIMIT keeps the planner from turning the probes into
-- a scan of the whole table when its statistics are young).
-- name: JobVersionSpecs :many
SELECT k.job_id::uuid AS job_id, k.version::bigint AS version, v.spec
FROM (SELECT unnest(@job_ids::uuid[]) AS job_id, unnest(@versions::bigint[]) AS version) AS k
CROSS JOIN LATERAL (
    SELECT jv.spec FROM job_versions AS jv
    WHERE jv.job_id = k.job_id AND jv.version = k.version
    LIMIT 1
) AS v;

-- RunningOn lists the attempts running on a worker (task and fencing
-- token): what the worker still holds; one it runs that is missing was
-- cancelled, reaped or moved on. A read of tasks_running_worker alone (an
-- index-only scan once the pages are all-visible): it takes no lock, so it
-- waits for nothing and nothing waits for it. (The leases themselves are
-- the worker's: HeartbeatWorker.)
-- name: RunningOn :many
SELECT id, fencing_token FROM tasks WHERE worker_id = @worker_id AND status = 'running';

-- name: RecordLateReport :exec
UPDATE attempts SET late_outcome = @outcome, late_error = @error, late_at = now()
WHERE task_id = @task_id AND fencing_token = @fencing_token;

-- DecrementChildren counts the tasks @parent_ids done for each of their
-- waiting children (one for each of its parents among them) and returns
-- the children with their new counts.
-- name: DecrementChildren :many
WITH e AS (
    SELECT child_id, count(*)::int AS n FROM task_edges WHERE parent_id = ANY(@parent_ids::uuid[]) GROUP BY child_id
)
UPDATE tasks SET parents_remaining = parents_remaining - e.n
FROM e
WHERE tasks.id = e.child_id AND tasks.status = 'waiting'
RETURNING tasks.id, tasks.tenant_id, tasks.parents_remaining, tasks.queue, tasks.priority, tasks.run_id, tasks.step, tasks.conditional,
    tasks.fan_out, tasks.job_step, tasks.attempt, tasks.res_cpu, tasks.res_memory, tasks.res_gpu, tasks.res_custom;

-- name: ReleaseTasks :exec
UPDATE tasks SET status = 'queued', released_at = COALESCE(released_at, now()), ready_at = now(),
    admitted_at = CASE WHEN id = ANY(@admitted::uuid[]) THEN now() END
WHERE id = ANY(@ids::uuid[]) AND status = 'waiting';

-- FinishRunIfDone derives a run's status from its tasks once none is left
-- to run (succeeded when all succeeded or were skipped; failed when one
-- was dead-lettered; else cancelled when one was, else failed) and returns
-- the run's job; no row while tasks remain. The items of a fan-out are not
-- counted: their group (open while they are) stands for them, its end
-- decided by min_success.
-- name: FinishRunIfDone :one
WITH r AS (
UPDATE runs
SET status = CASE
        WHEN c.total = c.succeeded + c.skipped THEN 'succeeded'
        WHEN c.dead = 0 AND c.cancelled > 0 THEN 'cancelled'
        ELSE 'failed' END,
    reason = CASE
        WHEN c.total = c.succeeded + c.skipped OR (c.dead = 0 AND c.cancelled > 0) THEN ''
        WHEN c.dead > 0 THEN c.dead::text || ' task(s) dead-lettered'
        ELSE c.upstream::text || ' task(s) failed upstream' END,
    finished_at = now(), started_at = COALESCE(runs.started_at, c.started)
FROM (
    SELECT count(*) AS total,
           count(*) FILTER (WHERE status = 'succeeded') AS succeeded,
           count(*) FILTER (WHERE status = 'skipped') AS skipped,
           count(*) FILTER (WHERE status = 'dead_lettered') AS dead,
           count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
           count(*) FILTER (WHERE status = 'upstream_failed') AS upstream,
           count(*) FILTER (WHERE status IN ('waiting', 'queued', 'running', 'retrying', 'expanded')) AS open,
           min(started_at) AS started
    FROM tasks WHERE run_id = @id AND group_id IS NULL
) AS c
WHERE runs.id = @id AND runs.status IN ('pending', 'running') AND c.open = 0
RETURNING runs.id, runs.job_id, runs.status, runs.shard, runs.watched, runs.finished_at, runs.parent_task_id, runs.concurrency_keys
), e AS (
    INSERT INTO run_finishes (run_id, shard, status, finished_at)
    SELECT r.id, r.shard, r.status, r.finished_at FROM r WHERE r.watched
    ON CONFLICT (run_id) DO UPDATE SET status = EXCLUDED.status, finished_at = EXCLUDED.finished_at
), uf AS (
    -- a run of a job some schedule.after names, or a child run (its
    -- parent step ends with it): the event of its end
    INSERT INTO upstream_finishes (run_id, finished_at, shard, status)
    SELECT r.id, r.finished_at, r.shard, r.status FROM r JOIN jobs AS uj ON uj.id = r.job_id
    WHERE r.parent_task_id IS NOT NULL
       OR EXISTS (SELECT 1 FROM job_triggers AS g
                  WHERE g.tenant_id = uj.tenant_id AND g.upstream_namespace = uj.namespace AND g.upstream_name = uj.name)
    ON CONFLICT DO NOTHING
)
SELECT r.job_id, r.status, COALESCE(r.concurrency_keys, '{}')::text[] AS concurrency_keys FROM r;

-- PromoteQueuedRun starts the run that overlap: queue held back.
-- name: PromoteQueuedRun :one
UPDATE runs SET status = 'pending'
WHERE id = (SELECT r.id FROM runs AS r WHERE r.job_id = @job_id AND r.held AND r.finished_at IS NULL AND r.status = 'queued'
              AND r.concurrency_keys IS NULL -- (held for its keys: promoteKeyed's)
              AND NOT r.debouncing -- (debounced: its shard's scheduler starts it)
            ORDER BY r.scheduled_for LIMIT 1)
  AND status = 'queued' -- re-checked after a wait for the row: two promoters start it once
RETURNING id;

-- RootTasks lists the tasks of a held run that start with it (not the
-- held items of a fan-out, which their group releases): its first steps,
-- or, for a run retried while its key was full, those to run again
-- (their attempts go on).
-- name: RootTasks :many
SELECT id, tenant_id, queue, priority, attempt, run_id, step, conditional, fan_out, job_step FROM tasks
WHERE run_id = @run_id AND status = 'waiting' AND parents_remaining = 0 AND group_id IS NULL;

-- ExpiredLeases lists running tasks whose lease lapsed: their worker's
-- (it died or stalled), or, for a remote attempt (one with a deadline),
-- its own (no heartbeat renewed it, or it is past its deadline). Each is
-- then failed under its fencing token and only while that lease is still
-- lapsed, so two reapers that see the same task cannot both fail it, and a
-- worker that renewed first keeps it.
-- name: ExpiredLeases :many
WITH by_worker AS (
    SELECT t.id, t.fencing_token, false AS past_deadline FROM workers AS w
    JOIN tasks AS t ON t.worker_id = w.id AND t.status = 'running' AND t.deadline_at IS NULL
    WHERE w.lease_expires_at < now()
    ORDER BY w.lease_expires_at
    LIMIT @batch
), own AS (
    SELECT t.id, t.fencing_token, COALESCE(t.deadline_at <= now(), false) AS past_deadline FROM tasks AS t
    WHERE t.status = 'running' AND t.deadline_at IS NOT NULL AND t.lease_expires_at < now()
    ORDER BY t.lease_expires_at
    LIMIT @batch
)
SELECT b.id, b.fencing_token, b.past_deadline::bool AS past_deadline FROM by_worker AS b
UNION ALL
SELECT o.id, o.fencing_token, o.past_deadline::bool AS past_deadline FROM own AS o;

-- TaskShapes reads, for reports that did not carry them, each task's run,
-- step and attempt and the job version its run pinned.
-- name: TaskShapes :many
SELECT t.id, t.run_id, t.step, t.attempt, r.job_id, r.job_version
FROM tasks AS t
JOIN runs AS r ON r.id = t.run_id
WHERE t.id = ANY(@ids::uuid[]);

-- WaitingChildren lists the waiting children of tasks, with their trigger rule.
-- name: WaitingChildren :many
SELECT e.parent_id, e.child_id, t.trigger_rule FROM tasks AS t
JOIN task_edges AS e ON e.child_id = t.id
WHERE e.parent_id = ANY(@parents::uuid[]) AND t.status = 'waiting';

-- WaitingEdgesOfRun lists the edges of a run whose child waits, with the
-- child's trigger rule: the graph a deep failure settles
-- (run.propagateFailure walks it in memory; a recursive query the planner
-- joined by scanning every edge at each step took 11 s for a chain of
-- 10,000).
-- name: WaitingEdgesOfRun :many
SELECT e.parent_id, e.child_id, t.trigger_rule FROM tasks AS t
JOIN task_edges AS e ON e.child_id = t.id
WHERE t.run_id = @run_id AND t.status = 'waiting';

-- name: MarkUpstreamFailed :exec
UPDATE tasks SET status = 'upstream_failed', finished_at = now()
WHERE id = ANY(@ids::uuid[]) AND status = 'waiting';

-- DecrementTasks counts one finished parent for each listed child (a child
-- listed twice counts two).
-- name: DecrementTasks :many
UPDATE tasks SET parents_remaining = parents_remaining - d.n
FROM (SELECT u.id, count(*)::int AS n FROM unnest(@ids::uuid[]) AS u (id) GROUP BY u.id) AS d
WHERE tasks.id = d.id AND tasks.status = 'waiting'
RETURNING tasks.id, tasks.tenant_id, tasks.parents_remaining, tasks.queue, tasks.priority, tasks.run_id, tasks.step, tasks.conditional, tasks.fan_out, tasks.job_step, tasks.attempt,
    tasks.res_cpu, tasks.res_memory, tasks.res_gpu, tasks.res_custom;

-- SkipTasks skips tasks, each with its reason: waiting ones (a condition
-- was false, a parent was skipped) and, in a replay, upstream_failed ones
-- whose failed parent may now run but another was skipped.
-- name: SkipTasks :many
UPDATE tasks SET status = 'skipped', finished_at = now(), last_error = u.reason
FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@reasons::text[]) AS reason) AS u
WHERE tasks.id = u.id AND tasks.status IN ('waiting', 'upstream_failed')
RETURNING tasks.id;

-- FailConditions dead-letters waiting tasks whose condition could not be
-- evaluated, each with its error.
-- name: FailConditions :many
UPDATE tasks SET status = 'dead_lettered', finished_at = now(), last_error = u.error
FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@errors::text[]) AS error) AS u
WHERE tasks.id = u.id AND tasks.status = 'waiting'
RETURNING tasks.id;

-- ConditionRuns reads what conditions of tasks of runs read of the run.
-- name: ConditionRuns :many
SELECT r.id, r.job_id, r.job_version, r.params, r.upstream, r.event, r.scheduled_for, r.trigger, j.namespace, j.name, r.shard,
       r.tenant_id, r.depth, COALESCE(r.root_run_id, r.id)::uuid AS root_run_id
FROM runs AS r JOIN jobs AS j ON j.id = r.job_id
WHERE r.id = ANY(@ids::uuid[]);

-- CompleteAttempts ends a batch of running attempts, each holding its
-- @fencing_tokens entry, in one statement: each task's new status, its
-- attempt on record (the attempts row, from what the start wrote to the
-- task's row, with its outcome) and, when @run_statuses says so (a one-task run's end),
-- its run. A task missing from the answer had a stale report (invariant
-- 5). A report of the reaper or of a worker that lost its lease (@expired)
-- applies only while the worker's lease (or the attempt's own) is still
-- lapsed: a renewal that won the row lock first keeps the attempt alive.
-- job_id is set for the runs that finished; flow_keys and flow_limits
-- are a keyed step's (docs/flow-control.md), NULL for the others.
-- name: CompleteAttempts :many
WITH req AS (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@fencing_tokens::bigint[]) AS token,
           unnest(@statuses::text[]) AS status, unnest(@outcomes::text[]) AS outcome,
           unnest(@exit_reasons::text[]) AS exit_reason, unnest(@failure_classes::text[]) AS failure_class,
           unnest(@errors::text[]) AS error, unnest(@outputs::text[]) AS output,
           unnest(@truncateds::bool[]) AS truncated, unnest(@logs::text[]) AS log,
           unnest(@run_statuses::text[]) AS run_status, unnest(@run_reasons::text[]) AS run_reason,
           unnest(@expired::bool[]) AS expired
), t AS (
    UPDATE tasks
    SET status = req.status, last_error = req.error, admitted_at = NULL,
        ready_at = CASE WHEN req.status = 'retrying' THEN now() ELSE tasks.ready_at END,
        rate_at = CASE WHEN req.status = 'retrying' THEN NULL ELSE tasks.rate_at END, -- (a retry lines up again)
        finished_at = CASE WHEN req.status IN ('succeeded', 'failed', 'dead_lettered', 'skipped') THEN now() END
    FROM req
    WHERE tasks.id = req.id AND tasks.fencing_token = req.token AND tasks.status = 'running'
      AND (NOT req.expired OR tasks.deadline_at IS NOT NULL AND tasks.lease_expires_at <= now()
           OR tasks.deadline_at IS NULL AND EXISTS (SELECT 1 FROM workers AS w WHERE w.id = tasks.worker_id AND w.lease_expires_at <= now()))
    RETURNING tasks.id, tasks.run_id, tasks.group_id, tasks.queue, tasks.priority, tasks.tenant_id, tasks.started_at, req.token, req.outcome,
              tasks.attempt_id, tasks.attempt, tasks.attempt_worker, tasks.attempt_started_at, req.exit_reason, req.failure_class, req.error, req.output, req.truncated, req.log, req.run_status, req.run_reason,
              tasks.flow_keys, tasks.flow_limits
), a AS (
    INSERT INTO attempts (id, task_id, tenant_id, number, fencing_token, worker, started_at,
                          finished_at, outcome, exit_reason, failure_class, error, output, output_truncated, log)
    SELECT t.attempt_id, t.id, t.tenant_id, t.attempt, t.token, t.attempt_worker, t.attempt_started_at,
           now(), t.outcome, t.exit_reason, t.failure_class, t.error, t.output, t.truncated, t.log
    FROM t
), r AS (
    UPDATE runs SET status = t.run_status, reason = t.run_reason, finished_at = now(),
        started_at = COALESCE(runs.started_at, t.started_at)
    FROM t
    WHERE runs.id = t.run_id AND runs.status IN ('pending', 'running') AND t.run_status <> ''
    RETURNING runs.id, runs.job_id, runs.status, runs.shard, runs.watched, runs.finished_at, runs.parent_task_id, runs.concurrency_keys
), e AS (
    INSERT INTO run_finishes (run_id, shard, status, finished_at)
    SELECT r.id, r.shard, r.status, r.finished_at FROM r WHERE r.watched
    ON CONFLICT (run_id) DO UPDATE SET status = EXCLUDED.status, finished_at = EXCLUDED.finished_at
), uf AS (
    -- a run of a job some schedule.after names, or a child run (its
    -- parent step ends with it): the event of its end
    INSERT INTO upstream_finishes (run_id, finished_at, shard, status)
    SELECT r.id, r.finished_at, r.shard, r.status FROM r JOIN jobs AS uj ON uj.id = r.job_id
    WHERE r.parent_task_id IS NOT NULL
       OR EXISTS (SELECT 1 FROM job_triggers AS g
                  WHERE g.tenant_id = uj.tenant_id AND g.upstream_namespace = uj.namespace AND g.upstream_name = uj.name)
    ON CONFLICT DO NOTHING
)
SELECT t.id, t.token::bigint AS fencing_token, t.run_id, t.group_id, t.queue, t.priority, t.tenant_id, now()::timestamptz AS now, r.job_id,
       t.flow_keys::text[] AS flow_keys, t.flow_limits::int[] AS flow_limits,
       r.concurrency_keys::text[] AS run_keys
FROM t LEFT JOIN r ON r.id = t.run_id;

-- InsertItems writes the items of expanded fan-outs, waiting (held until
-- their group releases them), each with its group's run, queue, priority
-- and resources: @group_ids[i] is the group of item @steps[i]. (The caller
-- adds them to what their tenants hold, just before it commits.)
-- name: InsertItems :exec
INSERT INTO tasks (id, tenant_id, run_id, step, status, parents_remaining, queue, priority, trigger_rule, created_at,
                   group_id, item, item_index, res_cpu, res_memory, res_gpu, res_custom)
SELECT u.id, g.tenant_id, g.run_id, u.step, 'waiting', 0, g.queue, g.priority, 'all_success', now(),
       g.id, u.item::jsonb, u.item_index, g.res_cpu, g.res_memory, g.res_gpu, g.res_custom
FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@group_ids::uuid[]) AS group_id, unnest(@steps::text[]) AS step,
             unnest(@items::text[]) AS item, unnest(@item_indexes::int[]) AS item_index) AS u
JOIN tasks AS g ON g.id = u.group_id;

-- ExpandGroups moves waiting groups to expanded with their counts of
-- items (@counts[i] for @ids[i]), of which @held[i] are held back
-- (max_parallel); it returns those it moved.
-- name: ExpandGroups :many
UPDATE tasks SET status = 'expanded', released_at = COALESCE(released_at, now()),
    items_total = u.n, items_open = u.n, items_succeeded = 0, items_failed = 0, items_held = u.held
FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@counts::int[]) AS n, unnest(@held::int[]) AS held) AS u
WHERE tasks.id = u.id AND tasks.status = 'waiting'
RETURNING tasks.id;

-- CountItemEnds counts ended items in their groups (@succeeded[i] and
-- @failed[i] items of group @ids[i], in id order), in the transaction
-- that ends them, under their runs' locks, and returns each group's
-- counts and how many held items to release in their place (release:
-- the caller releases them, HeldItems). A group not expanded (its run
-- cancelled) is not in the answer.
-- name: CountItemEnds :many
UPDATE tasks SET items_open = tasks.items_open - u.ok - u.failed,
    items_succeeded = tasks.items_succeeded + u.ok,
    items_failed = tasks.items_failed + u.failed,
    items_held = GREATEST(tasks.items_held - u.ok - u.failed, 0)
FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@succeeded::int[]) AS ok, unnest(@failed::int[]) AS failed) AS u
JOIN tasks AS g ON g.id = u.id -- g: the row before (its items_held); the writers hold the run's lock
WHERE tasks.id = u.id AND tasks.status = 'expanded'
RETURNING tasks.id, tasks.run_id, tasks.step, tasks.items_total::int AS items_total, tasks.items_open::int AS items_open,
          tasks.items_succeeded::int AS items_succeeded, tasks.items_failed::int AS items_failed,
          LEAST(g.items_held, u.ok + u.failed)::int AS release;

-- HeldItems lists a group's held items (waiting), lowest index first: the
-- next that max_parallel lets run.
-- name: HeldItems :many
SELECT id, tenant_id, queue, priority, run_id, step, attempt FROM tasks
WHERE group_id = @group_id::uuid AND status = 'waiting'
ORDER BY item_index
LIMIT @max_items;

-- ExpandedBefore lists the groups, of those given, that were expanded
-- before (a retried run's), with their counts.
-- name: ExpandedBefore :many
SELECT id, items_total::int AS items_total, items_succeeded::int AS items_succeeded FROM tasks
WHERE id = ANY(@ids::uuid[]) AND items_total IS NOT NULL;

-- ReopenItems makes the items of groups that did not succeed wait again
-- (a retried run), and every item of a group whose count of succeeded
-- items is 0 (a rerun cleared it): held until their group releases them,
-- their attempt numbers going on.
-- name: ReopenItems :exec
UPDATE tasks SET status = 'waiting', finished_at = NULL, last_error = '', admitted_at = NULL, ready_at = NULL
WHERE group_id = ANY(@group_ids::uuid[]) AND status <> 'waiting'
  AND (status <> 'succeeded' OR (SELECT g.items_succeeded FROM tasks AS g WHERE g.id = tasks.group_id) = 0);

-- ReopenGroups moves waiting groups expanded before (a retried run) back
-- to expanded: their succeeded items keep their ends, @opens[i] items are
-- open again, of which @held[i] held back.
-- name: ReopenGroups :many
UPDATE tasks SET status = 'expanded', finished_at = NULL, last_error = '', items_open = u.open, items_failed = 0, items_held = u.held
FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@opens::int[]) AS open, unnest(@held::int[]) AS held) AS u
WHERE tasks.id = u.id AND tasks.status = 'waiting'
RETURNING tasks.id;

-- EndGroup ends an expanded group (its items all ended) as succeeded or
-- dead_lettered, with its reason.
-- name: EndGroup :execrows
UPDATE tasks SET status = @status, finished_at = now(), last_error = @reason
WHERE id = @id AND status = 'expanded';

-- ItemOutputs reads the items of groups in item order, each with its
-- status and its latest succeeded attempt's output (steps.NAME.outputs),
-- up to @max_bytes of outputs a group: past them, a row says cut and
-- carries no output.
-- name: ItemOutputs :many
SELECT o.group_id::uuid AS group_id, o.item_index::int AS item_index, o.status,
       (CASE WHEN o.upto <= @max_bytes::bigint THEN o.output ELSE '' END)::text AS output,
       o.output_truncated::bool AS output_truncated, (o.upto > @max_bytes::bigint)::bool AS cut
FROM (
    SELECT t.group_id, t.item_index, t.status, COALESCE(a.output, '') AS output, COALESCE(a.output_truncated, false) AS output_truncated,
           sum(octet_length(COALESCE(a.output, ''))) OVER (PARTITION BY t.group_id ORDER BY t.item_index) AS upto
    FROM tasks AS t
    LEFT JOIN LATERAL (
        SELECT x.output, x.output_truncated FROM attempts AS x
        WHERE x.task_id = t.id AND x.outcome = 'succeeded'
        ORDER BY x.number DESC LIMIT 1
    ) AS a ON true
    WHERE t.group_id = ANY(@group_ids::uuid[])
) AS o
ORDER BY o.group_id, o.item_index;

-- Parked steps (docs/parked-steps.md).

-- ParkTasks parks released steps: each task running (attempt + 1, a new
-- fencing token, its attempt on record on @workers[i]; no worker, lease,
-- deadline or admission mark), and its parked row written beside it,
-- due at @untils[i] or, when that is before 1971, @after_seconds[i] from
-- now. A task no longer waiting or queued is left alone (no row).
-- name: ParkTasks :many
WITH req AS (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@attempt_ids::uuid[]) AS attempt_id, unnest(@workers::text[]) AS worker,
           unnest(@kinds::text[]) AS kind, unnest(@shards::int[]) AS shard,
           unnest(@after_seconds::float8[]) AS after_seconds, unnest(@untils::timestamptz[]) AS until,
           unnest(@event_types::text[]) AS event_type, unnest(@match_keys::text[]) AS match_key,
           unnest(@match_paths::text[]) AS match_path, unnest(@messages::text[]) AS message
), t AS (
    UPDATE tasks
    SET status = 'running', attempt = tasks.attempt + 1, fencing_token = tasks.fencing_token + 1,
        worker_id = NULL, lease_expires_at = NULL, deadline_at = NULL, admitted_at = NULL,
        started_at = COALESCE(tasks.started_at, now()), released_at = COALESCE(tasks.released_at, now()), ready_at = COALESCE(tasks.ready_at, now()),
        attempt_id = req.attempt_id, attempt_started_at = now(), attempt_worker = req.worker
    FROM req
    WHERE tasks.id = req.id AND tasks.status IN ('waiting', 'queued') AND tasks.job_step
    RETURNING tasks.id, tasks.tenant_id, tasks.run_id, tasks.fencing_token
)
INSERT INTO parked_steps (task_id, tenant_id, run_id, shard, kind, fencing_token, wake_at, event_type, match_key, match_path, message, created_at)
SELECT t.id, t.tenant_id, t.run_id, req.shard, req.kind, t.fencing_token,
       CASE WHEN req.until >= '1971-01-01' THEN req.until ELSE now() + req.after_seconds * interval '1 second' END,
       NULLIF(req.event_type, ''), NULLIF(req.match_key, ''), NULLIF(req.match_path, ''),
       CASE WHEN req.kind = 'approval' THEN req.message END, clock_timestamp()
FROM t JOIN req ON req.id = t.id
ON CONFLICT (task_id) DO UPDATE
SET tenant_id = EXCLUDED.tenant_id, run_id = EXCLUDED.run_id, shard = EXCLUDED.shard, kind = EXCLUDED.kind,
    fencing_token = EXCLUDED.fencing_token, wake_at = EXCLUDED.wake_at, event_type = EXCLUDED.event_type,
    match_key = EXCLUDED.match_key, match_path = EXCLUDED.match_path, message = EXCLUDED.message, created_at = EXCLUDED.created_at
RETURNING task_id;

-- Waits and the events step meet on a transaction-scoped advisory lock
-- per tenant and event type (docs/parked-steps.md, "A wait and the event
-- it waits for"): a park takes it shared before it writes its wait, whose
-- created_at is then the clock's (not its transaction's start); the
-- events step takes it exclusive before it reads the waits of its
-- events, so it waits for the parks in flight to commit, and a park that
-- comes after it is stamped after the events it took. In key order, on
-- both sides.

-- name: LockWaitKindsShared :exec
SELECT pg_advisory_xact_lock_shared(s.k) FROM (
    SELECT DISTINCT hashtextextended(u.tenant_id::text || '/' || u.type, 7346) AS k
    FROM (SELECT unnest(@tenant_ids::uuid[]) AS tenant_id, unnest(@types::text[]) AS type) AS u
    ORDER BY 1
) AS s;

-- name: LockWaitKinds :exec
SELECT pg_advisory_xact_lock(s.k) FROM (
    SELECT DISTINCT hashtextextended(u.tenant_id::text || '/' || u.type, 7346) AS k
    FROM (SELECT unnest(@tenant_ids::uuid[]) AS tenant_id, unnest(@types::text[]) AS type) AS u
    ORDER BY 1
) AS s;

-- ReadEventsOfWaits reads the pending events of each (@tenant_ids[i],
-- @types[i]) received since the transaction began: those that may end a
-- wait it parks (received after the wait's stamp). Under READ COMMITTED
-- it changes nothing. Under SERIALIZABLE (tests; CockroachDB) it is the
-- read that an events step taking such an event conflicts with: that
-- step read the waits before this park committed, and this park read the
-- event before that step took it, so the database aborts one of the two,
-- and the retry of either sees the other (docs/parked-steps.md, "A wait
-- and the event it waits for"). It reads each row (its type is not in
-- the index), so that the conflict is the row's, not only the index's.
-- name: ReadEventsOfWaits :one
SELECT count(e.type)::int FROM events AS e
JOIN (SELECT DISTINCT unnest(@tenant_ids::uuid[]) AS tenant_id, unnest(@types::text[]) AS type) AS k
  ON k.tenant_id = e.tenant_id AND k.type = e.type
WHERE e.pending AND e.received_at >= now();

-- HasDueParked: whether the shards have parked steps due (a probe before
-- a transaction of the timers step).
-- name: HasDueParked :one
SELECT EXISTS (SELECT 1 FROM parked_steps WHERE shard = ANY(@shards::int[]) AND wake_at <= now())::bool;

-- DueParked reads the shards' parked steps that are due, the earliest
-- first (their shards' owner alone takes them: no lock here; LockParked
-- takes them once their runs are locked).
-- name: DueParked :many
SELECT task_id, run_id, fencing_token FROM parked_steps
WHERE shard = ANY(@shards::int[]) AND wake_at <= now()
ORDER BY wake_at
LIMIT @batch;

-- LockParked locks the parked rows of tasks (@task_ids[i] parked under
-- @tokens[i]), after their runs (the order of a cancel, which deletes
-- them), and returns those still there as they were read: a cancel or
-- another wake may have ended one meanwhile, or a retry parked it again
-- under a new token.
-- name: LockParked :many
SELECT p.task_id, p.run_id, p.kind, p.fencing_token, p.wake_at, p.event_type, p.created_at, now()::timestamptz AS now FROM parked_steps AS p
JOIN (SELECT unnest(@task_ids::uuid[]) AS task_id, unnest(@tokens::bigint[]) AS token) AS w ON w.task_id = p.task_id AND w.token = p.fencing_token
ORDER BY p.task_id
FOR UPDATE OF p;

-- WaitPaths reads the match paths in use by the parked waits of each
-- (@tenant_ids[i], @types[i]): a skip scan of parked_steps_paths, one
-- index probe a path, at most @max_paths in all.
-- name: WaitPaths :many
WITH RECURSIVE q AS (
    SELECT DISTINCT unnest(@tenant_ids::uuid[]) AS tenant_id, unnest(@types::text[]) AS type
), p (tenant_id, type, path) AS (
    SELECT q.tenant_id, q.type, (SELECT min(x.match_path) FROM parked_steps AS x
                                 WHERE x.tenant_id = q.tenant_id AND x.event_type = q.type AND x.match_path IS NOT NULL)
    FROM q
    UNION ALL
    SELECT p.tenant_id, p.type, (SELECT min(x.match_path) FROM parked_steps AS x
                                 WHERE x.tenant_id = p.tenant_id AND x.event_type = p.type AND x.match_path > p.path)
    FROM p WHERE p.path IS NOT NULL
)
SELECT p.tenant_id::uuid AS tenant_id, p.type::text AS type, p.path::text AS path FROM p WHERE p.path IS NOT NULL LIMIT @max_paths;

-- WaitsFor reads the parked waits that events of (@tenant_ids[i],
-- @types[i]) received at @received_ats[i] may end: those of the tenant and
-- type that parked before the event was received, and whose key is one the
-- event offers (@keys[j] for @key_events[j] = i), or that have none. At
-- most @max_waits rows: index probes, one per event and key, and one for
-- the waits without a key.
-- name: WaitsFor :many
WITH e AS MATERIALIZED (
    SELECT unnest(@tenant_ids::uuid[]) AS tenant_id, unnest(@types::text[]) AS type, unnest(@received_ats::timestamptz[]) AS received_at,
           generate_subscripts(@tenant_ids::uuid[], 1) AS i
), ek AS MATERIALIZED (
    SELECT e.tenant_id, e.type, e.received_at, e.i, k.key
    FROM (SELECT unnest(@key_events::int[]) AS i, unnest(@keys::text[]) AS key) AS k JOIN e ON e.i = k.i
), cand AS (
    SELECT e.i, p.task_id FROM e JOIN parked_steps AS p
      ON p.tenant_id = e.tenant_id AND p.event_type = e.type AND p.match_key IS NULL AND p.created_at < e.received_at
    UNION
    SELECT ek.i, p.task_id FROM ek JOIN parked_steps AS p
      ON p.tenant_id = ek.tenant_id AND p.event_type = ek.type AND p.match_key = ek.key AND p.created_at < ek.received_at
)
SELECT c.i::int AS event_index, p.task_id, p.run_id, p.fencing_token, t.step, t.attempt, r.job_id, r.job_version
FROM cand AS c
JOIN parked_steps AS p ON p.task_id = c.task_id
JOIN tasks AS t ON t.id = p.task_id
JOIN runs AS r ON r.id = p.run_id
ORDER BY p.task_id, c.i
LIMIT @max_waits;

-- name: DeleteParked :exec
DELETE FROM parked_steps WHERE task_id = ANY(@ids::uuid[]);

-- ParkedOfRuns reads the parked steps of runs (the run views: what each
-- waits for).
-- name: ParkedOfRuns :many
SELECT task_id, kind, wake_at, event_type, message, fencing_token FROM parked_steps WHERE run_id = ANY(@run_ids::uuid[]);

-- Approvals (docs/parked-steps.md, "approval").

-- ParkedStep reads the task of a run's step (@step: the step's name),
-- with its parked row when it has one under its current fencing token
-- and whether its wake_at has passed at the database's now (due).
-- The run is locked by the caller first.
-- name: ParkedStep :one
SELECT t.id AS task_id, t.status, t.fencing_token, t.attempt, p.kind, p.wake_at,
       coalesce(p.wake_at <= now(), false)::bool AS due
FROM tasks AS t
LEFT JOIN parked_steps AS p ON p.task_id = t.id AND p.fencing_token = t.fencing_token
WHERE t.run_id = @run_id AND t.step = @step;

-- InsertDecision records a principal's decision on an attempt of an
-- approval; nothing (no row) when the principal decided on it already.
-- name: InsertDecision :many
INSERT INTO step_decisions (task_id, fencing_token, principal, tenant_id, decision, comment, decided_at)
VALUES (@task_id, @fencing_token, @principal, @tenant_id, @decision, @comment, now())
ON CONFLICT (task_id, fencing_token, principal) DO NOTHING
RETURNING decided_at;

-- DecisionsOf reads the decisions on the current attempts of parked
-- approvals of tasks (@task_ids[i] parked under @tokens[i]), the first
-- first.
-- name: DecisionsOf :many
SELECT d.task_id, d.principal, d.decision, d.comment, d.decided_at FROM step_decisions AS d
JOIN (SELECT unnest(@task_ids::uuid[]) AS task_id, unnest(@tokens::bigint[]) AS token) AS w
  ON w.task_id = d.task_id AND w.token = d.fencing_token
ORDER BY d.task_id, d.decided_at, d.principal;

-- SetAsideParked puts off a parked step whose transaction failed alone by
-- a minute (the scheduler logs why), so that it holds up no other.
-- name: SetAsideParked :exec
UPDATE parked_steps SET wake_at = now() + interval '1 minute' WHERE task_id = @task_id;

-- UnkeyedWaits counts, up to @cap, the parked waits of each (@tenant_ids[i],
-- @types[i]) whose match is not indexed (no match_key): each event of the
-- type asks every one of them.
-- name: UnkeyedWaits :many
SELECT q.tenant_id, q.type, (SELECT count(*) FROM (
        SELECT 1 FROM parked_steps AS p
        WHERE p.tenant_id = q.tenant_id AND p.event_type = q.type AND p.match_key IS NULL
        LIMIT @cap::int) AS x)::int AS n
FROM (SELECT DISTINCT unnest(@tenant_ids::uuid[]) AS tenant_id, unnest(@types::text[]) AS type) AS q;

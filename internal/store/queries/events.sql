-- Events (docs/events.md).

-- InsertEvent writes an event, pending, unless its key was taken in its
-- tenant and source: then nothing (no row returned; EventByKey reads the
-- first).
-- name: InsertEvent :one
INSERT INTO events (id, tenant_id, source, event_key, type, data, time, received_at, shard, published_by)
VALUES (@id, @tenant_id, @source, @event_key, @type, @data::jsonb, COALESCE(sqlc.narg(time)::timestamptz, now()), now(), @shard, NULLIF(@published_by::text, ''))
ON CONFLICT (tenant_id, source, event_key) DO NOTHING
RETURNING id, time, received_at;

-- EventByKey reads the event that took a key.
-- name: EventByKey :one
SELECT id, type, time, received_at FROM events WHERE tenant_id = @tenant_id AND source = @source AND event_key = @event_key;

-- HasPendingEvents: whether the shards have pending events (a probe
-- before a transaction of the events step).
-- name: HasPendingEvents :one
SELECT EXISTS (SELECT 1 FROM events WHERE pending AND shard = ANY(@shards::int[]) AND (retry_at IS NULL OR retry_at <= now()))::bool;

-- TakePendingEvents locks a batch of the shards' pending events, tenant
-- by tenant: at most @per_tenant of each (its oldest), the tenants in id
-- order from @after_tenant (the first tenant after it, then around), up to
-- @batch in all, skipping those another transaction holds.
-- The tenants with pending events are read one index probe each (a skip
-- scan of events_pending), not by reading every pending event.
-- name: TakePendingEvents :many
WITH RECURSIVE t (tenant_id) AS (
    (SELECT e.tenant_id FROM events AS e WHERE e.pending ORDER BY e.tenant_id LIMIT 1)
    UNION ALL
    SELECT (SELECT e.tenant_id FROM events AS e WHERE e.pending AND e.tenant_id > t.tenant_id ORDER BY e.tenant_id LIMIT 1)
    FROM t WHERE t.tenant_id IS NOT NULL
), turn AS (
    SELECT t.tenant_id FROM t WHERE t.tenant_id IS NOT NULL
    ORDER BY t.tenant_id <= @after_tenant::uuid, t.tenant_id
)
SELECT x.id, x.tenant_id, x.source, x.event_key, x.type, x.data, x.time, x.received_at
FROM turn CROSS JOIN LATERAL (
    SELECT e.id, e.tenant_id, e.source, e.event_key, e.type, e.data, e.time, e.received_at FROM events AS e
    WHERE e.pending AND e.tenant_id = turn.tenant_id AND e.shard = ANY(@shards::int[]) AND (e.retry_at IS NULL OR e.retry_at <= now())
    ORDER BY e.received_at, e.id
    LIMIT @per_tenant
    FOR UPDATE OF e SKIP LOCKED
) AS x
LIMIT @batch;

-- EventJobs locks (FOR SHARE, in id order) the live jobs whose
-- schedule.event names one of the events' types (tenant and type in
-- parallel arrays): a change of one waits for the step, or the step for
-- it.
-- name: EventJobs :many
SELECT j.id, j.tenant_id, j.namespace, j.name, j.status, j.version, j.shard, j.spec, g.type
FROM job_events AS g JOIN jobs AS j ON j.id = g.job_id
WHERE (g.tenant_id, g.type) IN (SELECT unnest(@tenant_ids::uuid[]), unnest(@types::text[]))
  AND j.status <> 'deleted'
ORDER BY j.id
FOR SHARE OF j;

-- name: MarkEventsMatched :exec
UPDATE events SET pending = false, last_error = '' WHERE id = ANY(@ids::uuid[]);

-- SetAsideEvent puts off an event whose transaction failed alone, by
-- 2^tries seconds (at most 10 minutes), with the error; at its
-- @max_tries-th failure it is no longer pending (its error kept: it
-- starts nothing, and retention prunes it).
-- name: SetAsideEvent :exec
UPDATE events SET tries = tries + 1, last_error = @error,
    retry_at = now() + least(power(2, tries), 600) * interval '1 second',
    pending = tries + 1 < @max_tries::int
WHERE id = @id;

-- SetJobEvent records the event type a job's schedule.event names.
-- name: SetJobEvent :exec
INSERT INTO job_events (job_id, tenant_id, type) VALUES (@job_id, @tenant_id, @type)
ON CONFLICT (job_id) DO UPDATE SET type = EXCLUDED.type;

-- name: DeleteJobEvent :exec
DELETE FROM job_events WHERE job_id = @job_id;

-- PruneEvents deletes up to @batch events that are no longer pending,
-- received longer ago than their tenant keeps runs (run_retention_seconds,
-- else @default_seconds; never under @floor_seconds): an event is kept as
-- long as the runs it may have started or ended, whose archive holds it
-- (their run.event, their wait's output), and never while a run it
-- started is open. @min_seconds, the smallest
-- retention of any tenant, bounds the index scan. Their ids may then be
-- published again.
-- name: PruneEvents :execrows
DELETE FROM events AS e WHERE e.id IN (
    SELECT x.id FROM events AS x JOIN tenants AS t ON t.id = x.tenant_id
    WHERE x.received_at < now() - INTERVAL '1 second' * @min_seconds::float8
      AND x.received_at < now() - INTERVAL '1 second' * GREATEST(COALESCE(t.run_retention_seconds, @default_seconds::bigint), @floor_seconds::bigint)::float8
      AND NOT x.pending
      -- (a run it started still open keeps it: its id stays taken)
      AND NOT EXISTS (SELECT 1 FROM runs AS r WHERE r.event_id = x.id AND r.finished_at IS NULL)
    ORDER BY x.received_at LIMIT @batch
);

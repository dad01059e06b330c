-- Events (docs/events.md).

-- InsertEvent writes an event, pending, unless its key was taken in its
-- tenant and source: then nothing (no row returned; EventByKey reads the
-- first).
-- name: InsertEvent :one
INSERT INTO events (id, tenant_id, source, event_key, type, data, time, received_at, shard)
VALUES (@id, @tenant_id, @source, @event_key, @type, @data::jsonb, COALESCE(sqlc.narg(time)::timestamptz, now()), now(), @shard)
ON CONFLICT (tenant_id, source, event_key) DO NOTHING
RETURNING id, time, received_at;

-- EventByKey reads the event that took a key.
-- name: EventByKey :one
SELECT id, type, time, received_at FROM events WHERE tenant_id = @tenant_id AND source = @source AND event_key = @event_key;

-- HasPendingEvents: whether the shards have pending events (a probe
-- before a transaction of the events step).
-- name: HasPendingEvents :one
SELECT EXISTS (SELECT 1 FROM events WHERE pending AND shard = ANY(@shards::int[]) AND (retry_at IS NULL OR retry_at <= now()))::bool;

-- TakePendingEvents locks a batch of the shards' pending events, oldest
-- first, skipping those another transaction holds.
-- name: TakePendingEvents :many
SELECT id, tenant_id, source, event_key, type, data, time, received_at FROM events
WHERE pending AND shard = ANY(@shards::int[]) AND (retry_at IS NULL OR retry_at <= now())
ORDER BY received_at, id
LIMIT @batch
FOR UPDATE SKIP LOCKED;

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
-- 2^tries seconds (at most 10 minutes), with the error.
-- name: SetAsideEvent :exec
UPDATE events SET tries = tries + 1, last_error = @error,
    retry_at = now() + least(power(2, tries), 600) * interval '1 second'
WHERE id = @id;

-- SetJobEvent records the event type a job's schedule.event names.
-- name: SetJobEvent :exec
INSERT INTO job_events (job_id, tenant_id, type) VALUES (@job_id, @tenant_id, @type)
ON CONFLICT (job_id) DO UPDATE SET type = EXCLUDED.type;

-- name: DeleteJobEvent :exec
DELETE FROM job_events WHERE job_id = @job_id;

-- PruneEvents deletes up to @batch events received more than
-- @older_than_seconds ago that are no longer pending (their ids may then
-- be published again).
-- name: PruneEvents :execrows
DELETE FROM events AS e WHERE e.id IN (
    SELECT x.id FROM events AS x
    WHERE x.received_at < now() - INTERVAL '1 second' * @older_than_seconds::float8 AND NOT x.pending
    ORDER BY x.received_at LIMIT @batch
);

-- Step rate limits (docs/flow-control.md, "Rate limits"): the admission
-- pass spends a key's tokens under its advisory lock, taken with
-- TryLockKeys (flow.sql) on "rate/TENANT/VALUE"; no other writer of a
-- bucket's row but the reaper's sweep, under the same lock.

-- RateTasks writes the rate limits of released tasks: task ids[i] spends
-- a token of key keys[i] (the tenant's) at each admission, limits[i]
-- tokens per per_ms[i] ms; its place in the key's line (rate_at) is
-- given at admission.
-- name: RateTasks :exec
UPDATE tasks SET rate_key = u.key, rate_limit = u.lim, rate_per_ms = u.per, rate_at = NULL
FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@keys::text[]) AS key, unnest(@limits::int[]) AS lim,
             unnest(@per_ms::bigint[]) AS per) AS u
WHERE tasks.id = u.id;

-- RateBuckets reads the buckets of (tenant_ids[i], keys[i]) that exist.
-- name: RateBuckets :many
SELECT b.tenant_id, b.key, b.tat, b.tail FROM rate_buckets AS b
JOIN (SELECT unnest(@tenant_ids::uuid[]) AS tenant_id, unnest(@keys::text[]) AS key) AS q
  ON q.tenant_id = b.tenant_id AND q.key = b.key;

-- SetRateBuckets writes the buckets a pass spent tokens of or lined tasks
-- up on.
-- name: SetRateBuckets :exec
INSERT INTO rate_buckets (tenant_id, key, tat, tail)
SELECT unnest(@tenant_ids::uuid[]), unnest(@keys::text[]), unnest(@tats::timestamptz[]), unnest(@tails::timestamptz[])
ON CONFLICT (tenant_id, key) DO UPDATE SET tat = EXCLUDED.tat, tail = EXCLUDED.tail;

-- RatedWaiting reads the tasks of a key waiting for admission now in
-- @queue that have no place in its line yet (none admitted by this pass:
-- those are marked), the oldest first, at most @n, each with its limit,
-- skipping any another transaction holds (a later pass lines it up).
-- name: RatedWaiting :many
SELECT t.id, t.rate_limit::int AS rate_limit, t.rate_per_ms::bigint AS rate_per_ms FROM tasks AS t
WHERE t.tenant_id = @tenant_id AND t.rate_key = @key::text AND t.rate_at IS NULL AND t.queue = @queue
  AND t.admitted_at IS NULL AND t.status IN ('queued', 'retrying') AND t.ready_at <= now()
ORDER BY t.ready_at, t.id
LIMIT @n
FOR NO KEY UPDATE SKIP LOCKED;

-- RateLineEnds is, for each key of (tenant_ids[i], keys[i]), the last
-- place of its line that a task still waits in (no row: none waits): a
-- line whose tasks were cancelled or admitted is as long as what waits.
-- name: RateLineEnds :many
SELECT q.tenant_id::uuid AS tenant_id, q.key::text AS key, e.last::timestamptz AS last
FROM (SELECT unnest(@tenant_ids::uuid[]) AS tenant_id, unnest(@keys::text[]) AS key) AS q
CROSS JOIN LATERAL (
    SELECT t.rate_at AS last FROM tasks AS t
    WHERE t.tenant_id = q.tenant_id AND t.rate_key = q.key AND t.rate_at IS NOT NULL
      AND t.admitted_at IS NULL AND t.status IN ('queued', 'retrying')
    ORDER BY t.rate_at DESC LIMIT 1
) AS e;

-- LineUpRated gives tasks of a key refused a token their places in the
-- key's line: task ids[i] waits until ats[i] (its ready_at and rate_at).
-- name: LineUpRated :exec
UPDATE tasks SET ready_at = u.at, rate_at = u.at
FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@ats::timestamptz[]) AS at) AS u
WHERE tasks.id = u.id AND tasks.admitted_at IS NULL;

-- SweepRateBuckets deletes up to @n buckets that are full and have no
-- line (as if they did not exist), each under its key's lock, skipping
-- those an admitter holds.
-- name: SweepRateBuckets :execrows
DELETE FROM rate_buckets AS b
USING (SELECT tenant_id, key FROM rate_buckets WHERE tat <= now() AND tail <= now() LIMIT @n) AS s
WHERE b.tenant_id = s.tenant_id AND b.key = s.key AND b.tat <= now() AND b.tail <= now()
  AND pg_try_advisory_xact_lock(hashtextextended('rate/' || b.tenant_id::text || '/' || b.key, 8191));

-- Queries of the watchdog (package watchdog) and of the alert lists.

-- OverdueWatchedJobs is the dead man's switch of one pass: active jobs of
-- the shards with alerts whose next instant is older than min_seconds and
-- has not fired. It is the scheduler's range scan (job_schedules_due),
-- shifted back by min_seconds, so in a healthy cluster it reads nothing.
-- name: OverdueWatchedJobs :many
SELECT j.id, j.tenant_id, j.shard, j.version, j.next_fire_at
FROM unnest(@shards::int[]) AS s (shard)
CROSS JOIN LATERAL (
    SELECT k.id, k.tenant_id, js.shard, k.version, js.next_fire_at::timestamptz AS next_fire_at
    FROM job_schedules AS js JOIN jobs AS k ON k.id = js.job_id
    WHERE js.shard = s.shard AND js.next_fire_at IS NOT NULL
      AND js.next_fire_at < now() - INTERVAL '1 second' * @min_seconds::float8
      AND k.spec->'alerts' IS NOT NULL
    ORDER BY js.next_fire_at
    LIMIT @batch
) AS j;

-- OpenWatchedRuns pages through the unfinished runs of watched jobs of the
-- shards, older than min_seconds (runs_watched).
-- name: OpenWatchedRuns :many
SELECT r.id, r.tenant_id, r.job_id, r.shard, r.scheduled_for, r.trigger, r.created_at,
       (r.backfill_id IS NOT NULL)::bool AS backfilled,
       r.started_at, s.first_start, j.version AS job_version, r.debounce_at
FROM runs AS r JOIN jobs AS j ON j.id = r.job_id
LEFT JOIN LATERAL (
    SELECT t.started_at AS first_start FROM tasks AS t
    WHERE t.run_id = r.id AND t.started_at IS NOT NULL
    ORDER BY t.started_at LIMIT 1
) AS s ON true
WHERE r.shard = ANY(@shards::int[]) AND r.watched AND r.finished_at IS NULL
  AND NOT r.debouncing -- (waiting for its triggers to pause: not due yet)
  AND r.scheduled_for < now() - INTERVAL '1 second' * @min_seconds::float8
  AND (r.shard, r.scheduled_for, r.id) > (@after_shard::int, @after_at::timestamptz, @after_id::uuid)
ORDER BY r.shard, r.scheduled_for, r.id
LIMIT @batch;

-- name: RunningAttemptsOfRuns :many
SELECT t.run_id, t.step, t.attempt_id::uuid AS attempt_id, t.attempt AS number, t.attempt_started_at::timestamptz AS started_at
FROM tasks AS t
WHERE t.run_id = ANY(@run_ids::uuid[]) AND t.status = 'running' AND t.attempt_id IS NOT NULL;

-- name: WatchedJobSpecs :many
SELECT id, tenant_id, version, namespace, name, spec FROM jobs WHERE id = ANY(@ids::uuid[]);

-- TakeRunFinishes locks a batch of the finish events of the shards, with
-- whether each run has a dead-lettered task; the caller deletes them in
-- the same transaction.
-- name: TakeRunFinishes :many
SELECT f.run_id, f.status, f.finished_at, r.job_id, r.tenant_id, r.shard, r.scheduled_for, r.trigger, r.started_at,
       r.reason, COALESCE(r.trace_parent, '')::text AS trace_parent, j.version AS job_version,
       EXISTS (SELECT 1 FROM tasks AS t WHERE t.run_id = f.run_id AND t.status = 'dead_lettered') AS dead_letters
FROM run_finishes AS f JOIN runs AS r ON r.id = f.run_id JOIN jobs AS j ON j.id = r.job_id
WHERE f.shard = ANY(@shards::int[])
ORDER BY f.shard, f.finished_at
LIMIT @batch
FOR UPDATE OF f SKIP LOCKED;

-- ConsecutiveFailures reads, for pause_after_failures, a job's latest
-- @n runs that ended succeeded, failed or dead-lettered (skipped and
-- cancelled runs count neither way), among those created since the job
-- was last resumed: how many there are, and how many of them failed. It
-- reads the runs as they are, so a finish event seen twice counts once.
-- name: ConsecutiveFailures :one
WITH since AS (
    SELECT COALESCE(max(a.at), '1970-01-01T00:00:00Z'::timestamptz) AS at
    FROM audit_log AS a WHERE a.target_id = @job_id AND a.action = 'resume'
), last AS (
    SELECT r.status FROM runs AS r, since
    WHERE r.tenant_id = @tenant_id AND r.job_id = @job_id AND r.status IN ('succeeded', 'failed', 'dead_lettered')
      AND r.created_at > since.at
    ORDER BY r.scheduled_for DESC
    LIMIT @n
)
SELECT count(*)::int AS ended, (count(*) FILTER (WHERE last.status <> 'succeeded'))::int AS failed FROM last;

-- name: DeleteRunFinishes :exec
DELETE FROM run_finishes WHERE run_id = ANY(@run_ids::uuid[]);

-- RaiseAlerts inserts alerts; one that exists open for its (job, cause)
-- is left as it is (raised once while open) and not returned; one that
-- was resolved is raised again (its cause came back: a replayed dead
-- letter that dead-lettered again, a retried run that failed again) and
-- returned, so that it notifies again.
-- name: RaiseAlerts :many
INSERT INTO alerts (id, tenant_id, job_id, shard, kind, cause, run_id, attempt_id, scheduled_for, message, raised_at)
SELECT u.id, u.tenant_id, u.job_id, u.shard, u.kind, u.cause, NULLIF(u.run_id, '00000000-0000-0000-0000-000000000000'::uuid),
       NULLIF(u.attempt_id, '00000000-0000-0000-0000-000000000000'::uuid),
       CASE WHEN u.scheduled_for > '1970-01-01' THEN u.scheduled_for END, u.message, now()
FROM (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@tenant_ids::uuid[]) AS tenant_id, unnest(@job_ids::uuid[]) AS job_id,
           unnest(@shards::int[]) AS shard, unnest(@kinds::text[]) AS kind, unnest(@causes::text[]) AS cause,
           unnest(@run_ids::uuid[]) AS run_id, unnest(@attempt_ids::uuid[]) AS attempt_id,
           unnest(@scheduled_fors::timestamptz[]) AS scheduled_for, unnest(@messages::text[]) AS message
) AS u
ON CONFLICT (job_id, cause) DO UPDATE
SET resolved_at = NULL, resolution = '', raised_at = now(), message = EXCLUDED.message, scheduled_for = EXCLUDED.scheduled_for
WHERE alerts.resolved_at IS NOT NULL
RETURNING *;

-- OpenAlertsWindow finds the next window of a watchdog pass's open
-- alerts: up to batch of the shards' open alerts after the id after, in
-- id order; until is the window's last id (the zero UUID when empty).
-- name: OpenAlertsWindow :one
SELECT count(*)::int AS n, COALESCE((array_agg(w.id ORDER BY w.id DESC))[1], '00000000-0000-0000-0000-000000000000'::uuid)::uuid AS until
FROM (
    SELECT a.id FROM alerts AS a
    WHERE a.shard = ANY(@shards::int[]) AND a.resolved_at IS NULL AND a.id > @after::uuid
    ORDER BY a.id
    LIMIT @batch
) AS w;

-- ResolveAlerts closes the open alerts of the shards in the window (after,
-- until] (OpenAlertsWindow) whose cause has cleared and returns them. A
-- pass looks at one window, the next pass at the next one: alerts that
-- stay open do not hide those behind them, and a pass's work is bounded
-- by the window, not by how many alerts are open. A job's latest started
-- and succeeded instants are read once per job of the window (from its
-- oldest open alert's instant), not once per alert.
-- name: ResolveAlerts :many
WITH w AS (
    SELECT a.* FROM alerts AS a
    WHERE a.shard = ANY(@shards::int[]) AND a.resolved_at IS NULL AND a.id > @after::uuid AND a.id <= @until::uuid
), since AS (
    SELECT w.job_id, min(w.scheduled_for) AS at FROM w WHERE w.kind IN ('missed', 'failure') GROUP BY w.job_id
), latest AS (
    SELECT since.job_id,
           (SELECT max(r.scheduled_for) FROM runs AS r WHERE r.job_id = since.job_id AND r.scheduled_for >= since.at
                AND (r.started_at IS NOT NULL
                     OR EXISTS (SELECT 1 FROM tasks AS t WHERE t.run_id = r.id AND t.started_at IS NOT NULL))) AS started,
           (SELECT max(r.scheduled_for) FROM runs AS r WHERE r.job_id = since.job_id AND r.scheduled_for >= since.at
                AND r.status = 'succeeded') AS succeeded
    FROM since
), c AS (
    SELECT a.id, CASE
        WHEN j.status = 'deleted' THEN 'the job was deleted'
        WHEN a.kind = 'paused' AND j.status = 'active' THEN 'the job was resumed'
        WHEN a.kind = 'paused' THEN ''
        WHEN j.spec->'alerts' IS NULL OR NOT ((j.spec->'alerts'->'on') @> to_jsonb(a.kind)) THEN 'the job no longer raises ' || a.kind
        WHEN a.run_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM runs AS r WHERE r.id = a.run_id) THEN 'the run was pruned'
        WHEN a.kind = 'missed' AND j.status = 'paused' THEN 'the job was paused'
        WHEN a.kind = 'missed' AND l.started >= a.scheduled_for THEN 'a run started'
        WHEN a.kind = 'stuck' AND a.attempt_id IS NOT NULL
             AND NOT EXISTS (SELECT 1 FROM tasks AS x WHERE x.run_id = a.run_id AND x.attempt_id = a.attempt_id AND x.status = 'running') THEN 'the attempt ended'
        WHEN a.kind = 'stuck' AND a.attempt_id IS NULL
             AND EXISTS (SELECT 1 FROM runs AS r WHERE r.id = a.run_id AND r.finished_at IS NOT NULL) THEN 'the run finished'
        WHEN a.kind = 'failure' AND l.succeeded >= a.scheduled_for THEN 'a run succeeded'
        WHEN a.kind = 'dead_letter'
             AND EXISTS (SELECT 1 FROM runs AS r WHERE r.id = a.run_id AND r.status = 'cancelled') THEN 'the run was cancelled'
        WHEN a.kind = 'dead_letter'
             AND NOT EXISTS (SELECT 1 FROM tasks AS t WHERE t.run_id = a.run_id AND t.status = 'dead_lettered') THEN 'its dead letters were replayed'
        ELSE '' END AS why
    FROM w AS a JOIN jobs AS j ON j.id = a.job_id LEFT JOIN latest AS l ON l.job_id = a.job_id
)
UPDATE alerts SET resolved_at = now(), resolution = c.why
FROM c
WHERE alerts.id = c.id AND c.why <> ''
RETURNING alerts.*;

-- ListAlerts pages through a tenant's alerts, newest first; a scoped
-- caller sees those of what it was granted, as in ListJobs.
-- name: ListAlerts :many
SELECT a.*, j.namespace, j.name AS job_name
FROM alerts AS a JOIN jobs AS j ON j.id = a.job_id
WHERE a.tenant_id = @tenant_id
  AND (NOT @open_only::bool OR a.resolved_at IS NULL)
  AND (sqlc.narg(job_id)::uuid IS NULL OR a.job_id = sqlc.narg(job_id)::uuid)
  AND (@namespace::text = '' OR j.namespace = @namespace::text)
  AND (NOT @scoped::bool OR j.namespace = ANY(@scope_namespaces::text[])
       OR j.namespace || '/' || j.name = ANY(@scope_jobs::text[]))
  AND (a.raised_at, a.id) < (@before_at::timestamptz, @before_id::uuid)
ORDER BY a.raised_at DESC, a.id DESC
LIMIT @page_size;

-- name: OpenAlertCounts :many
SELECT kind, count(*) AS open FROM alerts WHERE resolved_at IS NULL GROUP BY kind;

-- name: PruneResolvedAlerts :execrows
DELETE FROM alerts WHERE id IN (
    SELECT id FROM alerts WHERE resolved_at < now() - INTERVAL '1 second' * @older_than_seconds::float8
    ORDER BY resolved_at LIMIT @batch);

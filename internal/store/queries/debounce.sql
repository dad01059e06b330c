-- Debounce (docs/flow-control.md, "Debounce"): runs written queued with
-- debounce_at, joined by later triggers of their key, started by the
-- scheduler of their shard when due. The writers of a key's debounced
-- run decide one after the other under its advisory lock
-- ("debounce/JOB/VALUE", LockConcurrencyKeys).

-- OpenDebounces are the job's debounced runs not started yet of the given
-- key values, locked.
-- name: OpenDebounces :many
SELECT id, debounce_key::text AS debounce_key FROM runs
WHERE job_id = @job_id AND debounce_key = ANY(@keys::text[]) AND debounce_at IS NOT NULL AND status = 'queued'
ORDER BY id
FOR UPDATE;

-- JoinDebounce gives a debounced run a later trigger's params, event and
-- principal, and puts its start off to period after now, but not past
-- max_wait (0: no bound) after its first trigger (its creation);
-- n triggers joined it.
-- name: JoinDebounce :one
UPDATE runs SET params = NULLIF(@params::text, '')::jsonb, event = NULLIF(@event::text, '')::jsonb,
    event_id = NULLIF(@event_id::uuid, '00000000-0000-0000-0000-000000000000'::uuid),
    triggered_by = COALESCE(NULLIF(@triggered_by::text, ''), triggered_by),
    debounce_count = debounce_count + @joined::int,
    debounce_at = LEAST(now() + @period::interval, created_at + NULLIF(@max_wait::interval, '0'::interval))
WHERE id = @id AND debounce_at IS NOT NULL AND status = 'queued'
RETURNING debounce_at::timestamptz AS debounce_at, debounce_count;

-- MarkDebounced makes runs just written queued debounced runs: each with
-- its key's value, ns triggers, starting its period after now.
-- name: MarkDebounced :many
UPDATE runs SET debounce_key = u.key, debounce_count = u.n, debounce_at = now() + u.period
FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@keys::text[]) AS key, unnest(@ns::int[]) AS n, unnest(@periods::interval[]) AS period) AS u
WHERE runs.id = u.id
RETURNING runs.id, runs.debounce_at::timestamptz AS debounce_at;

-- HasDueDebounces reports whether the shards have a debounced run due.
-- name: HasDueDebounces :one
SELECT EXISTS (
    SELECT 1 FROM runs WHERE shard = ANY(@shards::int[]) AND debounce_at <= now() AND debounce_at IS NOT NULL AND status = 'queued'
)::bool;

-- DueDebounces reads a batch of the shards' due debounced runs, the
-- earliest first (their jobs' schedule rows are locked before them:
-- LockDebounced).
-- name: DueDebounces :many
SELECT id, job_id FROM runs
WHERE shard = ANY(@shards::int[]) AND debounce_at <= now() AND debounce_at IS NOT NULL AND status = 'queued'
ORDER BY debounce_at, id
LIMIT @batch;

-- LockDebounced locks those of the runs still due, in id order (a later
-- trigger may have put one off meanwhile: READ COMMITTED reads the row
-- again once locked).
-- name: LockDebounced :many
SELECT id, tenant_id, job_id, job_version, shard, scheduled_for, trigger, params, event
FROM runs
WHERE id = ANY(@ids::uuid[]) AND debounce_at <= now() AND debounce_at IS NOT NULL AND status = 'queued'
ORDER BY id
FOR UPDATE;

-- StartDebounced ends runs' debounce: each as its job's overlap policy
-- and keys decided it (pending, or queued for them), its keys written.
-- name: StartDebounced :exec
UPDATE runs SET debounce_at = NULL, status = u.status, reason = u.reason,
    concurrency_keys = string_to_array(NULLIF(u.ckeys, ''), chr(30))
FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@statuses::text[]) AS status, unnest(@reasons::text[]) AS reason,
             unnest(@concurrency_keys::text[]) AS ckeys) AS u
WHERE runs.id = u.id AND runs.debounce_at IS NOT NULL AND runs.status = 'queued';

-- SetAsideDebounce puts a debounced run whose start failed alone off by a
-- minute.
-- name: SetAsideDebounce :exec
UPDATE runs SET debounce_at = now() + interval '1 minute' WHERE id = @id AND debounce_at IS NOT NULL AND status = 'queued';

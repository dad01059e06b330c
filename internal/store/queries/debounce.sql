-- Debounce (docs/flow-control.md, "Debounce"): runs written queued and
-- debouncing, joined by later triggers of their key, started by the
-- scheduler of their shard when due. The writers of a key's debounced
-- run decide one after the other under its advisory lock
-- ("debounce/JOB/VALUE", LockConcurrencyKeys).

-- OpenDebounces are the job's debouncing runs of the given key values,
-- locked.
-- name: OpenDebounces :many
SELECT id, debounce_key::text AS debounce_key FROM runs
WHERE job_id = @job_id AND debounce_key = ANY(@keys::text[]) AND debouncing
ORDER BY id
FOR UPDATE;

-- JoinDebounce gives a debouncing run a later trigger: its params, event,
-- upstream run, trigger, tree and who is behind it (as InsertRuns works
-- it out), and puts its start off to period after now, but not past
-- max_wait (0: no bound) after its first trigger (its creation); joined
-- triggers joined it.
-- name: JoinDebounce :one
UPDATE runs SET params = NULLIF(@params::text, '')::jsonb, event = NULLIF(@event::text, '')::jsonb,
    event_id = NULLIF(@event_id::uuid, '00000000-0000-0000-0000-000000000000'::uuid),
    upstream = NULLIF(@upstream::text, '')::jsonb, trigger = @trigger::text,
    root_run_id = NULLIF(@root_run_id::uuid, '00000000-0000-0000-0000-000000000000'::uuid), depth = @depth::int,
    triggered_by = COALESCE(NULLIF(@triggered_by::text, ''),
                            CASE WHEN @root_run_id::uuid <> '00000000-0000-0000-0000-000000000000'::uuid
                                 THEN (SELECT rr.triggered_by FROM runs AS rr WHERE rr.id = @root_run_id::uuid) END,
                            CASE WHEN @event_id::uuid <> '00000000-0000-0000-0000-000000000000'::uuid
                                 THEN (SELECT ev.published_by FROM events AS ev WHERE ev.id = @event_id::uuid) END),
    debounce_count = debounce_count + @joined::int,
    debounce_at = LEAST(now() + @period::interval, created_at + NULLIF(@max_wait::interval, '0'::interval))
WHERE runs.id = @id::uuid AND runs.debouncing
RETURNING runs.debounce_at::timestamptz AS debounce_at, runs.debounce_count, runs.created_at, runs.scheduled_for;

-- MarkDebounced makes runs just written queued debouncing runs: each with
-- its key's value, ns triggers, starting its period after now (a run
-- written otherwise, skipped by its tenant's quota, is left alone).
-- name: MarkDebounced :many
UPDATE runs SET debouncing = true, debounce_key = u.key, debounce_count = u.n, debounce_at = now() + u.period
FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@keys::text[]) AS key, unnest(@ns::int[]) AS n, unnest(@periods::interval[]) AS period) AS u
WHERE runs.id = u.id AND runs.status = 'queued'
RETURNING runs.id, runs.debounce_at::timestamptz AS debounce_at, runs.debounce_count;

-- HasDueDebounces reports whether the shards have a debouncing run due
-- (of a job not paused: its run waits for it to resume).
-- name: HasDueDebounces :one
SELECT EXISTS (
    SELECT 1 FROM runs AS r JOIN jobs AS j ON j.id = r.job_id
    WHERE r.shard = ANY(@shards::int[]) AND r.debouncing AND r.debounce_at <= now() AND j.status <> 'paused'
)::bool;

-- DueDebounces reads a batch of the shards' due debouncing runs (of jobs
-- not paused), the earliest first (their jobs' schedule rows are locked
-- before them: LockDebounced).
-- name: DueDebounces :many
SELECT r.id, r.job_id FROM runs AS r JOIN jobs AS j ON j.id = r.job_id
WHERE r.shard = ANY(@shards::int[]) AND r.debouncing AND r.debounce_at <= now() AND j.status <> 'paused'
ORDER BY r.debounce_at, r.id
LIMIT @batch;

-- LockDebounced locks those of the runs still due, in id order (a later
-- trigger may have put one off meanwhile: READ COMMITTED reads the row
-- again once locked), with their jobs' status.
-- name: LockDebounced :many
SELECT r.id, r.tenant_id, r.job_id, r.job_version, r.shard, r.scheduled_for, r.trigger, r.params, r.event, j.status AS job_status
FROM runs AS r JOIN jobs AS j ON j.id = r.job_id
WHERE r.id = ANY(@ids::uuid[]) AND r.debouncing AND r.debounce_at <= now() AND j.status <> 'paused'
ORDER BY r.id
FOR UPDATE OF r;

-- StartDebounced ends runs' debounce (debounce_at stays: when it
-- started): each as its job's overlap policy and keys decided it
-- (pending, or queued for them), its keys written.
-- name: StartDebounced :exec
UPDATE runs SET debouncing = false, status = u.status, reason = u.reason,
    concurrency_keys = string_to_array(NULLIF(u.ckeys, ''), chr(30))
FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@statuses::text[]) AS status, unnest(@reasons::text[]) AS reason,
             unnest(@concurrency_keys::text[]) AS ckeys) AS u
WHERE runs.id = u.id AND runs.debouncing;

-- SetAsideDebounce puts a debouncing run whose start failed alone off by
-- a minute.
-- name: SetAsideDebounce :exec
UPDATE runs SET debounce_at = now() + interval '1 minute' WHERE id = @id AND debouncing;

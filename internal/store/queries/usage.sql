-- JobRooms reads, for the tenants given that have a job, definition
-- bytes or history bytes quota, those quotas and what they hold (package
-- usage).
-- name: JobRooms :many
SELECT t.id, t.name, t.max_jobs, t.max_definition_bytes, t.max_history_bytes,
       COALESCE(sum(u.jobs), 0)::bigint AS jobs, COALESCE(sum(u.definition_bytes), 0)::bigint AS definition_bytes,
       COALESCE(sum(u.history_bytes), 0)::bigint AS history_bytes
FROM tenants AS t
LEFT JOIN tenant_job_usage AS u ON u.tenant_id = t.id
WHERE t.id = ANY(@tenant_ids::uuid[]) AND (t.max_jobs > 0 OR t.max_definition_bytes > 0 OR t.max_history_bytes > 0)
GROUP BY t.id, t.name, t.max_jobs, t.max_definition_bytes, t.max_history_bytes;

-- RunRooms reads, for the tenants given that have a run or task quota,
-- those quotas and what they hold.
-- name: RunRooms :many
SELECT t.id, t.name, t.max_runs, t.max_tasks,
       COALESCE(sum(u.runs), 0)::bigint AS runs, COALESCE(sum(u.tasks), 0)::bigint AS tasks
FROM tenants AS t
LEFT JOIN tenant_run_usage AS u ON u.tenant_id = t.id
WHERE t.id = ANY(@tenant_ids::uuid[]) AND (t.max_runs > 0 OR t.max_tasks > 0)
GROUP BY t.id, t.name, t.max_runs, t.max_tasks;

-- AddJobUsage adds to (or, negative, takes from) what tenants' shards
-- hold of jobs, definition bytes and history bytes; the caller orders the
-- rows by (tenant, shard).
-- name: AddJobUsage :exec
INSERT INTO tenant_job_usage (tenant_id, shard, jobs, definition_bytes, history_bytes)
SELECT unnest(@tenant_ids::uuid[]), unnest(@shards::int[]), unnest(@jobs::bigint[]), unnest(@definition_bytes::bigint[]),
       unnest(@history_bytes::bigint[])
ON CONFLICT (tenant_id, shard) DO UPDATE
SET jobs = tenant_job_usage.jobs + EXCLUDED.jobs, definition_bytes = tenant_job_usage.definition_bytes + EXCLUDED.definition_bytes,
    history_bytes = tenant_job_usage.history_bytes + EXCLUDED.history_bytes;

-- AddRunUsage adds to (or takes from) what tenants' shards hold of runs
-- and tasks; the caller orders the rows by (tenant, shard), so that two
-- writers lock them in one order.
-- name: AddRunUsage :exec
INSERT INTO tenant_run_usage (tenant_id, shard, runs, tasks)
SELECT unnest(@tenant_ids::uuid[]), unnest(@shards::int[]), unnest(@runs::bigint[]), unnest(@tasks::bigint[])
ON CONFLICT (tenant_id, shard) DO UPDATE
SET runs = tenant_run_usage.runs + EXCLUDED.runs, tasks = tenant_run_usage.tasks + EXCLUDED.tasks;

-- TenantStorage reads a tenant's storage quotas and what it holds.
-- name: TenantStorage :one
SELECT t.max_jobs, t.max_definition_bytes, t.max_runs, t.max_tasks, t.max_history_bytes,
       COALESCE((SELECT sum(u.jobs) FROM tenant_job_usage AS u WHERE u.tenant_id = t.id), 0)::bigint AS jobs,
       COALESCE((SELECT sum(u.definition_bytes) FROM tenant_job_usage AS u WHERE u.tenant_id = t.id), 0)::bigint AS definition_bytes,
       COALESCE((SELECT sum(u.history_bytes) FROM tenant_job_usage AS u WHERE u.tenant_id = t.id), 0)::bigint AS history_bytes,
       COALESCE((SELECT sum(u.runs) FROM tenant_run_usage AS u WHERE u.tenant_id = t.id), 0)::bigint AS runs,
       COALESCE((SELECT sum(u.tasks) FROM tenant_run_usage AS u WHERE u.tenant_id = t.id), 0)::bigint AS tasks
FROM tenants AS t WHERE t.id = @id;

-- name: SetTenantStorageLimits :exec
UPDATE tenants SET max_jobs = @max_jobs, max_definition_bytes = @max_definition_bytes, max_runs = @max_runs, max_tasks = @max_tasks,
    max_history_bytes = @max_history_bytes
WHERE id = @id;

-- ClearJobUsage and CountJobUsage, then ClearRunUsage and CountRunUsage,
-- in one transaction, count again what every tenant holds (usage.Recount;
-- the backfill of migration 00021).
-- name: ClearJobUsage :exec
DELETE FROM tenant_job_usage;

-- CountJobUsage counts live jobs and their definitions' bytes, and their
-- history's: the versions kept but the live ones, and the audit rows of
-- the jobs' changes (not of their triggers and backfills, which hold
-- params, not definitions).
-- name: CountJobUsage :exec
INSERT INTO tenant_job_usage (tenant_id, shard, jobs, definition_bytes, history_bytes)
SELECT j.tenant_id, j.shard, count(*) FILTER (WHERE j.status <> 'deleted'),
       COALESCE(sum(octet_length(j.spec::text)) FILTER (WHERE j.status <> 'deleted'), 0),
       COALESCE(sum((SELECT sum(octet_length(v.spec::text)) FROM job_versions AS v
                      WHERE v.job_id = j.id AND (j.status = 'deleted' OR v.version < j.version))), 0)
       + COALESCE(sum((SELECT sum(COALESCE(octet_length(a.before::text), 0) + COALESCE(octet_length(a.after::text), 0)) FROM audit_log AS a
                       WHERE a.target_id = j.id AND a.target_kind = 'job'
                         AND a.action IN ('create', 'update', 'delete', 'pause', 'resume'))), 0)
FROM jobs AS j
GROUP BY j.tenant_id, j.shard;

-- name: ClearRunUsage :exec
DELETE FROM tenant_run_usage;

-- name: CountRunUsage :exec
INSERT INTO tenant_run_usage (tenant_id, shard, runs, tasks)
SELECT r.tenant_id, r.shard, count(*), COALESCE(sum(t.n), 0)
FROM runs AS r
LEFT JOIN (SELECT run_id, count(*) AS n FROM tasks GROUP BY run_id) AS t ON t.run_id = r.id
GROUP BY r.tenant_id, r.shard;

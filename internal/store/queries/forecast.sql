-- StepMedians is the median length of each step's succeeded attempts over
-- the last 50 runs of each of the tenant's jobs (a fan-out's items, named
-- STEP[i], count as their step).
-- name: StepMedians :many
SELECT j.id::uuid AS job_id, regexp_replace(k.step, '\[[0-9]+\]$', '')::text AS step,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY EXTRACT(EPOCH FROM a.finished_at - a.started_at))::float8 AS seconds
FROM unnest(@job_ids::uuid[]) AS j (id)
CROSS JOIN LATERAL (
    SELECT r.id FROM runs AS r WHERE r.tenant_id = @tenant_id AND r.job_id = j.id
    ORDER BY r.scheduled_for DESC LIMIT 50
) AS r
JOIN tasks AS k ON k.run_id = r.id
JOIN attempts AS a ON a.task_id = k.id AND a.outcome = 'succeeded' AND a.finished_at IS NOT NULL
GROUP BY 1, 2;

-- LiveQueueCapacities is, per queue, what its live workers declare
-- together, and how many declare nothing (custom: a list of their
-- custom counts).
-- name: LiveQueueCapacities :many
SELECT w.queue::text AS queue, (count(*) FILTER (WHERE w.cap_cpu IS NULL))::bigint AS undeclared,
       COALESCE(sum(w.cap_cpu), 0)::bigint AS cpu, COALESCE(sum(w.cap_memory), 0)::bigint AS memory,
       COALESCE(sum(w.cap_gpu), 0)::bigint AS gpu,
       jsonb_agg(w.cap_custom) FILTER (WHERE w.cap_custom IS NOT NULL) AS custom
FROM (SELECT jsonb_object_keys(queues) AS queue, cap_cpu, cap_memory, cap_gpu, cap_custom
      FROM workers WHERE lease_expires_at > now()) AS w
GROUP BY w.queue
ORDER BY w.queue;

-- TenantAllocations is, per tenant, what its tasks holding slots ask for
-- together (the allocation metrics), the largest first.
-- name: TenantAllocations :many
SELECT t.name, f.tasks, f.cpu, f.memory, f.gpu
FROM (SELECT tenant_id, count(*)::bigint AS tasks, COALESCE(sum(res_cpu), 0)::bigint AS cpu,
             COALESCE(sum(res_memory), 0)::bigint AS memory, COALESCE(sum(res_gpu), 0)::bigint AS gpu
      FROM tasks WHERE admitted_at IS NOT NULL AND status IN ('queued', 'running', 'retrying')
      GROUP BY tenant_id) AS f
JOIN tenants AS t ON t.id = f.tenant_id
ORDER BY f.gpu DESC, f.cpu DESC, f.memory DESC, t.name;

-- QueueAllocations is, per queue, what its running tasks ask for together
-- (the cluster page's queues).
-- name: QueueAllocations :many
SELECT queue, COALESCE(sum(res_cpu), 0)::bigint AS cpu, COALESCE(sum(res_memory), 0)::bigint AS memory,
       COALESCE(sum(res_gpu), 0)::bigint AS gpu,
       jsonb_agg(res_custom) FILTER (WHERE res_custom IS NOT NULL) AS custom
FROM tasks
WHERE admitted_at IS NOT NULL AND status = 'running'
GROUP BY queue;

-- Storage quotas (package usage): what a tenant may keep stored, 0 for no
-- bound. Tenants made before this migration, the default tenant among
-- them, start with none; `orrery tenants create` gives new ones the
-- defaults of usage.Defaults.
--
-- What a tenant stores is counted as it is written, per (tenant, shard),
-- so that no count holds a row every writer of a tenant waits on:
-- tenant_job_usage counts live jobs and the bytes of their definitions
-- (the spec as JSON text), kept by job creation, update and deletion;
-- tenant_run_usage counts runs and their tasks, kept by run creation and
-- retention. A tenant's use is the sum of its rows. The backfill below
-- counts what exists; nodes of an older version still writing after it
-- are not counted. Outside a transaction, each statement re-runnable:
-- CockroachDB does not let one transaction use a column it added.

-- +goose NO TRANSACTION

-- +goose Up
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS max_jobs BIGINT NOT NULL DEFAULT 0 CHECK (max_jobs >= 0);
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS max_definition_bytes BIGINT NOT NULL DEFAULT 0 CHECK (max_definition_bytes >= 0);
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS max_runs BIGINT NOT NULL DEFAULT 0 CHECK (max_runs >= 0);
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS max_tasks BIGINT NOT NULL DEFAULT 0 CHECK (max_tasks >= 0);

CREATE TABLE IF NOT EXISTS tenant_job_usage (
    tenant_id        UUID NOT NULL REFERENCES tenants (id),
    shard            INT NOT NULL,
    jobs             BIGINT NOT NULL,
    definition_bytes BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, shard)
);

CREATE TABLE IF NOT EXISTS tenant_run_usage (
    tenant_id UUID NOT NULL REFERENCES tenants (id),
    shard     INT NOT NULL,
    runs      BIGINT NOT NULL,
    tasks     BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, shard)
);

INSERT INTO tenant_job_usage (tenant_id, shard, jobs, definition_bytes)
SELECT tenant_id, shard, count(*), COALESCE(sum(octet_length(spec::text)), 0)
FROM jobs WHERE status <> 'deleted'
GROUP BY tenant_id, shard
ON CONFLICT (tenant_id, shard) DO NOTHING;

INSERT INTO tenant_run_usage (tenant_id, shard, runs, tasks)
SELECT r.tenant_id, r.shard, count(*), COALESCE(sum(t.n), 0)
FROM runs AS r
LEFT JOIN (SELECT run_id, count(*) AS n FROM tasks GROUP BY run_id) AS t ON t.run_id = r.id
GROUP BY r.tenant_id, r.shard
ON CONFLICT (tenant_id, shard) DO NOTHING;

-- +goose Down
DROP TABLE IF EXISTS tenant_run_usage;
DROP TABLE IF EXISTS tenant_job_usage;
ALTER TABLE tenants DROP COLUMN IF EXISTS max_tasks;
ALTER TABLE tenants DROP COLUMN IF EXISTS max_runs;
ALTER TABLE tenants DROP COLUMN IF EXISTS max_definition_bytes;
ALTER TABLE tenants DROP COLUMN IF EXISTS max_jobs;

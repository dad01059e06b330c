-- Schedules as operators need them.
--
-- Fair firing: the scheduler takes due jobs tenant by tenant (weighted),
-- so that one tenant's backlog of firings does not hold another's due
-- instants behind it. job_schedules learns each job's tenant (a job never
-- changes tenant), and an index gives each tenant's due jobs in fire-time
-- order (store DueJobsFair).
--
-- Outside a transaction, re-runnable as 00017: a fill that stopped half way
-- is completed by running it again. Nodes older than this migration do not
-- write the column: every serve process is stopped before this runs
-- (README, upgrading).

-- Alerts learn the kind paused (pause_after_failures paused the job). The
-- check constraint is named as PostgreSQL named it in 00013
-- (alerts_kind_check; CockroachDB named it check_kind).

-- +goose NO TRANSACTION

-- +goose Up
ALTER TABLE job_schedules ADD COLUMN IF NOT EXISTS tenant_id UUID;

UPDATE job_schedules AS s SET tenant_id = j.tenant_id FROM jobs AS j WHERE j.id = s.job_id AND s.tenant_id IS NULL;

ALTER TABLE job_schedules ALTER COLUMN tenant_id SET NOT NULL;

CREATE INDEX IF NOT EXISTS job_schedules_tenant_due ON job_schedules (tenant_id, next_fire_at) WHERE next_fire_at IS NOT NULL;

ALTER TABLE alerts DROP CONSTRAINT IF EXISTS alerts_kind_check;
ALTER TABLE alerts DROP CONSTRAINT IF EXISTS check_kind;
ALTER TABLE alerts ADD CONSTRAINT alerts_kind_check CHECK (kind IN ('missed', 'stuck', 'failure', 'dead_letter', 'paused'));

-- +goose Down
DELETE FROM alerts WHERE kind = 'paused';
ALTER TABLE alerts DROP CONSTRAINT IF EXISTS alerts_kind_check;
ALTER TABLE alerts ADD CONSTRAINT alerts_kind_check CHECK (kind IN ('missed', 'stuck', 'failure', 'dead_letter'));
DROP INDEX IF EXISTS job_schedules_tenant_due;
ALTER TABLE job_schedules DROP COLUMN IF EXISTS tenant_id;

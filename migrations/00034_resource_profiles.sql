-- Resources (docs/resources.md): a tenant's named profiles, the live jobs
-- that name them, and the resources a task pinned when its run was made.
--
-- resource_profiles: a tenant's profile, its vector as integers
-- (millicores, bytes, counts; custom: {"name": count}).
--
-- job_profiles: the profiles a live job's definition names (its steps' and
-- its defaults'), written with the job (create, update) and removed with
-- it (delete): the foreign key makes a profile that a live job names
-- impossible to delete, and a job naming a missing one impossible to
-- write, whatever two transactions race.
--
-- tasks.res_*: what the task asks for, resolved when its run was created
-- (a profile read then: a later change of the profile changes later runs
-- only); an item of a fan-out has its group's. 0 and NULL: none.

-- +goose Up
CREATE TABLE IF NOT EXISTS resource_profiles (
    tenant_id  UUID NOT NULL REFERENCES tenants (id),
    name       TEXT NOT NULL,
    cpu        BIGINT NOT NULL DEFAULT 0 CHECK (cpu >= 0),
    memory     BIGINT NOT NULL DEFAULT 0 CHECK (memory >= 0),
    gpu        BIGINT NOT NULL DEFAULT 0 CHECK (gpu >= 0),
    custom     JSONB,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, name)
);
CREATE TABLE IF NOT EXISTS job_profiles (
    job_id    UUID NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    tenant_id UUID NOT NULL,
    profile   TEXT NOT NULL,
    PRIMARY KEY (job_id, profile),
    FOREIGN KEY (tenant_id, profile) REFERENCES resource_profiles (tenant_id, name) ON DELETE RESTRICT
);
CREATE INDEX IF NOT EXISTS job_profiles_profile ON job_profiles (tenant_id, profile);
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS res_cpu BIGINT NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS res_memory BIGINT NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS res_gpu BIGINT NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS res_custom JSONB;

-- +goose Down
ALTER TABLE tasks DROP COLUMN IF EXISTS res_custom;
ALTER TABLE tasks DROP COLUMN IF EXISTS res_gpu;
ALTER TABLE tasks DROP COLUMN IF EXISTS res_memory;
ALTER TABLE tasks DROP COLUMN IF EXISTS res_cpu;
DROP TABLE IF EXISTS job_profiles;
DROP TABLE IF EXISTS resource_profiles;

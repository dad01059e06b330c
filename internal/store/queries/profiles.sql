-- Resource profiles (docs/resources.md) and the jobs that name them.

-- LockProfile reads a tenant's profile and locks it (what SetProfile and
-- DeleteProfile change, audited with its before). FOR NO KEY UPDATE: a
-- job being written with the profile (job_profiles' foreign key holds it
-- FOR KEY SHARE) does not wait on a change of its vector; a deletion
-- waits on such a job in its DELETE, and then meets its row.
-- name: LockProfile :one
SELECT * FROM resource_profiles WHERE tenant_id = @tenant_id AND name = @name FOR NO KEY UPDATE;

-- name: UpsertProfile :one
INSERT INTO resource_profiles (tenant_id, name, cpu, memory, gpu, custom)
VALUES (@tenant_id, @name, @cpu, @memory, @gpu, sqlc.narg(custom)::jsonb)
ON CONFLICT (tenant_id, name) DO UPDATE
SET cpu = EXCLUDED.cpu, memory = EXCLUDED.memory, gpu = EXCLUDED.gpu, custom = EXCLUDED.custom, updated_at = now()
RETURNING *;

-- name: CountProfiles :one
SELECT count(*)::bigint FROM resource_profiles WHERE tenant_id = @tenant_id;

-- name: ListProfiles :many
SELECT * FROM resource_profiles WHERE tenant_id = @tenant_id ORDER BY name LIMIT 1000;

-- ProfilesNamed reads the profiles of a tenant among @names: a job's (to
-- refuse one naming a missing profile by name before the foreign key
-- would), or a run's steps' (to pin their resources).
-- name: ProfilesNamed :many
SELECT * FROM resource_profiles WHERE tenant_id = @tenant_id AND name = ANY(@names::text[]) ORDER BY name;

-- DeleteProfile deletes a profile no live job names (the foreign key of
-- job_profiles refuses it otherwise).
-- name: DeleteProfile :exec
DELETE FROM resource_profiles WHERE tenant_id = @tenant_id AND name = @name;

-- ProfileJobs names live jobs that name a profile (for the refusal of its
-- deletion), a few.
-- name: ProfileJobs :many
SELECT j.namespace, j.name FROM job_profiles AS p JOIN jobs AS j ON j.id = p.job_id
WHERE p.tenant_id = @tenant_id AND p.profile = @profile
ORDER BY j.namespace, j.name LIMIT 5;

-- DeleteJobProfiles and InsertJobProfiles make a job's job_profiles rows
-- the profiles its definition names (on a change; a creation writes them
-- in CreateJobs).
-- name: DeleteJobProfiles :exec
DELETE FROM job_profiles WHERE job_id = @job_id;

-- name: InsertJobProfiles :exec
INSERT INTO job_profiles (job_id, tenant_id, profile)
SELECT @job_id, @tenant_id, unnest(@profiles::text[]);

-- ProfilesOfTenants reads the profiles named (@names[i] of tenant
-- @tenant_ids[i]) by the steps of runs being created, to pin their
-- resources.
-- name: ProfilesOfTenants :many
SELECT p.* FROM resource_profiles AS p
JOIN (SELECT DISTINCT unnest(@tenant_ids::uuid[]) AS tenant_id, unnest(@names::text[]) AS name) AS u
  ON u.tenant_id = p.tenant_id AND u.name = p.name;

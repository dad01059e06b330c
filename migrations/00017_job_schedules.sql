-- Each job's next fire time moves out of the wide jobs row into a narrow
-- table of its own. Firing advanced jobs.next_fire_at for every run: a
-- rewrite of the whole row (its spec and labels) and an entry in each of
-- its four indexes, and a row lock on it, all in the firing transaction.
-- job_schedules holds the live value: firing locks and advances it there
-- (an entry in two small indexes), and reads the jobs row without a lock.
--
-- jobs.next_fire_at stays what a definition change set (create, update,
-- pause, resume, delete: rare writes; a paused job resumes from it); the
-- statement or transaction that writes a job writes its schedule row too
-- (NULL there unless the job is active). No trigger: Orrery's own tables
-- keep to what PostgreSQL and CockroachDB both run.
--
-- Nodes older than this migration read and write jobs.next_fire_at as the
-- live time: every serve process is stopped before this runs, and none
-- older may start after it (README, upgrading); workers do not read it.
--
-- Outside a transaction, the way up re-runnable: a fill that stopped half
-- way is completed by running it again, rows already there left alone.
-- The way down is not, once past its DROP TABLE (its UPDATE reads the
-- table); goose records the version after its last statement.

-- +goose NO TRANSACTION

-- +goose Up
CREATE TABLE IF NOT EXISTS job_schedules (
    job_id       UUID PRIMARY KEY REFERENCES jobs (id),
    shard        INT NOT NULL,
    next_fire_at TIMESTAMPTZ -- NULL: nothing left to fire, or the job is not active
);

INSERT INTO job_schedules (job_id, shard, next_fire_at)
SELECT id, shard, CASE WHEN status = 'active' THEN next_fire_at END FROM jobs
ON CONFLICT (job_id) DO NOTHING;

-- The scheduler's range scan: due jobs of one shard.
CREATE INDEX IF NOT EXISTS job_schedules_due ON job_schedules (shard, next_fire_at) WHERE next_fire_at IS NOT NULL;

-- +goose Down
-- The live fire times back where older nodes read them, with every serve
-- process stopped, as for the way up.
UPDATE jobs SET next_fire_at = s.next_fire_at FROM job_schedules AS s WHERE s.job_id = jobs.id AND jobs.status = 'active';
DROP TABLE IF EXISTS job_schedules;

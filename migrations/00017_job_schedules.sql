-- Each job's next fire time moves out of the wide jobs row into a narrow
-- table of its own. Firing advanced jobs.next_fire_at for every run: a
-- rewrite of the whole row (its spec and labels) and an entry in each of
-- its four indexes, and a row lock on it, all in the firing transaction.
-- job_schedules holds the live value: firing locks and advances it there
-- (an entry in two small indexes), and reads the jobs row without a lock.
--
-- jobs.next_fire_at stays what a definition change set (create, update,
-- pause, resume, delete: rare writes; a paused job resumes from it), and
-- the trigger carries every such write to job_schedules (NULL there unless
-- the job is active).
--
-- Nodes older than this migration read and write jobs.next_fire_at as the
-- live time: none of them may run beside a newer one (README, upgrading);
-- workers do not read it.
--
-- Outside a transaction, each statement re-runnable, in this order: the
-- trigger first (replaced in one statement, so that no write slips
-- between a drop and a create on a re-run), so that a write committed
-- while the table is filled has gone through it, and the fill leaves such
-- rows alone. The fill runs at READ COMMITTED: at a stricter default
-- isolation, meeting a row the trigger wrote after its snapshot would fail
-- it with a serialization error.

-- +goose NO TRANSACTION

-- +goose Up
CREATE TABLE IF NOT EXISTS job_schedules (
    job_id       UUID PRIMARY KEY REFERENCES jobs (id),
    shard        INT NOT NULL,
    next_fire_at TIMESTAMPTZ -- NULL: nothing left to fire, or the job is not active
);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION job_schedules_follow() RETURNS TRIGGER LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_schedules (job_id, shard, next_fire_at)
    VALUES (NEW.id, NEW.shard, CASE WHEN NEW.status = 'active' THEN NEW.next_fire_at END)
    ON CONFLICT (job_id) DO UPDATE SET shard = EXCLUDED.shard, next_fire_at = EXCLUDED.next_fire_at;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE OR REPLACE TRIGGER jobs_schedule AFTER INSERT OR UPDATE OF next_fire_at, status, shard ON jobs
    FOR EACH ROW EXECUTE FUNCTION job_schedules_follow();

SET default_transaction_isolation = 'read committed';
INSERT INTO job_schedules (job_id, shard, next_fire_at)
SELECT id, shard, CASE WHEN status = 'active' THEN next_fire_at END FROM jobs
ON CONFLICT (job_id) DO NOTHING;
RESET default_transaction_isolation;

-- The scheduler's range scan: due jobs of one shard.
CREATE INDEX IF NOT EXISTS job_schedules_due ON job_schedules (shard, next_fire_at) WHERE next_fire_at IS NOT NULL;

-- +goose Down
-- The live fire times back where older nodes read them (with every serve
-- process stopped, as for the way up), unless a run of this before got
-- past dropping the table.
-- +goose StatementBegin
DO $$
BEGIN
    IF to_regclass('job_schedules') IS NOT NULL THEN
        UPDATE jobs SET next_fire_at = s.next_fire_at FROM job_schedules AS s WHERE s.job_id = jobs.id AND jobs.status = 'active';
    END IF;
END
$$;
-- +goose StatementEnd
DROP TRIGGER IF EXISTS jobs_schedule ON jobs;
DROP FUNCTION IF EXISTS job_schedules_follow();
DROP TABLE IF EXISTS job_schedules;

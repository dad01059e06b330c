-- Two indexes that no query reads any more, written all the same:
--  - jobs_due: the scheduler reads due jobs from job_schedules since 00017;
--    jobs.next_fire_at changes only with a definition, and nothing scans
--    jobs by it. Each creation, update, pause and resume wrote an entry.
--  - dispatch_outbox_created: the relay reads by queue, then age, since
--    00018 (dispatch_outbox_queue). Each outbox row wrote an entry.

-- +goose Up
DROP INDEX IF EXISTS jobs_due;
DROP INDEX IF EXISTS dispatch_outbox_created;

-- +goose Down
CREATE INDEX IF NOT EXISTS jobs_due ON jobs (shard, next_fire_at) WHERE status = 'active' AND next_fire_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS dispatch_outbox_created ON dispatch_outbox (created_at, id);

-- The relay of one queue database reads the outbox rows of its queues
-- only: by queue, then age. With the age index alone, a relay ordered
-- every pending row by age and skipped those of other queue databases, so
-- a queue database that was down (and its queues' backlog) made every
-- other relay read past that backlog, batch after batch.

-- +goose Up
CREATE INDEX IF NOT EXISTS dispatch_outbox_queue ON dispatch_outbox (queue, created_at, id);

-- +goose Down
DROP INDEX IF EXISTS dispatch_outbox_queue;

-- Who is behind a run (docs/parked-steps.md, "approval": separate), for
-- every run a person caused, not only those triggered by hand: a
-- backfill's runs are its creator's (backfills.created_principal), a run
-- an event started is the event's publisher's (events.published_by; none
-- for a signed webhook's: a provider, not a person), and a child run or a
-- run started by another's end is its tree's root's (InsertRuns copies
-- runs.triggered_by from the root run).

--
-- runs_event_id: the janitor keeps an event while a run it started is
-- open (an approval may keep one open for a year), so that a redelivery
-- of it cannot start a second run; it looks its runs up by event.

-- +goose Up
ALTER TABLE backfills ADD COLUMN created_principal TEXT;
ALTER TABLE events ADD COLUMN published_by TEXT;
CREATE INDEX runs_event_id ON runs (event_id) WHERE event_id IS NOT NULL;

-- +goose Down
DROP INDEX runs_event_id;
ALTER TABLE events DROP COLUMN published_by;
ALTER TABLE backfills DROP COLUMN created_principal;

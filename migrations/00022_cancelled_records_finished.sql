-- Runs written cancelled (the older instants of one firing pass under
-- overlap: cancel_previous) were written without finished_at, so that
-- retention, which prunes finished runs, kept them for good (and storage
-- quotas counted them). They finished when they were written.

-- +goose Up
UPDATE runs SET finished_at = created_at WHERE status = 'cancelled' AND finished_at IS NULL;

-- +goose Down
SELECT 1;

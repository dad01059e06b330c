-- Deleting a task (retention) checks the foreign key task_edges.child_id;
-- without an index each check scanned all of task_edges.

-- +goose Up
CREATE INDEX task_edges_child ON task_edges (child_id);

-- +goose Down
DROP INDEX task_edges_child;

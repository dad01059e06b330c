// Package dispatch hands released tasks to River: admission decides which
// ready tasks go now, and Release inserts their River jobs in the caller's
// transaction, so a task is queued if and only if that transaction commits.
package dispatch

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// TaskArgs is the River job for one attempt of one task. Attempt is the
// number of the attempt it starts; with the task id it is the job's unique
// key, so a replayed insert is harmless.
type TaskArgs struct {
	TaskID  uuid.UUID `json:"task_id" river:"unique"`
	Attempt int       `json:"attempt" river:"unique"`
}

// Kind is the River job kind of TaskArgs.
func (TaskArgs) Kind() string { return "orrery_task" }

// Ready is a task to hand to a worker pool.
type Ready struct {
	TaskID   uuid.UUID
	Tenant   uuid.UUID
	Queue    string
	Priority int // River priority, 1 (critical) to 4 (low)
	Attempt  int // the attempt this starts
	// NotBefore delays the attempt (retry backoff): an instant computed from
	// the database's clock, never this process's. Zero: now.
	NotBefore time.Time
}

// Dispatcher inserts River jobs for released tasks.
type Dispatcher struct {
	river *river.Client[pgx.Tx]
}

// New returns a Dispatcher with an insert-only River client.
func New() (*Dispatcher, error) {
	c, err := river.NewClient(riverpgxv5.New(nil), &river.Config{})
	if err != nil {
		return nil, fmt.Errorf("dispatch: %w", err)
	}
	return &Dispatcher{river: c}, nil
}

// admit is where tenant quotas and weighted fairness will decide which
// ready tasks go now and which wait; today every ready task goes.
func admit(ready []Ready) []Ready { return ready }

// Release admits ready tasks and inserts their River jobs in tx.
func (d *Dispatcher) Release(ctx context.Context, tx pgx.Tx, ready []Ready) error {
	ready = admit(ready)
	if len(ready) == 0 {
		return nil
	}
	params := make([]river.InsertManyParams, len(ready))
	for i, r := range ready {
		opts := &river.InsertOpts{Queue: r.Queue, Priority: r.Priority, MaxAttempts: 25, UniqueOpts: river.UniqueOpts{ByArgs: true}}
		if !r.NotBefore.IsZero() {
			opts.ScheduledAt = r.NotBefore
		}
		params[i] = river.InsertManyParams{Args: TaskArgs{TaskID: r.TaskID, Attempt: r.Attempt}, InsertOpts: opts}
	}
	if _, err := d.river.InsertManyTx(ctx, tx, params); err != nil {
		return fmt.Errorf("dispatch: insert River jobs: %w", err)
	}
	return nil
}

package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/engine/worker"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/node"
	"github.com/orrery-dev/orrery/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// A worker binary of your own registers Go handlers by name; a job's step
// `run: {handler: load-warehouse}` then runs in it.
func Example() {
	dsn, drop, err := pgtest.NewDatabase() // your Orrery database
	if err != nil {
		panic(err)
	}
	defer drop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, _ := pgxpool.New(ctx, dsn)
	defer pool.Close()

	loaded := make(chan executor.Call, 1)
	w, err := worker.New(worker.Config{
		StatePool: pool,
		Queues:    map[string]int{"warehouse": 4},
		Handlers: map[string]executor.HandlerFunc{
			"load-warehouse": func(ctx context.Context, c executor.Call) error {
				loaded <- c // your code; return an error to retry, executor.Permanent(err) to give up
				return nil
			},
		},
	})
	if err != nil {
		panic(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	// Something to run: a job on the warehouse queue, fired by a scheduler node.
	d, _ := dispatch.New()
	n, _ := node.New(ctx, node.Config{Pool: pool, Dispatcher: d})
	go func() { _ = n.Run(ctx) }()
	jobs, _ := job.New(ctx, pool, nil)
	now, _ := jobs.Now(ctx)
	_, err = jobs.Create(ctx, job.Anonymous, dag.Resource{
		Metadata: dag.Metadata{Name: "nightly-load"},
		Spec: dag.JobSpec{
			Schedule: schedule.Spec{At: now.Format(time.RFC3339)},
			Defaults: dag.StepDefaults{Queue: "warehouse"},
			Run:      &dag.Executor{Handler: "load-warehouse"},
		},
	}, "")
	if err != nil {
		panic(err)
	}
	c := <-loaded
	fmt.Println(c.Job, c.Step, "attempt", c.Attempt)
	cancel()
	<-done
	// Output: nightly-load main attempt 1
}

package worker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/engine/worker"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/failpoint"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
)

// A step that fails for good settles its descendants in a transaction of
// its own: while that transaction is held open (the failpoint), holding
// its run and its tasks, another tenant's runs, of one step and of two,
// start, report and succeed on the same worker.
func TestAFailureSettlingHoldsNoOtherReport(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	other := uuid.Must(uuid.NewV7())
	if _, err := pool.Exec(ctx, "INSERT INTO tenants (id, name) VALUES ($1, 'other')", other); err != nil {
		t.Fatal(err)
	}
	enginetest.StartNode(t, pool)
	settling, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	fp := failpoint.New()
	fp.On(worker.FailpointSettled, func() {
		once.Do(func() {
			close(settling)
			select {
			case <-release:
			case <-time.After(time.Minute):
				t.Error("not released")
			}
		})
	})
	enginetest.StartWorkers(t, worker.Config{StatePool: pool, Queues: map[string]int{"default": 4}, Failpoints: fp,
		Handlers: map[string]executor.HandlerFunc{
			"ok":   func(context.Context, executor.Call) error { return nil },
			"fail": func(context.Context, executor.Call) error { return executor.Permanent(errors.New("fails for good")) },
		}})
	create := func(a job.Actor, name string, handlers ...string) {
		t.Helper()
		now, err := jobs.Now(ctx)
		if err != nil {
			t.Fatal(err)
		}
		spec := dag.JobSpec{Schedule: schedule.Spec{At: now.Format(time.RFC3339)}, Defaults: dag.StepDefaults{Retry: &dag.Retry{MaxAttempts: 1}}}
		for i, h := range handlers {
			st := dag.Step{Name: h + string(rune('a'+i)), Run: dag.Executor{Handler: h}}
			if i > 0 {
				st.Needs = []string{spec.Steps[i-1].Name}
			}
			spec.Steps = append(spec.Steps, st)
		}
		if _, err := jobs.Create(ctx, a, dag.Resource{Metadata: dag.Metadata{Name: name}, Spec: spec}, ""); err != nil {
			t.Fatal(err)
		}
	}
	create(job.Anonymous, "pipeline", "fail", "ok", "ok")
	select {
	case <-settling:
	case <-time.After(30 * time.Second):
		t.Fatal("the failure was not settled apart (worker/settled not hit)")
	}
	otherActor := job.Actor{Tenant: other, Name: "other"}
	create(otherActor, "single", "ok")
	create(otherActor, "pair", "ok", "ok")
	enginetest.WaitFor(t, 30*time.Second, "the other tenant's runs succeed while the failure settles", func() bool {
		return enginetest.Int(t, pool, "SELECT count(*) FROM runs WHERE tenant_id = $1 AND status = 'succeeded'", other) == 2
	})
	close(release)
	enginetest.WaitFor(t, 30*time.Second, "the pipeline fails", func() bool {
		return enginetest.Int(t, pool, "SELECT count(*) FROM tasks WHERE status = 'upstream_failed'") == 2
	})
}

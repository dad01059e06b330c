package dispatch_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/engine/worker"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/job"
)

// Every transaction that inserts River jobs wakes the workers of their
// queues, not only the first in River's own notification window: with the
// workers' poll an hour away, runs one after another (each a new insert
// within the hour), a chain whose every hop is released by a report, and
// runs of a tenant with a quota (inserted by an admission pass) all
// finish, through River tables in the state database and through the
// outbox and relay into a queue database. Without the notification every
// insert after the first waits for the poll, and the test times out.
func TestEveryInsertWakesTheWorkers(t *testing.T) {
	for _, outbox := range []bool{false, true} {
		t.Run(fmt.Sprintf("outbox=%v", outbox), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			cfg := worker.Config{StatePool: f.pool, Queues: map[string]int{"q": 4}, FetchPollInterval: time.Hour,
				Handlers: map[string]executor.HandlerFunc{"work": f.live.handler}}
			if outbox {
				cfg.QueueDBs = dispatch.QueueDBs{Default: f.outbox()}
			}
			enginetest.StartWorkers(t, cfg)
			free := f.tenant("free", 1, 0)
			for i := range 3 {
				f.waitRuns(30*time.Second, f.fire(free, fmt.Sprintf("one%d", i), "q", 1, nil))
			}
			f.waitRuns(30*time.Second, f.chain(free, "chain", "q", 4))
			capped := f.tenant("capped", 1, 1) // a quota: admitted by the admitters' passes only
			for i := range 3 {
				f.waitRuns(30*time.Second, f.fire(capped, fmt.Sprintf("capped%d", i), "q", 2, nil))
			}
		})
	}
}

// chain creates a job of n steps in queue, each needing the one before,
// and triggers one run of it.
func (f *fixture) chain(a job.Actor, name, queue string, n int) uuid.UUID {
	f.t.Helper()
	spec := dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("@yearly")}, Overlap: dag.OverlapAllow,
		Defaults: dag.StepDefaults{Queue: queue, Retry: &dag.Retry{MaxAttempts: 1}}}
	for i := range n {
		st := dag.Step{Name: fmt.Sprintf("s%d", i), Run: dag.Executor{Handler: "work"}}
		if i > 0 {
			st.Needs = []string{fmt.Sprintf("s%d", i-1)}
		}
		spec.Steps = append(spec.Steps, st)
	}
	return f.trigger(a, name, spec)
}

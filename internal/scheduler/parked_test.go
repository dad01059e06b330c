package scheduler_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/node"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/run"
)

// A step that sleeps parks: its task runs on no worker (no worker, lease,
// admission mark or River job), its row says when it ends, and the
// scheduler ends it then, passing {until, time} to the step after. An
// until that evaluates to a past instant ends at once; one that is no
// RFC 3339 instant, or more than a year ahead, dead-letters the step
// naming the field. A cancel ends it and removes its row; a retry parks
// it again.
func TestSleepingStepParksAndWakes(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	var mu sync.Mutex
	after := map[string]string{} // the after step's payload by run
	startPolicyWorker(t, pool, map[string]executor.HandlerFunc{
		"note": func(ctx context.Context, c executor.Call) error {
			mu.Lock()
			defer mu.Unlock()
			after[c.RunID.String()] = string(c.Payload)
			return nil
		},
	})
	startPolicyNode(t, pool, node.Config{})
	never := schedule.Spec{Cron: schedule.Crons("0 0 1 1 *"), Timezone: "UTC"}
	createJob(t, pool, "nap", dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow,
		Steps: []dag.Step{
			{Name: "nap", Sleep: &dag.Sleep{For: 2 * time.Second}},
			{Name: "after", Needs: []string{"nap"}, Run: dag.Executor{Handler: "note"}, Payload: dag.Payload(`{"until": "${{ steps.nap.output.until }}"}`)},
		}})
	createJob(t, pool, "nap-until", dag.JobSpec{Schedule: never, Overlap: dag.OverlapAllow,
		Params: map[string]dag.Param{"at": {Type: "string"}},
		Steps: []dag.Step{
			{Name: "nap", Sleep: &dag.Sleep{Until: "${{ params.at }}"}},
			{Name: "after", Needs: []string{"nap"}, Run: dag.Executor{Handler: "note"}},
		}})
	_, _, runs := services(t, pool)
	trigger := func(name string, params map[string]string) uuid.UUID {
		t.Helper()
		r, err := runs.TriggerWith(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: name}, run.TriggerOptions{IgnoreOverlap: true, ParamTexts: params})
		if err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	waitRun := func(id uuid.UUID, status string) {
		t.Helper()
		enginetest.WaitFor(t, 60*time.Second, "run "+id.String()+" "+status, func() bool { return runStatus(t, pool, id) == status })
	}
	parked := func(id uuid.UUID) int {
		return enginetest.Int(t, pool, "SELECT count(*) FROM parked_steps WHERE run_id = $1", id)
	}

	r1 := trigger("nap", nil)
	enginetest.WaitFor(t, 20*time.Second, "the nap parked", func() bool { return parked(r1) == 1 })
	if n := enginetest.Int(t, pool, `SELECT count(*) FROM tasks WHERE run_id = $1 AND step = 'nap' AND status = 'running'
		AND worker_id IS NULL AND lease_expires_at IS NULL AND admitted_at IS NULL AND attempt_worker = 'orrery (sleep)'`, r1); n != 1 {
		t.Errorf("the sleeping task is not running on no worker")
	}
	if n := enginetest.Int(t, pool, `SELECT count(*) FROM river_job AS j JOIN tasks AS t ON j.args->>'task_id' = t.id::text WHERE t.run_id = $1 AND t.step = 'nap'`, r1); n != 0 {
		t.Errorf("the sleeping step has %d River jobs", n)
	}
	waitRun(r1, "succeeded")
	if parked(r1) != 0 {
		t.Error("the woken step's row is left")
	}
	slept := enginetest.Int(t, pool, `SELECT (extract(epoch FROM a.finished_at - a.started_at) * 1000)::int FROM attempts AS a JOIN tasks AS t ON t.id = a.task_id
		WHERE t.run_id = $1 AND t.step = 'nap'`, r1)
	if slept < 2000 {
		t.Errorf("the nap's attempt lasted %d ms, less than its 2 s", slept)
	}
	mu.Lock()
	var p struct{ Until string }
	if err := json.Unmarshal([]byte(after[r1.String()]), &p); err != nil || p.Until == "" {
		t.Errorf("after's payload %q: %v", after[r1.String()], err)
	}
	mu.Unlock()

	// until: a past instant ends at once; a bad one, or one past the
	// bound, dead-letters the step.
	past := trigger("nap-until", map[string]string{"at": "2020-01-01T00:00:00Z"})
	waitRun(past, "succeeded")
	for at, want := range map[string]string{
		"tomorrow": `sleep.until: "tomorrow" is not an RFC 3339 instant`,
		time.Now().Add(400 * 24 * time.Hour).UTC().Format(time.RFC3339): "is more than 366 days ahead",
	} {
		id := trigger("nap-until", map[string]string{"at": at})
		waitRun(id, "failed")
		var last string
		if err := pool.QueryRow(ctx, "SELECT last_error FROM tasks WHERE run_id = $1 AND step = 'nap'", id).Scan(&last); err != nil || !strings.Contains(last, want) {
			t.Errorf("until %q: the step's error %q (%v), want %q", at, last, err, want)
		}
	}

	// A cancel ends the sleep and its row; a retry parks it again.
	long := trigger("nap-until", map[string]string{"at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	enginetest.WaitFor(t, 20*time.Second, "the long nap parked", func() bool { return parked(long) == 1 })
	if _, err := runs.CancelRun(ctx, job.Anonymous, long, "test"); err != nil {
		t.Fatal(err)
	}
	if parked(long) != 0 || runStatus(t, pool, long) != "cancelled" {
		t.Errorf("cancelled: %d rows parked, run %s", parked(long), runStatus(t, pool, long))
	}
	if _, err := runs.RetryRun(ctx, job.Anonymous, long, true); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 20*time.Second, "the long nap parked again", func() bool { return parked(long) == 1 })
	if n := enginetest.Int(t, pool, "SELECT attempt FROM tasks WHERE run_id = $1 AND step = 'nap'", long); n != 2 {
		t.Errorf("the retried nap is attempt %d, want 2", n)
	}
	if _, err := runs.CancelRun(ctx, job.Anonymous, long, "test"); err != nil {
		t.Fatal(err)
	}
}

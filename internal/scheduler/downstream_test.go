package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/node"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/run"
)

// A job after another starts one run per upstream run that ends with an
// outcome it names, with run.upstream (the run, its outcome, its last
// steps' outputs) in its expressions; none while paused; a cycle of jobs
// is refused.
func TestAfterStartsOneRunPerUpstreamEnd(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	var mu sync.Mutex
	seen := map[string]string{} // load's payload by run
	var fail sync.Map
	startPolicyWorker(t, pool, map[string]executor.HandlerFunc{
		"extract": func(ctx context.Context, c executor.Call) error {
			if _, ok := fail.Load("on"); ok {
				return executor.Permanent(errors.New("boom"))
			}
			if _, ok := fail.Load("weird"); ok { // JSON that jsonb refuses: a number past float64, a NUL
				return executor.SetOutput(ctx, `{"n": 1e999, "s": "a\u0000b"}`)
			}
			return executor.SetOutput(ctx, map[string]any{"rows": 3, "file": "s3://b/" + c.RunID.String()})
		},
		"load": func(ctx context.Context, c executor.Call) error {
			mu.Lock()
			defer mu.Unlock()
			seen[c.RunID.String()] = string(c.Payload)
			return nil
		},
		"alarm": func(ctx context.Context, c executor.Call) error { return nil },
	})
	startPolicyNode(t, pool, node.Config{})
	yearly := schedule.Spec{Cron: schedule.Crons("@yearly")}
	createJob(t, pool, "extract", dag.JobSpec{Schedule: yearly, Overlap: dag.OverlapAllow, Run: &dag.Executor{Handler: "extract"},
		Defaults: dag.StepDefaults{Retry: &dag.Retry{MaxAttempts: 1}}})
	load := createJob(t, pool, "load", dag.JobSpec{Schedule: schedule.Spec{After: &schedule.After{Job: "extract"}}, Overlap: dag.OverlapAllow,
		Run:     &dag.Executor{Handler: "load"},
		Payload: dag.Payload(`{"from": "${{ run.upstream.id }}", "file": "${{ run.upstream.outputs.main.file }}", "rows": "${{ run.upstream.outputs.main.rows }}", "trigger": "${{ run.trigger }}"}`)})
	createJob(t, pool, "alarm", dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("@yearly"), After: &schedule.After{Job: "extract", On: []string{"failed", "dead_lettered"}}},
		Run: &dag.Executor{Handler: "alarm"}})
	if load.NextFireAt != nil {
		t.Errorf("a job after another alone has a next fire time: %s", load.NextFireAt)
	}
	jobs, _, runs := services(t, pool)
	extract := job.Ref{Namespace: "default", Name: "extract"}
	var ups []uuid.UUID
	for range 3 {
		r, err := runs.Trigger(ctx, job.Anonymous, extract, "", true)
		if err != nil {
			t.Fatal(err)
		}
		ups = append(ups, r.ID)
	}
	countOf := func(name, where string) int {
		return enginetest.Int(t, pool, "SELECT count(*) FROM runs AS r JOIN jobs AS j ON j.id = r.job_id WHERE j.name = $1 AND "+where, name)
	}
	enginetest.WaitFor(t, 30*time.Second, "three load runs succeeded", func() bool { return countOf("load", "r.status = 'succeeded'") == 3 })
	mu.Lock()
	for runID, payload := range seen {
		var p struct {
			From, File, Trigger string
			Rows                int // a string that is exactly one expression keeps its type
		}
		if err := json.Unmarshal([]byte(payload), &p); err != nil {
			t.Fatalf("load %s: payload %s: %v", runID, payload, err)
		}
		if p.File != "s3://b/"+p.From || p.Rows != 3 || p.Trigger != "upstream" {
			t.Errorf("load %s: payload %s", runID, payload)
		}
	}
	mu.Unlock()
	if n := enginetest.Int(t, pool, "SELECT count(DISTINCT r.upstream->>'id') FROM runs AS r WHERE r.trigger = 'upstream' AND r.upstream->>'id' = ANY($1::text[])",
		[]string{ups[0].String(), ups[1].String(), ups[2].String()}); n != 3 {
		t.Errorf("load's runs name %d of the 3 upstream runs", n)
	}
	if n := countOf("alarm", "true"); n != 0 {
		t.Errorf("alarm (on failed) ran %d times for succeeded runs", n)
	}

	// A failure starts alarm, not load.
	fail.Store("on", true)
	if _, err := runs.Trigger(ctx, job.Anonymous, extract, "", true); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 30*time.Second, "alarm started by the failure", func() bool {
		return countOf("alarm", "r.trigger = 'upstream' AND r.upstream->>'outcome' IN ('failed', 'dead_lettered')") == 1
	})
	fail.Delete("on")

	// Paused: nothing starts; resumed: the next end starts a run again.
	if _, err := jobs.Pause(ctx, job.Anonymous, job.Ref{ID: load.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := runs.Trigger(ctx, job.Anonymous, extract, "", true); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 30*time.Second, "the events consumed", func() bool {
		return countOf("extract", "r.finished_at IS NOT NULL") == 5 && enginetest.Int(t, pool, "SELECT count(*) FROM upstream_finishes") == 0
	})
	if n := countOf("load", "true"); n != 3 {
		t.Errorf("%d load runs after a run of extract while load was paused, want 3", n)
	}
	if _, err := jobs.Resume(ctx, job.Anonymous, job.Ref{ID: load.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := runs.Trigger(ctx, job.Anonymous, extract, "", true); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 30*time.Second, "a fourth load run", func() bool { return countOf("load", "r.status = 'succeeded'") == 4 })

	// An output jsonb cannot store is left out of run.upstream (named in
	// outputs_cut), not a reason to stop: the run is started all the same.
	fail.Store("weird", true)
	weird, err := runs.Trigger(ctx, job.Anonymous, extract, "", true)
	if err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 30*time.Second, "a load run for the odd output", func() bool {
		return countOf("load", "r.upstream->>'id' = '"+weird.ID.String()+"' AND r.upstream->'outputs_cut' ? 'main'") == 1
	})
	fail.Delete("weird")

	// extract after load would make a cycle: refused, nothing written.
	before := enginetest.Int(t, pool, "SELECT version FROM jobs WHERE name = 'extract'")
	_, err = jobs.Update(ctx, job.Anonymous, extract, dag.Resource{Metadata: dag.Metadata{Name: "extract"},
		Spec: dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("@yearly"), After: &schedule.After{Job: "load"}}, Run: &dag.Executor{Handler: "extract"}}}, int64(before))
	if err == nil || !strings.Contains(err.Error(), "default/extract after default/load after default/extract") {
		t.Errorf("a cycle: %v", err)
	}
	if after := enginetest.Int(t, pool, "SELECT version FROM jobs WHERE name = 'extract'"); after != before {
		t.Errorf("version %d -> %d", before, after)
	}
}

// A run whose last step fans out gives the runs it starts its items'
// outputs in run.upstream.outputs, in item order.
func TestUpstreamOutputsOfAFanOut(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	startPolicyWorker(t, pool, map[string]executor.HandlerFunc{
		"sq": func(ctx context.Context, c executor.Call) error {
			var in struct{ I int }
			if err := json.Unmarshal(c.Payload, &in); err != nil {
				return err
			}
			return executor.SetOutput(ctx, map[string]any{"sq": in.I * in.I})
		},
		"noop": func(context.Context, executor.Call) error { return nil },
	})
	startPolicyNode(t, pool, node.Config{})
	createJob(t, pool, "fanned", dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("@yearly")}, Overlap: dag.OverlapAllow,
		Steps: []dag.Step{{Name: "each", ForEach: "${{ [1, 2, 3] }}", Run: dag.Executor{Handler: "sq"}, Payload: dag.Payload(`{"i": "${{ item }}"}`)}}})
	createJob(t, pool, "after-fan", dag.JobSpec{Schedule: schedule.Spec{After: &schedule.After{Job: "fanned"}}, Overlap: dag.OverlapAllow,
		Run: &dag.Executor{Handler: "noop"}})
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatch.New()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.NewService(pool, jobs, d).Trigger(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: "fanned"}, "", true); err != nil {
		t.Fatal(err)
	}
	var outputs string
	enginetest.WaitFor(t, 30*time.Second, "after-fan started with the items' outputs", func() bool {
		return pool.QueryRow(ctx, `SELECT r.upstream->'outputs'->>'each' FROM runs AS r JOIN jobs AS j ON j.id = r.job_id
			WHERE j.name = 'after-fan'`).Scan(&outputs) == nil
	})
	if outputs != `[{"sq": 1}, {"sq": 4}, {"sq": 9}]` {
		t.Errorf("run.upstream.outputs.each = %s", outputs)
	}
}

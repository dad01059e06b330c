package run_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/internal/usage"
)

const fanOutJob = `apiVersion: orrery.dev/v1
kind: Job
metadata: {name: fan, namespace: data}
spec:
  schedule: {cron: "@yearly"}
  overlap: allow
  defaults: {retry: {max_attempts: 1}}
  params:
    files: {type: string, default: "a,b,c,d,e,f,g"}
    fail:  {type: string, default: ""}
    need:  {type: string, default: ""}
  steps:
    - name: list
      run: {handler: emit}
      payload: {files: "${{ params.files }}"}
    - name: load
      needs: [list]
      for_each: ${{ steps.list.output.files }}
      max_parallel: 2
      run: {handler: load}
      payload: {file: "${{ item }}", i: "${{ item_index }}", fail: "${{ params.fail }}"}
    - name: report
      needs: [load]
      trigger_rule: all_done
      run: {handler: record}
      payload: {outputs: "${{ steps.load.outputs }}", status: "${{ steps.load.status }}"}
`

// TestFanOutOverAParentsOutput: a step fans out over its parent's output,
// one task per item (STEP[i]) reading item and item_index, at most
// max_parallel at once; its child waits for every item and reads their
// outputs in item order; an empty list skips the step and a list past
// the bound dead-letters it, writing no item; min_success decides a
// partial success.
func TestFanOutOverAParentsOutput(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	jobs, _ := job.New(ctx, pool, nil)
	d, _ := dispatch.New()
	runs := run.NewService(pool, jobs, d)
	var mu sync.Mutex
	inflight, most := map[uuid.UUID]int{}, map[uuid.UUID]int{}
	reports := map[uuid.UUID]json.RawMessage{}
	enginetest.StartWorker(t, pool, 6, map[string]executor.HandlerFunc{
		"emit": func(ctx context.Context, c executor.Call) error {
			var in struct{ Files string }
			if err := json.Unmarshal(c.Payload, &in); err != nil {
				return err
			}
			files := []string{}
			if in.Files != "-" {
				files = strings.Split(in.Files, ",")
			}
			return executor.SetOutput(ctx, map[string]any{"files": files})
		},
		"load": func(ctx context.Context, c executor.Call) error {
			var in struct {
				File string
				I    int
				Fail string
			}
			if err := json.Unmarshal(c.Payload, &in); err != nil {
				return err
			}
			if c.Step != dag.ItemStep("load", in.I) {
				return fmt.Errorf("task %s got item_index %d", c.Step, in.I)
			}
			mu.Lock()
			inflight[c.RunID]++
			most[c.RunID] = max(most[c.RunID], inflight[c.RunID])
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			mu.Lock()
			inflight[c.RunID]--
			mu.Unlock()
			if strings.Contains(in.Fail, in.File) {
				return executor.Permanent(errors.New("no " + in.File))
			}
			return executor.SetOutput(ctx, map[string]any{"file": in.File, "n": in.I})
		},
		"record": func(_ context.Context, c executor.Call) error {
			mu.Lock()
			defer mu.Unlock()
			reports[c.RunID] = c.Payload
			return nil
		},
	})
	docs, es := dag.Decode("fan.yaml", []byte(fanOutJob))
	if len(es) > 0 {
		t.Fatal(es)
	}
	if _, err := jobs.Create(ctx, job.Anonymous, docs[0].Resource, ""); err != nil {
		t.Fatal(err)
	}
	ref := job.Ref{Namespace: "data", Name: "fan"}
	trigger := func(params map[string]string) uuid.UUID {
		t.Helper()
		r, err := runs.TriggerWith(ctx, job.Anonymous, ref, run.TriggerOptions{ParamTexts: params})
		if err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	all := trigger(nil)
	empty := trigger(map[string]string{"files": "-"})
	partial := trigger(map[string]string{"files": "a,b,c,d", "fail": "b", "need": "3"})
	over := trigger(map[string]string{"files": strings.Repeat("x,", dag.MaxItems) + "x"})
	for _, id := range []uuid.UUID{all, empty, partial, over} {
		waitRunEnds(t, pool, id)
	}
	status := func(id uuid.UUID, step string) (string, string) {
		var s, why string
		if err := pool.QueryRow(ctx, "SELECT status, last_error FROM tasks WHERE run_id = $1 AND step = $2", id, step).Scan(&s, &why); err != nil {
			t.Fatalf("%s of run %s: %v", step, id, err)
		}
		return s, why
	}
	runStatus := func(id uuid.UUID) string {
		return queryString(t, pool, "SELECT status FROM runs WHERE id = $1", id)
	}

	// Every item ran once, at most two at once, and report read them in order.
	if s := runStatus(all); s != "succeeded" {
		t.Fatalf("run all: %s", s)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM tasks WHERE run_id = $1 AND group_id IS NOT NULL AND status = 'succeeded' AND attempt = 1", all); n != 7 {
		t.Errorf("%d items succeeded at their first attempt, want 7", n)
	}
	mu.Lock()
	gotMost, report := most[all], reports[all]
	mu.Unlock()
	if gotMost > 2 || gotMost < 1 {
		t.Errorf("at most %d items ran at once, want 1..2 (max_parallel 2)", gotMost)
	}
	var rep struct {
		Outputs []struct {
			File string
			N    int
		}
		Status string
	}
	if err := json.Unmarshal(report, &rep); err != nil {
		t.Fatalf("report's payload %s: %v", report, err)
	}
	if len(rep.Outputs) != 7 || rep.Status != "succeeded" {
		t.Fatalf("report read %s", report)
	}
	for i, o := range rep.Outputs {
		if o.N != i || o.File != string(rune('a'+i)) {
			t.Errorf("outputs[%d] = %+v", i, o)
		}
	}
	if s, _ := status(all, "load"); s != "succeeded" {
		t.Errorf("group load: %s", s)
	}

	// An empty list skips the step; report (all_done) runs anyway.
	if s, why := status(empty, "load"); s != "skipped" || why != run.ReasonEmptyList {
		t.Errorf("empty list: load %s (%q)", s, why)
	}
	if s, _ := status(empty, "report"); s != "succeeded" {
		t.Errorf("empty list: report %s", s)
	}
	// The bound: the group is dead-lettered, naming it, and no item is written.
	if s, why := status(over, "load"); s != "dead_lettered" || !strings.Contains(why, fmt.Sprintf("the list has %d items; the limit is %d", dag.MaxItems+1, dag.MaxItems)) {
		t.Errorf("over the bound: load %s (%q)", s, why)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM tasks WHERE run_id = $1 AND group_id IS NOT NULL", over); n != 0 {
		t.Errorf("over the bound: %d items written", n)
	}
	if s := runStatus(over); s != "failed" {
		t.Errorf("over the bound: run %s", s)
	}
	// One item of four failed: with all of them needed, the group fails
	// and says how many succeeded; report (all_done) still reads the
	// outputs, null for the failed item.
	if s, why := status(partial, "load"); s != "dead_lettered" || why != "3 of 4 items succeeded; min_success needs 4" {
		t.Errorf("partial: load %s (%q)", s, why)
	}
	mu.Lock()
	report = reports[partial]
	mu.Unlock()
	if !strings.Contains(string(report), `null`) || !strings.Contains(string(report), `"status":"dead_lettered"`) {
		t.Errorf("partial: report read %s", report)
	}
}

// TestMinSuccess: a group with min_success succeeds with some items
// failed, and the run with it.
func TestMinSuccess(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	jobs, _ := job.New(ctx, pool, nil)
	d, _ := dispatch.New()
	runs := run.NewService(pool, jobs, d)
	enginetest.StartWorker(t, pool, 4, map[string]executor.HandlerFunc{
		"odd": func(_ context.Context, c executor.Call) error {
			var in struct{ I int }
			if err := json.Unmarshal(c.Payload, &in); err != nil {
				return err
			}
			if in.I%2 == 1 {
				return executor.Permanent(errors.New("odd"))
			}
			return nil
		},
	})
	for _, tt := range []struct {
		min  string
		want string
	}{{`"50%"`, "succeeded"}, {`2`, "succeeded"}, {`3`, "failed"}, {`"51%"`, "failed"}} {
		name := "min-" + strings.NewReplacer(`"`, "", "%", "pct").Replace(tt.min)
		yaml := fmt.Sprintf(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: %s}
spec:
  schedule: {cron: "@yearly"}
  defaults: {retry: {max_attempts: 1}}
  steps:
    - name: each
      for_each: ${{ [10, 11, 12, 13] }}
      min_success: %s
      run: {handler: odd}
      payload: {i: "${{ item }}"}
`, name, tt.min)
		docs, es := dag.Decode(name+".yaml", []byte(yaml))
		if len(es) > 0 {
			t.Fatal(es)
		}
		if _, err := jobs.Create(ctx, job.Anonymous, docs[0].Resource, ""); err != nil {
			t.Fatal(err)
		}
		r, err := runs.TriggerWith(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: name}, run.TriggerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waitRunEnds(t, pool, r.ID)
		if got := queryString(t, pool, "SELECT status FROM runs WHERE id = $1", r.ID); got != tt.want {
			t.Errorf("min_success %s: run %s, want %s", tt.min, got, tt.want)
		}
	}
}

// waitRunEnds waits (a minute at most) for a run to end.
func waitRunEnds(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) {
	t.Helper()
	enginetest.WaitFor(t, 60*time.Second, "run "+id.String()+" ends", func() bool {
		return queryString(t, pool, "SELECT status FROM runs WHERE id = $1", id) != "pending" &&
			queryString(t, pool, "SELECT status FROM runs WHERE id = $1", id) != "running"
	})
}

func queryString(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) string {
	t.Helper()
	var s string
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

// TestFanOutHeldToTheTaskQuota: a fan-out whose items would take its
// tenant past max_tasks is dead-lettered, naming the quota, with no item
// written.
func TestFanOutHeldToTheTaskQuota(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	jobs, _ := job.New(ctx, pool, nil)
	d, _ := dispatch.New()
	runs := run.NewService(pool, jobs, d)
	enginetest.StartWorker(t, pool, 2, map[string]executor.HandlerFunc{"ok": func(context.Context, executor.Call) error { return nil }})
	if err := usage.Set(ctx, store.New(pool), job.DefaultTenant, usage.Limits{Tasks: 20}); err != nil {
		t.Fatal(err)
	}
	docs, es := dag.Decode("wide.yaml", []byte(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: wide}
spec:
  schedule: {cron: "@yearly"}
  overlap: allow
  steps:
    - name: each
      for_each: ${{ params.n.split(',') }}
      run: {handler: ok}
  params:
    n: {type: string, default: "a,b,c"}
`))
	if len(es) > 0 {
		t.Fatal(es)
	}
	if _, err := jobs.Create(ctx, job.Anonymous, docs[0].Resource, ""); err != nil {
		t.Fatal(err)
	}
	ref := job.Ref{Namespace: "default", Name: "wide"}
	small, err := runs.TriggerWith(ctx, job.Anonymous, ref, run.TriggerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wide, err := runs.TriggerWith(ctx, job.Anonymous, ref, run.TriggerOptions{ParamTexts: map[string]string{"n": strings.Repeat("x,", 29) + "x"}})
	if err != nil {
		t.Fatal(err)
	}
	waitRunEnds(t, pool, small.ID)
	waitRunEnds(t, pool, wide.ID)
	if s := queryString(t, pool, "SELECT status FROM runs WHERE id = $1", small.ID); s != "succeeded" {
		t.Errorf("3 items within the quota: run %s", s)
	}
	why := queryString(t, pool, "SELECT last_error FROM tasks WHERE run_id = $1 AND step = 'each'", wide.ID)
	if !strings.Contains(why, "storage quota max_tasks is 20") || !strings.Contains(why, "this would add 30") {
		t.Errorf("30 items past the quota: the group's reason %q", why)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM tasks WHERE run_id = $1 AND group_id IS NOT NULL", wide.ID); n != 0 {
		t.Errorf("%d items written past the quota", n)
	}
	if n := enginetest.Int(t, pool, "SELECT sum(tasks)::int FROM tenant_run_usage"); n != enginetest.Int(t, pool, "SELECT count(*) FROM tasks") {
		t.Errorf("tenant_run_usage counts %d tasks, the database holds %d", n, enginetest.Int(t, pool, "SELECT count(*) FROM tasks"))
	}
	// The tenant's own bound on a fan-out's items (max_items_per_step, as
	// SetTenantQuota writes it): 2 here, under the default 10,000.
	if _, err := pool.Exec(ctx, "UPDATE tenants SET max_items_per_step = 2 WHERE id = $1", job.DefaultTenant); err != nil {
		t.Fatal(err)
	}
	capped, err := runs.TriggerWith(ctx, job.Anonymous, ref, run.TriggerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitRunEnds(t, pool, capped.ID)
	if why := queryString(t, pool, "SELECT last_error FROM tasks WHERE run_id = $1 AND step = 'each'", capped.ID); !strings.Contains(why, "for_each: the list has 3 items; the limit is 2") {
		t.Errorf("3 items past the tenant's max_items_per_step: the group's reason %q", why)
	}
}

// TestRetryAFanOut: a run whose fan-out failed (one item failed for good)
// or was cancelled while its items ran is retried from where it failed:
// the items that succeeded keep their ends (one attempt each), the others
// run again (their attempt numbers going on), max_parallel still holds,
// and the run succeeds.
func TestRetryAFanOut(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	jobs, _ := job.New(ctx, pool, nil)
	d, _ := dispatch.New()
	runs := run.NewService(pool, jobs, d)
	var healed atomic.Bool
	block := make(chan struct{})
	enginetest.StartWorker(t, pool, 4, map[string]executor.HandlerFunc{
		"item": func(ctx context.Context, c executor.Call) error {
			var in struct{ I int }
			if err := json.Unmarshal(c.Payload, &in); err != nil {
				return err
			}
			if in.I == 2 && !healed.Load() {
				return executor.Permanent(errors.New("item 2 fails until healed"))
			}
			if in.I == 100 && !healed.Load() {
				select { // the cancelled run's first item runs until cancelled
				case <-block:
				case <-ctx.Done():
				}
			}
			return nil
		},
		"after": func(context.Context, executor.Call) error { return nil },
	})
	for _, tt := range []struct{ name, list string }{{"fails", "[0, 1, 2, 3]"}, {"cancelled", "[100, 101, 102]"}} {
		docs, es := dag.Decode(tt.name+".yaml", []byte(fmt.Sprintf(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: %s}
spec:
  schedule: {cron: "@yearly"}
  defaults: {retry: {max_attempts: 1}}
  steps:
    - name: each
      for_each: ${{ %s }}
      max_parallel: 1
      run: {handler: item}
      payload: {i: "${{ item }}"}
    - name: after
      needs: [each]
      run: {handler: after}
`, tt.name, tt.list)))
		if len(es) > 0 {
			t.Fatal(es)
		}
		if _, err := jobs.Create(ctx, job.Anonymous, docs[0].Resource, ""); err != nil {
			t.Fatal(err)
		}
	}
	fails, err := runs.TriggerWith(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: "fails"}, run.TriggerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cancelled, err := runs.TriggerWith(ctx, job.Anonymous, job.Ref{Namespace: "default", Name: "cancelled"}, run.TriggerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitRunEnds(t, pool, fails.ID)
	enginetest.WaitFor(t, 30*time.Second, "the cancelled run's first item runs", func() bool {
		return queryString(t, pool, "SELECT status FROM tasks WHERE run_id = $1 AND step = 'each[0]'", cancelled.ID) == "running"
	})
	if _, err := runs.CancelRun(ctx, job.Anonymous, cancelled.ID, "test"); err != nil {
		t.Fatal(err)
	}
	if s := queryString(t, pool, "SELECT status FROM runs WHERE id = $1", fails.ID); s != "failed" {
		t.Fatalf("the failing run: %s", s)
	}
	healed.Store(true)
	for _, id := range []uuid.UUID{fails.ID, cancelled.ID} {
		if _, err := runs.RetryRun(ctx, job.Anonymous, id, false); err != nil {
			t.Fatal(err)
		}
		waitRunEnds(t, pool, id)
		if s := queryString(t, pool, "SELECT status FROM runs WHERE id = $1", id); s != "succeeded" {
			t.Errorf("run %s retried: %s", id, s)
		}
		if n := enginetest.Int(t, pool, `SELECT count(*) FROM tasks WHERE run_id = $1 AND group_id IS NOT NULL AND status <> 'succeeded'`, id); n != 0 {
			t.Errorf("run %s: %d items did not succeed", id, n)
		}
	}
	// The items that had succeeded ran once; item 2 ran twice (attempt 2).
	got := map[string]int{}
	rows, err := pool.Query(ctx, "SELECT step, attempt FROM tasks WHERE run_id = $1 AND group_id IS NOT NULL", fails.ID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var step string
		var n int
		if err := rows.Scan(&step, &n); err != nil {
			t.Fatal(err)
		}
		got[step] = n
	}
	rows.Close()
	if want := map[string]int{"each[0]": 1, "each[1]": 1, "each[2]": 2, "each[3]": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("attempts by item %v, want %v", got, want)
	}
	if n := enginetest.Int(t, pool, `SELECT count(*) FROM tasks WHERE group_id IS NOT NULL AND run_id = $1 AND attempt = 0`, cancelled.ID); n != 0 {
		t.Errorf("the cancelled run retried: %d items never ran", n)
	}
}

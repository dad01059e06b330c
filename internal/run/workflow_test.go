package run_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/run"
)

const dataPipeline = `apiVersion: orrery.dev/v1
kind: Job
metadata: {name: pipeline, namespace: data}
spec:
  schedule: {cron: "@yearly"}
  overlap: allow
  defaults: {retry: {max_attempts: 1}}
  params:
    region: {type: string, default: eu, enum: [eu, us]}
    n:      {type: integer, default: 2}
  steps:
    - name: list
      run: {handler: emit}
      payload: {region: "${{ params.region }}", n: "${{ params.n }}"}
    - name: use
      needs: [list]
      run: {handler: record}
      payload:
        files: "${{ steps.list.output.files }}"
        first: "${{ steps.list.output.files[0] }}"
        status: "${{ steps.list.status }}"
        text: "${{ params.region }}-${{ params.n * 10 }}"
        day: "${{ run.scheduled_for }}"
        id: "${{ run.id }}"
        trigger: "${{ run.trigger }}"
        who: "${{ job.namespace + '/' + job.name }}"
        attempt: "${{ attempt }}"
    - name: bad
      needs: [list]
      run: {handler: record}
      payload: {x: "${{ steps.list.output.nope }}"}
`

// TestParamsAndOutputsFlowToChildren: a manual trigger's params reach a
// root step's payload, a root's output reaches its children's, every
// variable has its value, and a step whose expression cannot be evaluated
// fails for good without running, naming the field.
func TestParamsAndOutputsFlowToChildren(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	jobs, _ := job.New(ctx, pool, nil)
	d, _ := dispatch.New()
	runs := run.NewService(pool, jobs, d)
	var mu sync.Mutex
	got := map[string]json.RawMessage{}
	enginetest.StartWorker(t, pool, 4, map[string]executor.HandlerFunc{
		"emit": func(ctx context.Context, c executor.Call) error {
			var in struct {
				Region string
				N      int
			}
			if err := json.Unmarshal(c.Payload, &in); err != nil {
				return err
			}
			files := []string{}
			for i := range in.N {
				files = append(files, in.Region+"-"+string(rune('a'+i))+".csv")
			}
			return executor.SetOutput(ctx, map[string]any{"files": files})
		},
		"record": func(_ context.Context, c executor.Call) error {
			mu.Lock()
			defer mu.Unlock()
			got[c.Step] = c.Payload
			return nil
		},
	})
	docs, es := dag.Decode("pipeline.yaml", []byte(dataPipeline))
	if len(es) > 0 {
		t.Fatal(es)
	}
	if _, err := jobs.Create(ctx, job.Anonymous, docs[0].Resource, ""); err != nil {
		t.Fatal(err)
	}
	ref := job.Ref{Namespace: "data", Name: "pipeline"}

	// Params that do not fit are refused, naming the param; nothing is written.
	for _, tt := range []struct {
		o    run.TriggerOptions
		want string
	}{
		{run.TriggerOptions{ParamTexts: map[string]string{"region": "fr"}}, `params.region: "fr" is not one of "eu", "us"`},
		{run.TriggerOptions{ParamTexts: map[string]string{"n": "two"}}, `params.n: "two" is not an integer`},
		{run.TriggerOptions{ParamTexts: map[string]string{"nope": "1"}}, `params.nope: no such param (declared: n, region)`},
		{run.TriggerOptions{Params: map[string]dag.Payload{"n": dag.Payload(`2.5`)}}, `params.n: 2.5 is not an integer`},
		{run.TriggerOptions{Params: map[string]dag.Payload{"n": dag.Payload(`1`)}, ParamTexts: map[string]string{"n": "1"}}, `params.n: given twice`},
	} {
		_, err := runs.TriggerWith(ctx, job.Anonymous, ref, tt.o)
		var fe *dag.FieldError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("TriggerWith(%+v) = %v, want a field error %q", tt.o, err, tt.want)
		}
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM runs"); n != 0 {
		t.Fatalf("%d runs written by refused triggers", n)
	}

	r, err := runs.TriggerWith(ctx, job.Anonymous, ref, run.TriggerOptions{ParamTexts: map[string]string{"region": "us", "n": "3"}})
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Params) != `{"n":3,"region":"us"}` {
		t.Errorf("the run's params = %s", r.Params)
	}
	var status string
	enginetest.WaitFor(t, 60*time.Second, "run finishes", func() bool {
		_ = pool.QueryRow(ctx, "SELECT status FROM runs WHERE id = $1", r.ID).Scan(&status)
		return status != "pending" && status != "running"
	})
	if status != string(lifecycle.RunFailed) {
		t.Errorf("run %s, want it failed by the step bad", status)
	}
	mu.Lock()
	use, ranBad := got["use"], got["bad"] != nil
	mu.Unlock()
	var payload map[string]any
	if err := json.Unmarshal(use, &payload); err != nil {
		t.Fatalf("use's payload %s: %v", use, err)
	}
	want := map[string]any{
		"files": []any{"us-a.csv", "us-b.csv", "us-c.csv"}, "first": "us-a.csv", "status": "succeeded", "text": "us-30",
		"day": r.ScheduledFor.UTC().Format(time.RFC3339Nano), "id": r.ID.String(), "trigger": "manual", "who": "data/pipeline", "attempt": float64(1),
	}
	for k, v := range want {
		if g, _ := json.Marshal(payload[k]); string(g) != mustJSON(v) {
			t.Errorf("use's payload %s = %s, want %s", k, g, mustJSON(v))
		}
	}
	if ranBad {
		t.Error("the step whose expression failed ran")
	}
	var taskStatus, reason, errText string
	if err := pool.QueryRow(ctx, `SELECT t.status, a.exit_reason, a.error FROM tasks t JOIN attempts a ON a.task_id = t.id
		WHERE t.run_id = $1 AND t.step = 'bad'`, r.ID).Scan(&taskStatus, &reason, &errText); err != nil {
		t.Fatal(err)
	}
	if taskStatus != string(lifecycle.TaskDeadLettered) || reason != executor.ReasonExpression || !strings.Contains(errText, "payload.x: ${{ steps.list.output.nope }}: no such key: nope") {
		t.Errorf("bad: %s, %s, %q", taskStatus, reason, errText)
	}
}

// TestScheduledRunWithoutAParamsDefault: a scheduled instant of a job
// with a param that has no default is on record, skipped, naming it; one
// whose params all have defaults runs with them.
func TestScheduledRunWithoutAParamsDefault(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	jobs, _ := job.New(ctx, pool, nil)
	docs, es := dag.Decode("p.yaml", []byte(strings.Replace(dataPipeline, "n:      {type: integer, default: 2}", "n:      {type: integer}", 1)))
	if len(es) > 0 {
		t.Fatal(es)
	}
	created, err := jobs.Create(ctx, job.Anonymous, docs[0].Resource, "")
	if err != nil {
		t.Fatal(err)
	}
	defaults := docs[0].Resource.Spec
	defaults.Params = map[string]dag.Param{"region": defaults.Params["region"]}
	d, _ := dispatch.New()
	a := &run.Applier{Dispatcher: d}
	var ids []uuid.UUID
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		ids, err = a.Insert(ctx, tx, []run.New{
			{Job: run.JobRef{ID: created.ID, Tenant: created.Tenant, Version: created.Version, Shard: created.Shard, Spec: &docs[0].Resource.Spec},
				At: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Trigger: lifecycle.TriggerSchedule, Status: lifecycle.RunPending},
			{Job: run.JobRef{ID: created.ID, Tenant: created.Tenant, Version: created.Version, Shard: created.Shard, Spec: &defaults},
				At: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), Trigger: lifecycle.TriggerSchedule, Status: lifecycle.RunPending},
		}, nil, nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var status, reason string
	var params []byte
	_ = pool.QueryRow(ctx, "SELECT status, reason, params FROM runs WHERE id = $1", ids[0]).Scan(&status, &reason, &params)
	if status != "skipped" || reason != "param n has no default, and a schedule run gives no params" || params != nil {
		t.Errorf("run without a default: %s %q %s", status, reason, params)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM tasks WHERE run_id = $1", ids[0]); n != 0 {
		t.Errorf("the skipped run has %d tasks", n)
	}
	_ = pool.QueryRow(ctx, "SELECT status, params::text FROM runs WHERE id = $1", ids[1]).Scan(&status, &params)
	if status != "pending" || string(params) != `{"region": "eu"}` {
		t.Errorf("run with defaults: %s %s", status, params)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

const conditions = `apiVersion: orrery.dev/v1
kind: Job
metadata: {name: conditions}
spec:
  schedule: {cron: "@yearly"}
  overlap: allow
  defaults: {retry: {max_attempts: 1}}
  params:
    dry_run: {type: boolean, default: false}
    gate:    {type: string, default: open}
  steps:
    - name: gate
      when: "${{ params.gate != 'closed' }}"
      run: {handler: emit}
    - name: list
      run: {handler: emit}
    - name: publish
      needs: [list]
      when: "${{ !params.dry_run && steps.list.output.changed }}"
      run: {handler: record}
    - name: after_all_success
      needs: [publish]
      run: {handler: record}
    - name: after_none_failed
      needs: [publish]
      trigger_rule: none_failed
      run: {handler: record}
    - name: after_all_done
      needs: [publish]
      trigger_rule: all_done
      run: {handler: record}
    - name: deeper
      needs: [after_all_success]
      run: {handler: record}
`

// TestConditionsSkipByTriggerRule: a condition false skips its step,
// and the skip flows to its children by trigger rule; with the condition
// true everything runs; a run whose tasks all succeeded or were skipped
// succeeded; a root's condition is decided at the run's insert.
func TestConditionsSkipByTriggerRule(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	jobs, _ := job.New(ctx, pool, nil)
	d, _ := dispatch.New()
	runs := run.NewService(pool, jobs, d)
	var mu sync.Mutex
	ran := map[uuid.UUID][]string{}
	enginetest.StartWorker(t, pool, 4, map[string]executor.HandlerFunc{
		"emit": func(ctx context.Context, c executor.Call) error {
			return executor.SetOutput(ctx, map[string]any{"changed": true})
		},
		"record": func(_ context.Context, c executor.Call) error {
			mu.Lock()
			defer mu.Unlock()
			ran[c.RunID] = append(ran[c.RunID], c.Step)
			return nil
		},
	})
	docs, es := dag.Decode("conditions.yaml", []byte(conditions))
	if len(es) > 0 {
		t.Fatal(es)
	}
	if _, err := jobs.Create(ctx, job.Anonymous, docs[0].Resource, ""); err != nil {
		t.Fatal(err)
	}
	finish := func(texts map[string]string) (uuid.UUID, string, map[string]string) {
		t.Helper()
		r, err := runs.TriggerWith(ctx, job.Anonymous, job.Ref{Name: "conditions"}, run.TriggerOptions{ParamTexts: texts})
		if err != nil {
			t.Fatal(err)
		}
		var status string
		enginetest.WaitFor(t, 60*time.Second, "run finishes", func() bool {
			_ = pool.QueryRow(ctx, "SELECT status FROM runs WHERE id = $1", r.ID).Scan(&status)
			return status != "pending" && status != "running"
		})
		rows, _ := pool.Query(ctx, "SELECT step, status FROM tasks WHERE run_id = $1", r.ID)
		tasks := map[string]string{}
		for rows.Next() {
			var step, st string
			_ = rows.Scan(&step, &st)
			tasks[step] = st
		}
		return r.ID, status, tasks
	}

	id, status, tasks := finish(map[string]string{"dry_run": "true", "gate": "closed"})
	want := map[string]string{"gate": "skipped", "list": "succeeded", "publish": "skipped", "after_all_success": "skipped",
		"after_none_failed": "succeeded", "after_all_done": "succeeded", "deeper": "skipped"}
	if status != "succeeded" || mustJSON(tasks) != mustJSON(want) {
		t.Errorf("dry run: run %s, tasks %v\nwant succeeded, %v", status, tasks, want)
	}
	var reason string
	_ = pool.QueryRow(ctx, "SELECT last_error FROM tasks WHERE run_id = $1 AND step = 'publish'", id).Scan(&reason)
	if reason != "skipped: its condition (when) is false" {
		t.Errorf("publish's reason %q", reason)
	}
	mu.Lock()
	if got := strings.Join(ran[id], " "); strings.Contains(got, "publish") || strings.Contains(got, "deeper") {
		t.Errorf("skipped steps ran: %s", got)
	}
	mu.Unlock()

	_, status, tasks = finish(nil)
	for step, st := range tasks {
		if st != "succeeded" {
			t.Errorf("with defaults, %s is %s (run %s)", step, st, status)
		}
	}
}

// TestRetryFromTheFailedStep: a dead-lettered run retried runs its failed
// step and the steps below it again, keeps the succeeded ones (not run
// again) and their outputs, numbers attempts on; a cancelled run retried
// runs what never started; a succeeded run is not retried; the job's
// overlap policy refuses a retry beside an active run; each retry is
// audited.
func TestRetryFromTheFailedStep(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	jobs, _ := job.New(ctx, pool, nil)
	d, _ := dispatch.New()
	runs := run.NewService(pool, jobs, d)
	var mu sync.Mutex
	calls := map[string]int{}
	var healed bool
	block := make(chan struct{})
	enginetest.StartWorker(t, pool, 4, map[string]executor.HandlerFunc{
		"step": func(ctx context.Context, c executor.Call) error {
			mu.Lock()
			calls[c.Step]++
			ok := healed
			mu.Unlock()
			switch c.Step {
			case "extract":
				return executor.SetOutput(ctx, map[string]any{"rows": 42})
			case "load":
				if !ok {
					return executor.Permanent(errors.New("the warehouse is down"))
				}
				var p struct{ Rows int }
				if err := json.Unmarshal(c.Payload, &p); err != nil || p.Rows != 42 {
					return executor.Permanent(errors.New("load did not get extract's output: " + string(c.Payload)))
				}
			case "wait":
				select {
				case <-block:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		},
	})
	docs, es := dag.Decode("etl.yaml", []byte(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: etl}
spec:
  schedule: {cron: "@yearly"}
  overlap: skip
  defaults: {retry: {max_attempts: 1}}
  steps:
    - {name: extract, run: {handler: step}}
    - {name: load, needs: [extract], run: {handler: step}, payload: {rows: "${{ steps.extract.output.rows }}"}}
    - {name: report, needs: [load], run: {handler: step}}
---
apiVersion: orrery.dev/v1
kind: Job
metadata: {name: slow}
spec:
  schedule: {cron: "@yearly"}
  steps:
    - {name: wait, run: {handler: step}}
    - {name: after, needs: [wait], run: {handler: step}}
`))
	if len(es) > 0 {
		t.Fatal(es)
	}
	for _, doc := range docs {
		if _, err := jobs.Create(ctx, job.Anonymous, doc.Resource, ""); err != nil {
			t.Fatal(err)
		}
	}
	finished := func(id uuid.UUID) string {
		t.Helper()
		var status string
		enginetest.WaitFor(t, 60*time.Second, "run finishes", func() bool {
			_ = pool.QueryRow(ctx, "SELECT status FROM runs WHERE id = $1", id).Scan(&status)
			return status != "pending" && status != "running"
		})
		return status
	}
	r, err := runs.Trigger(ctx, job.Anonymous, job.Ref{Name: "etl"}, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if s := finished(r.ID); s != "failed" {
		t.Fatalf("first pass: %s", s)
	}
	var cannot error
	if _, cannot = runs.RetryRun(ctx, job.Anonymous, uuid.Must(uuid.NewV7()), false); !errors.Is(cannot, run.ErrNotFound) {
		t.Errorf("retry of no run: %v", cannot)
	}

	mu.Lock()
	healed = true
	before := calls["extract"]
	mu.Unlock()
	retried, err := runs.RetryRun(ctx, job.Anonymous, r.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	if retried.Status != "running" {
		t.Errorf("the retried run is %s, want running", retried.Status)
	}
	if s := finished(r.ID); s != "succeeded" {
		t.Fatalf("retried: %s", s)
	}
	mu.Lock()
	if calls["extract"] != before {
		t.Errorf("extract ran again on the retry (%d calls, %d before)", calls["extract"], before)
	}
	mu.Unlock()
	var attempts []string
	rows, _ := pool.Query(ctx, `SELECT t.step || ':' || a.number || ':' || a.outcome FROM attempts a JOIN tasks t ON t.id = a.task_id
		WHERE t.run_id = $1 ORDER BY t.step, a.number`, r.ID)
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		attempts = append(attempts, s)
	}
	if got := strings.Join(attempts, " "); got != "extract:1:succeeded load:1:failed load:2:succeeded report:1:succeeded" {
		t.Errorf("attempts %s", got)
	}
	if _, err := runs.RetryRun(ctx, job.Anonymous, r.ID, false); !errors.Is(err, run.ErrCannotRetry) {
		t.Errorf("retry of a succeeded run: %v", err)
	}
	if n := enginetest.Int(t, pool, "SELECT count(*) FROM audit_log WHERE action = 'retry' AND target_id = $1", r.ID); n != 1 {
		t.Errorf("%d retry audit entries", n)
	}

	// A cancelled run: the step that ran when it was cancelled runs again,
	// and the one that never started runs.
	slow, err := runs.Trigger(ctx, job.Anonymous, job.Ref{Name: "slow"}, "", false)
	if err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 30*time.Second, "wait runs", func() bool {
		return enginetest.Int(t, pool, "SELECT count(*) FROM tasks WHERE run_id = $1 AND status = 'running'", slow.ID) == 1
	})
	if _, err := runs.CancelRun(ctx, job.Anonymous, slow.ID, "test"); err != nil {
		t.Fatal(err)
	}
	// The job's overlap policy (skip) refuses the retry beside an active run.
	active, err := runs.Trigger(ctx, job.Anonymous, job.Ref{Name: "slow"}, "", false)
	if err != nil || active.Status != "pending" {
		t.Fatalf("second run of slow: %v, %v", active, err)
	}
	if _, err := runs.RetryRun(ctx, job.Anonymous, slow.ID, false); !errors.Is(err, run.ErrCannotRetry) || !strings.Contains(err.Error(), "overlap policy skip") {
		t.Errorf("retry beside an active run: %v", err)
	}
	close(block)
	finished(active.ID)
	if _, err := runs.RetryRun(ctx, job.Anonymous, slow.ID, false); err != nil {
		t.Fatal(err)
	}
	if s := finished(slow.ID); s != "succeeded" {
		t.Fatalf("retried cancelled run: %s", s)
	}
	if n := enginetest.Int(t, pool, "SELECT max(attempt) FROM tasks WHERE run_id = $1 AND step = 'wait'", slow.ID); n != 2 {
		t.Errorf("wait's attempt %d, want 2", n)
	}
}

// TestCutOutputIsNotRead: an output past 64 KiB is kept cut and marked;
// a step whose expression reads it fails for good without running, saying
// so; a step that reads only its status runs.
func TestCutOutputIsNotRead(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	jobs, _ := job.New(ctx, pool, nil)
	d, _ := dispatch.New()
	runs := run.NewService(pool, jobs, d)
	var ran sync.Map
	enginetest.StartWorker(t, pool, 4, map[string]executor.HandlerFunc{
		"big": func(ctx context.Context, c executor.Call) error {
			return executor.SetOutput(ctx, map[string]any{"blob": strings.Repeat("x", 70<<10)})
		},
		"use": func(_ context.Context, c executor.Call) error {
			ran.Store(c.Step, true)
			return nil
		},
	})
	docs, es := dag.Decode("cut.yaml", []byte(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: cut}
spec:
  schedule: {cron: "@yearly"}
  defaults: {retry: {max_attempts: 1}}
  steps:
    - {name: big, run: {handler: big}}
    - {name: reads_output, needs: [big], run: {handler: use}, payload: {n: "${{ size(steps.big.output.blob) }}"}}
    - {name: reads_status, needs: [big], run: {handler: use}, when: "${{ steps.big.status == 'succeeded' }}"}
`))
	if len(es) > 0 {
		t.Fatal(es)
	}
	if _, err := jobs.Create(ctx, job.Anonymous, docs[0].Resource, ""); err != nil {
		t.Fatal(err)
	}
	r, err := runs.Trigger(ctx, job.Anonymous, job.Ref{Name: "cut"}, "", false)
	if err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 60*time.Second, "run finishes", func() bool {
		return enginetest.Int(t, pool, "SELECT count(*) FROM runs WHERE id = $1 AND finished_at IS NOT NULL", r.ID) == 1
	})
	var size int
	var cut bool
	if err := pool.QueryRow(ctx, `SELECT length(a.output), a.output_truncated FROM attempts a JOIN tasks t ON t.id = a.task_id
		WHERE t.run_id = $1 AND t.step = 'big'`, r.ID).Scan(&size, &cut); err != nil || size != executor.MaxOutput || !cut {
		t.Fatalf("big's output: %d bytes, cut %v (%v)", size, cut, err)
	}
	var status, errText string
	if err := pool.QueryRow(ctx, `SELECT t.status, a.error FROM tasks t JOIN attempts a ON a.task_id = t.id
		WHERE t.run_id = $1 AND t.step = 'reads_output'`, r.ID).Scan(&status, &errText); err != nil {
		t.Fatal(err)
	}
	if status != "dead_lettered" || !strings.Contains(errText, "the output of step big was cut") {
		t.Errorf("reads_output: %s, %q", status, errText)
	}
	if _, ok := ran.Load("reads_output"); ok {
		t.Error("reads_output ran")
	}
	if _, ok := ran.Load("reads_status"); !ok {
		t.Error("reads_status, which reads only big's status, did not run")
	}
}

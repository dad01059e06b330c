package main_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
)

// Bounds a hostile tenant's editor meets, tried through real processes.

// TestExpressionBombsThroughAWorker: a step whose output is 40,000
// characters, and steps below it whose condition, payload and argv would
// build gigabytes from it (replace of each character by the whole
// output, a join of as many copies), in three runs: the worker that
// releases them (and evaluates their expressions) refuses each, naming
// the call, and its peak RSS stays within maxWorkerRSS (before the
// bound, three such conditions took a worker from 446 MB to 9.6 GB).
func TestExpressionBombsThroughAWorker(t *testing.T) {
	t.Parallel()
	const maxWorkerRSS = 300 << 10 // KiB
	dsn := pgtest.DSN(t)
	pool := openPool(t, dsn)
	startNodeProc(t, dsn, "node")
	w := workerProc(t, dsn, "w")
	ctx := context.Background()
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	gen := dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/sh", "-c", `head -c 40000 /dev/zero | tr '\0' a`}}}
	noop := dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/true"}}}
	for i := range 3 {
		if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{
			Metadata: dag.Metadata{Name: fmt.Sprintf("bomb-%d", i)},
			Spec: dag.JobSpec{
				Schedule: schedule.Spec{At: dbNow(t, pool).Format(time.RFC3339)},
				Steps: []dag.Step{
					{Name: "gen", Run: gen},
					{Name: "when", Needs: []string{"gen"}, When: `${{ size(steps.gen.output.replace("a", steps.gen.output)) > 0 }}`, Run: noop},
					{Name: "payload", Needs: []string{"gen"}, Run: noop,
						Payload: dag.Payload(`{"x": "${{ steps.gen.output.split('').map(c, steps.gen.output).join('') }}"}`)},
					{Name: "argv", Needs: []string{"gen"},
						Run: dag.Executor{Command: &dag.CommandExecutor{Argv: []string{"/bin/echo", `${{ steps.gen.output.replace("", steps.gen.output) }}`}}}},
				},
			},
		}, ""); err != nil {
			t.Fatal(err)
		}
	}
	idle := enginetest.ProcKB(t, w.cmd.Process.Pid, "VmRSS")
	poll(t, 60*time.Second, "the three runs end", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM runs WHERE finished_at IS NOT NULL`) == 3
	})
	want := map[string]string{"when": "replace would build 1600000000 bytes", "payload": "join would build more than 1048576 bytes (27 of its 40000 items",
		"argv": "replace would build 1600080000 bytes"}
	rows, err := pool.Query(ctx, `SELECT t.step, t.status, t.last_error || coalesce((SELECT string_agg(a.error, ' ') FROM attempts a WHERE a.task_id = t.id), '')
		FROM tasks t WHERE t.step <> 'gen'`)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var step, status, why string
		if err := rows.Scan(&step, &status, &why); err != nil {
			t.Fatal(err)
		}
		n++
		if status != "dead_lettered" || !strings.Contains(why, want[step]) || !strings.Contains(why, "${{") {
			t.Errorf("step %s: %s, %q; want it refused with %q, naming the expression", step, status, why, want[step])
		}
	}
	if err := rows.Err(); err != nil || n != 9 {
		t.Fatalf("%d steps below gen (%v), want 9", n, err)
	}
	peak := enginetest.ProcKB(t, w.cmd.Process.Pid, "VmHWM")
	t.Logf("worker RSS: %d MiB idle, %d MiB peak", idle>>10, peak>>10)
	if peak > maxWorkerRSS {
		t.Errorf("the worker's peak RSS is %d MiB; the bound is %d MiB", peak>>10, maxWorkerRSS>>10)
	}
}

// TestParamsCountInEveryReadBudget: a definition's params count in its
// bound and in every read budget as its payloads do. The enum that took a
// server from 396 MB to 1,439 MB with four readers (100 lists of 6,800
// empty arrays, 2 MB a job) is refused naming the field, as is a job
// step's 2 MB of params; four jobs holding all the values a definition
// may, 100,000 of them in params' enums, read by four readers at once in
// each view, keep the server within 300 MB above idle.
func TestParamsCountInEveryReadBudget(t *testing.T) {
	t.Parallel()
	const maxAboveIdle = 300 << 10 // KiB
	addr, serve := startServe(t, pgtest.DSN(t))
	client := orreryv1connect.NewJobServiceClient(http.DefaultClient, "http://"+addr)
	ctx := context.Background()
	empties := func(n int, last float64) *structpb.Value {
		l := &structpb.ListValue{}
		for range n {
			l.Values = append(l.Values, structpb.NewListValue(&structpb.ListValue{}))
		}
		l.Values = append(l.Values, structpb.NewNumberValue(last))
		return structpb.NewListValue(l)
	}
	handler := &orreryv1.Executor{Kind: &orreryv1.Executor_Handler{Handler: "h"}}
	create := func(name string, spec *orreryv1.JobSpec) error {
		spec.Schedule = &orreryv1.Schedule{Cron: "@yearly"}
		_, err := client.CreateJob(ctx, connect.NewRequest(&orreryv1.CreateJobRequest{
			Metadata: &orreryv1.JobMetadata{Name: name, Namespace: "heavy"}, Spec: spec}))
		return err
	}

	attack := &orreryv1.Param{Type: "array"}
	for e := range dag.MaxParamEnum {
		attack.Enum = append(attack.Enum, empties(6_800, float64(e)))
	}
	err := create("enum", &orreryv1.JobSpec{Params: map[string]*orreryv1.Param{"p": attack}, Steps: []*orreryv1.Step{{Name: "s", Run: handler}}})
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "spec.params.p.enum: is ") ||
		!strings.Contains(err.Error(), "bytes as JSON; the limit is 16384") {
		t.Fatalf("a 2 MB enum: %v", err)
	}
	params, _ := structpb.NewStruct(map[string]any{})
	params.Fields["a"] = empties(680_000, 0)
	err = create("call", &orreryv1.JobSpec{Steps: []*orreryv1.Step{{Name: "s",
		Run: &orreryv1.Executor{Kind: &orreryv1.Executor_Job{Job: &orreryv1.JobCall{Name: "other", Params: params}}}}}})
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "spec.steps[0].run.job.params: is ") ||
		!strings.Contains(err.Error(), "bytes as JSON; a run's params are at most 65536") {
		t.Fatalf("2 MB of a job step's params: %v", err)
	}

	// The worst a definition may hold in params: 100 enums of 1,000
	// values, and payloads for the rest of its 200,000.
	spec := func() *orreryv1.JobSpec {
		s := &orreryv1.JobSpec{Params: map[string]*orreryv1.Param{}}
		for p := range dag.MaxParams {
			param := &orreryv1.Param{Type: "array"}
			for e := range 10 {
				param.Enum = append(param.Enum, empties(98, float64(e)))
			}
			s.Params[fmt.Sprintf("p%03d", p)] = param
		}
		for i := range 7 {
			s.Steps = append(s.Steps, &orreryv1.Step{Name: fmt.Sprintf("s%d", i), Run: handler, Payload: empties(14_100, 0)})
		}
		return s
	}
	for i := range 4 {
		if err := create(fmt.Sprintf("heavy-%d", i), spec()); err != nil {
			t.Fatal(err)
		}
	}
	idle := enginetest.ProcKB(t, serve.cmd.Process.Pid, "VmRSS")
	for _, view := range []orreryv1.JobView{orreryv1.JobView_JOB_VIEW_BASIC, orreryv1.JobView_JOB_VIEW_FULL} {
		var wg sync.WaitGroup
		var jobs atomic.Int64
		for range 4 {
			wg.Go(func() {
				req := &orreryv1.ListJobsRequest{Namespace: "heavy", View: view}
				for {
					res, err := client.ListJobs(ctx, connect.NewRequest(req))
					if err != nil {
						t.Error(err)
						return
					}
					jobs.Add(int64(len(res.Msg.GetJobs())))
					if req.PageToken = res.Msg.GetNextPageToken(); req.PageToken == "" {
						return
					}
				}
			})
		}
		wg.Wait()
		if jobs.Load() != 16 {
			t.Errorf("%s: four readers read %d jobs, want 16", view, jobs.Load())
		}
	}
	// The audit list carries definitions too (each creation's after), and
	// counts their values: one such entry a page.
	audit := orreryv1connect.NewAuditServiceClient(http.DefaultClient, "http://"+addr)
	page, err := audit.ListAudit(ctx, connect.NewRequest(&orreryv1.ListAuditRequest{TargetKind: "job"}))
	if err != nil || len(page.Msg.GetEntries()) != 1 || page.Msg.GetNextPageToken() == "" {
		t.Errorf("audit: %v, %d entries; want one and a next page", err, len(page.Msg.GetEntries()))
	}
	peak := enginetest.ProcKB(t, serve.cmd.Process.Pid, "VmHWM")
	t.Logf("server RSS: %d MiB idle, %d MiB peak", idle>>10, peak>>10)
	if peak-idle > maxAboveIdle {
		t.Errorf("four readers took the server %d MiB above idle; the bound is %d MiB", (peak-idle)>>10, maxAboveIdle>>10)
	}
}

// TestStepCeilingsThroughAWorker: a fork bomb and a memory hog in command
// steps of one run fail with the ceiling they reached named (before the
// ceilings, 1,000 processes and 1 GiB ran without complaint), while a
// neighbour step of the same run on the same worker finishes, and the
// worker runs the next run as if nothing happened.
func TestStepCeilingsThroughAWorker(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("the ceilings of processes and memory need cgroups, which root makes here")
	}
	dsn := pgtest.DSN(t)
	pool := openPool(t, dsn)
	startNodeProc(t, dsn, "node")
	w := startProc(t, "w", "worker", "--db", dsn, "--queue", "default=4", "--name", "w", "--allow-command", "/bin/*",
		"--allow-command", "/usr/bin/python3*", "--step-max-processes", "64", "--step-max-memory", "64MiB", "--log-level", "info")
	ctx := context.Background()
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	cmd := func(argv ...string) dag.Executor { return dag.Executor{Command: &dag.CommandExecutor{Argv: argv}} }
	once := &dag.Retry{MaxAttempts: 1}
	for i, name := range []string{"bombs", "after"} {
		steps := []dag.Step{{Name: "neighbour", Run: cmd("/bin/sh", "-c", "sleep 1; echo fine")}}
		if i == 0 {
			steps = append(steps,
				dag.Step{Name: "fork", Run: cmd("/bin/sh", "-c", `f() { f | f & }; f; sleep 30`)},
				dag.Step{Name: "hog", Run: cmd("/usr/bin/python3", "-c", `b = b"a" * (512 << 20)`)})
		}
		if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: name},
			Spec: dag.JobSpec{Schedule: schedule.Spec{At: dbNow(t, pool).Format(time.RFC3339)}, Steps: steps,
				Defaults: dag.StepDefaults{Retry: once, Timeout: dag.D(10 * time.Second)}}}, ""); err != nil {
			t.Fatal(err)
		}
		poll(t, 60*time.Second, name+" ends", func() bool {
			return queryInt(t, pool, `SELECT count(*) FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = $1 AND r.finished_at IS NOT NULL`, name) == 1
		})
	}
	rows, err := pool.Query(ctx, `SELECT j.name || '/' || t.step, t.status, coalesce(a.exit_reason, ''), coalesce(a.error, ''), coalesce(a.output, '')
		FROM tasks t JOIN runs r ON r.id = t.run_id JOIN jobs j ON j.id = r.job_id LEFT JOIN attempts a ON a.task_id = t.id ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"after/neighbour": "succeeded||fine",
		"bombs/neighbour": "succeeded||fine",
		// A fork bomb tries on until its timeout: it ends so, and says why
		// (or, when its 64 shells fill 64 MiB, as they may on a busy
		// machine, at the memory limit: limit, saying both; or, when its
		// first shell's own fork is refused before the timeout, as it may
		// be on a busy machine, the shell exits 2: limit, saying the forks
		// refused; each taken below as the same end, the bomb held).
		"bombs/fork": "dead_lettered|timeout|it reached its process limit (64 processes and threads): ",
		"bombs/hog":  "dead_lettered|limit|it passed its memory limit (64 MiB): the kernel killed 1 of its processes",
	}
	got := map[string]bool{}
	for rows.Next() {
		var step, status, reason, why, output string
		if err := rows.Scan(&step, &status, &reason, &why, &output); err != nil {
			t.Fatal(err)
		}
		got[step] = true
		w, ok := want[step]
		parts := strings.SplitN(w, "|", 3)
		if step == "bombs/fork" && reason == "limit" && (strings.Contains(why, "it passed its memory limit") || strings.Contains(why, "forks were refused")) {
			reason = "timeout" // the same bomb, held by its ceilings
		}
		if !ok || status != parts[0] || reason != parts[1] || !strings.Contains(why+strings.TrimSpace(output), parts[2]) {
			t.Errorf("%s: %s, %s, %q, %q; want %s", step, status, reason, why, output, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("steps %v, want %d", got, len(want))
	}
	if w.exited() {
		t.Fatal("the worker died")
	}
	if logs := w.Logs(); !strings.Contains(logs, "command steps' ceilings: processes 64 by cgroup (pids), memory 64 MiB by cgroup (memory), file size 1 GiB by rlimit") {
		t.Errorf("the worker does not say how its ceilings hold:\n%s", logs)
	}
}

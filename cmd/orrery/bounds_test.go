package main_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
)

// Bounds a hostile tenant's editor meets, tried through real processes.

// procKB reads a field (VmHWM, VmRSS) of a process's /proc status, in KiB.
func procKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

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
	idle := procKB(t, w.cmd.Process.Pid, "VmRSS")
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
		if status != "dead_lettered" && status != "failed" || !strings.Contains(why, want[step]) || !strings.Contains(why, "${{") {
			t.Errorf("step %s: %s, %q; want it refused with %q, naming the expression", step, status, why, want[step])
		}
	}
	if err := rows.Err(); err != nil || n != 9 {
		t.Fatalf("%d steps below gen (%v), want 9", n, err)
	}
	peak := procKB(t, w.cmd.Process.Pid, "VmHWM")
	t.Logf("worker RSS: %d MiB idle, %d MiB peak", idle>>10, peak>>10)
	if peak > maxWorkerRSS {
		t.Errorf("the worker's peak RSS is %d MiB; the bound is %d MiB", peak>>10, maxWorkerRSS>>10)
	}
}

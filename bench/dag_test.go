package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/job"
	runsvc "github.com/orrery-dev/orrery/internal/run"
)

// BenchmarkDAG runs a 1,000-step fan-out/fan-in and a 200-step chain of
// no-op steps end to end, reporting the time to complete each and the
// resolver overhead per task: from the moment its last parent finished to
// the start of its first attempt; a 10,000-item fan-out (the expansion's
// cost); and a chain of 50 steps that each run a one-step job (run.job):
// per call, its release to the child run's first start, and the child's
// end to the step's.
func BenchmarkDAG(b *testing.B) {
	shapes := map[string]func() []dag.Step{
		"fanout-1000": func() []dag.Step {
			steps := []dag.Step{{Name: "split", Run: dag.Executor{Handler: "noop"}}}
			var parts []string
			for i := range 1000 {
				n := fmt.Sprintf("part-%04d", i)
				parts = append(parts, n)
				steps = append(steps, dag.Step{Name: n, Needs: []string{"split"}, Run: dag.Executor{Handler: "noop"}})
			}
			return append(steps, dag.Step{Name: "merge", Needs: parts, Run: dag.Executor{Handler: "noop"}})
		},
		"foreach-10000": func() []dag.Step {
			return []dag.Step{{Name: "split", Run: dag.Executor{Handler: "noop"}},
				{Name: "each", Needs: []string{"split"}, ForEach: "${{ params.items.split(',') }}", Run: dag.Executor{Handler: "noop"}},
				{Name: "merge", Needs: []string{"each"}, Run: dag.Executor{Handler: "noop"}, Payload: dag.Payload(`{"n": "${{ size(steps.each.outputs) }}"}`)}}
		},
		"calls-50": func() []dag.Step {
			steps := []dag.Step{{Name: "c00", Run: dag.Executor{Job: &dag.JobCall{Name: "leaf"}}}}
			for i := 1; i < 50; i++ {
				steps = append(steps, dag.Step{Name: fmt.Sprintf("c%02d", i), Needs: []string{fmt.Sprintf("c%02d", i-1)}, Run: dag.Executor{Job: &dag.JobCall{Name: "leaf"}}})
			}
			return steps
		},
		"chain-200": func() []dag.Step {
			steps := []dag.Step{{Name: "s000", Run: dag.Executor{Handler: "noop"}}}
			for i := 1; i < 200; i++ {
				steps = append(steps, dag.Step{Name: fmt.Sprintf("s%03d", i), Needs: []string{fmt.Sprintf("s%03d", i-1)}, Run: dag.Executor{Handler: "noop"}})
			}
			return steps
		},
	}
	for _, name := range []string{"fanout-1000", "foreach-10000", "chain-200", "calls-50"} {
		b.Run(name, func(b *testing.B) {
			for range b.N {
				pool := freshDB(b)
				ctx := context.Background()
				eng := startEngine(b, pool, 100)
				jobs, err := job.New(ctx, pool, nil)
				if err != nil {
					b.Fatal(err)
				}
				spec := dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("@yearly")}, Steps: shapes[name]()}
				if name == "calls-50" { // the job each step runs
					if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "leaf"},
						Spec: dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("@yearly")}, Run: &dag.Executor{Handler: "noop"}}}, ""); err != nil {
						b.Fatal(err)
					}
				}
				if name == "foreach-10000" { // 10,000 items: "0,1,...,9999"
					items := make([]string, 10_000)
					for i := range items {
						items[i] = fmt.Sprint(i)
					}
					def, _ := json.Marshal(strings.Join(items, ","))
					spec.Params = map[string]dag.Param{"items": {Type: "string", Default: dag.Payload(def)}}
				}
				_, err = jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: name}, Spec: spec}, "")
				if err != nil {
					b.Fatal(err)
				}
				d, err := dispatch.New()
				if err != nil {
					b.Fatal(err)
				}
				r, err := runsvc.NewService(pool, jobs, d).Trigger(ctx, job.Anonymous, job.Ref{Name: name}, "", false)
				if err != nil {
					b.Fatal(err)
				}
				var status, reason string
				for deadline := time.Now().Add(5 * time.Minute); status != "succeeded"; time.Sleep(20 * time.Millisecond) {
					if err := pool.QueryRow(ctx, "SELECT status, reason FROM runs WHERE id = $1", r.ID).Scan(&status, &reason); err != nil {
						b.Fatal(err)
					}
					switch status {
					case "queued", "pending", "running", "succeeded":
					default: // a step failed: the run will not succeed
						b.Fatalf("run %s: %s %s; tasks: %s", r.ID, status, reason, taskSummary(b, pool, r.ID))
					}
					eng.check(b)
					if time.Now().After(deadline) {
						b.Fatalf("deadline passed: run %s after 5 minutes; tasks: %s", status, taskSummary(b, pool, r.ID))
					}
				}
				checkNoFailures(b, pool)
				eng.check(b)
				var took float64
				if err := pool.QueryRow(ctx, "SELECT extract(epoch FROM finished_at - created_at) FROM runs WHERE id = $1", r.ID).Scan(&took); err != nil {
					b.Fatal(err)
				}
				if name == "foreach-10000" { // the expansion: the parent's report to the items' first start, and to all of them started
					var first, all float64
					if err := pool.QueryRow(ctx, `SELECT extract(epoch FROM min(i.started_at) - s.finished_at), extract(epoch FROM max(i.started_at) - s.finished_at)
						FROM tasks s JOIN tasks i ON i.run_id = s.run_id AND i.group_id IS NOT NULL
						WHERE s.run_id = $1 AND s.step = 'split' GROUP BY s.finished_at`, r.ID).Scan(&first, &all); err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(took, "run-s")
					b.ReportMetric(first*1000, "report-to-first-item-ms")
					b.ReportMetric(all, "report-to-all-started-s")
					continue
				}
				if name == "calls-50" { // per call: the step's release to its child's first start, the child's end to the step's
					var start50, start99, end50, end99 float64
					if err := pool.QueryRow(ctx, `SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY s), percentile_disc(0.99) WITHIN GROUP (ORDER BY s),
							percentile_disc(0.5) WITHIN GROUP (ORDER BY e), percentile_disc(0.99) WITHIN GROUP (ORDER BY e)
						FROM (SELECT extract(epoch FROM (SELECT min(k.started_at) FROM tasks k WHERE k.run_id = c.id) - t.started_at) * 1000 AS s,
						             extract(epoch FROM t.finished_at - c.finished_at) * 1000 AS e
						      FROM tasks t JOIN runs c ON c.id = t.child_run_id WHERE t.run_id = $1) AS d`, r.ID).Scan(&start50, &start99, &end50, &end99); err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(took, "run-s")
					b.ReportMetric(start50, "p50-call-start-ms")
					b.ReportMetric(start99, "p99-call-start-ms")
					b.ReportMetric(end50, "p50-child-end-to-step-end-ms")
					b.ReportMetric(end99, "p99-child-end-to-step-end-ms")
					continue
				}
				rows, err := pool.Query(ctx, `SELECT extract(epoch FROM a.started_at - max(p.finished_at))
					FROM tasks c JOIN attempts a ON a.task_id = c.id AND a.number = 1
					JOIN task_edges e ON e.child_id = c.id JOIN tasks p ON p.id = e.parent_id
					WHERE c.run_id = $1 GROUP BY c.id, a.started_at`, r.ID)
				if err != nil {
					b.Fatal(err)
				}
				var hops []float64
				for rows.Next() {
					var s float64
					if err := rows.Scan(&s); err != nil {
						b.Fatal(err)
					}
					hops = append(hops, s*1000)
				}
				if err := rows.Err(); err != nil {
					b.Fatal(err)
				}
				rows.Close()
				if len(hops) == 0 {
					b.Fatal("no task with a parent started")
				}
				slices.Sort(hops)
				b.ReportMetric(took, "run-s")
				b.ReportMetric(hops[len(hops)/2], "p50-resolve-ms")
				b.ReportMetric(hops[len(hops)*99/100], "p99-resolve-ms")
			}
		})
	}
}

// taskSummary counts a run's tasks by status, with one error of a task
// that failed, for a benchmark's failure message.
func taskSummary(b *testing.B, pool *pgxpool.Pool, run uuid.UUID) string {
	b.Helper()
	var summary string
	err := pool.QueryRow(context.Background(), `SELECT COALESCE(string_agg(status || '=' || n, ' ' ORDER BY status), '') ||
		COALESCE(' (e.g. ' || (SELECT step || ': ' || last_error FROM tasks WHERE run_id = $1 AND last_error <> '' LIMIT 1) || ')', '')
		FROM (SELECT status, count(*) AS n FROM tasks WHERE run_id = $1 GROUP BY status) AS c`, run).Scan(&summary)
	if err != nil {
		b.Fatal(err)
	}
	return summary
}

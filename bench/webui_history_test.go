package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/orrery-dev/orrery/api"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/job"
	runsvc "github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/webui"
)

// BenchmarkWebUIHistory measures the web UI's server time (in process, as
// BenchmarkWebUI) over a history of 100,000 runs in the last 24 hours, of
// 200 jobs in 5 namespaces: the overview (the home page), the runs page
// across jobs with and without filters (a rare one too), a job's page with
// its history grid, and the REST API's summary and run list.
//
//	go test -run '^$' -bench WebUIHistory -benchtime 20x ./bench/
func BenchmarkWebUIHistory(b *testing.B) {
	pool := freshDB(b)
	ctx := context.Background()
	seedJobs(b, pool, "hist", 200, noopSpec("*/5 * * * *"), time.Now().Add(time.Hour))
	began := time.Now()
	for _, sql := range []string{
		`INSERT INTO namespaces (tenant_id, name) SELECT DISTINCT tenant_id, 'ns-' || n FROM jobs, generate_series(0, 4) AS n`,
		`UPDATE jobs SET namespace = 'ns-' || (right(name, 3)::int % 5)`,
		// One run every 0.864 s over the last 24 hours, round-robin over
		// the jobs: 3% failed (a dead-lettered task with its error), 1%
		// skipped, 1% cancelled, the rest succeeded; each started 0-5 s
		// after its instant. Ids are time-ordered, as Orrery's own.
		`INSERT INTO runs (id, tenant_id, job_id, job_version, shard, scheduled_for, trigger, status, reason, created_at, started_at, finished_at)
		 SELECT (lpad(to_hex((extract(epoch FROM t.at) * 1000)::bigint), 12, '0') || left(md5(i::text), 20))::uuid,
		        j.tenant_id, j.id, 1, j.shard, t.at, 'schedule',
		        CASE WHEN i % 100 < 3 THEN 'failed' WHEN i % 100 = 3 THEN 'skipped' WHEN i % 100 = 4 THEN 'cancelled' ELSE 'succeeded' END,
		        CASE WHEN i % 100 = 3 THEN 'overlap skip' ELSE '' END,
		        t.at, CASE WHEN i % 100 = 3 THEN NULL ELSE t.at + (i % 5000) * interval '1 millisecond' END, t.at + interval '10 seconds'
		 FROM generate_series(1, 100000) AS i
		 JOIN LATERAL (SELECT now() - i * interval '864 milliseconds' AS at) AS t ON true
		 JOIN (SELECT id, tenant_id, shard, row_number() OVER (ORDER BY name) - 1 AS k FROM jobs) AS j ON j.k = i % 200`,
		`INSERT INTO tasks (id, tenant_id, run_id, step, status, parents_remaining, queue, priority, attempt, created_at, released_at, started_at, finished_at, last_error)
		 SELECT (left(replace(id::text, '-', ''), 12) || left(md5(id::text || 't'), 20))::uuid, tenant_id, id, 'main',
		        CASE status WHEN 'failed' THEN 'dead_lettered' WHEN 'succeeded' THEN 'succeeded' ELSE 'cancelled' END, 0, 'default', 3, 1,
		        created_at, created_at, started_at, finished_at, CASE status WHEN 'failed' THEN 'exit code 1: no such table' ELSE '' END
		 FROM runs WHERE status <> 'skipped'`,
		`VACUUM ANALYZE jobs, runs, tasks`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			b.Fatalf("%.60s: %v", sql, err)
		}
	}
	fmt.Fprintf(os.Stderr, "loaded 100,000 runs of the last 24 hours in %s\n", time.Since(began).Round(time.Second))
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		b.Fatal(err)
	}
	d, err := dispatch.New()
	if err != nil {
		b.Fatal(err)
	}
	apiHandler := api.NewHandler(api.Services{Jobs: jobs, Runs: runsvc.NewService(pool, jobs, d), State: pool, Auth: api.NoAuth{}}, nil)
	ui, err := webui.New(webui.Config{API: apiHandler, AuthOff: true})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		h    http.Handler
		path string
	}{
		{"overview", ui, "/"},
		{"overview-namespace", ui, "/?namespace=ns-3"},
		{"runs", ui, "/runs"},
		{"runs-failed", ui, "/runs?status=failed"},
		{"runs-namespace", ui, "/runs?namespace=ns-2"},
		{"runs-rare-trigger", ui, "/runs?trigger=manual"},
		{"job-grid", ui, "/jobs/ns-0/hist-0000000"},
		{"rest-summary", apiHandler, "/api/v1/runs:summarize"},
		{"rest-runs", apiHandler, "/api/v1/runs?pageSize=50"},
	} {
		b.Run(c.name, func(b *testing.B) {
			get := func() int {
				rec := httptest.NewRecorder()
				c.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, c.path, nil))
				if rec.Code != http.StatusOK {
					b.Fatalf("GET %s: %d %.300s", c.path, rec.Code, rec.Body.String())
				}
				return rec.Body.Len()
			}
			size := get() // warm: prepared statements, templates
			b.ResetTimer()
			for range b.N {
				get()
			}
			b.ReportMetric(float64(size)/1024, "page-KiB")
		})
	}
}

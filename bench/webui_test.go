package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/api"
	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/job"
	runsvc "github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/webui"
)

// BenchmarkWebUI measures the web UI's server time (the handler, in
// process; no network, no browser) for the jobs list with 100,000 jobs
// (first page and a deep page) and a 1,000-task run page, and the live
// run page's fan-out: 100 viewers of one run, the time from a task's
// change in the database to its event reaching every viewer, and the
// server's CPU while they watch.
//
//	go test -run '^$' -bench WebUI -benchtime 20x ./bench/
func BenchmarkWebUI(b *testing.B) {
	pool := freshDB(b)
	ctx := context.Background()
	next := time.Now().Add(24 * time.Hour)
	seedJobs(b, pool, "job", 100_000, noopSpec("0 3 * * *"), next)
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		b.Fatal(err)
	}
	d, err := dispatch.New()
	if err != nil {
		b.Fatal(err)
	}
	runs := runsvc.NewService(pool, jobs, d)
	steps := []dag.Step{{Name: "split", Run: dag.Executor{Handler: "noop"}}}
	var parts []string
	for i := range 1000 {
		n := fmt.Sprintf("part-%04d", i)
		parts = append(parts, n)
		steps = append(steps, dag.Step{Name: n, Needs: []string{"split"}, Run: dag.Executor{Handler: "noop"}})
	}
	steps = append(steps, dag.Step{Name: "merge", Needs: parts, Run: dag.Executor{Handler: "noop"}})
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "fanout", Namespace: "wide"},
		Spec: dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("@yearly")}, Steps: steps}}, ""); err != nil {
		b.Fatal(err)
	}
	r, err := runs.Trigger(ctx, job.Anonymous, job.Ref{Namespace: "wide", Name: "fanout"}, "", false)
	if err != nil {
		b.Fatal(err)
	}
	// A 10,000-item fan-out: a root step with for_each expands when its
	// run is written (no worker needed), its items waiting to run.
	items := make([]string, 10_000)
	for i := range items {
		items[i] = fmt.Sprint(i)
	}
	def, _ := json.Marshal(strings.Join(items, ","))
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "foreach", Namespace: "wide"},
		Spec: dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("@yearly")}, Params: map[string]dag.Param{"items": {Type: "string", Default: dag.Payload(def)}},
			Steps: []dag.Step{{Name: "each", ForEach: "${{ params.items.split(',') }}", MaxParallel: 10, Run: dag.Executor{Handler: "noop"}}}}}, ""); err != nil {
		b.Fatal(err)
	}
	fan, err := runs.Trigger(ctx, job.Anonymous, job.Ref{Namespace: "wide", Name: "foreach"}, "", false)
	if err != nil {
		b.Fatal(err)
	}
	apiHandler := api.NewHandler(api.Services{Jobs: jobs, Runs: runs, State: pool, Auth: api.NoAuth{}}, nil)
	ui, err := webui.New(webui.Config{API: apiHandler, AuthOff: true})
	if err != nil {
		b.Fatal(err)
	}
	get := func(b *testing.B, path string) int {
		rec := httptest.NewRecorder()
		ui.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK {
			b.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body.String()[:min(rec.Body.Len(), 300)])
		}
		return rec.Body.Len()
	}
	deep := "/jobs?page=" + store.EncodePageToken(map[string]any{"n": "job-0090000", "i": uuid.Nil})
	for _, c := range []struct{ name, path string }{
		{"jobs-first-page", "/jobs"},
		{"jobs-deep-page", deep},
		{"jobs-search", "/jobs?q=0099"},
		{"run-1000-tasks", "/runs/" + r.ID.String()},
		{"run-10000-items", "/runs/" + fan.ID.String()},
		{"run-10000-items-listed", "/runs/" + fan.ID.String() + "?items=each&from=9000"},
	} {
		b.Run(c.name, func(b *testing.B) {
			size := get(b, c.path) // warm: prepared statements, templates
			b.ResetTimer()
			for range b.N {
				get(b, c.path)
			}
			b.ReportMetric(float64(size)/1024, "page-KiB")
		})
	}

	b.Run("live-100-viewers", func(b *testing.B) {
		srv := httptest.NewServer(ui)
		defer srv.Close()
		const viewers = 100
		var wg sync.WaitGroup
		got := make(chan string, viewers*4)
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		for range viewers {
			req, _ := http.NewRequestWithContext(cctx, http.MethodGet, srv.URL+"/runs/"+r.ID.String()+"/events", nil)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer res.Body.Close()
				sc := bufio.NewScanner(res.Body)
				sc.Buffer(make([]byte, 1<<20), 1<<20)
				first := true
				for sc.Scan() {
					line := sc.Text()
					if strings.HasPrefix(line, "data: ") {
						if first { // the whole state on connect
							first = false
							continue
						}
						got <- line
					}
				}
			}()
		}
		time.Sleep(time.Second) // every viewer connected and had its first state
		var task uuid.UUID
		if err := pool.QueryRow(ctx, "SELECT id FROM tasks WHERE run_id = $1 AND step = 'part-0500'", r.ID).Scan(&task); err != nil {
			b.Fatal(err)
		}
		var worst time.Duration
		b.ResetTimer()
		for range b.N {
			start := time.Now()
			// Flip the task between queued and running: each flip is a change.
			if _, err := pool.Exec(ctx, "UPDATE tasks SET status = CASE status WHEN 'running' THEN 'queued' ELSE 'running' END WHERE id = $1", task); err != nil {
				b.Fatal(err)
			}
			for range viewers {
				select {
				case <-got:
				case <-time.After(10 * time.Second):
					b.Fatal("a viewer did not get the change within 10 s")
				}
			}
			worst = max(worst, time.Since(start))
		}
		b.StopTimer()
		b.ReportMetric(float64(worst.Milliseconds()), "worst-ms-to-all")
		// CPU of this process (the server: the viewers only read) while
		// 100 viewers watch a run that does not change.
		var before, after syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
		idle := 5 * time.Second
		time.Sleep(idle)
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
		cpu := time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) * time.Nanosecond
		b.ReportMetric(100*cpu.Seconds()/idle.Seconds(), "%cpu-watching")
		cancel()
		wg.Wait()
	})
}

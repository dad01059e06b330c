package worker_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/engine/worker"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
)

// An answer the database cannot store as it is (cut in the middle of a
// character by the excerpt's limit, with a NUL and bytes that are not
// UTF-8) still ends its attempt: the excerpt is stored made valid.
// Before, the report failed for good and the run stayed running.
func TestOutputThatIsNotTextEndsTheAttempt(t *testing.T) {
	t.Parallel()
	body := "x\x00\xff\xfe" + strings.Repeat("€", 5000) // the last 8 KiB start inside a "€"
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(body)) }))
	defer sink.Close()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	enginetest.StartWorkers(t, worker.Config{StatePool: pool, Queues: map[string]int{"default": 2},
		AllowEgress: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	enginetest.StartNode(t, pool)
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	now, err := jobs.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, url := range []string{sink.URL + "/long", sink.URL + "/short"} {
		if strings.HasSuffix(url, "short") {
			body = "a\x00b\xffc" // short: kept whole, made valid
		}
		name := url[strings.LastIndexByte(url, '/')+1:]
		if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: name}, Spec: dag.JobSpec{
			Schedule: schedule.Spec{At: now.Format(time.RFC3339)},
			Run:      &dag.Executor{HTTP: &dag.HTTPExecutor{URL: url, Method: "GET"}},
		}}, ""); err != nil {
			t.Fatal(err)
		}
		var status, output string
		enginetest.WaitFor(t, 30*time.Second, name+": the run finishes", func() bool {
			_ = pool.QueryRow(ctx, `SELECT r.status, COALESCE(a.output, '') FROM runs AS r JOIN jobs AS j ON j.id = r.job_id
				JOIN tasks AS t ON t.run_id = r.id LEFT JOIN attempts AS a ON a.task_id = t.id WHERE j.name = $1`, name).Scan(&status, &output)
			return status == "succeeded"
		})
		if !utf8.ValidString(output) || strings.ContainsRune(output, 0) || len(output) > executor.MaxOutput {
			t.Errorf("%s: output of %d bytes, valid UTF-8 %v", name, len(output), utf8.ValidString(output))
		}
		if name == "short" && output != "a\uFFFDb\uFFFDc" {
			t.Errorf("short: output %q, want the bad bytes replaced", output)
		}
	}
}

package run_test

import (
	"context"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/engine/worker"
	"github.com/orrery-dev/orrery/examples"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/event"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/internal/store"
)

// The example pipelines that `orrery dev` loads run to success: their
// webhooks answered by a test server, their commands run, their Go handler
// registered.
func TestExamplesRun(t *testing.T) {
	pool := pgtest.Pool(t)
	ctx := context.Background()
	var mu sync.Mutex
	var hooks []string
	hookSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		hooks = append(hooks, r.URL.Path+" "+r.Header.Get("Authorization")+" "+string(body))
		mu.Unlock()
	}))
	defer hookSrv.Close()
	t.Setenv("HOOK_TOKEN", "Bearer test-token")
	enginetest.StartWorkers(t, worker.Config{StatePool: pool, Queues: map[string]int{"default": 4, "etl": 4, "warehouse": 2},
		AllowCommand: []string{"/bin/*"},
		AllowEgress:  []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, // the hook server
		Secrets:      executor.SecretPolicy{Env: map[string][]string{"default/analytics": {"HOOK_TOKEN"}}},
		Handlers:     map[string]executor.HandlerFunc{"load-warehouse": func(context.Context, executor.Call) error { return nil }}})
	enginetest.StartNode(t, pool)
	// The remote steps (run: {worker: invoice}): a remote worker that
	// succeeds, through a gateway as WorkerService's would.
	gw := enginetest.StartGateway(t, pool)
	remoteCtx, stopRemote := context.WithCancel(ctx)
	remoteDone := make(chan struct{})
	defer func() { stopRemote(); <-remoteDone }()
	go func() {
		defer close(remoteDone)
		w := run.RemoteWorker{ID: uuid.New(), Name: "examples", Tenant: job.DefaultTenant, Queues: map[string]int{"default": 4}, Types: []string{"invoice"}}
		for remoteCtx.Err() == nil {
			atts, err := gw.Claim(remoteCtx, w, 4, time.Second, 30*time.Second)
			if err != nil {
				continue
			}
			var ends []run.Report // the claim's ends in one report, one transaction
			for _, a := range atts {
				ends = append(ends, run.Report{TaskID: a.Call.TaskID, FencingToken: a.Call.FencingToken,
					Result: executor.Result{OK: true, Output: `{"invoice":"INV-1"}`}})
			}
			if len(ends) > 0 {
				_, _ = gw.Report(remoteCtx, w, ends)
			}
		}
	}()
	jobs, _ := job.New(ctx, pool, nil)
	d, _ := dispatch.New()
	runs := run.NewService(pool, jobs, d)

	names, _ := fs.Glob(examples.FS(), "*.yaml")
	for _, name := range names {
		data, _ := examples.FS().ReadFile(name)
		docs, es := dag.Decode(name, data)
		if len(es) > 0 {
			t.Fatal(es)
		}
		for _, doc := range docs {
			r := doc.Resource
			for i := range r.Spec.Steps {
				if h := r.Spec.Steps[i].Run.HTTP; h != nil {
					h.URL = strings.Replace(h.URL, "http://127.0.0.1:8080/dev/sink", hookSrv.URL, 1)
				}
			}
			if _, err := jobs.Create(ctx, job.Anonymous, r, ""); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			ref := job.Ref{Namespace: r.Metadata.Namespace, Name: r.Metadata.Name}
			var started *run.Run
			if a := r.Spec.Schedule.After; a != nil && len(r.Spec.Schedule.Cron) == 0 && r.Spec.Schedule.At == "" {
				// A job after another (defined by an earlier file) runs as it
				// would: when a run of that one ends.
				if _, err := runs.Trigger(ctx, job.Anonymous, job.Ref{Namespace: a.Namespace, Name: a.Job}, "", true); err != nil {
					t.Fatal(err)
				}
				enginetest.WaitFor(t, 60*time.Second, name+" started by "+a.Job+"'s end", func() bool {
					var id uuid.UUID
					if pool.QueryRow(ctx, "SELECT r.id FROM runs AS r JOIN jobs AS j ON j.id = r.job_id WHERE j.namespace = $1 AND j.name = $2 AND r.trigger = 'upstream'",
						ref.Namespace, ref.Name).Scan(&id) != nil {
						return false
					}
					started = &run.Run{ID: id}
					return true
				})
			} else if e := r.Spec.Schedule.Event; e != nil && len(r.Spec.Schedule.Cron) == 0 && r.Spec.Schedule.At == "" {
				// A job started by events runs as it would: when one is
				// published (of data its filter takes).
				if _, err := event.Publish(ctx, pool, job.DefaultTenant, jobs.Shards(), event.Event{Type: e.Type, ID: name,
					Data: []byte(`{"order": "1001", "amount": 150, "repo": "web", "sha": "a1"}`)}); err != nil {
					t.Fatal(err)
				}
				enginetest.WaitFor(t, 60*time.Second, name+" started by its event", func() bool {
					var id uuid.UUID
					if pool.QueryRow(ctx, "SELECT r.id FROM runs AS r JOIN jobs AS j ON j.id = r.job_id WHERE j.namespace = $1 AND j.name = $2 AND r.trigger = 'event'",
						ref.Namespace, ref.Name).Scan(&id) != nil {
						return false
					}
					started = &run.Run{ID: id}
					return true
				})
				if r.Spec.Debounce != nil {
					// Its period passes (not waited for here): the
					// scheduler starts it.
					if err := store.Retry(ctx, func() error {
						_, err := pool.Exec(ctx, "UPDATE runs SET debounce_at = now() WHERE id = $1 AND debounce_at IS NOT NULL", started.ID)
						return err
					}); err != nil {
						t.Fatal(err)
					}
				}
			} else {
				var err error
				if started, err = runs.Trigger(ctx, job.Anonymous, ref, "", true); err != nil {
					t.Fatal(err)
				}
			}
			for _, st := range r.Spec.Steps {
				if st.Approval == nil {
					continue
				}
				// A step that asks for an approval is approved, as its
				// deciders would.
				enginetest.WaitFor(t, 60*time.Second, name+" asks for its approval", func() bool {
					return enginetest.Int(t, pool, "SELECT count(*) FROM parked_steps WHERE run_id = $1 AND kind = 'approval'", started.ID) == 1
				})
				if _, err := runs.Decide(ctx, job.Anonymous, run.Decision{Run: started.ID, Step: st.Name, Approve: true, Comment: "examples"}); err != nil {
					t.Fatal(err)
				}
			}
			var status string
			enginetest.WaitFor(t, 60*time.Second, name+" finishes", func() bool {
				_ = pool.QueryRow(ctx, "SELECT status FROM runs WHERE id = $1", started.ID).Scan(&status)
				return status != "pending" && status != "running" && status != "queued"
			})
			if status != "succeeded" {
				d, _ := runs.Get(ctx, job.Anonymous, started.ID, run.ItemsPage{})
				for _, tk := range d.Tasks {
					t.Logf("%s: %s %s", tk.Step, tk.Status, tk.LastError)
				}
				t.Fatalf("%s/%s: run %s", r.Metadata.Namespace, r.Metadata.Name, status)
			}
		}
	}
	mu.Lock()
	if !strings.Contains(strings.Join(hooks, "\n"), "/etl-done Bearer test-token") {
		t.Fatalf("the report webhook did not get its resolved secret header: %v", hooks)
	}
	if !strings.Contains(strings.Join(hooks, "\n"), `"job":"daily-extract"`) ||
		!strings.Contains(strings.Join(hooks, "\n"), `"files":["eu-orders.csv","eu-refunds.csv"],"region":"eu"}`) {
		t.Fatalf("daily-extract's publish did not get its evaluated payload: %v", hooks)
	}
	published := len(hooks)
	mu.Unlock()

	// The pipeline with --param dry_run=true: its last step is skipped.
	dry, err := runs.TriggerWith(ctx, job.Anonymous, job.Ref{Namespace: "analytics", Name: "daily-extract"},
		run.TriggerOptions{IgnoreOverlap: true, ParamTexts: map[string]string{"dry_run": "true"}})
	if err != nil {
		t.Fatal(err)
	}
	var status string
	enginetest.WaitFor(t, 60*time.Second, "the dry run finishes", func() bool {
		_ = pool.QueryRow(ctx, "SELECT status FROM runs WHERE id = $1", dry.ID).Scan(&status)
		return status != "pending" && status != "running"
	})
	var publish string
	_ = pool.QueryRow(ctx, "SELECT status FROM tasks WHERE run_id = $1 AND step = 'publish'", dry.ID).Scan(&publish)
	mu.Lock()
	defer mu.Unlock()
	if status != "succeeded" || publish != "skipped" || len(hooks) != published {
		t.Fatalf("dry run: run %s, publish %s, %d webhook calls (before it %d)", status, publish, len(hooks), published)
	}
}

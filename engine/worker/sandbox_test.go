package worker_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/engine/executor"
	"github.com/orrery-dev/orrery/engine/worker"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
)

// The worker's Config carries its sandbox to the executors: a webhook to
// a loopback sink is refused, for good, unless AllowEgress names it, and
// its secret header resolves only where Secrets lets its namespace read it.
// No t.Parallel: t.Setenv.
func TestWorkerSandbox(t *testing.T) {
	t.Setenv("ORRERY_TEST_WORKER_TOKEN", "Bearer worker-token")
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	token := executor.SecretPolicy{Env: map[string][]string{"default/analytics": {"ORRERY_TEST_WORKER_TOKEN"}}}
	tests := []struct {
		name      string
		cfg       worker.Config
		status    string // of the run
		wantError string // in the attempt's error
		wantAuth  string // the sink's Authorization; "" means no call
	}{
		{name: "defaults refuse loopback", cfg: worker.Config{Secrets: token}, status: "failed",
			wantError: "egress to 127.0.0.1 refused: loopback address (this worker's egress policy; allow it with --allow-egress 127.0.0.1/32)"},
		{name: "defaults refuse the secret", cfg: worker.Config{AllowEgress: loopback}, status: "failed",
			wantError: `secret secret://env/ORRERY_TEST_WORKER_TOKEN: namespace "default/analytics" may not read this environment variable on this worker (--secret-env)`},
		{name: "allowed", cfg: worker.Config{AllowEgress: loopback, Secrets: token}, status: "succeeded", wantAuth: "Bearer worker-token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			auth := make(chan string, 8)
			sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { auth <- r.Header.Get("Authorization") }))
			defer sink.Close()
			pool := pgtest.Pool(t)
			ctx := context.Background()
			cfg := tt.cfg
			cfg.StatePool, cfg.Queues = pool, map[string]int{"default": 2}
			enginetest.StartWorkers(t, cfg)
			enginetest.StartNode(t, pool)
			jobs, err := job.New(ctx, pool, nil)
			if err != nil {
				t.Fatal(err)
			}
			now, err := jobs.Now(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_, err = jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "hook", Namespace: "analytics"}, Spec: dag.JobSpec{
				Schedule: schedule.Spec{At: now.Format(time.RFC3339)},
				Run: &dag.Executor{HTTP: &dag.HTTPExecutor{URL: sink.URL + "/hook", Method: "POST",
					Headers: map[string]string{"Authorization": "secret://env/ORRERY_TEST_WORKER_TOKEN"}}},
			}}, "")
			if err != nil {
				t.Fatal(err)
			}
			var status string
			enginetest.WaitFor(t, 30*time.Second, "the run finishes", func() bool {
				_ = pool.QueryRow(ctx, "SELECT status FROM runs").Scan(&status)
				return status != "" && status != "pending" && status != "running"
			})
			if status != tt.status {
				t.Fatalf("run %s, want %s", status, tt.status)
			}
			if tt.wantError != "" {
				var attempts int
				var msg, class string
				if err := pool.QueryRow(ctx, "SELECT count(*), max(error), max(failure_class) FROM attempts").Scan(&attempts, &msg, &class); err != nil {
					t.Fatal(err)
				}
				// Refused for good: one attempt, not retried.
				if attempts != 1 || !strings.Contains(msg, tt.wantError) || class != "user" {
					t.Errorf("%d attempt(s), error %q (%s), want one attempt failing for good with %q", attempts, msg, class, tt.wantError)
				}
				if strings.Contains(msg, "worker-token") {
					t.Errorf("the attempt's error carries the secret: %q", msg)
				}
			}
			select {
			case got := <-auth:
				if got != tt.wantAuth {
					t.Errorf("the sink got Authorization %q, want %q", got, tt.wantAuth)
				}
			default:
				if tt.wantAuth != "" {
					t.Error("the sink got no call")
				}
			}
		})
	}
}

func TestNewRefusesBadSandbox(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	for name, cfg := range map[string]worker.Config{
		"relative command pattern":  {AllowCommand: []string{"bin/*"}},
		"malformed command pattern": {AllowCommand: []string{"/bin/["}},
		"relative secret folder":    {Secrets: executor.SecretPolicy{Dirs: map[string][]string{"etl": {"secrets"}}}},
	} {
		cfg.StatePool, cfg.Queues = pool, map[string]int{"default": 1}
		if _, err := worker.New(cfg); err == nil {
			t.Errorf("%s: New() = nil error", name)
		}
	}
}

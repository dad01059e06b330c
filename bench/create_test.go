package bench

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
)

var (
	runID   = time.Now().UnixNano()
	created atomic.Int64 // names stay unique across the benchmark's runs
)

// withKey sends the benchmark's API key on every request.
type withKey struct{ next http.RoundTripper }

func (w withKey) RoundTrip(r *http.Request) (*http.Response, error) {
	if apiKey == "" {
		return w.next.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+apiKey)
	return w.next.RoundTrip(r)
}

// BenchmarkCreateJob creates jobs through the Connect API with N concurrent
// clients and reports creations per second and latency percentiles. Each
// creation (its job, version, audit and namespace rows) is committed
// (fsync) before the answer, together with the creations that arrived
// while the previous batch was written (group commit).
func BenchmarkCreateJob(b *testing.B) {
	for _, clients := range []int{1, 8, 32, 64} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			transport := &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}
			c := orreryv1connect.NewJobServiceClient(&http.Client{Transport: withKey{transport}}, serverURL)
			ctx := context.Background()
			var next, failed atomic.Int64
			var firstErr error
			var errOnce sync.Once
			latencies := make([]time.Duration, b.N)
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for range clients {
				wg.Go(func() {
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) || failed.Load() > 0 {
							return
						}
						req := &orreryv1.CreateJobRequest{
							Metadata: &orreryv1.JobMetadata{Name: fmt.Sprintf("bench-%d-%d", runID, created.Add(1)), Namespace: "bench", Labels: map[string]string{"team": "bench"}},
							Spec: &orreryv1.JobSpec{
								Schedule: &orreryv1.Schedule{Cron: "*/5 * * * *", Timezone: "Europe/London"},
								Run:      &orreryv1.Executor{Kind: &orreryv1.Executor_Http{Http: &orreryv1.HttpExecutor{Url: "http://127.0.0.1:9/hook"}}},
							},
						}
						t0 := time.Now()
						if _, err := c.CreateJob(ctx, connect.NewRequest(req)); err != nil {
							failed.Add(1)
							errOnce.Do(func() { firstErr = err })
							return
						}
						latencies[i] = time.Since(t0)
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d creates failed (the clients stopped at the first failure; %d of %d were started); first: %v", n, min(next.Load(), int64(b.N)), b.N, firstErr)
			}
			slices.Sort(latencies)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "creates/s")
			b.ReportMetric(float64(latencies[b.N/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(latencies[b.N*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/google/uuid"
	"github.com/orrery-dev/orrery/api"
	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/job"
	runpkg "github.com/orrery-dev/orrery/internal/run"
)

// BenchmarkEvents publishes events through the API (Connect, a real HTTP
// server in this process) at a paced rate (ORRERY_BENCH_EVENT_RATE a
// second, default 1,000, for 10 s), each twice (a provider's retry: the
// second a duplicate), to a tenant with 20 jobs of schedule.event of which
// one names the events' type (its filter reads the data); a scheduler node
// and a worker pool of 200 run the runs. It reports the events accepted a
// second and the time from an event's receipt to its run's step started
// (the database's clock at both ends).
func BenchmarkEvents(b *testing.B) {
	for range b.N {
		pool := freshDB(b)
		eng := startEngine(b, pool, 200)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		jobs, err := job.New(ctx, pool, nil)
		if err != nil {
			b.Fatal(err)
		}
		for i := range 20 {
			typ := fmt.Sprintf("other.%d", i)
			if i == 0 {
				typ = "order.paid"
			}
			if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: fmt.Sprintf("on-event-%d", i)}, Spec: dag.JobSpec{
				Schedule: schedule.Spec{Event: &schedule.Event{Type: typ, Filter: "${{ event.data.amount >= 0 }}"}}, Overlap: dag.OverlapAllow,
				Run: &dag.Executor{Handler: "noop"}, Payload: dag.Payload(`{"order": "${{ event.data.order }}"}`)}}, ""); err != nil {
				b.Fatal(err)
			}
		}
		// ORRERY_BENCH_EVENT_NOISY=N: before the paced events, another
		// tenant's flood of N events lands at once (a job of its own starts
		// a run for each); the figures are the paced (quiet) tenant's.
		if noisy := envInt(b, "ORRERY_BENCH_EVENT_NOISY", 0); noisy > 0 {
			tenant := uuid.Must(uuid.NewV7())
			if _, err := pool.Exec(ctx, "INSERT INTO tenants (id, name) VALUES ($1, 'noisy')", tenant); err != nil {
				b.Fatal(err)
			}
			if _, err := jobs.Create(ctx, job.Actor{Tenant: tenant, Name: "bench"}, dag.Resource{Metadata: dag.Metadata{Name: "noisy"}, Spec: dag.JobSpec{
				Schedule: schedule.Spec{Event: &schedule.Event{Type: "order.paid"}}, Overlap: dag.OverlapAllow, Run: &dag.Executor{Handler: "noop"}}}, ""); err != nil {
				b.Fatal(err)
			}
			if _, err := pool.Exec(ctx, `INSERT INTO events (id, tenant_id, event_key, type, data, time, received_at, shard)
				SELECT gen_random_uuid(), $1, 'n-' || i, 'order.paid', '{"amount": 1}', now(), now() - ($2 - i) * interval '10 microseconds', i % $3
				FROM generate_series(1, $2) AS i`, // received one after the other, as published ones are
				tenant, noisy, jobs.Shards()); err != nil {
				b.Fatal(err)
			}
			defer func() {
				if n := eng.handled.Load(); n < int64(noisy) {
					b.Logf("the flood's runs were still draining: %d steps ran", n)
				}
			}()
		}
		// ORRERY_BENCH_WAITS=N: before the paced events, N runs park a
		// step waiting for order.shipped (an hour's timeout): publishing
		// order.paid must not pay for them. ORRERY_BENCH_WAITS_TYPE=
		// order.paid makes them wait for the events published instead,
		// with a match none of them meets: each event asks each wait.
		if waits := envInt(b, "ORRERY_BENCH_WAITS", 0); waits > 0 {
			typ := os.Getenv("ORRERY_BENCH_WAITS_TYPE")
			if typ == "" {
				typ = "order.shipped"
			}
			w, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "waiter"}, Spec: dag.JobSpec{
				Schedule: schedule.Spec{Cron: schedule.Crons("0 0 1 1 *")}, Overlap: dag.OverlapAllow,
				Steps:  []dag.Step{{Name: "shipped", Wait: &dag.Wait{Event: typ, Match: "${{ event.data.order == params.order }}", Timeout: dag.D(time.Hour)}}},
				Params: map[string]dag.Param{"order": {Type: "string", Default: dag.Payload(`"x"`)}}}}, "")
			if err != nil {
				b.Fatal(err)
			}
			parkRuns(b, pool, eng, w, waits, nil)
		}
		srv, err := api.Listen("127.0.0.1:0", api.NewHandler(api.Services{Jobs: jobs, Runs: runpkg.NewService(pool, jobs, eng.dispatcher), State: pool,
			Auth: api.NoAuth{}}, eng.log))
		if err != nil {
			b.Fatal(err)
		}
		go func() { _ = srv.Serve(ctx) }()
		client := orreryv1connect.NewEventServiceClient(&http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}, "http://"+srv.Addr())

		rate := envInt(b, "ORRERY_BENCH_EVENT_RATE", 1000)
		const publishers, seconds = 20, 10
		total := rate * seconds
		var sent, dupes atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for p := range publishers {
			wg.Go(func() {
				every := time.Second * publishers / time.Duration(rate)
				tick := time.NewTicker(every)
				defer tick.Stop()
				for n := p; n < total; n += publishers {
					<-tick.C
					data, _ := structpb.NewStruct(map[string]any{"order": fmt.Sprint(n), "amount": float64(n % 500)})
					for range 2 {
						res, err := client.Publish(ctx, connect.NewRequest(&orreryv1.PublishRequest{Type: "order.paid", Id: fmt.Sprintf("e-%d", n), Data: data}))
						if err != nil {
							eng.fail(fmt.Sprintf("publish e-%d: %v", n, err))
							return
						}
						if res.Msg.GetDuplicate() {
							dupes.Add(1)
						}
					}
					sent.Add(1)
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		eng.check(b)
		want := int64(total + envInt(b, "ORRERY_BENCH_EVENT_NOISY", 0))
		deadline := time.Now().Add(3 * time.Minute)
		for eng.handled.Load() < want && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		eng.check(b)
		if got := eng.handled.Load(); got != want || dupes.Load() != int64(total) {
			b.Fatalf("%d steps ran and %d duplicates answered for %d events published twice (and the flood's)", got, dupes.Load(), total)
		}
		var p50, p99, maxLag float64
		if err := pool.QueryRow(ctx, `SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY s), percentile_cont(0.99) WITHIN GROUP (ORDER BY s), max(s)
			FROM (SELECT extract(epoch FROM a.started_at - e.received_at) AS s
			      FROM events e JOIN runs r ON r.event_id = e.id JOIN tasks t ON t.run_id = r.id JOIN attempts a ON a.task_id = t.id AND a.number = 1
			      WHERE e.tenant_id = $1) AS x`, job.DefaultTenant).
			Scan(&p50, &p99, &maxLag); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(sent.Load())/elapsed.Seconds(), "events/s")
		b.ReportMetric(p50*1000, "p50-start-ms")
		b.ReportMetric(p99*1000, "p99-start-ms")
		b.ReportMetric(maxLag*1000, "max-start-ms")
	}
}

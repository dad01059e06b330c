package metrics

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/store"
)

// WatchDatabase adds the gauges read from the databases at each scrape:
// orrery_queue_depth and orrery_queue_oldest_ready_seconds (River's ready
// jobs per queue, one query of each queue database for both) and
// orrery_admission_waiting and orrery_admission_oldest_waiting_seconds
// (tasks waiting for admission per queue, in the state database: the
// backlog River does not hold, a queue no worker serves included) and
// orrery_dead_letters (per namespace, in the state database) and
// orrery_tenant_allocated (per tenant of the top allocationTenants, and
// resource) and orrery_flow_key_waiting (the busiestKeys keys the most
// wait for: a series each, not one a key).
func (m *Metrics) WatchDatabase(state *pgxpool.Pool, queues dispatch.QueueDBs) {
	if m == nil {
		return
	}
	m.Register(&queueGauges{queues: queues,
		depth:  prometheus.NewDesc("orrery_queue_depth", "Tasks handed to River and ready, not yet fetched by a worker, per queue.", []string{"queue"}, nil),
		oldest: prometheus.NewDesc("orrery_queue_oldest_ready_seconds", "How long the oldest ready task of each queue has waited for a worker.", []string{"queue"}, nil),
	})
	m.Register(&waitingGauges{state: state,
		waiting: prometheus.NewDesc("orrery_admission_waiting", "Tasks released and waiting for admission (not yet handed to River), per queue.", []string{"queue"}, nil),
		oldest:  prometheus.NewDesc("orrery_admission_oldest_waiting_seconds", "How long the oldest task waiting for admission has waited, per queue.", []string{"queue"}, nil),
	})
	m.Register(NewGaugeFunc("orrery_dead_letters", "Dead-lettered tasks waiting for a replay, per namespace.", "namespace",
		func(ctx context.Context) (map[string]float64, error) {
			rows, err := store.New(state).DeadLettersByNamespace(ctx)
			out := make(map[string]float64, len(rows))
			for _, r := range rows {
				out[r.Namespace] = float64(r.Dead)
			}
			return out, err
		}))
	m.Register(&allocationGauges{state: state,
		allocated: prometheus.NewDesc("orrery_tenant_allocated", "What the tasks holding slots ask for together, per tenant and resource (cpu in cores, memory in bytes, gpu), for the "+
			"20 tenants holding the most (by gpu, then cpu, then memory); the others together as tenant=\"(others)\".", []string{"tenant", "resource"}, nil),
	})
	m.Register(&keyGauges{state: state,
		waiting: prometheus.NewDesc("orrery_flow_key_waiting", fmt.Sprintf("Tasks (or runs) waiting for a key, for the %d keys the most wait for, of every tenant: "+
			"kind concurrency (a step's key), rate (a step's rate limit) or job (a job's key: \"JOB VALUE\").", busiestKeys), []string{"kind", "tenant", "key"}, nil),
		oldest: prometheus.NewDesc("orrery_flow_key_oldest_waiting_seconds", "How long the oldest task (or run) waiting for each of those keys has waited.", []string{"kind", "tenant", "key"}, nil),
		keys:   prometheus.NewDesc("orrery_flow_keys_waiting", "Keys with a task (or run) waiting for them, per kind.", []string{"kind"}, nil),
	})
	m.Register(NewGaugeFunc("orrery_alerts_open", "Alerts raised and not resolved, per kind.", "kind",
		func(ctx context.Context) (map[string]float64, error) {
			rows, err := store.New(state).OpenAlertCounts(ctx)
			out := map[string]float64{"missed": 0, "stuck": 0, "failure": 0, "dead_letter": 0, "paused": 0}
			for _, r := range rows {
				out[r.Kind] += float64(r.Open)
			}
			return out, err
		}))
}

// queueGauges reads River's queues once per scrape for both queue gauges.
type queueGauges struct {
	queues        dispatch.QueueDBs
	depth, oldest *prometheus.Desc
}

func (g *queueGauges) Describe(ch chan<- *prometheus.Desc) { ch <- g.depth; ch <- g.oldest }

func (g *queueGauges) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	ds, err := dispatch.QueueDepthsOf(ctx, g.queues)
	if err != nil && len(ds) == 0 {
		ch <- prometheus.NewInvalidMetric(g.depth, err)
		return
	}
	// Some queue database is down: the others' queues still show (the
	// relay logs the one that is down).
	for q, d := range ds {
		ch <- prometheus.MustNewConstMetric(g.depth, prometheus.GaugeValue, float64(d.Ready), q)
		ch <- prometheus.MustNewConstMetric(g.oldest, prometheus.GaugeValue, d.OldestSeconds, q)
	}
}

// waitingGauges reads the tasks waiting for admission once per scrape for
// both admission gauges. A queue with nothing waiting has no series.
type waitingGauges struct {
	state           *pgxpool.Pool
	waiting, oldest *prometheus.Desc
}

func (g *waitingGauges) Describe(ch chan<- *prometheus.Desc) { ch <- g.waiting; ch <- g.oldest }

func (g *waitingGauges) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	rows, err := store.New(g.state).AdmissionWaiting(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(g.waiting, err)
		return
	}
	for _, r := range rows {
		ch <- prometheus.MustNewConstMetric(g.waiting, prometheus.GaugeValue, float64(r.Waiting), r.Queue)
		ch <- prometheus.MustNewConstMetric(g.oldest, prometheus.GaugeValue, r.OldestSeconds, r.Queue)
	}
}

// allocationTenants bounds the tenants orrery_tenant_allocated names.
const allocationTenants = 20

// allocationGauges reads what each tenant's tasks in flight ask for at
// each scrape.
type allocationGauges struct {
	state     *pgxpool.Pool
	allocated *prometheus.Desc
}

func (g *allocationGauges) Describe(ch chan<- *prometheus.Desc) { ch <- g.allocated }

func (g *allocationGauges) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	rows, err := store.New(g.state).TenantAllocations(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(g.allocated, err)
		return
	}
	type alloc struct{ cpu, memory, gpu int64 }
	var others alloc
	emit := func(tenant string, a alloc) {
		ch <- prometheus.MustNewConstMetric(g.allocated, prometheus.GaugeValue, float64(a.cpu)/1000, tenant, "cpu")
		ch <- prometheus.MustNewConstMetric(g.allocated, prometheus.GaugeValue, float64(a.memory), tenant, "memory")
		ch <- prometheus.MustNewConstMetric(g.allocated, prometheus.GaugeValue, float64(a.gpu), tenant, "gpu")
	}
	for i, r := range rows {
		if i < allocationTenants {
			emit(r.Name, alloc{r.Cpu, r.Memory, r.Gpu})
			continue
		}
		others = alloc{others.cpu + r.Cpu, others.memory + r.Memory, others.gpu + r.Gpu}
	}
	if len(rows) > allocationTenants {
		emit("(others)", others)
	}
}

// busiestKeys bounds the keys orrery_flow_key_waiting names.
const busiestKeys = 10

// keyGauges reads the busiest keys of flow control once per scrape.
type keyGauges struct {
	state                 *pgxpool.Pool
	waiting, oldest, keys *prometheus.Desc
}

func (g *keyGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.waiting
	ch <- g.oldest
	ch <- g.keys
}

func (g *keyGauges) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	rows, err := store.New(g.state).BusiestKeys(ctx, store.BusiestKeysParams{AllTenants: true, N: busiestKeys})
	if err != nil {
		ch <- prometheus.NewInvalidMetric(g.waiting, err)
		return
	}
	kinds := map[string]int64{"concurrency": 0, "rate": 0, "job": 0}
	for _, r := range rows {
		ch <- prometheus.MustNewConstMetric(g.waiting, prometheus.GaugeValue, float64(r.Waiting), r.Kind, r.Tenant, r.Key)
		ch <- prometheus.MustNewConstMetric(g.oldest, prometheus.GaugeValue, r.OldestSeconds, r.Kind, r.Tenant, r.Key)
		kinds[r.Kind] = r.KeysWaiting
	}
	for k, n := range kinds {
		ch <- prometheus.MustNewConstMetric(g.keys, prometheus.GaugeValue, float64(n), k)
	}
}

// Package metrics holds the Prometheus metrics of one Orrery process and
// serves them on /metrics. Components take a *Metrics (nil: they measure
// nothing) and record through its methods, each after the transaction it
// describes committed, so a retried transaction counts once.
//
// Labels are bounded: outcome, reason, exit reason, queue, namespace and
// node names; never a job, run or task id.
package metrics

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are one process's metrics, on their own registry.
type Metrics struct {
	reg *prometheus.Registry

	scheduleLag      prometheus.Histogram
	runsFinished     *prometheus.CounterVec
	instantsSkipped  *prometheus.CounterVec
	attempts         *prometheus.CounterVec
	leaseExpirations prometheus.Counter
	shardsOwned      *prometheus.GaugeVec
	shardTakeovers   prometheus.Counter
	firingBatch      prometheus.Histogram
	alertsRaised     *prometheus.CounterVec
	notifications    *prometheus.CounterVec
	admissionWait    *prometheus.HistogramVec
}

// New makes the metrics, with the Go and process collectors.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		scheduleLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "orrery_schedule_lag_seconds",
			Help:    "From the fire time of a run the schedule fired (its instant plus jitter; trigger schedule, not catch-ups or backfills) to the start of its first attempt of a root step, on the database's clock.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}),
		runsFinished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orrery_runs_finished_total",
			Help: "Runs that reached a terminal status, by outcome (succeeded, failed, cancelled).",
		}, []string{"outcome"}),
		instantsSkipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orrery_instants_skipped_total",
			Help: "Scheduled instants that got no run, by reason (misfire, overlap, upstream).",
		}, []string{"reason"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orrery_attempts_total",
			Help: "Attempts whose report was accepted, by outcome (succeeded, failed) and exit reason.",
		}, []string{"outcome", "exit_reason"}),
		leaseExpirations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "orrery_lease_expirations_total",
			Help: "Running tasks whose lease lapsed and that the reaper failed or retried.",
		}),
		shardsOwned: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "orrery_shards_owned",
			Help: "Shards this scheduler node holds.",
		}, []string{"node"}),
		shardTakeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "orrery_shard_takeovers_total",
			Help: "Shards this node claimed (unowned, released, or lapsed).",
		}),
		firingBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "orrery_firing_batch_seconds",
			Help:    "One firing transaction: the due jobs of this node's shards made into runs.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
		alertsRaised: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orrery_alerts_raised_total",
			Help: "Alerts the watchdog raised, by kind (missed, stuck, failure, dead_letter); each cause once.",
		}, []string{"kind"}),
		notifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orrery_notification_deliveries_total",
			Help: "Webhook notification delivery attempts, by outcome (delivered, retry, failed).",
		}, []string{"outcome"}),
		admissionWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "orrery_admission_wait_seconds",
			Help:    "From a task becoming ready (released, or its retry backoff over) to its admission into its queue, by queue.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"queue"}),
	}
	m.reg.MustRegister(m.scheduleLag, m.admissionWait, m.alertsRaised, m.notifications, m.runsFinished, m.instantsSkipped, m.attempts, m.leaseExpirations,
		m.shardsOwned, m.shardTakeovers, m.firingBatch,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the metrics in Prometheus's text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, Timeout: 10 * time.Second})
}

// Register adds a collector (the database gauges) to the registry.
func (m *Metrics) Register(c prometheus.Collector) {
	if m != nil {
		m.reg.MustRegister(c)
	}
}

// AdmissionWait records how long admitted tasks of a queue waited for
// admission, in seconds on the database's clock.
func (m *Metrics) AdmissionWait(queue string, waited []float64) {
	if m == nil {
		return
	}
	o := m.admissionWait.WithLabelValues(queue)
	for _, w := range waited {
		o.Observe(max(w, 0))
	}
}

// ScheduleLag records a root step's first attempt starting lag after its
// run's fire time (instant plus jitter), for runs of trigger schedule.
func (m *Metrics) ScheduleLag(d time.Duration) {
	if m != nil {
		m.scheduleLag.Observe(d.Seconds())
	}
}

// RunFinished counts a run reaching a terminal status (run.Applier calls
// it once the transaction that ended the run commits).
func (m *Metrics) RunFinished(status string) {
	if m != nil {
		m.runsFinished.WithLabelValues(status).Inc()
	}
}

// InstantsSkipped counts instants that got no run.
func (m *Metrics) InstantsSkipped(reason string, n int) {
	if m != nil && n > 0 {
		m.instantsSkipped.WithLabelValues(reason).Add(float64(n))
	}
}

// Attempt counts an accepted attempt report.
func (m *Metrics) Attempt(outcome, exitReason string) {
	if m != nil {
		m.attempts.WithLabelValues(outcome, exitReason).Inc()
	}
}

// LeaseExpirations counts lapsed task leases the reaper handled.
func (m *Metrics) LeaseExpirations(n int) {
	if m != nil && n > 0 {
		m.leaseExpirations.Add(float64(n))
	}
}

// ShardsOwned sets how many shards node holds.
func (m *Metrics) ShardsOwned(node string, n int) {
	if m != nil {
		m.shardsOwned.WithLabelValues(node).Set(float64(n))
	}
}

// ShardTakeovers counts shards claimed.
func (m *Metrics) ShardTakeovers(n int) {
	if m != nil && n > 0 {
		m.shardTakeovers.Add(float64(n))
	}
}

// FiringBatch starts timing one firing transaction, on the monotonic
// clock (a measurement, never a scheduling decision: the firing path takes
// its time from the database); the returned func records it when the
// transaction took any job.
func (m *Metrics) FiringBatch() func(took bool) {
	start := time.Now()
	return func(took bool) {
		if m != nil && took {
			m.firingBatch.Observe(time.Since(start).Seconds())
		}
	}
}

// AlertsRaised counts raised alerts by kind.
func (m *Metrics) AlertsRaised(byKind map[string]int) {
	if m == nil {
		return
	}
	for kind, n := range byKind {
		m.alertsRaised.WithLabelValues(kind).Add(float64(n))
	}
}

// Delivery counts one notification delivery attempt by outcome.
func (m *Metrics) Delivery(outcome string) {
	if m != nil {
		m.notifications.WithLabelValues(outcome).Inc()
	}
}

// gaugeFunc is a collector that reads its values when scraped, bounded by
// a timeout: the database gauges.
type gaugeFunc struct {
	desc  *prometheus.Desc
	read  func(ctx context.Context) (map[string]float64, error)
	label string
}

// NewGaugeFunc makes a gauge with one label whose values read calls at
// each scrape (within 5 s); a failed read reports nothing for that scrape.
func NewGaugeFunc(name, help, label string, read func(ctx context.Context) (map[string]float64, error)) prometheus.Collector {
	return &gaugeFunc{desc: prometheus.NewDesc(name, help, []string{label}, nil), read: read, label: label}
}

func (g *gaugeFunc) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

// scrapeTimeout bounds one database read of a scrape.
const scrapeTimeout = 5 * time.Second

func (g *gaugeFunc) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	values, err := g.read(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(g.desc, err)
		return
	}
	for k, v := range values {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v, k)
	}
}

package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/internal/watchdog"
	"github.com/orrery-dev/orrery/shard"
)

// watchedSpec is noopSpec with alerts: missed after startWithin; its runs
// go to queue.
func watchedSpec(cron, queue string, startWithin time.Duration) dag.JobSpec {
	r := dag.Resource{Metadata: dag.Metadata{Name: "x"}, Spec: noopSpec(cron)}
	r.Spec.Alerts = &dag.Alerts{StartWithin: dag.D(startWithin)}
	r.Spec.Defaults.Queue = queue
	r.Normalize()
	return r.Spec
}

// BenchmarkWatchdogPass measures one watchdog pass over 64 shards (the dead
// man's switch probe per shard, the open watched runs, the finish events,
// the resolution of open alerts) with 10,000 and 1,000,000 jobs, every one
// of them with alerts, none late: the cost a healthy cluster pays.
func BenchmarkWatchdogPass(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			pool := freshDB(b)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			future := time.Now().Add(24 * time.Hour)
			for off := 0; off < n; off += 100_000 {
				seedJobs(b, pool, fmt.Sprintf("w%d", off), min(100_000, n-off), watchedSpec("0 0 1 1 *", "default", time.Minute), future)
			}
			dog := ownedWatchdog(ctx, b, pool)
			if n == 1_000_000 && os.Getenv("ORRERY_BENCH_EXPLAIN") != "" {
				explain(b, pool, "OverdueWatchedJobs", `EXPLAIN (ANALYZE, BUFFERS) SELECT j.id FROM unnest($1::int[]) AS s (shard)
					CROSS JOIN LATERAL (SELECT k.id FROM job_schedules AS js JOIN jobs AS k ON k.id = js.job_id
					WHERE js.shard = s.shard AND js.next_fire_at IS NOT NULL AND js.next_fire_at < now() - interval '5 seconds'
					AND k.spec->'alerts' IS NOT NULL ORDER BY js.next_fire_at LIMIT 1000) AS j`,
					allShards())
			}
			b.ResetTimer()
			for range b.N {
				if res, err := dog.Pass(ctx); err != nil || len(res.Raised) != 0 {
					b.Fatalf("pass: %v, raised %d", err, len(res.Raised))
				}
			}
		})
	}
}

// BenchmarkWatchdogOpenAlerts measures one watchdog pass while alerts
// stay open: one watched per-minute job whose queue no worker serves, for
// a day and for two (1,440 and 2,880 runs never started, each with its
// open missed alert). A pass looks at a window of Batch (1,000) open
// alerts, and reads the job's latest started run once, not per alert.
func BenchmarkWatchdogOpenAlerts(b *testing.B) {
	for _, n := range []int{1_440, 2_880} {
		b.Run(fmt.Sprintf("open=%d", n), func(b *testing.B) {
			pool := freshDB(b)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			seedJobs(b, pool, "stranded", 1, watchedSpec("* * * * *", "nobody", time.Minute), time.Now().Add(time.Hour))
			for _, sql := range []string{
				`INSERT INTO runs (id, tenant_id, job_id, job_version, shard, scheduled_for, trigger, status, created_at, watched)
				 SELECT gen_random_uuid(), j.tenant_id, j.id, 1, j.shard, date_trunc('minute', now()) - i * interval '1 minute', 'schedule', 'pending', now(), true
				 FROM jobs AS j, generate_series(1, $1::int) AS i`,
				`INSERT INTO alerts (id, tenant_id, job_id, shard, kind, cause, scheduled_for, message, raised_at)
				 SELECT gen_random_uuid(), r.tenant_id, r.job_id, r.shard, 'missed',
				        'missed:' || to_char(r.scheduled_for AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), r.scheduled_for, 'm', now()
				 FROM runs AS r`,
			} {
				var args []any
				if strings.Contains(sql, "$1") {
					args = append(args, n)
				}
				if _, err := pool.Exec(ctx, sql, args...); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := pool.Exec(ctx, "ANALYZE"); err != nil {
				b.Fatal(err)
			}
			dog := ownedWatchdog(ctx, b, pool)
			b.ResetTimer()
			for range b.N {
				if res, err := dog.Pass(ctx); err != nil || len(res.Resolved) != 0 || len(res.Raised) != 0 {
					b.Fatalf("pass: %v, raised %d, resolved %d", err, len(res.Raised), len(res.Resolved))
				}
			}
		})
	}
}

// ownedWatchdog is a watchdog over all the shards, claimed by a shard
// manager of its own until ctx ends.
func ownedWatchdog(ctx context.Context, b *testing.B, pool *pgxpool.Pool) *watchdog.Watchdog {
	b.Helper()
	mgr, err := shard.NewManager(ctx, pool, shard.Config{TTL: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = mgr.Run(ctx) }()
	for len(mgr.Leases()) < shard.DefaultCount {
		time.Sleep(10 * time.Millisecond)
	}
	dog, err := watchdog.New(watchdog.Config{Pool: pool, Shards: mgr})
	if err != nil {
		b.Fatal(err)
	}
	return dog
}

func allShards() []int32 {
	s := make([]int32, shard.DefaultCount)
	for i := range s {
		s[i] = int32(i)
	}
	return s
}

// explain prints a query's plan (ORRERY_BENCH_EXPLAIN set).
func explain(b *testing.B, pool *pgxpool.Pool, name, sql string, args ...any) {
	b.Helper()
	rows, err := pool.Query(context.Background(), sql, args...)
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			b.Fatal(err)
		}
		plan = append(plan, line)
	}
	fmt.Fprintf(os.Stderr, "EXPLAIN %s:\n%s\n", name, strings.Join(plan, "\n"))
}

// BenchmarkMissedToAlert measures how long after start_within a missed
// instant is raised, with a node's watchdog at its default interval (2 s),
// for 20 jobs due at one instant with start_within 5s: "stranded" (the
// runs were created, in a queue no worker serves) and "unfired" (no
// scheduler at all: the dead man's switch). Aim: under start_within + 5 s.
func BenchmarkMissedToAlert(b *testing.B) {
	const jobs, within = 20, 5 * time.Second
	for _, mode := range []string{"stranded", "unfired"} {
		b.Run(mode, func(b *testing.B) {
			for range b.N {
				pool := freshDB(b)
				ctx, cancel := context.WithCancel(context.Background())
				at := dbTime(b, pool).Truncate(time.Second).Add(3 * time.Second)
				cron := fmt.Sprintf("%d %d %d * * *", at.Second(), at.Minute(), at.Hour())
				seedJobs(b, pool, "late", jobs, watchedSpec(cron, "unserved", within), at)
				if mode == "stranded" {
					startEngine(b, pool, 1) // serves "default"; the jobs' runs wait in "unserved"
				} else {
					mgr, err := shard.NewManager(ctx, pool, shard.Config{TTL: 10 * time.Second})
					if err != nil {
						b.Fatal(err)
					}
					dog, err := watchdog.New(watchdog.Config{Pool: pool, Shards: mgr})
					if err != nil {
						b.Fatal(err)
					}
					go func() { _ = mgr.Run(ctx) }()
					go func() { _ = dog.Run(ctx) }()
				}
				var delays []time.Duration
				for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
					rows, err := pool.Query(ctx, "SELECT extract(epoch FROM raised_at - scheduled_for) FROM alerts WHERE kind = 'missed'")
					if err != nil {
						b.Fatal(err)
					}
					delays = delays[:0]
					for rows.Next() {
						var s float64
						if err := rows.Scan(&s); err != nil {
							b.Fatal(err)
						}
						delays = append(delays, time.Duration(s*float64(time.Second))-within)
					}
					rows.Close()
					if len(delays) == jobs {
						break
					}
					if time.Now().After(deadline) {
						b.Fatalf("%d of %d missed alerts within a minute", len(delays), jobs)
					}
				}
				if mode == "stranded" {
					var created int
					_ = pool.QueryRow(ctx, "SELECT count(*) FROM runs WHERE started_at IS NULL").Scan(&created)
					if created != jobs {
						b.Fatalf("%d unstarted runs, want %d", created, jobs)
					}
				}
				cancel()
				slices.Sort(delays)
				b.ReportMetric(ms(delays[len(delays)/2]), "p50-beyond-within-ms")
				b.ReportMetric(ms(delays[len(delays)-1]), "max-beyond-within-ms")
			}
		})
	}
}

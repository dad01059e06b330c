package run

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/store"
)

// The overview's window and its lists.
const (
	// DefaultSummaryWindow is the window of a summary that names none.
	DefaultSummaryWindow = 24 * time.Hour
	// MaxSummaryWindow bounds a window: 168 hourly buckets.
	MaxSummaryWindow = 7 * 24 * time.Hour
	// summaryRows is how many failing jobs, slow starts and late jobs a
	// summary lists.
	summaryRows = 10
	// lateSlack is how far past its next instant an active job must be to
	// count as late: the scheduler's own lag stays under it.
	lateSlack = time.Minute
	// maxSummaryJobs bounds the jobs a narrowed summary names to the
	// database.
	maxSummaryJobs = 20_000
)

// SummaryFilter is the window (of scheduled instants) and namespace of a
// summary.
type SummaryFilter struct {
	Since, Until time.Time
	Namespace    string
}

// Summary is the state of a tenant's runs over a window at a glance.
type Summary struct {
	Since, Until time.Time
	// Hours is one bucket per hour of the window, oldest first.
	Hours         []HourCount
	FailingJobs   []FailingJob
	SlowestStarts []SlowStart
	LateJobs      []LateJob
}

// HourCount is an hour's runs by status.
type HourCount struct {
	Start    time.Time
	ByStatus map[string]int
}

// FailingJob is a job with failed or dead-lettered runs in the window.
type FailingJob struct {
	Namespace, Job string
	Failures       int
	LastFailure    time.Time
}

// SlowStart is a scheduled run and how long after its instant it
// started.
type SlowStart struct {
	RunID              uuid.UUID
	Namespace, Job     string
	Scheduled, Started time.Time
}

// LateJob is an active job whose next instant is past and not fired.
type LateJob struct {
	Namespace, Job string
	NextFire       time.Time
}

// Summarize reads the runs of f's window the actor may see: by hour and
// status, the jobs that failed most, the slowest scheduled starts, and
// the jobs whose next instant is late. A zero window is the last 24
// hours; a window is at most 7 days.
func (s *Service) Summarize(ctx context.Context, a job.Actor, f SummaryFilter) (Summary, error) {
	// Planned per call: see the queries' comment. The window is the
	// database's clock's, as the instants it holds.
	q := store.New(store.PlannedPerCall(s.pool))
	now, err := q.DatabaseNow(ctx)
	if err != nil {
		return Summary{}, err
	}
	if f.Until.IsZero() {
		f.Until = now
	}
	if f.Since.IsZero() {
		f.Since = f.Until.Add(-DefaultSummaryWindow)
	}
	switch {
	case !f.Since.Before(f.Until):
		return Summary{}, &dag.FieldError{Field: "since", Message: "must be before until"}
	case f.Until.Sub(f.Since) > MaxSummaryWindow:
		return Summary{}, &dag.FieldError{Field: "since", Message: "the window is at most 7 days"}
	}
	scoped, scopeNS, scopeJobs := a.Scope.Params()
	var ns *string
	if f.Namespace != "" {
		ns = &f.Namespace
	}
	out := Summary{Since: f.Since, Until: f.Until}
	first := f.Since.Truncate(time.Hour) // UTC's hours: an hour is 3600 s in every zone
	narrowed := ns != nil || scoped
	var jobIDs []uuid.UUID
	if narrowed {
		jobIDs, err = q.JobIDsIn(ctx, store.JobIDsInParams{TenantID: a.Tenant, Namespace: ns, Scoped: scoped, ScopeNamespaces: scopeNS, ScopeJobs: scopeJobs,
			MaxRows: maxSummaryJobs + 1})
		if err != nil {
			return Summary{}, err
		}
		if len(jobIDs) > maxSummaryJobs {
			return Summary{}, &dag.FieldError{Field: "namespace", Message: fmt.Sprintf("more than %d jobs: name a narrower namespace", maxSummaryJobs)}
		}
	}
	var (
		hours   []store.RunsByHourRow
		failing []store.FailingJobsRow
		slow    []store.SlowestStartsRow
		late    []store.LateJobsRow
	)
	// Four reads side by side on the pool, each on its own snapshot: no
	// panel needs to agree with another to the row.
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		hours, err = q.RunsByHour(gctx, store.RunsByHourParams{FirstHour: first, TenantID: a.Tenant, Since: f.Since, Until: f.Until,
			Narrowed: narrowed, JobIds: jobIDs})
		return err
	})
	g.Go(func() (err error) {
		failing, err = q.FailingJobs(gctx, store.FailingJobsParams{TenantID: a.Tenant, Since: f.Since, Until: f.Until, Narrowed: narrowed, JobIds: jobIDs,
			MaxRows: summaryRows})
		return err
	})
	g.Go(func() (err error) {
		slow, err = q.SlowestStarts(gctx, store.SlowestStartsParams{TenantID: a.Tenant, Since: f.Since, Until: f.Until, Narrowed: narrowed, JobIds: jobIDs,
			MaxRows: summaryRows})
		return err
	})
	g.Go(func() (err error) {
		before := now.Add(-lateSlack)
		late, err = q.LateJobs(gctx, store.LateJobsParams{TenantID: a.Tenant, Before: &before, Namespace: ns,
			Scoped: scoped, ScopeNamespaces: scopeNS, ScopeJobs: scopeJobs, MaxRows: summaryRows})
		return err
	})
	if err := g.Wait(); err != nil {
		return Summary{}, err
	}
	for h := first; h.Before(f.Until); h = h.Add(time.Hour) {
		out.Hours = append(out.Hours, HourCount{Start: h.UTC(), ByStatus: map[string]int{}})
	}
	for _, r := range hours {
		i := int(r.Hour.Sub(first) / time.Hour)
		if i >= 0 && i < len(out.Hours) {
			out.Hours[i].ByStatus[string(lifecycle.RunStatus(r.Status).Ended())] += int(r.Runs)
		}
	}
	for _, r := range failing {
		out.FailingJobs = append(out.FailingJobs, FailingJob{Namespace: r.Namespace, Job: r.Name, Failures: int(r.Failures), LastFailure: r.LastFailure})
	}
	for _, r := range slow {
		out.SlowestStarts = append(out.SlowestStarts, SlowStart{RunID: r.ID, Namespace: r.Namespace, Job: r.Name, Scheduled: r.ScheduledFor, Started: r.StartedAt})
	}
	for _, r := range late {
		out.LateJobs = append(out.LateJobs, LateJob{Namespace: r.Namespace, Job: r.Name, NextFire: r.NextFireAt})
	}
	return out, nil
}

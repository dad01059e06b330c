// Package forecast counts what a set of jobs will fire, minute by minute,
// over a window: the load a platform team sees before it comes (a
// midnight storm, and what jitter does to it). It computes with the code
// that fires (package schedule: time zone, start and end, exclusions,
// jitter drawn for each job), so the forecast and the firing agree.
package forecast

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/resources"
	"github.com/orrery-dev/orrery/dag/schedule"
)

// Bounds on one forecast.
const (
	MaxWindow   = 7 * 24 * time.Hour
	MaxInstants = 2_000_000
	MaxTop      = 50
	// jobsPerMinute bounds the jobs a hot minute names.
	jobsPerMinute = 5
)

// Job is a job as the forecast sees it.
type Job struct {
	Namespace, Name string
	Spec            dag.JobSpec
	// For the capacity forecast: each step's length (the median of its
	// recent attempts; a step without is DefaultStepLength), and the
	// profiles of the job's tenant its steps may name.
	Lengths  map[string]time.Duration
	Profiles map[string]resources.Vector
}

// Minute is one minute's firings.
type Minute struct {
	At    time.Time
	Runs  int
	Tasks map[string]int // by queue: the tasks the minute's runs will hold
	Jobs  []JobCount     // the jobs that fire most in it, most first (hot minutes only)
}

// JobCount is one job's firings in a minute.
type JobCount struct {
	Job  string // namespace/name
	Runs int
}

// Result is a forecast.
type Result struct {
	From, To time.Time
	Runs     int            // instants that fire in the window
	Tasks    map[string]int // by queue
	Minutes  []Minute       // the minutes that fire anything, in order (Jobs unset)
	Hottest  []Minute       // the top minutes by runs, hottest first, with their jobs
}

// stepQueue is the queue a step's tasks go to, by its name in the job
// (a tenant's binding may route it further when it runs).
func stepQueue(spec *dag.JobSpec, st *dag.Step) string {
	switch {
	case st.Queue != "":
		return st.Queue
	case spec.Defaults.Queue != "":
		return spec.Defaults.Queue
	}
	return "default"
}

// InQueue keeps of jobs those that have a step in queue, each with only
// those steps: what a forecast of that queue counts (a run of the job
// once, its tasks in the queue). An empty queue keeps every job whole.
func InQueue(jobs []Job, queue string) []Job {
	if queue == "" {
		return jobs
	}
	var out []Job
	for _, j := range jobs {
		var steps []dag.Step
		for i := range j.Spec.Steps {
			if stepQueue(&j.Spec, &j.Spec.Steps[i]) == queue {
				steps = append(steps, j.Spec.Steps[i])
			}
		}
		if len(steps) > 0 {
			j.Spec.Steps = steps
			out = append(out, j)
		}
	}
	return out
}

// Compute forecasts jobs over [from, to): every instant whose fire time
// (the instant plus its jitter) falls in the window, counted in its
// minute. Paused jobs are the caller's to leave out.
func Compute(jobs []Job, from, to time.Time, top int) (*Result, error) {
	switch {
	case !to.After(from):
		return nil, &dag.FieldError{Field: "to", Message: "is not after from"}
	case to.Sub(from) > MaxWindow:
		return nil, &dag.FieldError{Field: "to", Message: fmt.Sprintf("the window is %s; the limit is %s", to.Sub(from), MaxWindow)}
	case top < 0 || top > MaxTop:
		return nil, &dag.FieldError{Field: "top", Message: fmt.Sprintf("%d is outside 0..%d", top, MaxTop)}
	}
	res := &Result{From: from, To: to, Tasks: map[string]int{}}
	byMinute := map[int64]*Minute{}
	perJob := map[int64]map[string]int{}
	for _, j := range jobs {
		queues := map[string]int{}
		for i := range j.Spec.Steps {
			queues[stepQueue(&j.Spec, &j.Spec.Steps[i])]++
		}
		key := j.Namespace + "/" + j.Name
		err := fires(&j, from, to, func(fire time.Time) error {
			if res.Runs++; res.Runs > MaxInstants {
				return &dag.FieldError{Field: "to", Message: fmt.Sprintf("more than %d runs fire in the window: narrow it, or the jobs", MaxInstants)}
			}
			m := fire.Truncate(time.Minute).Unix()
			mm := byMinute[m]
			if mm == nil {
				mm = &Minute{At: time.Unix(m, 0).UTC(), Tasks: map[string]int{}}
				byMinute[m] = mm
				perJob[m] = map[string]int{}
			}
			mm.Runs++
			perJob[m][key]++
			for q, n := range queues {
				mm.Tasks[q] += n
				res.Tasks[q] += n
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	for _, m := range byMinute {
		res.Minutes = append(res.Minutes, *m)
	}
	slices.SortFunc(res.Minutes, func(a, b Minute) int { return a.At.Compare(b.At) })
	hot := slices.Clone(res.Minutes)
	slices.SortStableFunc(hot, func(a, b Minute) int { return cmp.Compare(b.Runs, a.Runs) })
	for _, m := range hot[:min(top, len(hot))] {
		for job, n := range perJob[m.At.Unix()] {
			m.Jobs = append(m.Jobs, JobCount{Job: job, Runs: n})
		}
		slices.SortFunc(m.Jobs, func(a, b JobCount) int { return cmp.Or(cmp.Compare(b.Runs, a.Runs), cmp.Compare(a.Job, b.Job)) })
		m.Jobs = m.Jobs[:min(jobsPerMinute, len(m.Jobs))]
		res.Hottest = append(res.Hottest, m)
	}
	return res, nil
}

// fires calls fn with the fire time (the instant plus its jitter) of
// each instant of j's schedule that fires in [from, to), in order, until
// fn fails.
func fires(j *Job, from, to time.Time, fn func(fire time.Time) error) error {
	s, err := schedule.Parse(j.Spec.Schedule)
	if err != nil {
		return nil // stored before a rule it breaks: nothing fires it differently
	}
	s = s.For(j.Namespace, j.Name)
	// Instants that fire in the window start at most the jitter before it.
	for at := from.Add(-s.Jitter() - time.Second); ; {
		next, ok := s.Next(at)
		if !ok || !next.Before(to) {
			return nil
		}
		at = next
		fire := s.Fire(next)
		if fire.Before(from) || !fire.Before(to) {
			continue
		}
		if err := fn(fire); err != nil {
			return err
		}
	}
}

// Peak is the hottest minute's runs (0 for none).
func (r *Result) Peak() int {
	if len(r.Hottest) == 0 {
		return 0
	}
	return r.Hottest[0].Runs
}

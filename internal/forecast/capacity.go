package forecast

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/resources"
)

// The capacity forecast: per queue and hour, what the steps of the runs
// the schedules fire will ask for, on average at once, against what the
// queue's live workers have (docs/resources.md, "The forecast"). A run's
// step starts when the steps it needs have taken their lengths (its
// critical path from the fire time) and holds its resources for its
// length: the median of its recent attempts (Job.Lengths), or
// DefaultStepLength when it has none. A conditional step counts as if it
// ran, a fan-out as one item, a job step as nothing (the runs it starts
// are not counted: only its child job's own schedule is).

// DefaultStepLength is a step's length when it has no history.
const DefaultStepLength = time.Minute

// maxCells bounds the (step of a fired run, hour) pairs one capacity
// forecast adds up (a step longer than an hour counts in each hour it
// spans), checked before it adds any: about a second of work.
const maxCells = 5_000_000

// QueueCapacity is what a queue's live workers have.
type QueueCapacity struct {
	// Capacity is the declaring workers' capacity together.
	Capacity resources.Vector
	// Unbounded: a live worker declares no capacity, so resources bound
	// nothing in the queue.
	Unbounded bool
}

// Hour is one queue's demand in one hour of the window.
type Hour struct {
	Queue string
	At    time.Time
	// Demand is what the queue's tasks ask for on average at once over the
	// part of the hour inside the window, rounded up.
	Demand   resources.Vector
	Capacity resources.Vector
	// Served: a live worker serves the queue. Unbounded: one declares no
	// capacity.
	Served, Unbounded bool
	// Short names the resources the demand passes the capacity of (a
	// queue no live worker serves is short of every one it asks for).
	Short []string
	// Jobs, in a short hour: those asking most of its first short
	// resource, most first.
	Jobs []JobDemand
	// Load is the largest share of the capacity the demand asks for, over
	// the resources (above 1: short; 0 when unbounded or not served).
	Load float64
}

// JobDemand is one job's part of an hour's demand.
type JobDemand struct {
	Job    string // namespace/name
	Demand resources.Vector
}

// Capacity is the capacity forecast of jobs over [from, to) against
// fleet (by queue): every queue and hour whose steps ask for any
// resource, in order of queue then hour; and how many steps had no
// history (DefaultStepLength each).
func Capacity(jobs []Job, from, to time.Time, fleet map[string]QueueCapacity) ([]Hour, int, error) {
	if !to.After(from) || to.Sub(from) > MaxWindow {
		return nil, 0, &dag.FieldError{Field: "to", Message: fmt.Sprintf("the window must be after from and at most %s", MaxWindow)}
	}
	type cell struct {
		queue string
		hour  int64
	}
	loads := make([][]stepLoad, len(jobs))
	unmeasured := 0
	for i := range jobs {
		var n int
		loads[i], n = loadsOf(&jobs[i])
		unmeasured += n
	}
	// Resource-seconds by queue and hour, then by job for the short ones.
	total := map[cell]map[string]float64{}
	spread := func(j int, fire time.Time, add func(c cell, l *stepLoad, secs float64)) {
		for i := range loads[j] {
			l := &loads[j][i]
			start, end := fire.Add(l.start), fire.Add(l.start+l.length)
			start, end = later(start, from), earlier(end, to)
			for h := start.Truncate(time.Hour); h.Before(end); h = h.Add(time.Hour) {
				if secs := earlier(end, h.Add(time.Hour)).Sub(later(start, h)).Seconds(); secs > 0 {
					add(cell{l.queue, h.Unix()}, l, secs)
				}
			}
		}
	}
	// The hours each step of a run spans: the bound, counted before any
	// work (the instants alone are cheap to count).
	spans := make([]int, len(jobs))
	for j := range jobs {
		for _, l := range loads[j] {
			spans[j] += int(l.length/time.Hour) + 2
		}
	}
	cells := 0
	for j := range jobs {
		if spans[j] == 0 {
			continue
		}
		err := fires(&jobs[j], from, to, func(time.Time) error {
			if cells += spans[j]; cells > maxCells {
				return &dag.FieldError{Field: "to", Message: fmt.Sprintf("the runs in the window hold steps for more than %d step-hours together: narrow it, or the jobs", maxCells)}
			}
			return nil
		})
		if err != nil {
			return nil, 0, err
		}
	}
	for j := range jobs {
		if len(loads[j]) == 0 {
			continue
		}
		_ = fires(&jobs[j], from, to, func(fire time.Time) error {
			spread(j, fire, func(c cell, l *stepLoad, secs float64) {
				m := total[c]
				if m == nil {
					m = map[string]float64{}
					total[c] = m
				}
				for k, name := range l.names {
					m[name] += l.amounts[k] * secs
				}
			})
			return nil
		})
	}
	// The seconds of an hour inside the window: its average's divisor.
	inWindow := func(h time.Time) float64 { return earlier(to, h.Add(time.Hour)).Sub(later(from, h)).Seconds() }
	hours := make([]Hour, 0, len(total))
	short := map[cell]string{}
	for c, sums := range total {
		at := time.Unix(c.hour, 0).UTC()
		qc, served := fleet[c.queue]
		h := Hour{Queue: c.queue, At: at, Demand: average(sums, inWindow(at)), Capacity: qc.Capacity, Served: served, Unbounded: qc.Unbounded}
		if !h.Unbounded {
			for _, name := range h.Demand.Names() {
				if h.Demand.Get(name) > h.Capacity.Get(name) {
					h.Short = append(h.Short, name)
				}
				if c := h.Capacity.Get(name); c > 0 {
					h.Load = max(h.Load, float64(h.Demand.Get(name))/float64(c))
				}
			}
		}
		if len(h.Short) > 0 {
			short[c] = h.Short[0]
		}
		hours = append(hours, h)
	}
	if len(short) > 0 { // a second pass names the jobs of the short hours
		byJob := map[cell]map[string]float64{}
		for j := range jobs {
			if len(loads[j]) == 0 {
				continue
			}
			key := jobs[j].Namespace + "/" + jobs[j].Name
			_ = fires(&jobs[j], from, to, func(fire time.Time) error {
				spread(j, fire, func(c cell, l *stepLoad, secs float64) {
					name, ok := short[c]
					if !ok || l.need.Get(name) == 0 {
						return
					}
					if byJob[c] == nil {
						byJob[c] = map[string]float64{}
					}
					byJob[c][key] += float64(l.need.Get(name)) * secs
				})
				return nil
			})
		}
		for i := range hours {
			h := &hours[i]
			c := cell{h.Queue, h.At.Unix()}
			name, ok := short[c]
			if !ok {
				continue
			}
			for key, amount := range byJob[c] {
				h.Jobs = append(h.Jobs, JobDemand{Job: key, Demand: average(map[string]float64{name: amount}, inWindow(h.At))})
			}
			slices.SortFunc(h.Jobs, func(a, b JobDemand) int {
				return cmp.Or(cmp.Compare(b.Demand.Get(name), a.Demand.Get(name)), cmp.Compare(a.Job, b.Job))
			})
			h.Jobs = h.Jobs[:min(jobsPerMinute, len(h.Jobs))]
		}
	}
	slices.SortFunc(hours, func(a, b Hour) int { return cmp.Or(cmp.Compare(a.Queue, b.Queue), a.At.Compare(b.At)) })
	return hours, unmeasured, nil
}

// AsksResources reports whether a step of j asks for resources (its own,
// its defaults', or a profile): the jobs a capacity forecast reads the
// history of.
func AsksResources(j *Job) bool {
	for i := range j.Spec.Steps {
		if set := j.Spec.Effective(i); !set.Resources.IsZero() || set.ResourceProfile != "" {
			return true
		}
	}
	return false
}

// stepLoad is what one step of a job's run asks of its queue: from start
// (after the fire time) for length.
type stepLoad struct {
	queue         string
	need          resources.Vector
	start, length time.Duration
	// need by resource, read once
	names   []string
	amounts []float64
}

// loadsOf is what each step of a run of j asks for, and when (the steps
// asking for nothing left out), with how many steps had no history.
func loadsOf(j *Job) ([]stepLoad, int) {
	spec := &j.Spec
	index := make(map[string]int, len(spec.Steps))
	for i, st := range spec.Steps {
		index[st.Name] = i
	}
	length := make([]time.Duration, len(spec.Steps))
	unmeasured := 0
	for i, st := range spec.Steps {
		if d, ok := j.Lengths[st.Name]; ok {
			length[i] = d
		} else {
			length[i] = DefaultStepLength
			unmeasured++
		}
	}
	// A step starts when every step it needs has ended (the DAG is
	// acyclic: validated before it is stored).
	start := make([]time.Duration, len(spec.Steps))
	done := make([]bool, len(spec.Steps))
	var startOf func(i, depth int) time.Duration
	startOf = func(i, depth int) time.Duration {
		if done[i] || depth > len(spec.Steps) {
			return start[i]
		}
		for _, n := range spec.Steps[i].Needs {
			if k, ok := index[n]; ok {
				start[i] = max(start[i], startOf(k, depth+1)+length[k])
			}
		}
		done[i] = true
		return start[i]
	}
	var out []stepLoad
	for i, st := range spec.Steps {
		set := spec.Effective(i)
		need := set.Resources
		if set.ResourceProfile != "" {
			need = j.Profiles[set.ResourceProfile]
		}
		if st.OnNoWorker() || need.IsZero() {
			continue
		}
		l := stepLoad{queue: set.Queue, need: need, start: startOf(i, 0), length: length[i], names: need.Names()}
		for _, name := range l.names {
			l.amounts = append(l.amounts, float64(need.Get(name)))
		}
		out = append(out, l)
	}
	return out, unmeasured
}

// average is resource-seconds over secs seconds, rounded up.
func average(sums map[string]float64, secs float64) resources.Vector {
	var v resources.Vector
	for name, s := range sums {
		n := int64(math.Ceil(s/secs - 1e-9))
		switch name {
		case resources.CPU:
			v.CPU = n
		case resources.Memory: // in whole MiB, as workers declare it
			v.Memory = (n + 1<<20 - 1) &^ (1<<20 - 1)
		case resources.GPU:
			v.GPU = n
		default:
			if v.Custom == nil {
				v.Custom = map[string]int64{}
			}
			v.Custom[name] = n
		}
	}
	return v
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

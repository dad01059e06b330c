package dag

import (
	"time"

	"github.com/orrery-dev/orrery/dag/resources"
)

// Settings are a step's effective settings: its own, else the job's
// defaults, else Orrery's.
type Settings struct {
	Queue       string
	Priority    int // River priority: 1 critical .. 4 low
	Timeout     time.Duration
	MaxAttempts int
	Initial     time.Duration
	Max         time.Duration
	// Resources is what the step asks for, or ResourceProfile the
	// tenant's profile that says it (the caller reads it): its own, else
	// the defaults'; the zero vector when neither gives any.
	Resources       resources.Vector
	ResourceProfile string
}

// Effective resolves step i of a normalized spec.
func (s *JobSpec) Effective(i int) Settings {
	st, d := s.Steps[i], s.Defaults
	out := Settings{
		Queue:       first(st.Queue, d.Queue, DefaultQueue),
		Priority:    Priorities[first(st.Priority, d.Priority, DefaultPriority)],
		Timeout:     orDefault(st.Timeout, orDefault(d.Timeout, DefaultTimeout)),
		MaxAttempts: DefaultMaxAttempts,
		Initial:     DefaultRetryInitial,
		Max:         DefaultRetryMax,
	}
	for _, r := range []*Retry{d.Retry, st.Retry} { // the step's own wins
		if r == nil {
			continue
		}
		if r.MaxAttempts > 0 {
			out.MaxAttempts = r.MaxAttempts
		}
		if r.Initial != nil {
			out.Initial = r.Initial.Duration
		}
		if r.Max != nil {
			out.Max = r.Max.Duration
		}
	}
	if out.Max < out.Initial {
		out.Max = out.Initial
	}
	switch {
	case st.Resources != nil:
		out.Resources, _ = st.Resources.Vector() // valid: checked when the spec was
	case st.ResourceProfile != "":
		out.ResourceProfile = st.ResourceProfile
	case d.Resources != nil:
		out.Resources, _ = d.Resources.Vector()
	default:
		out.ResourceProfile = d.ResourceProfile
	}
	return out
}

func first(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// orDefault is d's duration, or def when d is not set.
func orDefault(d *Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.Duration
}

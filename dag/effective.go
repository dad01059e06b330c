package dag

import "time"

// Settings are a step's effective settings: its own, else the job's
// defaults, else Orrery's.
type Settings struct {
	Queue       string
	Priority    int // River priority: 1 critical .. 4 low
	Timeout     time.Duration
	MaxAttempts int
	Initial     time.Duration
	Max         time.Duration
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

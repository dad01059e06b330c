package lifecycle

import "github.com/orrery-dev/orrery/dag"

// Reasons a run is written skipped, queued or cancelled by the overlap
// policy.
const (
	ReasonOverlapSkip      = "overlap: skip (the previous run is still active)"
	ReasonOverlapQueue     = "overlap: queue (waits for the previous run)"
	ReasonOverlapQueueFull = "overlap: queue already holds a run"
	// ReasonCancelledByNewer: a later instant of the same firing replaced
	// the run (cancel_previous).
	ReasonCancelledByNewer = "overlap: cancel_previous (a newer instant fired)"
	// ReasonCancelledByTrigger: a manual trigger replaced the run.
	ReasonCancelledByTrigger = "overlap: cancel_previous (a manual trigger)"
)

// Overlap decides, one new run of a job after another, what the job's
// overlap policy makes of each: the firing of a schedule asks once per due
// instant, a manual trigger once. It starts from the job's active runs and
// counts the runs it lets start.
type Overlap struct {
	policy  dag.OverlapPolicy
	running int  // active runs that are not held (pending or running)
	held    bool // a run is held (queued)
}

// NewOverlap starts the decision for a job under policy whose active runs
// have the statuses given.
func NewOverlap(policy dag.OverlapPolicy, active []RunStatus) *Overlap {
	o := &Overlap{policy: policy}
	for _, s := range active {
		if s == RunQueued {
			o.held = true
		} else {
			o.running++
		}
	}
	return o
}

// OverlapDecision is the status of one new run, and whether every run
// active before it (the job's, and those the same pass let start) is to
// be cancelled.
type OverlapDecision struct {
	Status         RunStatus // pending, queued or skipped
	Reason         string
	CancelPrevious bool
}

// Next decides one more run of the job.
func (o *Overlap) Next() OverlapDecision {
	d := OverlapDecision{Status: RunPending}
	switch o.policy {
	case dag.OverlapSkip:
		if o.running > 0 || o.held {
			d.Status, d.Reason = RunSkipped, ReasonOverlapSkip
		}
	case dag.OverlapQueue:
		switch {
		case o.running == 0 && !o.held:
		case !o.held:
			d.Status, d.Reason, o.held = RunQueued, ReasonOverlapQueue, true
		default:
			d.Status, d.Reason = RunSkipped, ReasonOverlapQueueFull
		}
	case dag.OverlapCancelPrevious:
		d.CancelPrevious = true
		o.running, o.held = 0, false
	}
	if d.Status == RunPending {
		o.running++
	}
	return d
}

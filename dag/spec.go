package dag

import (
	"bytes"
	"encoding/json"

	"github.com/orrery-dev/orrery/dag/schedule"
)

// APIVersion and Kind identify the resource in YAML.
const (
	APIVersion = "orrery.dev/v1"
	KindJob    = "Job"
)

// Resource is one YAML document: a Job.
type Resource struct {
	APIVersion string   `json:"apiVersion" yaml:"apiVersion" jsonschema:"enum=orrery.dev/v1"`
	Kind       string   `json:"kind" yaml:"kind" jsonschema:"enum=Job"`
	Metadata   Metadata `json:"metadata" yaml:"metadata"`
	Spec       JobSpec  `json:"spec" yaml:"spec"`
}

// Metadata names a job. Name is unique per tenant and namespace.
type Metadata struct {
	Name        string            `json:"name" yaml:"name"`
	Namespace   string            `json:"namespace,omitempty" yaml:"namespace,omitempty"`
	Description string            `json:"description,omitempty" yaml:"description,omitempty"`
	Labels      map[string]string `json:"labels,omitempty" yaml:"labels,omitempty"`
}

// JobSpec is what a job does and when: its schedule, policies and steps.
// A single-step job may give Run (and Payload) instead of Steps;
// Normalize turns that into one step named "main".
type JobSpec struct {
	Schedule    schedule.Spec `json:"schedule" yaml:"schedule"`
	Misfire     MisfirePolicy `json:"misfire,omitempty" yaml:"misfire,omitempty" jsonschema:"enum=skip,enum=fire_once,enum=backfill,default=fire_once"`
	MaxBackfill int           `json:"max_backfill,omitempty" yaml:"max_backfill,omitempty"`
	Overlap     OverlapPolicy `json:"overlap,omitempty" yaml:"overlap,omitempty" jsonschema:"enum=skip,enum=queue,enum=allow,enum=cancel_previous,default=skip"`
	// Concurrency bounds the job's runs by key (docs/flow-control.md).
	Concurrency []ConcurrencyLimit `json:"concurrency,omitempty" yaml:"concurrency,omitempty"`
	// Debounce collapses a burst of triggers into one run (docs/flow-control.md).
	Debounce *Debounce    `json:"debounce,omitempty" yaml:"debounce,omitempty"`
	Defaults StepDefaults `json:"defaults,omitzero" yaml:"defaults,omitempty"`
	Run      *Executor    `json:"run,omitempty" yaml:"run,omitempty"`
	Payload  Payload      `json:"payload,omitempty" yaml:"payload,omitempty"`
	Steps    []Step       `json:"steps,omitempty" yaml:"steps,omitempty"`
	// Params are the inputs of a run, read by expressions as params.NAME
	// (docs/workflows.md).
	Params map[string]Param `json:"params,omitempty" yaml:"params,omitempty"`
	// Alerts are the job's promises (start and finish deadlines) and whom
	// to tell when one is broken or a run fails.
	Alerts *Alerts `json:"alerts,omitempty" yaml:"alerts,omitempty"`
	// Callbacks are webhooks called when a run finishes.
	Callbacks []Callback `json:"callbacks,omitempty" yaml:"callbacks,omitempty"`
	// PauseAfterFailures pauses the job when its latest this many ended
	// runs since it was last resumed all failed (0: never).
	PauseAfterFailures int `json:"pause_after_failures,omitempty" yaml:"pause_after_failures,omitempty"`
}

// Watched reports whether the watchdog follows the job's runs: it has
// alerts, callbacks or pause_after_failures.
func (s *JobSpec) Watched() bool {
	return s.Alerts != nil || len(s.Callbacks) > 0 || s.PauseAfterFailures > 0
}

// Alerts configures the watchdog for one job. An alert is raised once per
// cause (an instant, a run, an attempt) and resolved when the cause clears.
type Alerts struct {
	// StartWithin: an expected instant with no started run this long after
	// it raises `missed`, also when nothing fired at all.
	StartWithin *Duration `json:"start_within,omitempty" yaml:"start_within,omitempty"`
	// FinishWithin: a run not finished this long after its instant raises
	// `stuck`.
	FinishWithin *Duration `json:"finish_within,omitempty" yaml:"finish_within,omitempty"`
	// On lists the kinds raised; default failure, dead_letter, stuck, and
	// missed when start_within is given.
	On     []string `json:"on,omitempty" yaml:"on,omitempty" jsonschema:"uniqueItems=true"`
	Notify []Notify `json:"notify,omitempty" yaml:"notify,omitempty"`
}

// Notify is one receiver of a job's alerts.
type Notify struct {
	Webhook *Webhook `json:"webhook" yaml:"webhook"`
}

// Webhook is a notification endpoint. Deliveries are POSTed JSON, signed
// with HMAC-SHA256 when Secret names a secret reference.
type Webhook struct {
	URL     string            `json:"url" yaml:"url"`
	Headers map[string]string `json:"headers,omitempty" yaml:"headers,omitempty"`
	// Secret is a secret reference (secret://env/NAME, secret://file/PATH)
	// whose value signs the body: Orrery-Signature: t=UNIX,v1=HEX.
	Secret string `json:"secret,omitempty" yaml:"secret,omitempty"`
}

// Callback is a webhook called when a run finishes with one of On
// (default: succeeded, failed, cancelled; failed includes dead-lettered).
type Callback struct {
	Webhook Webhook  `json:"webhook" yaml:"webhook"`
	On      []string `json:"on,omitempty" yaml:"on,omitempty" jsonschema:"uniqueItems=true"`
}

// StepDefaults are inherited by every step that does not set its own.
type StepDefaults struct {
	Queue    string    `json:"queue,omitempty" yaml:"queue,omitempty"`
	Priority string    `json:"priority,omitempty" yaml:"priority,omitempty" jsonschema:"enum=critical,enum=high,enum=normal,enum=low,default=normal"`
	Timeout  *Duration `json:"timeout,omitempty" yaml:"timeout,omitempty"`
	Retry    *Retry    `json:"retry,omitempty" yaml:"retry,omitempty"`
	// Resources and ResourceProfile (one of them) are what a step asks
	// for when it gives neither (docs/resources.md).
	Resources       *Resources `json:"resources,omitempty" yaml:"resources,omitempty"`
	ResourceProfile string     `json:"resource_profile,omitempty" yaml:"resource_profile,omitempty"`
}

// Step is one node of the job's DAG.
type Step struct {
	Name        string      `json:"name" yaml:"name"`
	Needs       []string    `json:"needs,omitempty" yaml:"needs,omitempty"`
	TriggerRule TriggerRule `json:"trigger_rule,omitempty" yaml:"trigger_rule,omitempty" jsonschema:"enum=all_success,enum=none_failed,enum=all_done,default=all_success"`
	// When is a condition, `${{ EXPR }}` of a boolean: false skips the
	// step when it would be released (docs/workflows.md).
	When string `json:"when,omitempty" yaml:"when,omitempty"`
	// ForEach fans the step out: `${{ EXPR }}` of a list, evaluated when
	// the step would be released, makes one task per element, named
	// STEP[0], STEP[1], ... (docs/dynamic-workflows.md).
	ForEach string `json:"for_each,omitempty" yaml:"for_each,omitempty"`
	// MaxParallel bounds how many items of a fan-out are released at
	// once (0: all of them, admission still applies).
	MaxParallel int `json:"max_parallel,omitempty" yaml:"max_parallel,omitempty"`
	// MinSuccess is how many items of a fan-out must succeed for the step
	// to succeed: all of them when empty.
	MinSuccess MinSuccess `json:"min_success,omitempty" yaml:"min_success,omitempty"`
	Run        Executor   `json:"run,omitzero" yaml:"run,omitempty"`
	// Sleep parks the step instead of running it: no worker, no slot,
	// until its time (docs/parked-steps.md). A step gives run or sleep.
	Sleep *Sleep `json:"sleep,omitempty" yaml:"sleep,omitempty"`
	// Wait parks the step until an event (docs/parked-steps.md).
	Wait *Wait `json:"wait,omitempty" yaml:"wait,omitempty"`
	// Approval parks the step until people decide (docs/parked-steps.md).
	Approval *Approval `json:"approval,omitempty" yaml:"approval,omitempty"`
	Payload  Payload   `json:"payload,omitempty" yaml:"payload,omitempty"`
	Queue    string    `json:"queue,omitempty" yaml:"queue,omitempty"`
	Priority string    `json:"priority,omitempty" yaml:"priority,omitempty" jsonschema:"enum=critical,enum=high,enum=normal,enum=low,default=normal"`
	Timeout  *Duration `json:"timeout,omitempty" yaml:"timeout,omitempty"`
	Retry    *Retry    `json:"retry,omitempty" yaml:"retry,omitempty"`
	// Resources is what the step needs, or ResourceProfile names a
	// profile of the tenant that says it (one of them; the defaults'
	// when neither): admission places it only on a worker with room.
	Resources       *Resources `json:"resources,omitempty" yaml:"resources,omitempty"`
	ResourceProfile string     `json:"resource_profile,omitempty" yaml:"resource_profile,omitempty"`
	// Concurrency bounds the tasks holding each key, across every step of
	// the tenant's jobs naming the same value: a task holds its keys from
	// its release until it ends, and one released at a key's limit waits
	// (docs/flow-control.md, "Step level").
	Concurrency []ConcurrencyLimit `json:"concurrency,omitempty" yaml:"concurrency,omitempty"`
	// RateLimit bounds how often its tasks start: a token bucket per value
	// of its key, shared by every step of the tenant's jobs naming the
	// value, each admission of an attempt spending a token
	// (docs/flow-control.md, "Rate limits").
	RateLimit *RateLimit `json:"rate_limit,omitempty" yaml:"rate_limit,omitempty"`
}

// Executor says how a step runs: exactly one of HTTP, Command, Handler,
// Worker or Job.
type Executor struct {
	HTTP    *HTTPExecutor    `json:"http,omitempty" yaml:"http,omitempty" jsonschema:"oneof_required=http"`
	Command *CommandExecutor `json:"command,omitempty" yaml:"command,omitempty" jsonschema:"oneof_required=command"`
	Handler string           `json:"handler,omitempty" yaml:"handler,omitempty" jsonschema:"oneof_required=handler"`
	// Worker sends the step to remote workers serving this type: processes
	// of any language that claim it over WorkerService
	// (docs/remote-workers.md).
	Worker string `json:"worker,omitempty" yaml:"worker,omitempty" jsonschema:"oneof_required=worker"`
	// Job runs another job as the step: a run of it (the child run) is
	// started when the step is released, and its end is the step's
	// (docs/workflows.md, "A step that runs another job").
	Job *JobCall `json:"job,omitempty" yaml:"job,omitempty" jsonschema:"oneof_required=job"`
}

// JobCall names the job a step runs, and the params of its run.
type JobCall struct {
	Name string `json:"name" yaml:"name"`
	// Namespace is the job's; the calling job's own when empty.
	Namespace string `json:"namespace,omitempty" yaml:"namespace,omitempty"`
	// Params are the child run's params (a JSON object, typed against the
	// child job's declaration when the step starts); their strings may
	// hold expressions, as a payload's do.
	Params Payload `json:"params,omitempty" yaml:"params,omitempty"`
}

// HTTPExecutor calls a webhook.
type HTTPExecutor struct {
	URL     string            `json:"url" yaml:"url"`
	Method  string            `json:"method,omitempty" yaml:"method,omitempty" jsonschema:"enum=GET,enum=POST,enum=PUT,enum=PATCH,enum=DELETE,default=POST"`
	Headers map[string]string `json:"headers,omitempty" yaml:"headers,omitempty"`
}

// CommandExecutor runs a program on a worker that allows it.
type CommandExecutor struct {
	Argv []string          `json:"argv" yaml:"argv"`
	Env  map[string]string `json:"env,omitempty" yaml:"env,omitempty"`
	Dir  string            `json:"dir,omitempty" yaml:"dir,omitempty"`
}

// Retry is a step's retry policy: up to MaxAttempts tries, with exponential
// backoff and full jitter between Initial and Max.
type Retry struct {
	MaxAttempts int       `json:"max_attempts,omitempty" yaml:"max_attempts,omitempty"`
	Initial     *Duration `json:"initial,omitempty" yaml:"initial,omitempty"`
	Max         *Duration `json:"max,omitempty" yaml:"max,omitempty"`
}

// Payload is a step's payload: JSON text. In YAML it is written as any
// YAML value that has a JSON form (usually a mapping).
type Payload json.RawMessage

// Values counts the JSON values a payload holds: each array, object,
// string, number, true, false and null, at any depth (an object's keys
// are not values). Each becomes an object of its own where the payload
// is turned into a tree (an API answer's protobuf Value). It reads valid
// JSON and allocates nothing.
func (p Payload) Values() int {
	n := 0
	inString, escaped, inScalar, afterString := false, false, false, false
	for _, c := range p {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString, afterString = false, true
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			inScalar = false
			continue // a key's string may be followed by space, then ':'
		case ':':
			if afterString {
				n-- // that string was a key
			}
		case '"':
			n++
			inString = true
		case '[', '{':
			n++
		case ']', '}', ',':
		default: // a number, true, false or null, one byte at a time
			if !inScalar {
				n++
				inScalar = true
			}
			afterString = false
			continue
		}
		inScalar, afterString = false, false
	}
	return n
}

func (p Payload) MarshalJSON() ([]byte, error) {
	if len(p) == 0 {
		return []byte("null"), nil
	}
	return p, nil
}

func (p *Payload) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*p = nil
		return nil
	}
	*p = canonicalJSON(b)
	return nil
}

// canonicalJSON rewrites JSON compactly with sorted keys (numbers kept
// exactly), so that a payload compares equal after a trip through JSONB.
// Text that is not JSON is returned as is, for Validate to report.
func canonicalJSON(b []byte) []byte {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil || d.More() {
		return append([]byte(nil), b...)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return append([]byte(nil), b...)
	}
	return out
}

// MisfirePolicy says what to do with instants that passed while nothing
// could fire them (internal/lifecycle decides it).
type MisfirePolicy string

// Misfire policies.
const (
	MisfireSkip     MisfirePolicy = "skip"      // advance past them
	MisfireFireOnce MisfirePolicy = "fire_once" // one run, for the latest missed instant
	MisfireBackfill MisfirePolicy = "backfill"  // one run per missed instant, capped by max_backfill
)

// OverlapPolicy says what a new run does while another run of its job is
// active (internal/lifecycle decides it).
type OverlapPolicy string

// Overlap policies.
const (
	OverlapSkip           OverlapPolicy = "skip"            // the new run is skipped
	OverlapQueue          OverlapPolicy = "queue"           // it waits for the active one (one at most)
	OverlapAllow          OverlapPolicy = "allow"           // both run
	OverlapCancelPrevious OverlapPolicy = "cancel_previous" // the active ones are cancelled
)

// TriggerRule says which ends of its parents let a step run.
type TriggerRule string

// Trigger rules.
const (
	TriggerAllSuccess TriggerRule = "all_success" // every parent succeeded (a skipped one skips the step)
	TriggerNoneFailed TriggerRule = "none_failed" // no parent failed (skipped ones count as done)
	TriggerAllDone    TriggerRule = "all_done"    // every parent ended, however
)

// Option values.
const (
	AlertMissed     = "missed"
	AlertStuck      = "stuck"
	AlertFailure    = "failure"
	AlertDeadLetter = "dead_letter"
	// AlertPaused is raised when pause_after_failures paused the job,
	// whatever alerts.on says, and resolved when the job is resumed.
	AlertPaused = "paused"

	OnSucceeded = "succeeded"
	OnFailed    = "failed"
	OnCancelled = "cancelled"

	DefaultNamespace = "default"
	DefaultQueue     = "default"
	DefaultPriority  = "normal"
	MainStep         = "main"
)

// Priorities maps priority names to River priorities (1 is the highest).
var Priorities = map[string]int{"critical": 1, "high": 2, "normal": 3, "low": 4}

// Normalize fills defaults that change nothing of the meaning and rewrites
// the single-step `run:` form as one step named "main", so that two specs
// that mean the same compare equal.
func (r *Resource) Normalize() {
	if r.APIVersion == "" {
		r.APIVersion = APIVersion
	}
	if r.Kind == "" {
		r.Kind = KindJob
	}
	if r.Metadata.Namespace == "" {
		r.Metadata.Namespace = DefaultNamespace
	}
	s := &r.Spec
	if s.Run != nil && len(s.Steps) == 0 {
		s.Steps = []Step{{Name: MainStep, Run: *s.Run, Payload: s.Payload}}
		s.Run, s.Payload = nil, nil
	}
	if s.Misfire == "" {
		s.Misfire = MisfireFireOnce
	}
	for i := range s.Steps {
		if j := s.Steps[i].Run.Job; j != nil && j.Namespace == "" {
			j.Namespace = r.Metadata.Namespace
		}
	}
	if a := s.Schedule.After; a != nil {
		if a.Namespace == "" {
			a.Namespace = r.Metadata.Namespace
		}
		if len(a.On) == 0 {
			a.On = a.Outcomes()
		}
	}
	if s.Misfire == MisfireBackfill && s.MaxBackfill == 0 {
		s.MaxBackfill = DefaultBackfill
	}
	if s.Overlap == "" && len(s.Concurrency) > 0 {
		s.Overlap = OverlapAllow // (the keys decide what waits)
	}
	if s.Overlap == "" {
		s.Overlap = OverlapSkip
		if s.Schedule.Event != nil && len(s.Schedule.Cron) == 0 && s.Schedule.At == "" && s.Schedule.After == nil {
			// A job started by events alone runs once for each event: one
			// that skipped while a run was active would drop events.
			s.Overlap = OverlapAllow
		}
	}
	if a := s.Alerts; a != nil && len(a.On) == 0 {
		a.On = []string{AlertFailure, AlertDeadLetter, AlertStuck}
		if a.StartWithin != nil {
			a.On = []string{AlertFailure, AlertDeadLetter, AlertMissed, AlertStuck}
		}
	}
	for i := range s.Callbacks {
		if len(s.Callbacks[i].On) == 0 {
			s.Callbacks[i].On = []string{OnSucceeded, OnFailed, OnCancelled}
		}
	}
	for name, p := range s.Params {
		if len(p.Default) > 0 {
			p.Default = canonicalJSON(p.Default)
		}
		for i := range p.Enum {
			p.Enum[i] = canonicalJSON(p.Enum[i])
		}
		s.Params[name] = p
	}
	for i := range s.Steps {
		if len(s.Steps[i].Payload) > 0 {
			s.Steps[i].Payload = canonicalJSON(s.Steps[i].Payload)
		}
		if s.Steps[i].TriggerRule == "" {
			s.Steps[i].TriggerRule = TriggerAllSuccess
		}
		if h := s.Steps[i].Run.HTTP; h != nil && h.Method == "" {
			h.Method = "POST"
		}
	}
}

package dag

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"

	"github.com/orrery-dev/orrery/dag/expr"

	"github.com/orrery-dev/orrery/dag/schedule"
)

// Limits.
const (
	MaxNameLen        = 63
	MaxDescriptionLen = 4096
	MaxLabels         = 64
	MaxLabelValueLen  = 256
	MaxPayloadBytes   = 256 << 10
	// MaxPayloadDepth caps how deeply a payload nests arrays and objects:
	// deeper JSON breaks protobuf decoders (their recursion limit), and with
	// it every listing that includes the job.
	MaxPayloadDepth = 64
	// MaxPayloadInteger is the largest magnitude of a number in a payload:
	// 2^53-1, below which every integer is exact as a double. See
	// checkPayload.
	MaxPayloadInteger = 1<<53 - 1
	// MaxDefinitionValues bounds the JSON values (Payload.Values) of a
	// whole definition as it is stored and answered: payloads, params'
	// defaults and enums, job steps' params, headers, argv, names and
	// every other field. Each becomes an object of its own wherever the
	// definition is read through the API (a free-form one a protobuf
	// Value, some 150 bytes for a 3-byte [] in [[],[],...]): 256 KiB
	// payloads of empty arrays in each of 7 steps made one GetJob
	// allocate about 100 MB. 200,000 lets MaxSteps steps of about 20
	// values each (a name, needs, an HTTP call with headers, a small
	// payload, a retry policy) be one job. Read budgets
	// (internal/job.ListBudgetValues) count the same.
	MaxDefinitionValues = 200_000
	MaxSteps            = 10_000
	MaxAttempts         = 100
	// MaxStepDuration bounds a step's timeout and its retries' backoff: a
	// longer one is a mistake (or near the 292 years a duration holds,
	// where arithmetic on it overflows).
	MaxStepDuration = 30 * 24 * time.Hour
	MaxBackfill     = 1000
	DefaultBackfill = 10
	// MaxPauseAfterFailures bounds pause_after_failures.
	MaxPauseAfterFailures = 1000
	// Alerts and callbacks.
	MinStartWithin = 5 * time.Second
	MaxWithin      = 30 * 24 * time.Hour
	MaxWebhooks    = 10
	MaxWebhookURL  = 2048
	MaxHeaders     = 32
	MaxHeaderValue = 4096
)

var (
	nameRE     = regexp.MustCompile(`^[a-z0-9][a-z0-9\-_.]*$`)
	labelKeyRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9\-_./]*$`)
	methods    = map[string]bool{"GET": true, "POST": true, "PUT": true, "PATCH": true, "DELETE": true}
)

// IsText reports whether s is text the database can store: valid UTF-8
// without a NUL character.
func IsText(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// Clip cuts s to at most n bytes, at a character's boundary, marking the
// cut with an ellipsis (which the n bytes include).
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := max(n-len("…"), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// ValidateName checks a job, namespace, step, queue or handler name.
func ValidateName(name string) error {
	switch {
	case name == "":
		return errors.New("must not be empty")
	case len(name) > MaxNameLen:
		return fmt.Errorf("is %d characters; the limit is %d", len(name), MaxNameLen)
	case !nameRE.MatchString(name):
		return fmt.Errorf("%q must start with a lowercase letter or digit and hold only a-z, 0-9, '-', '_' and '.'", name)
	}
	return nil
}

// Validate checks a normalized resource and returns every problem, each
// naming its field. It validates the schedule (schedule.Validate: an at
// within 1970..9999, a cron expression that fires), so a resource that
// passes can be stored and fired.
func Validate(r *Resource) Errors {
	var es Errors
	if r.APIVersion != APIVersion {
		es.add("apiVersion", "%q is not supported; use %s", r.APIVersion, APIVersion)
	}
	if r.Kind != KindJob {
		es.add("kind", "%q is not supported; use %s", r.Kind, KindJob)
	}
	validateMetadata(&es, &r.Metadata)
	validateSpec(&es, &r.Spec)
	validateAfter(&es, r)
	validateEvent(&es, r)
	validateConcurrency(&es, &r.Spec)
	validateDebounce(&es, &r.Spec)
	validateNoNUL(&es, r)
	return es
}

// validateNoNUL refuses a NUL character in any string of the resource
// (names, labels, payloads, URLs, argv...): the database can store none,
// in text or in JSON, and one would fail the write of every job that
// shares its statement. The field named is the first that holds one.
func validateNoNUL(es *Errors, r *Resource) {
	js, err := json.Marshal(r)
	if err != nil || !bytes.Contains(js, []byte(`\u0000`)) {
		return // (a payload that is not JSON is reported by its own check)
	}
	var v any
	if json.Unmarshal(js, &v) != nil {
		return
	}
	path, ok := findNUL(v, "")
	if !ok || slices.ContainsFunc(*es, func(e *FieldError) bool { return e.Field == path }) {
		return // (already refused for another reason)
	}
	es.add(path, "contains a NUL character")
}

// findNUL returns the path (as Validate names fields) of the first key or
// string in v that holds a NUL character.
func findNUL(v any, path string) (string, bool) {
	switch v := v.(type) {
	case string:
		return path, strings.IndexByte(v, 0) >= 0
	case []any:
		for i, e := range v {
			if p, ok := findNUL(e, fmt.Sprintf("%s[%d]", path, i)); ok {
				return p, true
			}
		}
	case map[string]any:
		for _, k := range sortedKeys(v) {
			p := strings.ReplaceAll(k, "\x00", `\x00`) // named, not printed
			if path != "" {
				p = path + "." + p
			}
			if strings.IndexByte(k, 0) >= 0 {
				return p, true
			}
			if p, ok := findNUL(v[k], p); ok {
				return p, true
			}
		}
	}
	return "", false
}

// validateAfter checks schedule.after's reference: a job's name and
// namespace, not the job itself (a cycle through other jobs is the job
// package's to find: it needs the stored jobs).
func validateAfter(es *Errors, r *Resource) {
	a := r.Spec.Schedule.After
	if a == nil || a.Job == "" { // (an empty name: schedule.Validate says so)
		return
	}
	if err := ValidateName(a.Job); err != nil {
		es.add("spec.schedule.after.job", "%v", err)
	}
	if err := ValidateName(a.Namespace); err != nil {
		es.add("spec.schedule.after.namespace", "%v", err)
	}
	if a.Job == r.Metadata.Name && a.Namespace == r.Metadata.Namespace {
		es.add("spec.schedule.after.job", "names this job: a job does not start on its own runs' ends")
	}
}

func validateMetadata(es *Errors, m *Metadata) {
	if err := ValidateName(m.Name); err != nil {
		es.add("metadata.name", "%v", err)
	}
	if err := ValidateName(m.Namespace); err != nil {
		es.add("metadata.namespace", "%v", err)
	}
	if len(m.Description) > MaxDescriptionLen {
		es.add("metadata.description", "is %d bytes; the limit is %d", len(m.Description), MaxDescriptionLen)
	}
	if len(m.Labels) > MaxLabels {
		es.add("metadata.labels", "has %d labels; the limit is %d", len(m.Labels), MaxLabels)
	}
	for _, k := range sortedKeys(m.Labels) {
		if len(k) > MaxNameLen || !labelKeyRE.MatchString(k) {
			es.add("metadata.labels."+k, "label key %q must be 1-%d characters of A-Z, a-z, 0-9, '-', '_', '.', '/'", k, MaxNameLen)
		}
		if len(m.Labels[k]) > MaxLabelValueLen {
			es.add("metadata.labels."+k, "value is %d characters; the limit is %d", len(m.Labels[k]), MaxLabelValueLen)
		}
	}
}

func validateSpec(es *Errors, s *JobSpec) {
	before := len(*es)
	if _, err := schedule.Validate(s.Schedule); err != nil {
		var se *schedule.Error
		if errors.As(err, &se) {
			es.add("spec.schedule."+se.Field, "%s", se.Message)
		} else {
			es.add("spec.schedule", "%v", err)
		}
	}
	switch s.Misfire {
	case MisfireSkip, MisfireFireOnce, MisfireBackfill:
	default:
		es.add("spec.misfire", "%q is not one of skip, fire_once, backfill", s.Misfire)
	}
	if s.PauseAfterFailures < 0 || s.PauseAfterFailures > MaxPauseAfterFailures {
		es.add("spec.pause_after_failures", "%d is outside 0..%d", s.PauseAfterFailures, MaxPauseAfterFailures)
	}
	switch {
	case s.MaxBackfill < 0 || s.MaxBackfill > MaxBackfill:
		es.add("spec.max_backfill", "%d is outside 1..%d", s.MaxBackfill, MaxBackfill)
	case s.MaxBackfill > 0 && s.Misfire != MisfireBackfill:
		es.add("spec.max_backfill", "applies only with misfire: backfill")
	}
	switch s.Overlap {
	case OverlapSkip, OverlapQueue, OverlapAllow, OverlapCancelPrevious:
	default:
		es.add("spec.overlap", "%q is not one of skip, queue, allow, cancel_previous", s.Overlap)
	}
	validateSettings(es, "spec.defaults", s.Defaults.Queue, s.Defaults.Priority, s.Defaults.Timeout, s.Defaults.Retry)
	validateResources(es, "spec.defaults", s.Defaults.Resources, s.Defaults.ResourceProfile)

	switch {
	case s.Run != nil && len(s.Steps) > 0:
		es.add("spec.run", "give either run (one step) or steps, not both")
		return
	case len(s.Steps) == 0:
		es.add("spec.steps", "a job needs run (one step) or steps")
		return
	case len(s.Steps) > MaxSteps:
		es.add("spec.steps", "has %d steps; the limit is %d", len(s.Steps), MaxSteps)
		return
	}
	if len(s.Payload) > 0 {
		es.add("spec.payload", "a top-level payload goes with run; with steps, give each step its payload")
	}
	index := make(map[string]int, len(s.Steps))
	for i := range s.Steps {
		st := &s.Steps[i]
		p := fmt.Sprintf("spec.steps[%d]", i)
		if err := ValidateName(st.Name); err != nil {
			es.add(p+".name", "%v", err)
		} else if j, dup := index[st.Name]; dup {
			es.add(p+".name", "duplicate step name %q (also spec.steps[%d])", st.Name, j)
		} else {
			index[st.Name] = i
		}
		switch st.TriggerRule {
		case TriggerAllSuccess, TriggerNoneFailed, TriggerAllDone:
		default:
			es.add(p+".trigger_rule", "%q is not one of all_success, none_failed, all_done", st.TriggerRule)
		}
		if st.Parks() {
			validateParked(es, p, st)
		} else {
			validateExecutor(es, p+".run", &st.Run)
		}
		validatePayload(es, p+".payload", st.Payload)
		validateSettings(es, p, st.Queue, st.Priority, st.Timeout, st.Retry)
		validateFanOut(es, p, st)
		validateJobStep(es, p, st)
		validateResources(es, p, st.Resources, st.ResourceProfile)
		if st.Run.Job != nil && (st.Resources != nil || st.ResourceProfile != "") {
			es.add(p+".resources", "a job step runs nothing itself: give resources on the steps of the job it runs")
		}
	}
	validateGraph(es, s.Steps, index)
	validateParams(es, s.Params)
	if len(*es) == before { // a part refused for its own size is not counted again
		validateValues(es, s)
	}
	if len(*es) == before { // expressions are checked against a sound spec
		_, xes := CompileExprs(s)
		*es = append(*es, xes...)
	}
	validateAlerts(es, s.Alerts)
	if len(s.Callbacks) > MaxWebhooks {
		es.add("spec.callbacks", "has %d callbacks; the limit is %d", len(s.Callbacks), MaxWebhooks)
		return
	}
	for i := range s.Callbacks {
		p := fmt.Sprintf("spec.callbacks[%d]", i)
		validateWebhook(es, p+".webhook", &s.Callbacks[i].Webhook)
		validateKinds(es, p+".on", s.Callbacks[i].On, OnSucceeded, OnFailed, OnCancelled)
	}
}

// validateValues checks the JSON values the definition holds in all
// (MaxDefinitionValues), counted part by part as it is stored: the spec
// without its params and steps, then each param, then each step. The
// error names the part that passes the bound, once.
func validateValues(es *Errors, s *JobSpec) {
	rest := *s
	rest.Params, rest.Steps = nil, nil
	total := jsonValues(&rest)
	if total > MaxDefinitionValues {
		es.add("spec", "holds %d JSON values besides its params and steps; the limit is %d in all", total, MaxDefinitionValues)
		return
	}
	add := func(path string, n int) {
		if total <= MaxDefinitionValues && total+n > MaxDefinitionValues {
			es.add(path, "brings the definition to %d JSON values (arrays, objects, strings, numbers, booleans, nulls, anywhere in it); the limit is %d in all", total+n, MaxDefinitionValues)
		}
		total += n
	}
	for _, name := range sortedKeys(s.Params) {
		p := s.Params[name]
		add("spec.params."+name, jsonValues(&p))
	}
	for i := range s.Steps {
		add(fmt.Sprintf("spec.steps[%d]", i), jsonValues(&s.Steps[i]))
	}
}

// jsonValues counts the JSON values of v's JSON form (0 when it has none:
// a payload that is not JSON, which its own check reports).
func jsonValues(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return 0
	}
	return Payload(b).Values()
}

// validateFanOut checks a step's fan-out settings; its list (for_each) is
// checked with its expressions (CompileExprs).
func validateFanOut(es *Errors, p string, st *Step) {
	if st.ForEach == "" {
		if st.MaxParallel != 0 {
			es.add(p+".max_parallel", "applies only with for_each")
		}
		if st.MinSuccess != "" {
			es.add(p+".min_success", "applies only with for_each")
		}
		return
	}
	if st.MaxParallel < 0 || st.MaxParallel > MaxItems {
		es.add(p+".max_parallel", "%d is outside 1..%d (or 0: no bound)", st.MaxParallel, MaxItems)
	}
	if st.MinSuccess != "" {
		if _, _, err := st.MinSuccess.parse(); err != nil {
			es.add(p+".min_success", "%v", err)
		}
	}
}

// validateJobStep refuses what a step that runs another job cannot take:
// its end is its child run's, which retries and times out by its own
// steps' settings.
func validateJobStep(es *Errors, p string, st *Step) {
	if st.Run.Job == nil {
		return
	}
	if len(st.Payload) > 0 {
		es.add(p+".payload", "a step that runs a job gives it params (run.job.params), not a payload")
	}
	if st.Retry != nil {
		es.add(p+".retry", "a step that runs a job is retried by retrying its run (runs retry), which retries the child run from where it failed; the child's steps retry by their own policies")
	}
	if st.Timeout != nil {
		es.add(p+".timeout", "a step that runs a job ends with its child run, which its own steps' timeouts bound")
	}
	if st.ForEach != "" {
		es.add(p+".for_each", "a step that runs a job cannot fan out (a fan-out's items run on workers)")
	}
}

func validateAlerts(es *Errors, a *Alerts) {
	if a == nil {
		return
	}
	if d := a.StartWithin; d != nil && (d.Duration < MinStartWithin || d.Duration > MaxWithin) {
		es.add("spec.alerts.start_within", "%s is outside %s..%s", d.Duration, MinStartWithin, MaxWithin)
	}
	if d := a.FinishWithin; d != nil && (d.Duration < time.Second || d.Duration > MaxWithin) {
		es.add("spec.alerts.finish_within", "%s is outside 1s..%s", d.Duration, MaxWithin)
	}
	validateKinds(es, "spec.alerts.on", a.On, AlertFailure, AlertDeadLetter, AlertMissed, AlertStuck)
	if slices.Contains(a.On, AlertMissed) && a.StartWithin == nil {
		es.add("spec.alerts.on", "missed needs start_within: how late a start may be")
	}
	if len(a.Notify) > MaxWebhooks {
		es.add("spec.alerts.notify", "has %d receivers; the limit is %d", len(a.Notify), MaxWebhooks)
		return
	}
	for i, n := range a.Notify {
		p := fmt.Sprintf("spec.alerts.notify[%d].webhook", i)
		if n.Webhook == nil {
			es.add(p, "is required")
			continue
		}
		validateWebhook(es, p, n.Webhook)
	}
}

func validateKinds(es *Errors, p string, kinds []string, allowed ...string) {
	seen := map[string]bool{}
	for _, k := range kinds {
		switch {
		case !slices.Contains(allowed, k):
			es.add(p, "%q is not one of %s", k, strings.Join(allowed, ", "))
		case seen[k]:
			es.add(p, "%q is listed twice", k)
		}
		seen[k] = true
	}
}

func validateWebhook(es *Errors, p string, w *Webhook) {
	u, err := url.Parse(w.URL)
	switch {
	case len(w.URL) > MaxWebhookURL:
		es.add(p+".url", "is %d characters; the limit is %d", len(w.URL), MaxWebhookURL)
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		es.add(p+".url", "%q is not an absolute http or https URL", w.URL)
	}
	validateHeaders(es, p+".headers", w.Headers)
	if w.Secret != "" && !IsSecretRef(w.Secret) {
		es.add(p+".secret", "%q is not a secret reference: secret://env/NAME or secret://file/PATH", w.Secret)
	}
}

// MaxSecretRef bounds a secret reference's length.
const MaxSecretRef = 1024

// IsSecretRef reports whether s is a secret reference a worker or a server
// resolves by its grants: secret://env/NAME or secret://file/PATH, at most
// MaxSecretRef characters.
func IsSecretRef(s string) bool {
	ref, ok := strings.CutPrefix(s, "secret://")
	kind, name, _ := strings.Cut(ref, "/")
	return ok && (kind == "env" || kind == "file") && name != "" && len(s) <= MaxSecretRef
}

// validateHeaders checks the HTTP headers of a webhook or an http step:
// how many, and each name a token and each value a field value HTTP can
// send (no line breaks or other control characters), within bounds.
func validateHeaders(es *Errors, p string, headers map[string]string) {
	if len(headers) > MaxHeaders {
		es.add(p, "has %d headers; the limit is %d", len(headers), MaxHeaders)
	}
	for _, k := range sortedKeys(headers) {
		if k == "" || len(k) > MaxNameLen*2 || !httpguts.ValidHeaderFieldName(k) {
			es.add(p, "%q is not a header name", k)
		} else if v := headers[k]; len(v) > MaxHeaderValue || !httpguts.ValidHeaderFieldValue(v) {
			es.add(p+"."+k, "must be at most %d bytes, without line breaks or other control characters", MaxHeaderValue)
		}
	}
}

func validateSettings(es *Errors, p, queue, priority string, timeout *Duration, retry *Retry) {
	if queue != "" {
		if err := ValidateName(queue); err != nil {
			es.add(p+".queue", "%v", err)
		} else if strings.HasPrefix(queue, "orrery_") {
			es.add(p+".queue", "%q: queue names starting with orrery_ are Orrery's own", queue)
		}
	}
	if _, ok := Priorities[priority]; priority != "" && !ok {
		es.add(p+".priority", "%q is not one of critical, high, normal, low", priority)
	}
	positive := func(field string, d *Duration) {
		switch {
		case d == nil:
		case d.Duration <= 0:
			es.add(field, "%s must be positive", d.Duration)
		case d.Duration > MaxStepDuration:
			es.add(field, "%s is longer than %s, the limit", d.Duration, MaxStepDuration)
		}
	}
	positive(p+".timeout", timeout)
	if retry == nil {
		return
	}
	if retry.MaxAttempts < 0 || retry.MaxAttempts > MaxAttempts {
		es.add(p+".retry.max_attempts", "%d is outside 1..%d", retry.MaxAttempts, MaxAttempts)
	}
	positive(p+".retry.initial", retry.Initial)
	positive(p+".retry.max", retry.Max)
	if retry.Initial != nil && retry.Max != nil && retry.Max.Duration > 0 && retry.Max.Duration < retry.Initial.Duration {
		es.add(p+".retry.max", "%s is shorter than initial (%s)", retry.Max.Duration, retry.Initial.Duration)
	}
}

func validateExecutor(es *Errors, p string, e *Executor) {
	n := 0
	if e.HTTP != nil {
		n++
	}
	if e.Command != nil {
		n++
	}
	if e.Handler != "" {
		n++
	}
	if e.Worker != "" {
		n++
	}
	if e.Job != nil {
		n++
	}
	if n != 1 {
		es.add(p, "give exactly one executor: http, command, handler, worker or job")
		return
	}
	switch {
	case e.HTTP != nil:
		u, err := url.Parse(e.HTTP.URL)
		switch {
		case len(e.HTTP.URL) > MaxWebhookURL:
			es.add(p+".http.url", "is %d characters; the limit is %d", len(e.HTTP.URL), MaxWebhookURL)
		case expr.HasExpr(e.HTTP.URL): // checked with its expressions (CompileExprs)
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			es.add(p+".http.url", "%q is not an absolute http or https URL", e.HTTP.URL)
		}
		if !methods[e.HTTP.Method] {
			es.add(p+".http.method", "%q is not one of GET, POST, PUT, PATCH, DELETE", e.HTTP.Method)
		}
		validateHeaders(es, p+".http.headers", e.HTTP.Headers)
	case e.Command != nil:
		switch {
		case len(e.Command.Argv) == 0 || e.Command.Argv[0] == "":
			es.add(p+".command.argv", "needs at least the program to run")
		case strings.Contains(e.Command.Argv[0], "{{"):
			es.add(p+".command.argv", "%q: the program cannot be a template (templates are allowed in the other arguments)", e.Command.Argv[0])
		case !strings.HasPrefix(e.Command.Argv[0], "/"):
			es.add(p+".command.argv", "%q is not an absolute path: workers run programs by absolute path", e.Command.Argv[0])
		}
		for i, a := range e.Command.Argv {
			if i == 0 {
				continue
			}
			if expr.HasExpr(a) {
				continue // checked with its expressions (CompileExprs)
			}
			if _, err := ExpandArg(a, nil); err != nil {
				es.add(fmt.Sprintf("%s.command.argv[%d]", p, i), "%v", err)
			}
		}
		for _, k := range sortedKeys(e.Command.Env) {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				es.add(p+".command.env", "%q is not an environment variable name", k)
			}
		}
	case e.Worker != "":
		if err := ValidateName(e.Worker); err != nil {
			es.add(p+".worker", "%v", err)
		}
	case e.Job != nil:
		if err := ValidateName(e.Job.Name); err != nil {
			es.add(p+".job.name", "%v", err)
		}
		if e.Job.Namespace != "" {
			if err := ValidateName(e.Job.Namespace); err != nil {
				es.add(p+".job.namespace", "%v", err)
			}
		}
		if len(e.Job.Params) > 0 {
			if len(e.Job.Params) > MaxParamsBytes {
				es.add(p+".job.params", "is %d bytes as JSON; a run's params are at most %d", len(e.Job.Params), MaxParamsBytes)
			} else {
				validatePayload(es, p+".job.params", e.Job.Params)
			}
			if b := bytes.TrimSpace(e.Job.Params); len(b) > 0 && b[0] != '{' {
				es.add(p+".job.params", "is not a mapping of param names to values")
			}
		}
	default:
		if err := ValidateName(e.Handler); err != nil {
			es.add(p+".handler", "%v", err)
		}
	}
}

func validatePayload(es *Errors, p string, payload Payload) {
	if len(payload) == 0 {
		return
	}
	if len(payload) > MaxPayloadBytes {
		es.add(p, "is %d bytes; the limit is %d (256 KiB)", len(payload), MaxPayloadBytes)
		return
	}
	if !json.Valid(payload) {
		es.add(p, "is not valid JSON")
		return
	}
	if msg := checkPayload(payload); msg != "" {
		es.add(p, "%s", msg)
	}
}

// checkPayload walks valid JSON without recursion and returns its first
// problem: nesting deeper than MaxPayloadDepth, or a number beyond
// ±MaxPayloadInteger.
//
// Numbers: payloads are kept as JSON text, so a YAML or JSON payload keeps
// its numbers exactly as written (canonicalJSON decodes with UseNumber).
// But the API carries payloads as google.protobuf.Value, whose numbers are
// doubles: past 2^53 an integer there is already rounded when it arrives
// (9007199254740993 comes as 9007199254740992) and nothing can tell. So
// every path, `orrery validate` included, rejects numbers whose magnitude
// exceeds 2^53-1, naming the limit: a number is either exact everywhere or
// refused, never rounded silently. Larger integers (IDs, amounts in
// minor units) go in strings. Fractional numbers within the range pass;
// over the API they are doubles, as in most JSON consumers.
func checkPayload(payload []byte) string {
	d := json.NewDecoder(bytes.NewReader(payload))
	d.UseNumber()
	depth := 0
	for {
		tok, err := d.Token()
		if err != nil {
			return "" // io.EOF: json.Valid passed
		}
		switch v := tok.(type) {
		case json.Delim:
			if v == '{' || v == '[' {
				if depth++; depth > MaxPayloadDepth {
					return fmt.Sprintf("nests arrays and objects more than %d levels deep; the limit is %d", MaxPayloadDepth, MaxPayloadDepth)
				}
			} else {
				depth--
			}
		case json.Number:
			if !safeNumber(string(v)) {
				n := string(v)
				if len(n) > 40 {
					n = n[:37] + "..."
				}
				return fmt.Sprintf("number %s is beyond ±%d (2^53-1), the limit: the API carries payload numbers as doubles, which would round it; send it as a string", n, MaxPayloadInteger)
			}
		}
	}
}

// safeNumber reports whether a JSON number's magnitude is at most
// MaxPayloadInteger.
func safeNumber(n string) bool {
	if i, err := strconv.ParseInt(n, 10, 64); err == nil {
		return i >= -MaxPayloadInteger && i <= MaxPayloadInteger
	}
	f, err := strconv.ParseFloat(n, 64)
	return err == nil && math.Abs(f) <= MaxPayloadInteger
}

// EffectiveTimeout and friends resolve a step's settings against the job's
// defaults and Orrery's own.
const (
	DefaultTimeout      = time.Hour
	DefaultMaxAttempts  = 3
	DefaultRetryInitial = time.Second
	DefaultRetryMax     = 5 * time.Minute
)

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

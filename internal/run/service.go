package run

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/metrics"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/internal/usage"
)

// ErrNotFound: no run (or dead letter) with that id in the caller's tenant.
var ErrNotFound = errors.New("run not found")

// Service serves run history and the run-level control plane.
type Service struct {
	pool       *pgxpool.Pool
	jobs       *job.Service
	dispatcher *dispatch.Dispatcher
	// Metrics counts the runs this service's calls finish (cancel, and a
	// trigger's cancel_previous); nil: none. Set before use.
	Metrics *metrics.Metrics
}

// NewService returns a Service.
func NewService(pool *pgxpool.Pool, jobs *job.Service, d *dispatch.Dispatcher) *Service {
	return &Service{pool: pool, jobs: jobs, dispatcher: d}
}

// applier writes the service's transitions.
func (s *Service) applier() *Applier { return &Applier{Dispatcher: s.dispatcher, Metrics: s.Metrics} }

// Run is one run as the API shows it.
type Run struct {
	ID           uuid.UUID           `json:"id"`
	JobID        uuid.UUID           `json:"job_id"`
	Namespace    string              `json:"namespace"`
	Job          string              `json:"job"`
	JobVersion   int64               `json:"job_version"`
	Shard        int                 `json:"shard"`
	ScheduledFor time.Time           `json:"scheduled_for"`
	Trigger      lifecycle.Trigger   `json:"trigger"`
	Status       lifecycle.RunStatus `json:"status"`
	Reason       string              `json:"reason,omitempty"`
	CreatedAt    time.Time           `json:"created_at"`
	StartedAt    *time.Time          `json:"started_at,omitempty"`
	FinishedAt   *time.Time          `json:"finished_at,omitempty"`
	// Params are the run's params: nil when the job declares none.
	Params json.RawMessage `json:"params,omitempty"`
	// Upstream is run.upstream for a run of trigger upstream (GetRun).
	Upstream json.RawMessage `json:"upstream,omitempty"`
	// Event is run.event for a run of trigger event (GetRun).
	Event json.RawMessage `json:"event,omitempty"`
	// FirstError is, in List, the error of a failed run's first task to
	// fail for good (its first 300 characters).
	FirstError string `json:"first_error,omitempty"`
	// Steps are, in List with WithSteps, its tasks' statuses by step.
	Steps map[string]string `json:"steps,omitempty"`
	// ParentRun and ParentStep are, for a run of trigger parent (Get), the
	// run and step that started it.
	ParentRun  *uuid.UUID `json:"parent_run_id,omitempty"`
	ParentStep string     `json:"parent_step,omitempty"`
	parentJob  [2]string  // the parent run's namespace and job, to check a reader's scope
	// TriggeredBy is, for a run triggered by hand (Get), who did.
	TriggeredBy string `json:"triggered_by,omitempty"`
	// ConcurrencyKeys are, for a run of a job with concurrency keys
	// (Get), their values, in the order of spec.concurrency.
	ConcurrencyKeys []string `json:"concurrency_keys,omitempty"`
	// DebounceKey is, for a run of a job with a debounce a trigger wrote
	// (Get), its key's value ("" for a job without a key); DebounceAt when
	// it starts, while its triggers may still put it off (nil once it
	// started); DebounceCount how many triggers it took.
	DebounceKey   *string    `json:"debounce_key,omitempty"`
	DebounceAt    *time.Time `json:"debounce_at,omitempty"`
	DebounceCount int        `json:"debounce_count,omitempty"`
}

// Detail is a run with its tasks and their attempts.
type Detail struct {
	Run
	Tasks []Task // a task per step: a fan-out's is its group
	// Items are the items asked for (ItemsPage), in item order.
	Items []Task
}

// ItemsPage asks Get for a page of a fan-out's items: of the step Of,
// from index From, at most MaxItemsPage.
type ItemsPage struct {
	Of   string
	From int
}

// MaxItemsPage bounds the items Get answers at once.
const MaxItemsPage = 500

// ItemCounts are a fan-out's items by status, and how many must succeed.
type ItemCounts struct {
	Total    int
	ByStatus map[lifecycle.TaskStatus]int
	Needed   int
}

// Task is one step of a run.
type Task struct {
	store.Task
	Attempts []store.EveryAttempt
	// Parents are the tasks this one waits for.
	Parents []uuid.UUID
	// WaitReason says why a queued or retrying task is not yet admitted
	// (see dispatch.WaitReason), or what a parked step waits for ("sleep
	// until T"); empty otherwise.
	WaitReason string
	// Items, for a fan-out's group, are its items' counts (nil before it
	// expanded).
	Items *ItemCounts
	// Approval, for a step parked on an approval, is what it asks and the
	// decisions so far.
	Approval *PendingApproval
	parked   *store.ParkedOfRunsRow // its parked row, for a parked step
}

// upstreamFor is run.upstream as actor a may read it: without the
// upstream run's outputs when a's scope does not show its job (the
// downstream job's author could read them; its readers may not).
func upstreamFor(a job.Actor, upstream json.RawMessage) json.RawMessage {
	if len(upstream) == 0 || a.Scope == nil {
		return upstream
	}
	var u map[string]any
	if json.Unmarshal(upstream, &u) != nil {
		return nil
	}
	ns, _ := u["namespace"].(string)
	name, _ := u["job"].(string)
	if a.Scope.Sees(ns, name) {
		return upstream
	}
	delete(u, "outputs")
	delete(u, "outputs_cut")
	out, err := json.Marshal(u)
	if err != nil {
		return nil
	}
	return out
}

// fromListRow is a run as the API shows it: its status is its view (a
// pending run with a started task is running), and it started with its
// first task when the run's own started_at is not written yet.
// fromGetRow is a run as GetRun reads it: ListRuns' view and its params.
func fromGetRow(r store.GetRunRow) Run {
	out := fromListRow(store.ListRunsRow{ID: r.ID, TenantID: r.TenantID, JobID: r.JobID, JobVersion: r.JobVersion, Shard: r.Shard,
		ScheduledFor: r.ScheduledFor, Trigger: r.Trigger, Status: r.Status, Reason: r.Reason, CreatedAt: r.CreatedAt,
		StartedAt: r.StartedAt, FirstStart: r.FirstStart, FinishedAt: r.FinishedAt, Namespace: r.Namespace, JobName: r.JobName})
	if len(r.Params) > 0 {
		out.Params = json.RawMessage(r.Params)
	}
	if len(r.Event) > 0 {
		out.Event = json.RawMessage(r.Event)
	}
	if len(r.Upstream) > 0 {
		out.Upstream = json.RawMessage(r.Upstream)
	}
	out.ParentRun, out.ParentStep, out.parentJob = r.ParentRunID, r.ParentStep, [2]string{r.ParentNamespace, r.ParentJob}
	out.TriggeredBy = r.TriggeredBy
	for _, k := range r.ConcurrencyKeys {
		out.ConcurrencyKeys = append(out.ConcurrencyKeys, valueOf(k))
	}
	out.DebounceKey, out.DebounceCount = r.DebounceKey, int(r.DebounceCount)
	if r.Debouncing { // (once it started, debounce_at is when it did)
		out.DebounceAt = r.DebounceAt
	}
	return out
}

func fromListRow(r store.ListRunsRow) Run {
	started := r.StartedAt
	if started == nil {
		started = r.FirstStart
	}
	return Run{ID: r.ID, JobID: r.JobID, Namespace: r.Namespace, Job: r.JobName, JobVersion: r.JobVersion, Shard: int(r.Shard),
		ScheduledFor: r.ScheduledFor.UTC(), Trigger: r.Trigger, Status: lifecycle.RunStatus(r.Status).Ended(), Reason: r.Reason, CreatedAt: r.CreatedAt.UTC(),
		StartedAt: started, FinishedAt: r.FinishedAt}
}

// ListFilter selects runs; zero fields do not filter.
type ListFilter struct {
	Job       job.Ref
	Namespace string // with Job unset
	Trigger   string
	// WithSteps fills Run.Steps: with Job set and at most 100 a page;
	// at most maxStepStatuses steps in all (the runs' first, by run and
	// step name).
	WithSteps bool
	Status    string
	Since     *time.Time
	Until     *time.Time
	PageSize  int
	PageToken string
}

// maxStepStatuses bounds the steps ListRuns with WithSteps answers.
const maxStepStatuses = 20_000

type runToken struct {
	At time.Time `json:"a"`
	ID uuid.UUID `json:"i"`
}

var maxUUID = uuid.Max

// List returns one page of runs, newest instant first.
func (s *Service) List(ctx context.Context, a job.Actor, f ListFilter) ([]Run, string, error) {
	size, err := job.PageSize(f.PageSize)
	if err != nil {
		return nil, "", err
	}
	before, err := decodeRunToken(f.PageToken)
	if err != nil {
		return nil, "", err
	}
	jobID, err := s.jobID(ctx, a, f.Job)
	if err != nil {
		return nil, "", err
	}
	if f.WithSteps && (jobID == nil || size > 100) {
		return nil, "", &dag.FieldError{Field: "with_steps", Message: "give a job and a page_size of at most 100"}
	}
	p := store.ListRunsParams{TenantID: a.Tenant, JobID: jobID, Since: f.Since, Until: f.Until, BeforeAt: before.At, BeforeID: before.ID, PageSize: int32(size + 1)}
	p.Scoped, p.ScopeNamespaces, p.ScopeJobs = a.Scope.Params()
	if f.Namespace != "" {
		p.Namespace = &f.Namespace
	}
	if f.Trigger != "" {
		switch lifecycle.Trigger(f.Trigger) {
		case lifecycle.TriggerSchedule, lifecycle.TriggerBackfill, lifecycle.TriggerManual, lifecycle.TriggerUpstream, lifecycle.TriggerParent, lifecycle.TriggerEvent:
		default:
			return nil, "", &dag.FieldError{Field: "trigger", Message: fmt.Sprintf("%q is not one of schedule, backfill, manual, upstream, parent, event", f.Trigger)}
		}
		p.Trigger = &f.Trigger
	}
	if f.Status != "" {
		st, err := lifecycle.ParseRunStatus(f.Status)
		if err != nil {
			return nil, "", &dag.FieldError{Field: "status", Message: err.Error()}
		}
		status := string(st.Ended()) // dead_lettered, as clients of earlier versions ask: failed
		p.Status = &status
	}
	rows, err := store.New(store.PlannedPerCall(s.pool)).ListRuns(ctx, p)
	if err != nil {
		return nil, "", err
	}
	rows, next := store.NextPage(rows, size, func(r store.ListRunsRow) any { return runToken{At: r.ScheduledFor, ID: r.ID} })
	out := make([]Run, len(rows))
	byID := make(map[uuid.UUID]*Run, len(rows))
	for i, r := range rows {
		out[i] = fromListRow(r)
		out[i].FirstError = r.FirstError
		byID[r.ID] = &out[i]
	}
	if f.WithSteps && len(rows) > 0 {
		ids := make([]uuid.UUID, len(rows))
		for i, r := range rows {
			ids[i] = r.ID
		}
		steps, err := store.New(store.PlannedPerCall(s.pool)).RunStepStatuses(ctx, store.RunStepStatusesParams{RunIds: ids, MaxRows: maxStepStatuses})
		if err != nil {
			return nil, "", err
		}
		for _, st := range steps {
			r := byID[st.RunID]
			if r.Steps == nil {
				r.Steps = map[string]string{}
			}
			r.Steps[st.Step] = string(st.Status)
		}
	}
	return out, next, nil
}

// Get returns a run with its tasks and attempts, a fan-out's items
// counted in its group, and the page of items asked for (none when
// page.Of is empty).
func (s *Service) Get(ctx context.Context, a job.Actor, id uuid.UUID, page ItemsPage) (*Detail, error) {
	if page.From < 0 {
		return nil, &dag.FieldError{Field: "items_from", Message: fmt.Sprintf("%d is negative", page.From)}
	}
	// One snapshot for the run, its tasks, attempts and edges, read again
	// when a serializable database refuses it (read-only transactions
	// can be, there).
	var r store.GetRunRow
	var tasks []store.Task
	var attempts []store.EveryAttempt
	var edges []store.TaskEdge
	err := store.InTx(ctx, s.pool, func(q *store.Queries) error {
		var err error
		if r, err = q.GetRun(ctx, store.GetRunParams{TenantID: a.Tenant, ID: id}); err != nil {
			return err
		}
		if tasks, err = q.RunTasks(ctx, id); err != nil {
			return err
		}
		if attempts, err = q.RunAttempts(ctx, id); err != nil {
			return err
		}
		edges, err = q.RunEdges(ctx, id)
		return err
	})
	if store.IsNotFound(err) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	q := store.New(s.pool)
	byTask := map[uuid.UUID][]store.EveryAttempt{}
	for _, at := range attempts {
		byTask[at.TaskID] = append(byTask[at.TaskID], at)
	}
	parents := map[uuid.UUID][]uuid.UUID{}
	for _, e := range edges {
		parents[e.ChildID] = append(parents[e.ChildID], e.ParentID)
	}
	d := &Detail{Run: fromGetRow(r)}
	d.Upstream = upstreamFor(a, d.Upstream)
	if d.ParentRun != nil && !a.Scope.Sees(d.parentJob[0], d.parentJob[1]) { // the caller's run, which its reader may not see
		d.ParentRun, d.ParentStep = nil, ""
	}
	var group *store.Task
	for _, t := range tasks {
		d.Tasks = append(d.Tasks, Task{Task: t, Attempts: byTask[t.ID], Parents: parents[t.ID]})
		if page.Of != "" && t.Step == page.Of && t.FanOut {
			group = &t
		}
	}
	if page.Of != "" && group == nil {
		return nil, &dag.FieldError{Field: "items_of", Message: fmt.Sprintf("the run has no step %.100q with for_each", page.Of)}
	}
	if err := s.countItems(ctx, q, r.JobID, r.JobVersion, d); err != nil {
		return nil, err
	}
	if group != nil {
		items, err := q.GroupItems(ctx, store.GroupItemsParams{GroupID: group.ID, FromIndex: int32(page.From), MaxItems: MaxItemsPage})
		if err != nil {
			return nil, err
		}
		ids := make([]uuid.UUID, len(items))
		for i, t := range items {
			ids[i] = t.ID
		}
		attempts, err := q.TasksAttempts(ctx, ids)
		if err != nil {
			return nil, err
		}
		of := map[uuid.UUID][]store.EveryAttempt{}
		for _, at := range attempts {
			of[at.TaskID] = append(of[at.TaskID], at)
		}
		for _, t := range items {
			d.Items = append(d.Items, Task{Task: t, Attempts: of[t.ID]})
		}
	}
	if err := waitReasons(ctx, q, d.Tasks); err != nil {
		return nil, err
	}
	if err := waitReasons(ctx, q, d.Items); err != nil {
		return nil, err
	}
	if err := fillApprovals(ctx, q, s.pool, d); err != nil {
		return nil, err
	}
	return d, nil
}

// countItems fills in the items' counts of d's fan-out groups (one query,
// none for a run without any).
func (s *Service) countItems(ctx context.Context, q *store.Queries, jobID uuid.UUID, version int64, d *Detail) error {
	groups := map[uuid.UUID]*Task{}
	for i := range d.Tasks {
		if t := &d.Tasks[i]; t.FanOut && t.ItemsTotal.Valid {
			n := int(t.ItemsTotal.Int32)
			t.Items = &ItemCounts{Total: n, ByStatus: map[lifecycle.TaskStatus]int{}, Needed: n}
			groups[t.ID] = t
		}
	}
	if len(groups) == 0 {
		return nil
	}
	spec, err := specs.get(ctx, s.pool, jobID, version)
	if err != nil {
		return err
	}
	for _, t := range groups {
		if i := spec.stepIndex(t.Step); i >= 0 {
			t.Items.Needed = spec.Steps[i].MinSuccess.Need(t.Items.Total)
		}
	}
	rows, err := q.ItemCounts(ctx, d.ID)
	if err != nil {
		return err
	}
	for _, r := range rows {
		if t := groups[r.GroupID]; t != nil {
			t.Items.ByStatus[r.Status] = int(r.N)
		}
	}
	return nil
}

// waitReasons says why each task waiting for admission waits (one reading
// per queue).
func waitReasons(ctx context.Context, q *store.Queries, tasks []Task) error {
	if err := parkedReasons(ctx, q, tasks); err != nil {
		return err
	}
	heldOn := func(t *store.Task) bool { return t.FlowWait != nil && t.Status == lifecycle.TaskWaiting } // by a step key (flow.go)
	var keys []flowKey
	for i := range tasks {
		if t := &tasks[i].Task; heldOn(t) {
			keys = append(keys, flowKey{t.TenantID, *t.FlowWait})
		}
	}
	var holders map[flowKey]int
	if len(keys) > 0 {
		var err error
		if holders, err = countHolders(ctx, q, keys); err != nil {
			return err
		}
	}
	var now time.Time
	byQueue := map[string]string{}
	for i := range tasks {
		t := &tasks[i].Task
		if heldOn(t) {
			k := flowKey{t.TenantID, *t.FlowWait}
			tasks[i].WaitReason = fmt.Sprintf("%s %s %d/%d", ReasonKeyHeld, k.key, holders[k], limitOn(t.FlowKeys, t.FlowLimits, k.key))
			continue
		}
		if t.AdmittedAt != nil || (t.Status != lifecycle.TaskQueued && t.Status != lifecycle.TaskRetrying) {
			continue
		}
		if now.IsZero() {
			var err error
			if now, err = q.DatabaseNow(ctx); err != nil {
				return err
			}
		}
		if t.ReadyAt != nil && t.ReadyAt.After(now) {
			if lined := t.RateAt != nil && t.RateAt.Equal(*t.ReadyAt); lined && t.RateKey != nil {
				tasks[i].WaitReason = RateWait(*t.RateKey, t.RateLimit, t.RatePerMs, t.ReadyAt.Sub(now))
			} else {
				tasks[i].WaitReason = "retry backoff until " + t.ReadyAt.UTC().Format(time.RFC3339Nano)
			}
			continue
		}
		need := tasks[i].Resources()
		key := t.Queue + "\x00" + need.String() // tasks of one size wait for one reason
		why, ok := byQueue[key]
		if !ok {
			var err error
			if why, err = dispatch.WaitReason(ctx, q, t.TenantID, t.Queue, need); err != nil {
				return err
			}
			byQueue[key] = why
		}
		tasks[i].WaitReason = why
	}
	return nil
}

// parkedReasons says what each parked step waits for ("sleep until T",
// "wait for order.shipped until T": docs/parked-steps.md), read from the parked rows of the runs that have
// one (a running task on no worker that started no child run).
func parkedReasons(ctx context.Context, q *store.Queries, tasks []Task) error {
	var runs []uuid.UUID
	for _, t := range tasks {
		if t.Status == lifecycle.TaskRunning && t.JobStep && t.ChildRunID == nil && !slices.Contains(runs, t.RunID) {
			runs = append(runs, t.RunID)
		}
	}
	if len(runs) == 0 {
		return nil
	}
	rows, err := q.ParkedOfRuns(ctx, runs)
	if err != nil {
		return err
	}
	byTask := make(map[uuid.UUID]*store.ParkedOfRunsRow, len(rows))
	for i := range rows {
		byTask[rows[i].TaskID] = &rows[i]
	}
	for i := range tasks {
		r := byTask[tasks[i].ID]
		tasks[i].parked = r
		switch {
		case r == nil || r.WakeAt == nil:
		case r.EventType != nil:
			tasks[i].WaitReason = "wait for " + *r.EventType + " until " + r.WakeAt.UTC().Format(time.RFC3339)
		default: // (an approval's says more: fillApprovals)
			tasks[i].WaitReason = r.Kind + " until " + r.WakeAt.UTC().Format(time.RFC3339)
		}
	}
	return nil
}

// Trigger starts a run of a job now (trigger "manual", instant = the
// database's now). The job's overlap policy applies unless ignoreOverlap.
// With an idempotency key, a replay returns the first run; another request
// under the same key is job.ErrIdempotencyConflict.
func (s *Service) Trigger(ctx context.Context, a job.Actor, ref job.Ref, key string, ignoreOverlap bool) (*Run, error) {
	return s.TriggerWith(ctx, a, ref, TriggerOptions{IdempotencyKey: key, IgnoreOverlap: ignoreOverlap})
}

// TriggerOptions are a manual trigger's choices.
type TriggerOptions struct {
	// IdempotencyKey makes a trigger sent twice start one run.
	IdempotencyKey string
	// IgnoreOverlap starts the run whatever the job's overlap policy says.
	IgnoreOverlap bool
	// Params are values of the job's params (the defaults fill in the
	// rest): typed against its declaration; when they do not fit (a *dag.FieldError), and nothing is written.
	Params map[string]dag.Payload
	// ParamTexts are values written as text (dag.Param.ParamText).
	ParamTexts map[string]string
}

// paramValues are the params a trigger gave, its texts read as their
// params' types.
func paramValues(spec *dag.JobSpec, o TriggerOptions) (map[string]dag.Payload, error) {
	if len(o.ParamTexts) == 0 {
		return o.Params, nil
	}
	out := make(map[string]dag.Payload, len(o.Params)+len(o.ParamTexts))
	for k, v := range o.Params {
		out[k] = v
	}
	for k, text := range o.ParamTexts {
		p, declared := spec.Params[k]
		_, twice := out[k]
		switch {
		case twice:
			return nil, &dag.FieldError{Field: "params." + k, Message: "given twice, as a value and as text"}
		case !declared:
			out[k] = dag.Payload(`null`) // RunParams names it
			continue
		}
		v, err := p.ParamText(text)
		if err != nil {
			return nil, &dag.FieldError{Field: "params." + k, Message: err.Error()}
		}
		out[k] = v
	}
	return out, nil
}

// TriggerWith starts a run of a job now, as Trigger, with params.
func (s *Service) TriggerWith(ctx context.Context, a job.Actor, ref job.Ref, o TriggerOptions) (*Run, error) {
	key, ignoreOverlap := o.IdempotencyKey, o.IgnoreOverlap
	if err := job.CheckIdempotencyKey(key); err != nil {
		return nil, err
	}
	// The tenant's storage quotas, read before the transaction (see
	// usage.RunRooms).
	var rooms usage.Rooms
	err := store.Retry(ctx, func() (err error) { // (one statement: retried alone on a serialization failure)
		rooms, err = usage.RunRooms(ctx, store.New(s.pool), []uuid.UUID{a.Tenant})
		return err
	})
	if err != nil {
		return nil, err
	}
	var out Run
	err = store.InRawTx(ctx, s.pool, func(tx pgx.Tx) error {
		q := store.New(tx)
		row, err := job.Lock(ctx, q, a, ref)
		if err != nil {
			return err
		}
		if row.Status == job.StatusDeleted {
			return fmt.Errorf("%w: %s", job.ErrDeleted, ref)
		}
		given, _ := json.Marshal([]any{o.Params, o.ParamTexts}) // sorted keys: equal values hash alike
		reqHash := sha256.Sum256([]byte(fmt.Sprintf("%s|%v|%s", row.ID, ignoreOverlap, given)))
		if key != "" {
			prev, err := q.GetTriggerKey(ctx, store.GetTriggerKeyParams{TenantID: a.Tenant, Key: key})
			switch {
			case err == nil && string(prev.RequestHash) != string(reqHash[:]):
				return job.ErrIdempotencyConflict
			case err == nil:
				return json.Unmarshal(prev.Response, &out)
			case !store.IsNotFound(err):
				return err
			}
		}
		var spec dag.JobSpec
		if err := json.Unmarshal(row.Spec, &spec); err != nil {
			return err
		}
		values, err := paramValues(&spec, o)
		if err != nil {
			return err
		}
		params, err := spec.RunParams(values)
		if err != nil {
			return err
		}
		if params == nil {
			params = dag.Payload{} // given (none): not a scheduled run's
		}
		now, err := q.DatabaseNow(ctx)
		if err != nil {
			return err
		}
		status, reason := lifecycle.RunPending, ""
		// (a debounced trigger's overlap is weighed when its run starts: FireDebounced)
		if !ignoreOverlap && spec.Debounce == nil {
			d, previous, err := weighOverlap(ctx, q, row.ID, spec.Overlap)
			if err != nil {
				return err
			}
			status, reason = d.Status, d.Reason
			if len(previous) > 0 {
				if _, err := s.applier().Cancel(ctx, tx, previous, lifecycle.ReasonCancelledByTrigger); err != nil {
					return err
				}
			}
		}
		ref := JobRef{ID: row.ID, Tenant: row.TenantID, Version: row.Version, Shard: int(row.Shard), Spec: &spec}
		news := []New{{Job: ref, At: now, Trigger: lifecycle.TriggerManual, Status: status, Reason: reason, Params: params, By: a.Principal,
			NoDebounce: ignoreOverlap}}
		ids, err := s.applier().Insert(ctx, tx, news, nil, rooms.Clone())
		if err != nil {
			return err
		}
		status, reason = news[0].Status, news[0].Reason // (its concurrency keys may hold it back)
		if ids[0] == uuid.Nil {
			return errors.New("a run for this instant exists already; trigger again")
		}
		out = Run{ID: ids[0], JobID: row.ID, Namespace: row.Namespace, Job: row.Name, JobVersion: row.Version, Shard: int(row.Shard),
			ScheduledFor: now.UTC(), Trigger: lifecycle.TriggerManual, Status: status, Reason: reason, CreatedAt: now.UTC()}
		if len(params) > 0 {
			out.Params = json.RawMessage(params)
		}
		if d := news[0].Debounced; d != nil { // a debounced run, maybe written by an earlier trigger
			if d.Joined {
				out.ScheduledFor, out.CreatedAt = d.ScheduledFor.UTC(), d.CreatedAt.UTC()
			}
			at := d.At.UTC()
			out.DebounceKey, out.DebounceAt, out.DebounceCount = &d.Key, &at, d.Count
		}
		snap, _ := json.Marshal(out)
		if err := q.InsertRunAudit(ctx, store.InsertRunAuditParams{
			ID: uuid.Must(uuid.NewV7()), TenantID: a.Tenant, Actor: a.Name, Action: "trigger", TargetKind: "job",
			TargetID: row.ID, TargetName: row.Namespace + "/" + row.Name, After: snap,
		}); err != nil {
			return err
		}
		if key != "" {
			return q.InsertTriggerKey(ctx, store.InsertTriggerKeyParams{TenantID: a.Tenant, Key: key, RequestHash: reqHash[:], Response: snap})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// MaxReason bounds the reason a cancellation gives.
const MaxReason = 1024

// CancelRun cancels a run's unfinished tasks and the run.
func (s *Service) CancelRun(ctx context.Context, a job.Actor, id uuid.UUID, reason string) (*Run, error) {
	switch {
	case len(reason) > MaxReason:
		return nil, &dag.FieldError{Field: "reason", Message: fmt.Sprintf("is %d bytes; the limit is %d", len(reason), MaxReason)}
	case !dag.IsText(reason):
		return nil, &dag.FieldError{Field: "reason", Message: "is not text (a NUL character or invalid UTF-8)"}
	}
	if reason == "" {
		reason = "cancelled by " + a.Name
	}
	err := store.InRawTx(ctx, s.pool, func(tx pgx.Tx) error {
		q := store.New(tx)
		r, err := q.GetRun(ctx, store.GetRunParams{TenantID: a.Tenant, ID: id})
		if store.IsNotFound(err) {
			return fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		if err != nil {
			return err
		}
		if _, err := q.LockRun(ctx, id); err != nil {
			return err
		}
		cancelled, err := s.applier().Cancel(ctx, tx, []uuid.UUID{id}, reason)
		if err != nil || len(cancelled) == 0 {
			return err // finished already: nothing to do
		}
		before, _ := json.Marshal(fromGetRow(r))
		if err := q.InsertRunAudit(ctx, store.InsertRunAuditParams{
			ID: uuid.Must(uuid.NewV7()), TenantID: a.Tenant, Actor: a.Name, Action: "cancel", TargetKind: "run",
			TargetID: id, TargetName: r.Namespace + "/" + r.JobName, Before: before,
		}); err != nil {
			return err
		}
		if r.Debouncing {
			return nil // it was never active: no run waited for its end
		}
		_, err = s.applier().in(tx).promoteQueued(ctx, r.JobID, r.ConcurrencyKeys)
		return err
	})
	if err != nil {
		return nil, err
	}
	d, err := s.Get(ctx, a, id, ItemsPage{})
	if err != nil {
		return nil, err
	}
	return &d.Run, nil
}

// DeadLetter is a task that failed for good.
type DeadLetter = store.ListDeadLettersRow

// ListDeadLetters returns one page of dead-lettered tasks, newest first.
func (s *Service) ListDeadLetters(ctx context.Context, a job.Actor, jobRef job.Ref, pageSizeReq int, token string) ([]DeadLetter, string, error) {
	size, err := job.PageSize(pageSizeReq)
	if err != nil {
		return nil, "", err
	}
	before, err := decodeRunToken(token)
	if err != nil {
		return nil, "", err
	}
	jobID, err := s.jobID(ctx, a, jobRef)
	if err != nil {
		return nil, "", err
	}
	return s.deadLetters(ctx, a, jobID, size, before)
}

// decodeRunToken reads a page token of runs or dead letters ("" = first page).
func decodeRunToken(token string) (runToken, error) {
	before := runToken{At: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), ID: maxUUID}
	if token != "" && store.DecodePageToken(token, &before) != nil {
		return before, &dag.FieldError{Field: "page_token", Message: "malformed; pass back next_page_token"}
	}
	return before, nil
}

// jobID resolves an optional job reference (nil: no job given).
func (s *Service) jobID(ctx context.Context, a job.Actor, ref job.Ref) (*uuid.UUID, error) {
	if ref == (job.Ref{}) {
		return nil, nil
	}
	j, err := s.jobs.Get(ctx, a, ref)
	if err != nil {
		return nil, err
	}
	return &j.ID, nil
}

// deadLetters reads one page of dead letters, of one job if jobID is set.
func (s *Service) deadLetters(ctx context.Context, a job.Actor, jobID *uuid.UUID, size int, before runToken) ([]DeadLetter, string, error) {
	p := store.ListDeadLettersParams{TenantID: a.Tenant, JobID: jobID, BeforeAt: before.At, BeforeID: before.ID, PageSize: int32(size + 1)}
	p.Scoped, p.ScopeNamespaces, p.ScopeJobs = a.Scope.Params()
	rows, err := store.New(s.pool).ListDeadLetters(ctx, p)
	if err != nil {
		return nil, "", err
	}
	rows, next := store.NextPage(rows, size, func(r store.ListDeadLettersRow) any { return runToken{At: *r.FinishedAt, ID: r.ID} })
	return rows, next, nil
}

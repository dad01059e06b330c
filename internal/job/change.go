package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/resources"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/internal/usage"
)

// Changing a job: its definition (Update), and its status (pause,
// resume, delete), each audited in its own transaction.

// Update replaces a job's definition if expectedVersion is still current,
// bumping the version. Name and namespace cannot change. An update that
// changes nothing returns the job as it is, with no new version.
func (s *Service) Update(ctx context.Context, a Actor, ref Ref, res dag.Resource, expectedVersion int64) (*Job, error) {
	if expectedVersion <= 0 {
		return nil, &dag.FieldError{Field: "expected_version", Message: "required: the version you read (optimistic concurrency)"}
	}
	res, spec, err := prepareSpec(res)
	if err != nil {
		return nil, err
	}
	var rooms usage.Rooms
	err = store.Retry(ctx, func() (err error) { // (one statement: retried alone on a serialization failure)
		rooms, err = usage.JobRooms(ctx, store.New(s.pool), []uuid.UUID{a.Tenant})
		return err
	})
	if err != nil {
		return nil, err
	}
	var out *Job
	err = store.InTx(ctx, s.pool, func(q *store.Queries) error {
		row, err := Lock(ctx, q, a, ref)
		if err != nil {
			return err
		}
		before, err := fromRow(row)
		if err != nil {
			return err
		}
		switch {
		case before.Status == StatusDeleted:
			return fmt.Errorf("%w: %s", ErrDeleted, ref)
		case before.Version != expectedVersion:
			return &VersionConflictError{Expected: expectedVersion, Current: before.Version}
		case res.Metadata.Name != before.Name:
			return dag.Errors{{Field: "metadata.name", Message: fmt.Sprintf("cannot change (%q to %q); create a new job instead", before.Name, res.Metadata.Name)}}
		case res.Metadata.Namespace != before.Namespace:
			return dag.Errors{{Field: "metadata.namespace", Message: fmt.Sprintf("cannot change (%q to %q); create a new job instead", before.Namespace, res.Metadata.Namespace)}}
		}
		if sameDefinition(before, res) {
			out = before
			return nil
		}
		d := usage.Delta{}
		if out, err = updateDefinition(ctx, q, a, before, res, spec, nil, d); err != nil {
			return err
		}
		if err := d.Check(rooms); err != nil {
			return err
		}
		return d.Write(ctx, q)
	})
	return out, err
}

// updateDefinition writes a new version of a job's definition, with its
// version row and audit row, counting the change in its size in d. The
// next fire time is recomputed from the database's clock when the
// schedule changed.
func updateDefinition(ctx context.Context, q *store.Queries, a Actor, before *Job, res dag.Resource, spec []byte, src *Source, d usage.Delta) (*Job, error) {
	if !sameAfter(before.Spec.Schedule.After, res.Spec.Schedule.After) { // (an editor of other fields need not see the upstream)
		if err := checkAfter(ctx, q, a, res); err != nil {
			return nil, err
		}
	}
	// A job whose steps run jobs is changed only by an actor that may run
	// them (its params, a condition, are the call's too).
	if err := checkCalls(ctx, q, a, res); err != nil {
		return nil, err
	}
	if err := checkProfiles(ctx, q, a, res); err != nil {
		return nil, err
	}
	next := before.NextFireAt
	if !sameInstants(before.Spec.Schedule, res.Spec.Schedule) && before.Status == StatusActive && !sameInstant(before.Spec.Schedule, res.Spec.Schedule) {
		now, err := q.DatabaseNow(ctx)
		if err != nil {
			return nil, err
		}
		sched, err := schedule.Parse(res.Spec.Schedule)
		if err != nil {
			return nil, err
		}
		next = firstFire(sched.For(res.Metadata.Namespace, res.Metadata.Name), now)
	}
	row, err := q.UpdateJobDefinition(ctx, store.UpdateJobDefinitionParams{
		TenantID: a.Tenant, ID: before.ID, ExpectedVersion: before.Version,
		Description: res.Metadata.Description, Labels: labelsJSON(res.Metadata.Labels), Spec: spec,
		NextFireAt: next, Actor: a.Name, Source: sourceJSON(src),
	})
	if err != nil {
		return nil, err
	}
	// The definition written in place of the one before, which stays as a
	// version of the job's history (until pruneVersions takes it).
	d.Add(row.TenantID, row.Shard, usage.Usage{DefinitionBytes: int64(len(row.Spec)) - before.specBytes, HistoryBytes: before.specBytes})
	if err := writeSchedule(ctx, q, row); err != nil {
		return nil, err
	}
	if err := writeTrigger(ctx, q, row, res.Spec.Schedule.After); err != nil {
		return nil, err
	}
	if err := writeEvent(ctx, q, row, res.Spec.Schedule.Event); err != nil {
		return nil, err
	}
	if err := writeCalls(ctx, q, row, res.Spec, a); err != nil {
		return nil, err
	}
	if err := writeProfiles(ctx, q, row, res.Spec); err != nil {
		return nil, err
	}
	out, err := fromRow(row)
	if err != nil {
		return nil, err
	}
	if err := q.InsertJobVersion(ctx, versionParams(out, a)); err != nil {
		return nil, err
	}
	n, err := audit(ctx, q, a, "update", before, out)
	if err != nil {
		return nil, err
	}
	d.Add(row.TenantID, row.Shard, usage.Usage{HistoryBytes: n})
	return out, pruneVersions(ctx, q, a, out, d)
}

// MaxVersionsKept bounds the versions of a job's definition kept: an
// update prunes the oldest past it that no run kept pins (a run pins the
// version it was made from, which a retry reads), releasing their bytes,
// with an audit row (prune_versions) naming them.
const MaxVersionsKept = 100

// pruneVersions prunes the versions of j past MaxVersionsKept, in q's
// transaction, counting the bytes released in d.
func pruneVersions(ctx context.Context, q *store.Queries, a Actor, j *Job, d usage.Delta) error {
	if j.Version <= MaxVersionsKept {
		return nil
	}
	pruned, err := q.PruneJobVersions(ctx, store.PruneJobVersionsParams{JobID: j.ID, Below: j.Version - MaxVersionsKept + 1})
	if err != nil || len(pruned) == 0 {
		return err
	}
	versions := make([]int64, len(pruned))
	var released int64
	for i, p := range pruned {
		versions[i], released = p.Version, released+p.Bytes
	}
	d.Add(j.Tenant, int32(j.Shard), usage.Usage{HistoryBytes: -released})
	after, _ := json.Marshal(map[string]any{"versions": versions, "kept": MaxVersionsKept, "bytes": released})
	return q.InsertAudit(ctx, store.InsertAuditParams{ID: uuid.Must(uuid.NewV7()), TenantID: j.Tenant, Actor: a.Name, Action: "prune_versions",
		TargetKind: "job_versions", TargetID: j.ID, TargetName: j.Namespace + "/" + j.Name, After: after})
}

func sameDefinition(j *Job, res dag.Resource) bool {
	return len(changedFields(j.Resource(), res)) == 0
}

// Pause stops a job from firing. Pausing a paused job changes nothing.
func (s *Service) Pause(ctx context.Context, a Actor, ref Ref) (*Job, error) {
	return s.setStatus(ctx, a, ref, "pause", func(j *Job, _ time.Time) (string, *time.Time, error) {
		return StatusPaused, j.NextFireAt, nil
	})
}

// Resume lets a paused job fire again. Its next fire time is recomputed
// from now by its misfire policy: skip goes to the first instant after now;
// fire_once fires the latest instant missed while paused; backfill fires up
// to max_backfill of them.
func (s *Service) Resume(ctx context.Context, a Actor, ref Ref) (*Job, error) {
	return s.setStatus(ctx, a, ref, "resume", func(j *Job, now time.Time) (string, *time.Time, error) {
		sched, err := schedule.Parse(j.Spec.Schedule)
		if err != nil {
			return "", nil, err
		}
		if j.NextFireAt == nil {
			return StatusActive, nil, nil
		}
		next, ok := sched.For(j.Namespace, j.Name).CatchUp(lifecycle.MisfireKeep(j.Spec.Misfire, j.Spec.MaxBackfill), *j.NextFireAt, now)
		if !ok {
			return StatusActive, nil, nil
		}
		return StatusActive, &next, nil
	})
}

// Delete marks a job deleted: it never fires again, its name is free for a
// new job, and its history stays.
func (s *Service) Delete(ctx context.Context, a Actor, ref Ref) (*Job, error) {
	return s.setStatus(ctx, a, ref, "delete", func(*Job, time.Time) (string, *time.Time, error) {
		return StatusDeleted, nil, nil
	})
}

type transition func(j *Job, now time.Time) (status string, next *time.Time, err error)

func (s *Service) setStatus(ctx context.Context, a Actor, ref Ref, action string, to transition) (*Job, error) {
	var out *Job
	err := store.InTx(ctx, s.pool, func(q *store.Queries) error {
		var err error
		out, err = setStatusIn(ctx, q, a, ref, action, to)
		return err
	})
	return out, err
}

// PauseForFailures pauses an active job in q's transaction if failing,
// asked once the job is locked (so that it sees a resume committed
// meanwhile), still says so; audited as action pause by actor (the
// system, for pause_after_failures). It reports whether it paused (false:
// the job was paused or deleted already, or no longer failing).
func PauseForFailures(ctx context.Context, q *store.Queries, a Actor, id uuid.UUID, failing func() (bool, error)) (bool, error) {
	paused := false
	_, err := setStatusIn(ctx, q, a, Ref{ID: id}, "pause", func(j *Job, _ time.Time) (string, *time.Time, error) {
		if j.Status != StatusActive {
			return j.Status, j.NextFireAt, nil
		}
		f, err := failing()
		if err != nil || !f {
			return j.Status, j.NextFireAt, err
		}
		paused = true
		return StatusPaused, j.NextFireAt, nil
	})
	if errors.Is(err, ErrDeleted) {
		return false, nil
	}
	return paused, err
}

// setStatusIn is setStatus in q's transaction.
func setStatusIn(ctx context.Context, q *store.Queries, a Actor, ref Ref, action string, to transition) (*Job, error) {
	var out *Job
	err := func() error {
		row, err := Lock(ctx, q, a, ref)
		if err != nil {
			return err
		}
		before, err := fromRow(row)
		if err != nil {
			return err
		}
		if before.Status == StatusDeleted {
			return fmt.Errorf("%w: %s", ErrDeleted, ref)
		}
		now, err := q.DatabaseNow(ctx)
		if err != nil {
			return err
		}
		status, next, err := to(before, now)
		if err != nil {
			return err
		}
		if status == before.Status {
			out = before
			return nil
		}
		d := usage.Delta{}
		row, err = setJobStatus(ctx, q, store.SetJobStatusParams{TenantID: a.Tenant, ID: before.ID, Status: status, NextFireAt: next, Actor: a.Name}, d)
		if err != nil {
			return err
		}
		if out, err = fromRow(row); err != nil {
			return err
		}
		n, err := audit(ctx, q, a, action, before, out)
		if err != nil {
			return err
		}
		d.AddExempt(row.TenantID, row.Shard, usage.Usage{HistoryBytes: n})
		return d.Write(ctx, q)
	}()
	return out, err
}

// setJobStatus changes a live job's status (pause, resume, delete) and
// its schedule row with it, in q's transaction; a deletion is counted in d.
func setJobStatus(ctx context.Context, q *store.Queries, p store.SetJobStatusParams, d usage.Delta) (store.Job, error) {
	row, err := q.SetJobStatus(ctx, p)
	if err != nil {
		return row, err
	}
	if row.Status == StatusDeleted { // its definition stays, as its last version: history
		d.AddExempt(row.TenantID, row.Shard, usage.Usage{Jobs: -1, DefinitionBytes: -int64(len(row.Spec)), HistoryBytes: int64(len(row.Spec))})
	}
	if err := writeSchedule(ctx, q, row); err != nil {
		return row, err
	}
	if row.Status == StatusDeleted { // a pause or resume leaves schedule.after and .event as they are
		if err := q.DeleteJobCalls(ctx, row.ID); err != nil {
			return row, err
		}
		if err := q.DeleteJobProfiles(ctx, row.ID); err != nil { // a deleted job no longer holds its profiles
			return row, err
		}
		if err := q.DeleteJobEvent(ctx, row.ID); err != nil {
			return row, err
		}
		return row, q.DeleteJobTrigger(ctx, row.ID)
	}
	return row, nil
}

// writeSchedule makes job row's schedule row follow the row just written
// in q's transaction (which holds the jobs row's lock, so the lock order
// is the one Lock takes): its shard, and its next fire time if the job is
// active.
func writeSchedule(ctx context.Context, q *store.Queries, row store.Job) error {
	next := row.NextFireAt
	if row.Status != StatusActive {
		next = nil
	}
	if err := q.SetJobSchedule(ctx, store.SetJobScheduleParams{JobID: row.ID, TenantID: row.TenantID, Shard: row.Shard, NextFireAt: next}); err != nil {
		return fmt.Errorf("job %s: schedule: %w", row.ID, err)
	}
	return nil
}

// writeTrigger makes job row's job_triggers row follow a, the
// (normalized) schedule.after of the definition just written.
func writeTrigger(ctx context.Context, q *store.Queries, row store.Job, a *schedule.After) error {
	if a == nil || row.Status == StatusDeleted {
		return q.DeleteJobTrigger(ctx, row.ID)
	}
	return q.SetJobTrigger(ctx, store.SetJobTriggerParams{JobID: row.ID, TenantID: row.TenantID,
		UpstreamNamespace: a.Namespace, UpstreamName: a.Job, Outcomes: a.Outcomes()})
}

// writeEvent makes job row's job_events row follow e, the schedule.event
// of the definition just written.
func writeEvent(ctx context.Context, q *store.Queries, row store.Job, e *schedule.Event) error {
	if e == nil || row.Status == StatusDeleted {
		return q.DeleteJobEvent(ctx, row.ID)
	}
	return q.SetJobEvent(ctx, store.SetJobEventParams{JobID: row.ID, TenantID: row.TenantID, Type: e.Type})
}

// sameInstants reports whether two schedules name the same instants as
// written (after and event, which name none, aside): a change of them
// alone keeps the next fire time.
func sameInstants(a, b schedule.Spec) bool {
	a.After, b.After = nil, nil
	a.Event, b.Event = nil, nil
	return a.Equal(b)
}

// sameAfter reports whether two schedule.after are the same as written.
func sameAfter(a, b *schedule.After) bool {
	return (a == nil) == (b == nil) && (a == nil || schedule.Spec{After: a}.Equal(schedule.Spec{After: b}))
}

// checkAfter refuses a definition whose schedule.after names a job the
// actor may not see (its runs' outputs would reach the job's), or leads,
// through the tenant's live jobs' schedule.after, back to the job itself
// (each run would start the next for ever).
func checkAfter(ctx context.Context, q *store.Queries, actor Actor, res dag.Resource) error {
	a := res.Spec.Schedule.After
	if a == nil {
		return nil
	}
	if !actor.Scope.Sees(a.Namespace, a.Job) {
		return dag.Errors{{Field: "spec.schedule.after.job", Message: fmt.Sprintf("%s/%s is outside what you were granted: a job starts after the jobs its author may read", a.Namespace, a.Job)}}
	}
	chain, err := q.AfterChain(ctx, store.AfterChainParams{TenantID: actor.Tenant, Namespace: a.Namespace, Name: a.Job})
	if err != nil {
		return err
	}
	path := []string{res.Metadata.Namespace + "/" + res.Metadata.Name}
	for _, c := range chain {
		path = append(path, c.Namespace+"/"+c.Name)
		if c.Namespace == res.Metadata.Namespace && c.Name == res.Metadata.Name {
			return dag.Errors{{Field: "spec.schedule.after.job", Message: "makes a cycle of jobs started by each other's ends: " + strings.Join(path, " after ")}}
		}
	}
	return nil
}

// callees lists the jobs a spec's steps run (run.job, namespaces filled
// in by Normalize), each once, as "namespace/name", sorted.
func callees(s dag.JobSpec) []string {
	var out []string
	for _, st := range s.Steps {
		if j := st.Run.Job; j != nil {
			out = append(out, j.Namespace+"/"+j.Name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// writeCalls makes job row's job_calls rows the jobs spec's steps run,
// with the key of a, whose right to run them checkCalls checked.
func writeCalls(ctx context.Context, q *store.Queries, row store.Job, spec dag.JobSpec, a Actor) error {
	if err := q.DeleteJobCalls(ctx, row.ID); err != nil {
		return err
	}
	p := store.InsertJobCallsParams{JobID: row.ID, TenantID: row.TenantID}
	if a.Key != uuid.Nil {
		p.AuthorKey = &a.Key
	}
	for _, c := range callees(spec) {
		ns, name, _ := strings.Cut(c, "/")
		p.Namespaces, p.Names = append(p.Namespaces, ns), append(p.Names, name)
	}
	if len(p.Names) == 0 || row.Status == StatusDeleted {
		return nil
	}
	return q.InsertJobCalls(ctx, p)
}

// checkCalls refuses a definition with a step that runs a job the actor
// may not run (the role a trigger needs: Actor.MayRun; checked at every
// write of a job with such a step, whatever it changes), or that leads,
// through the tenant's live jobs' steps that run jobs, back to the job
// itself (each run would start the next for ever; a cycle made by two
// jobs changed at once is bounded at run time, run.MaxCallDepth). A job
// called need not exist yet: a step that runs a missing job fails when
// it starts, naming it.
func checkCalls(ctx context.Context, q *store.Queries, actor Actor, res dag.Resource) error {
	self := res.Metadata.Namespace + "/" + res.Metadata.Name
	var es dag.Errors
	var p store.CallChainParams
	for i, st := range res.Spec.Steps {
		j := st.Run.Job
		if j == nil {
			continue
		}
		field := fmt.Sprintf("spec.steps[%d].run.job", i)
		switch {
		case j.Namespace+"/"+j.Name == self:
			es = append(es, &dag.FieldError{Field: field + ".name", Message: "runs the job itself: each run would start the next for ever"})
		case actor.MayRun != nil && !actor.MayRun(j.Namespace, j.Name):
			es = append(es, &dag.FieldError{Field: field + ".name", Message: fmt.Sprintf("%s/%s is outside what you were granted: a step runs only jobs its author may run (editor on it)", j.Namespace, j.Name)})
		}
		p.Namespaces, p.Names = append(p.Namespaces, j.Namespace), append(p.Names, j.Name)
	}
	if len(es) > 0 {
		return es
	}
	if len(p.Names) == 0 {
		return nil
	}
	p.TenantID, p.SelfNamespace, p.SelfName = actor.Tenant, res.Metadata.Namespace, res.Metadata.Name
	chain, err := q.CallChain(ctx, p)
	if err != nil {
		return err
	}
	if len(chain) >= 10_000 {
		return dag.Errors{{Field: "spec.steps", Message: "the jobs its steps run run too many others (10,000 links) to check for a cycle"}}
	}
	callers := map[string]string{} // a job reached, and the job whose step runs it
	for _, c := range chain {
		at := c.Namespace + "/" + c.Name
		if _, seen := callers[at]; !seen {
			callers[at] = c.CallerNamespace + "/" + c.CallerName
		}
		if at != self {
			continue
		}
		path := []string{self}
		for k := callers[at]; k != "/" && len(path) < 101; k = callers[k] {
			path = append([]string{k}, path...)
		}
		path = append([]string{self}, path...)
		return dag.Errors{{Field: "spec.steps", Message: "makes a cycle of jobs running each other: " + strings.Join(path, " runs ")}}
	}
	return nil
}

// checkProfiles refuses a definition naming a resource profile the
// tenant does not have, naming the field (the foreign key of job_profiles
// would refuse it too, with no field to name), or whose steps ask, one of
// them alone, for more than a tenant's resource quota.
func checkProfiles(ctx context.Context, q *store.Queries, a Actor, res dag.Resource) error {
	if err := checkResourceQuota(ctx, q, a, res); err != nil {
		return err
	}
	names := res.Spec.Profiles()
	if len(names) == 0 {
		return nil
	}
	rows, err := q.ProfilesNamed(ctx, store.ProfilesNamedParams{TenantID: a.Tenant, Names: names})
	if err != nil {
		return err
	}
	if es := MissingProfiles(&res.Spec, byName(rows)); len(es) > 0 {
		return es
	}
	return nil
}

// MissingProfiles names the fields of spec that name a profile not among
// have (the tenant's).
func MissingProfiles(spec *dag.JobSpec, have map[string]resources.Vector) dag.Errors {
	var es dag.Errors
	missing := func(field, name string) {
		if _, ok := have[name]; name != "" && !ok {
			es = append(es, &dag.FieldError{Field: field, Message: fmt.Sprintf("no resource profile %q in this tenant (orrery profiles list)", name)})
		}
	}
	missing("spec.defaults.resource_profile", spec.Defaults.ResourceProfile)
	for i, st := range spec.Steps {
		missing(fmt.Sprintf("spec.steps[%d].resource_profile", i), st.ResourceProfile)
	}
	return es
}

// writeProfiles makes job row's job_profiles rows the profiles spec
// names (none for a deleted job).
func writeProfiles(ctx context.Context, q *store.Queries, row store.Job, spec dag.JobSpec) error {
	if err := q.DeleteJobProfiles(ctx, row.ID); err != nil {
		return err
	}
	names := spec.Profiles()
	if len(names) == 0 || row.Status == StatusDeleted {
		return nil
	}
	return profileGone(q.InsertJobProfiles(ctx, store.InsertJobProfilesParams{JobID: row.ID, TenantID: row.TenantID, Profiles: names}))
}

// profileGone names the refusal of a job naming a profile deleted after
// checkProfiles read it (the foreign key's).
func profileGone(err error) error {
	if store.IsForeignKeyViolation(err, "job_profiles_tenant_id_profile_fkey") {
		return &dag.FieldError{Field: "spec", Message: "a resource profile it names was deleted meanwhile (orrery profiles list)"}
	}
	return err
}

// checkResourceQuota refuses a definition one of whose steps asks, alone,
// for more of a resource than the tenant's quota of it (it could never be
// admitted), naming the field and the quota; a step naming a profile is
// checked against the profile as it is now.
func checkResourceQuota(ctx context.Context, q *store.Queries, a Actor, res dag.Resource) error {
	raw, err := q.TenantMaxResources(ctx, a.Tenant)
	if err != nil || len(raw) == 0 {
		if store.IsNotFound(err) {
			return nil
		}
		return err
	}
	var quota resources.Vector
	_ = json.Unmarshal(raw, &quota) // written by access.SetQuota
	var profiles map[string]resources.Vector
	if names := res.Spec.Profiles(); len(names) > 0 {
		rows, err := q.ProfilesNamed(ctx, store.ProfilesNamedParams{TenantID: a.Tenant, Names: names})
		if err != nil {
			return err
		}
		profiles = byName(rows)
	}
	if es := overQuota(&res.Spec, quota, profiles); len(es) > 0 {
		return es
	}
	return nil
}

// overQuota names the steps of spec (their field) asking, alone, for more
// than quota of some resource (profiles: the tenant's, by name).
func overQuota(spec *dag.JobSpec, quota resources.Vector, profiles map[string]resources.Vector) dag.Errors {
	var es dag.Errors
	reported := map[string]bool{} // the defaults' once
	for i, st := range spec.Steps {
		e := spec.Effective(i)
		need, field := e.Resources, fmt.Sprintf("spec.steps[%d].resources", i)
		if e.ResourceProfile != "" {
			need, field = profiles[e.ResourceProfile], fmt.Sprintf("spec.steps[%d].resource_profile", i)
		}
		if st.Resources == nil && st.ResourceProfile == "" { // the defaults'
			field = "spec.defaults.resources"
			if spec.Defaults.ResourceProfile != "" {
				field = "spec.defaults.resource_profile"
			}
		}
		if name := need.Over(quota); name != "" && !reported[field] {
			reported[field] = true
			f := field
			if strings.HasSuffix(f, ".resources") {
				f += "." + resources.Field(name)
			}
			es = append(es, &dag.FieldError{Field: f, Message: fmt.Sprintf("step %s asks for %s %s; the tenant's quota is %s (orrery tenants quota)",
				st.Name, name, resources.Format(name, need.Get(name)), resources.Format(name, quota.Get(name)))})
		}
	}
	return es
}

// byName is profiles' resources by their names.
func byName(profiles []store.ResourceProfile) map[string]resources.Vector {
	out := make(map[string]resources.Vector, len(profiles))
	for _, p := range profiles {
		out[p.Name] = resources.FromColumns(p.Cpu, p.Memory, p.Gpu, p.Custom)
	}
	return out
}

// maxOverQuota bounds the jobs OverQuota names.
const maxOverQuota = 100

// OverQuota names the tenant's live jobs with a step asking, alone, for
// more than quota (what lowering a tenant's quota leaves waiting for
// ever), each with its first such field: "ns/name: spec.steps[0]...: step
// train asks for cpu 8; the tenant's quota is 4 (...)"; at most
// maxOverQuota, and whether there were more.
func (s *Service) OverQuota(ctx context.Context, tenant uuid.UUID, quota resources.Vector) ([]string, bool, error) {
	if quota.IsZero() {
		return nil, false, nil
	}
	q := store.New(s.pool)
	rows, err := q.ListProfiles(ctx, tenant)
	if err != nil {
		return nil, false, err
	}
	profiles := byName(rows)
	var out []string
	f := ListFilter{WithSteps: true, PageSize: 500}
	for {
		page, next, err := s.List(ctx, Actor{Tenant: tenant, Name: "quota check"}, f)
		if err != nil {
			return nil, false, err
		}
		for _, j := range page {
			if j.Status == StatusDeleted {
				continue
			}
			if es := overQuota(&j.Spec, quota, profiles); len(es) > 0 {
				if len(out) == maxOverQuota {
					return out, true, nil
				}
				out = append(out, j.Namespace+"/"+j.Name+": "+es[0].Error())
			}
		}
		if next == "" {
			return out, false, nil
		}
		f.PageToken = next
	}
}

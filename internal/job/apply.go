package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/internal/usage"
)

// Actions of a plan.
const (
	ActionCreate    = "create"
	ActionUpdate    = "update"
	ActionDelete    = "delete"
	ActionUnchanged = "unchanged"
)

// Item is one job of a folder being applied.
type Item struct {
	Resource dag.Resource
	Source   *Source
	spec     []byte // Resource.Spec as JSON, set by prepareItems
}

// Change is one line of a plan: what applying does to one job, and for an
// update the fields that change.
type Change struct {
	Action    string
	Namespace string
	Name      string
	Fields    []string
	Job       *Job // the job as it is (plan) or as it became (apply); nil for a create in a plan
}

// PlanOptions: with Prune, live jobs that were applied from files, in the
// Namespaces given (default: the namespaces of the items), and are not among
// the items are deleted.
type PlanOptions struct {
	Prune      bool
	Namespaces []string
}

// Plan says what ApplyAll would do, changing nothing.
func (s *Service) Plan(ctx context.Context, a Actor, items []Item, opt PlanOptions) ([]Change, error) {
	if err := checkOptions(opt); err != nil {
		return nil, err
	}
	items, err := prepareItems(items)
	if err != nil {
		return nil, err
	}
	var changes []Change
	err = store.InTx(ctx, s.pool, func(q *store.Queries) error {
		changes, _, err = s.plan(ctx, q, a, items, opt)
		if err != nil {
			return err
		}
		// What apply would refuse, the plan refuses too: a profile the
		// tenant lacks, a step past its quota.
		for i, c := range changes[:len(items)] {
			if c.Action != ActionCreate && c.Action != ActionUpdate {
				continue
			}
			if err := checkProfiles(ctx, q, a, items[i].Resource); err != nil {
				return &ItemError{Namespace: c.Namespace, Name: c.Name, Err: err}
			}
		}
		return nil
	})
	return changes, err
}

// ApplyAll makes the stored jobs match the items in one transaction: all
// changes commit or none. Applying the same items twice changes nothing.
func (s *Service) ApplyAll(ctx context.Context, a Actor, items []Item, opt PlanOptions) ([]Change, error) {
	if err := checkOptions(opt); err != nil {
		return nil, err
	}
	items, err := prepareItems(items)
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
	var changes []Change
	err = store.InTx(ctx, s.pool, func(q *store.Queries) error {
		var current []*Job
		changes, current, err = s.plan(ctx, q, a, items, opt)
		if err != nil {
			return err
		}
		now, err := q.DatabaseNow(ctx)
		if err != nil {
			return err
		}
		d := usage.Delta{}
		for i := range changes {
			c := &changes[i]
			switch c.Action {
			case ActionCreate:
				it := items[i]
				if c.Job, err = s.insertJob(ctx, q, a, it.Resource, it.spec, now, it.Source, d); err != nil {
					return &ItemError{Namespace: c.Namespace, Name: c.Name, Err: err}
				}
			case ActionUpdate:
				if c.Job, err = updateDefinition(ctx, q, a, current[i], items[i].Resource, items[i].spec, items[i].Source, d); err != nil {
					return &ItemError{Namespace: c.Namespace, Name: c.Name, Err: err}
				}
			case ActionDelete:
				// The plan read the job without a lock: lock it, in Lock's
				// order, and delete it as it is now, unless another
				// transaction deleted it meanwhile.
				row, err := Lock(ctx, q, a, Ref{ID: c.Job.ID})
				if err != nil {
					return &ItemError{Namespace: c.Namespace, Name: c.Name, Err: err}
				}
				before, err := fromRow(row)
				if err != nil {
					return err
				}
				if row.Status == StatusDeleted { // by another meanwhile: nothing done here
					c.Action, c.Job = ActionUnchanged, before
					continue
				}
				if row, err = setJobStatus(ctx, q, store.SetJobStatusParams{TenantID: a.Tenant, ID: c.Job.ID, Status: StatusDeleted, Actor: a.Name}, d); err != nil {
					return err
				}
				after, err := fromRow(row)
				if err != nil {
					return err
				}
				n, err := audit(ctx, q, a, "delete", before, after)
				if err != nil {
					return err
				}
				d.AddExempt(row.TenantID, row.Shard, usage.Usage{HistoryBytes: n})
				c.Job = after
			}
		}
		if err := d.Check(rooms); err != nil {
			return err
		}
		return d.Write(ctx, q)
	})
	return changes, err
}

// MaxSourceField bounds an applied job's source path and commit.
const MaxSourceField = 1024

// checkOptions refuses a --prune namespace no job could live in.
func checkOptions(opt PlanOptions) error {
	for i, ns := range opt.Namespaces {
		if err := dag.ValidateName(ns); err != nil {
			return &dag.FieldError{Field: fmt.Sprintf("namespaces[%d]", i), Message: err.Error()}
		}
	}
	return nil
}

// PrepareItems is prepareItems, for a caller that reads jobs given in a
// request without writing them (a forecast of what applying them would
// fire).
func PrepareItems(items []Item) ([]Item, error) { return prepareItems(items) }

// prepareItems normalizes and validates every item and rejects a job named
// twice; field paths are prefixed with the item ("jobs[2].spec.schedule.cron").
func prepareItems(items []Item) ([]Item, error) {
	var es dag.Errors
	seen := map[string]int{}
	out := make([]Item, len(items))
	for i, it := range items {
		res, spec, err := prepareSpec(it.Resource)
		if verrs, ok := err.(dag.Errors); ok {
			for _, e := range verrs {
				e2 := *e
				e2.Field = fmt.Sprintf("jobs[%d].%s", i, e.Field)
				es = append(es, &e2)
			}
			continue
		}
		if src := it.Source; src != nil {
			for _, f := range []struct{ name, v string }{{"path", src.Path}, {"commit", src.Commit}} {
				if len(f.v) > MaxSourceField || !dag.IsText(f.v) {
					es = append(es, &dag.FieldError{Field: fmt.Sprintf("jobs[%d].source.%s", i, f.name),
						Message: fmt.Sprintf("must be text of at most %d bytes", MaxSourceField)})
				}
			}
		}
		key := res.Metadata.Namespace + "/" + res.Metadata.Name
		if j, dup := seen[key]; dup {
			es = append(es, &dag.FieldError{Field: fmt.Sprintf("jobs[%d].metadata.name", i), Message: fmt.Sprintf("%s is also jobs[%d]", key, j)})
		}
		seen[key] = i
		out[i] = Item{Resource: res, Source: it.Source, spec: spec}
	}
	if len(es) > 0 {
		return nil, es
	}
	return out, nil
}

// plan compares the items with the stored jobs (locking them) and returns
// one change per item, in order, then the deletions; current[i] is the
// stored job of item i, if any.
func (s *Service) plan(ctx context.Context, q *store.Queries, a Actor, items []Item, opt PlanOptions) ([]Change, []*Job, error) {
	changes := make([]Change, 0, len(items))
	current := make([]*Job, len(items))
	wanted := map[string]bool{}
	namespaces := opt.Namespaces
	for i, it := range items {
		md := it.Resource.Metadata
		wanted[md.Namespace+"/"+md.Name] = true
		if len(opt.Namespaces) == 0 && !slices.Contains(namespaces, md.Namespace) {
			namespaces = append(namespaces, md.Namespace)
		}
		c := Change{Namespace: md.Namespace, Name: md.Name}
		row, err := Lock(ctx, q, a, Ref{Namespace: md.Namespace, Name: md.Name})
		switch {
		case err == nil:
			if current[i], err = fromRow(row); err != nil {
				return nil, nil, err
			}
			c.Job = current[i]
			if c.Fields = changedFields(current[i].Resource(), it.Resource); len(c.Fields) == 0 {
				c.Action = ActionUnchanged
			} else {
				c.Action = ActionUpdate
			}
		case isNotFound(err):
			c.Action = ActionCreate
		default:
			return nil, nil, err
		}
		changes = append(changes, c)
	}
	if !opt.Prune {
		return changes, current, nil
	}
	sort.Strings(namespaces)
	rows, err := q.AppliedJobsIn(ctx, store.AppliedJobsInParams{TenantID: a.Tenant, Namespaces: namespaces})
	if err != nil {
		return nil, nil, err
	}
	if err := withSchedules(ctx, q, rows); err != nil {
		return nil, nil, err
	}
	for _, r := range rows {
		if wanted[r.Namespace+"/"+r.Name] {
			continue
		}
		j, err := fromRow(r)
		if err != nil {
			return nil, nil, err
		}
		changes = append(changes, Change{Action: ActionDelete, Namespace: j.Namespace, Name: j.Name, Job: j})
	}
	return changes, current, nil
}

func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// changedFields names what differs between two normalized resources:
// metadata fields, spec fields, and steps by name ("spec.steps[load]").
func changedFields(before, after dag.Resource) []string {
	var out []string
	if before.Metadata.Description != after.Metadata.Description {
		out = append(out, "metadata.description")
	}
	if !reflect.DeepEqual(emptyNil(before.Metadata.Labels), emptyNil(after.Metadata.Labels)) {
		out = append(out, "metadata.labels")
	}
	b, x := fieldsOf(before.Spec), fieldsOf(after.Spec)
	for _, k := range sortedKeys(union(b, x)) {
		if k == "steps" {
			continue
		}
		if string(b[k]) != string(x[k]) {
			out = append(out, "spec."+k)
		}
	}
	steps := func(s []dag.Step) map[string]string {
		m := map[string]string{}
		for _, st := range s {
			j, _ := json.Marshal(st)
			m[st.Name] = string(j)
		}
		return m
	}
	bs, xs := steps(before.Spec.Steps), steps(after.Spec.Steps)
	var names []string
	for n := range bs {
		names = append(names, n)
	}
	for n := range xs {
		if _, ok := bs[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		if bs[n] != xs[n] {
			out = append(out, "spec.steps["+n+"]")
		}
	}
	return out
}

func fieldsOf(spec dag.JobSpec) map[string]json.RawMessage {
	b, _ := json.Marshal(spec)
	m := map[string]json.RawMessage{}
	_ = json.Unmarshal(b, &m)
	return m
}

func union(a, b map[string]json.RawMessage) map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func emptyNil(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

// ItemError is the refusal of one job of an apply: each line of its
// message (each field at fault) starts with the job's namespace/name, so
// that the CLI can point at the file and line that wrote it.
type ItemError struct {
	Namespace, Name string
	Err             error
}

func (e *ItemError) Error() string {
	prefix := e.Namespace + "/" + e.Name + ": "
	return prefix + strings.ReplaceAll(e.Err.Error(), "\n", "\n"+prefix)
}

func (e *ItemError) Unwrap() error { return e.Err }

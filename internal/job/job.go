package job

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/store"
)

// Statuses.
const (
	StatusActive  = "active"
	StatusPaused  = "paused"
	StatusDeleted = "deleted"
)

// DefaultTenant is the tenant the database is seeded with: `orrery dev`
// and `--auth none` act in it.
var DefaultTenant = uuid.MustParse("00000000-0000-0000-0000-000000000001")

// Actor is who makes a call, and in which tenant.
type Actor struct {
	Tenant uuid.UUID
	// Name is who acts, as records name them: the principal and the key's
	// prefix ("alice (ok_1a2b)").
	Name string
	// Principal is the principal alone ("alice"): one person whatever key
	// they use (an approval counts principals).
	Principal string
	// Scope, when set, narrows what lists show this actor to what it was
	// granted; nil sees the whole tenant. The API's interceptor decides
	// whether a call may be made at all; Scope only filters lists.
	Scope *Scope
	// MayRun, when set, says whether the actor may start runs of a job
	// (the role a trigger needs): a step that runs a job (run.job) is
	// applied only by an actor that may run it. nil: every job of its
	// tenant.
	MayRun func(namespace, name string) bool
	// Holds, when set, says whether the actor holds role (reader, editor,
	// admin) on a job (what an approval asks of its deciders). nil: every
	// role on every job of its tenant.
	Holds func(namespace, name, role string) bool
	// Key is the API key the actor called with (uuid.Nil: none, as with
	// authentication off): recorded with the jobs its job's steps run, whose
	// right to run them is checked again when a step starts.
	Key uuid.UUID
}

// Scope is what an actor without a tenant-wide role may see: whole
// namespaces, and single jobs named "namespace/name".
type Scope struct {
	Namespaces []string
	Jobs       []string
}

// Params returns the scope as the list queries take it: whether it
// applies, and its namespaces and jobs (never nil: an empty scope sees
// nothing).
func (s *Scope) Params() (scoped bool, namespaces, jobs []string) {
	if s == nil {
		return false, []string{}, []string{}
	}
	return true, append([]string{}, s.Namespaces...), append([]string{}, s.Jobs...)
}

// Sees reports whether the scope shows job namespace/name (a nil scope
// shows the whole tenant).
func (s *Scope) Sees(namespace, name string) bool {
	return s == nil || slices.Contains(s.Namespaces, namespace) || slices.Contains(s.Jobs, namespace+"/"+name)
}

// Anonymous is the actor of unauthenticated calls.
var Anonymous = Actor{Tenant: DefaultTenant, Name: "anonymous", Principal: "anonymous"}

// Job is a stored job definition.
type Job struct {
	ID          uuid.UUID         `json:"id"`
	Tenant      uuid.UUID         `json:"tenant_id"`
	Namespace   string            `json:"namespace"`
	Name        string            `json:"name"`
	Description string            `json:"description,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Spec        dag.JobSpec       `json:"spec"`
	Source      *Source           `json:"source,omitempty"`
	Status      string            `json:"status"`
	Version     int64             `json:"version"`
	Shard       int               `json:"shard"`
	NextFireAt  *time.Time        `json:"next_fire_at,omitempty"`
	CreatedAt   time.Time         `json:"created_at"`
	CreatedBy   string            `json:"created_by"`
	UpdatedAt   time.Time         `json:"updated_at"`
	UpdatedBy   string            `json:"updated_by"`
	DeletedAt   *time.Time        `json:"deleted_at,omitempty"`
	// LastRun is the latest run by scheduled instant, as List and Get
	// read it (not part of the definition: never audited).
	LastRun *LastRun `json:"-"`
	// specBytes is the stored spec's size, as the tenant's definition
	// bytes count it (package usage).
	specBytes int64
}

// LastRun is a job's latest run, in short.
type LastRun struct {
	ID           uuid.UUID
	Status       lifecycle.RunStatus
	ScheduledFor time.Time
}

// Resource returns the job as the YAML resource it was made from.
func (j *Job) Resource() dag.Resource {
	return dag.Resource{
		APIVersion: dag.APIVersion,
		Kind:       dag.KindJob,
		Metadata:   dag.Metadata{Name: j.Name, Namespace: j.Namespace, Description: j.Description, Labels: j.Labels},
		Spec:       j.Spec,
	}
}

// Upcoming returns the job's next n fire times (each instant later by its
// jitter), starting with its pending one; none for paused and deleted
// jobs.
func (j *Job) Upcoming(n int) []time.Time {
	if j.Status != StatusActive || j.NextFireAt == nil || n <= 0 {
		return nil
	}
	s, err := schedule.Parse(j.Spec.Schedule)
	if err != nil {
		return nil
	}
	s = s.For(j.Namespace, j.Name)
	out := []time.Time{j.NextFireAt.UTC()}
	for _, at := range s.Upcoming(s.InstantOf(*j.NextFireAt), n-1) {
		out = append(out, s.Fire(at))
	}
	return out
}

func fromRow(r store.Job) (*Job, error) {
	j := &Job{
		ID: r.ID, Tenant: r.TenantID, Namespace: r.Namespace, Name: r.Name, Description: r.Description,
		Status: r.Status, Version: r.Version, Shard: int(r.Shard), NextFireAt: utc(r.NextFireAt),
		CreatedAt: r.CreatedAt.UTC(), CreatedBy: r.CreatedBy, UpdatedAt: r.UpdatedAt.UTC(), UpdatedBy: r.UpdatedBy,
		DeletedAt: utc(r.DeletedAt), specBytes: int64(len(r.Spec)),
	}
	if err := json.Unmarshal(r.Labels, &j.Labels); err != nil {
		return nil, fmt.Errorf("job %s: labels: %w", r.ID, err)
	}
	if len(j.Labels) == 0 {
		j.Labels = nil
	}
	if err := json.Unmarshal(r.Spec, &j.Spec); err != nil {
		return nil, fmt.Errorf("job %s: spec: %w", r.ID, err)
	}
	if len(r.Source) > 0 {
		j.Source = new(Source)
		if err := json.Unmarshal(r.Source, j.Source); err != nil {
			return nil, fmt.Errorf("job %s: source: %w", r.ID, err)
		}
	}
	return j, nil
}

// Source is where `orrery apply` read a job: the file, and the commit when
// the folder was a git checkout.
type Source struct {
	Path   string `json:"path"`
	Commit string `json:"commit,omitempty"`
}

func sourceJSON(s *Source) []byte {
	if s == nil {
		return nil
	}
	b, _ := json.Marshal(s)
	return b
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func labelsJSON(labels map[string]string) []byte {
	if labels == nil {
		labels = map[string]string{}
	}
	b, _ := json.Marshal(labels)
	return b
}

// snapshot is the job as the audit trail records it.
func snapshot(j *Job) []byte {
	// Without HTML escapes: stored as JSONB, '<' is one byte, not six, and
	// usage.TextBytes counts what is stored.
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	_ = e.Encode(j)
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

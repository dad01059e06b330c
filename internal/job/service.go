package job

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/internal/batch"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/internal/usage"
)

// Service manages job definitions in the state database.
type Service struct {
	pool   *pgxpool.Pool
	shards int
	log    *slog.Logger
	// creator commits concurrent creations together (createJobs).
	creator *batch.Batcher[createReq, createRes]
}

// New returns a Service on pool; it reads the cluster's shard count once.
func New(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) (*Service, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n, err := store.New(pool).ShardCount(ctx)
	if err != nil {
		return nil, fmt.Errorf("job: read shard count (is the schema migrated?): %w", err)
	}
	s := &Service{pool: pool, shards: int(n), log: log}
	s.creator = batch.New("create jobs", log, s.createJobs)
	return s, nil
}

// Shards is the cluster's shard count.
func (s *Service) Shards() int { return s.shards }

// Ref names a job by ID, or by namespace and name among live jobs.
type Ref struct {
	ID        uuid.UUID
	Namespace string
	Name      string
}

func (r Ref) String() string {
	if r.ID != uuid.Nil {
		return r.ID.String()
	}
	if r.Namespace == "" {
		return dag.DefaultNamespace + "/" + r.Name // as lookup reads it
	}
	return r.Namespace + "/" + r.Name
}

// Now is the database's clock.
func (s *Service) Now(ctx context.Context) (time.Time, error) {
	return store.New(s.pool).DatabaseNow(ctx)
}

// MaxDefinitionBytes bounds a job's stored definition (its spec as JSON,
// every step and payload included): large enough for the 10,000-step
// pipelines validation allows, small enough that no read of a tenant's
// jobs is slowed by one of them.
const MaxDefinitionBytes = 2 << 20

// prepareSpec normalizes and validates a resource and returns it with its
// definition as stored (the spec as JSON), which it measures.
func prepareSpec(res dag.Resource) (dag.Resource, []byte, error) {
	res.Normalize()
	if es := dag.Validate(&res); len(es) > 0 {
		return res, nil, es
	}
	b, err := json.Marshal(res.Spec)
	if err != nil {
		return res, nil, &dag.FieldError{Field: "spec", Message: err.Error()}
	}
	if len(b) > MaxDefinitionBytes {
		return res, nil, &dag.FieldError{Field: "spec", Message: fmt.Sprintf("the definition is %d bytes; at most %d (MaxDefinitionBytes)", len(b), MaxDefinitionBytes)}
	}
	return res, b, nil
}

// MaxIdempotencyKey is the longest idempotency key, in bytes.
const MaxIdempotencyKey = 255

// CheckIdempotencyKey refuses an idempotency key the database cannot keep:
// too long for its index, or holding a NUL character.
func CheckIdempotencyKey(key string) error {
	switch {
	case len(key) > MaxIdempotencyKey:
		return &dag.FieldError{Field: "idempotency_key", Message: fmt.Sprintf("is %d bytes; the limit is %d", len(key), MaxIdempotencyKey)}
	case strings.IndexByte(key, 0) >= 0:
		return &dag.FieldError{Field: "idempotency_key", Message: "contains a NUL character"}
	}
	return nil
}

func requestHash(res dag.Resource) []byte {
	b, _ := json.Marshal(res)
	h := sha256.Sum256(b)
	return h[:]
}

func versionParams(j *Job, a Actor) store.InsertJobVersionParams {
	spec, _ := json.Marshal(j.Spec)
	return store.InsertJobVersionParams{
		JobID: j.ID, Version: j.Version, TenantID: j.Tenant, Description: j.Description,
		Labels: labelsJSON(j.Labels), Spec: spec, Actor: a.Name,
	}
}

// audit writes the audit row of a change of a job, with the job before
// and after it, and returns the bytes those take (usage.TextBytes: a
// definition's history counts in its tenant's definition bytes).
func audit(ctx context.Context, q *store.Queries, a Actor, action string, before, after *Job) (int64, error) {
	target := after
	if target == nil {
		target = before
	}
	p := store.InsertAuditParams{
		ID: uuid.Must(uuid.NewV7()), TenantID: a.Tenant, Actor: a.Name, Action: action,
		TargetKind: "job", TargetID: target.ID, TargetName: target.Namespace + "/" + target.Name,
	}
	if before != nil {
		p.Before = snapshot(before)
	}
	if after != nil {
		p.After = snapshot(after)
	}
	return usage.TextBytes(p.Before) + usage.TextBytes(p.After), q.InsertAudit(ctx, p)
}

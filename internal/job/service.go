package job

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/batch"
	"github.com/orrery-dev/orrery/internal/lifecycle"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/internal/usage"
	"github.com/orrery-dev/orrery/shard"
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

// Create stores a new job. With an idempotency key, a replay of the same
// request returns the job as first created, and a different request under
// the same key fails with ErrIdempotencyConflict.
func (s *Service) Create(ctx context.Context, a Actor, res dag.Resource, idempotencyKey string) (*Job, error) {
	res, spec, err := prepareSpec(res)
	if err != nil {
		return nil, err
	}
	if err := CheckIdempotencyKey(idempotencyKey); err != nil {
		return nil, err
	}
	req := createReq{a: a, res: res, spec: spec, key: idempotencyKey}
	if idempotencyKey != "" {
		req.reqHash = requestHash(res)
	}
	for attempt := 0; ; attempt++ {
		j, err := s.createJob(ctx, req)
		// Two concurrent first uses of one key: the loser trips over the
		// winner's name or key (raised once the winner committed) and finds
		// the winner's answer under the key on the second try.
		if attempt == 0 && idempotencyKey != "" && (errors.Is(err, ErrAlreadyExists) || store.IsUniqueViolation(err, "idempotency_keys_pkey")) {
			continue
		}
		return j, err
	}
}

// batchedDefinitionBytes bounds the definitions that join a batch of
// creations: a larger one (up to MaxDefinitionBytes) is written alone, so
// that a batch's statement stays under 13 MB (100 definitions, each sent
// twice: the spec and the audit row's snapshot).
const batchedDefinitionBytes = 64 << 10

// createJob commits a new job: concurrent creations are committed
// together, in one statement (createJobs). A caller that gives up while
// its creation waits for a batch is left out of it; one that gives up
// while its batch is written does not know whether its job was (as with
// any call): an idempotency key makes the retry safe.
func (s *Service) createJob(ctx context.Context, req createReq) (*Job, error) {
	var r createRes
	var err error
	if len(req.spec) > batchedDefinitionBytes {
		r, err = s.createAlone(ctx, req)
	} else if r, err = s.creator.Do(ctx, req); err == nil && r.alone {
		r, err = s.createAlone(ctx, req)
	}
	if err != nil {
		return nil, err
	}
	if r.err == nil {
		s.log.Debug("job created", "tenant", req.a.Tenant, "job_id", r.job.ID, "job", r.job.Namespace+"/"+r.job.Name)
	}
	return r.job, r.err
}

// createAlone commits one creation in a batch of its own.
func (s *Service) createAlone(ctx context.Context, req createReq) (createRes, error) {
	rs, err := s.createJobs(ctx, []createReq{req})
	if err != nil {
		return createRes{}, err
	}
	return rs[0], nil
}

// createReq is one creation waiting in the batcher; createRes its answer:
// the job, or the error of this creation alone (its name is taken, its
// key names another request).
type createReq struct {
	a       Actor
	res     dag.Resource
	spec    []byte // res.Spec as JSON
	key     string
	reqHash []byte
}

type createRes struct {
	job *Job
	err error
	// alone: the batch waited on a row another transaction is writing;
	// the caller writes this creation alone (so that only the creations
	// that need that row wait for it, each in its own call).
	alone bool
}

// createJobs commits a batch of creations in two round trips: one reads
// the database clock and the answers already stored under their keys,
// one writes the new jobs (CreateJobs: each with its namespace, version
// 1, audit row and key). A creation whose key an earlier one of the batch
// uses waits for the batch, then finds that one's answer. A concurrent
// first use of the same key in another batch fails this statement on the
// key's primary key; the batcher then serves each creation alone, and
// Create retries the one whose key was taken.
func (s *Service) createJobs(ctx context.Context, reqs []createReq) ([]createRes, error) {
	out := make([]createRes, len(reqs))
	var later []int // a key an earlier creation of the batch uses
	err := store.Retry(ctx, func() error {
		later = later[:0]
		q := store.New(s.pool)
		lp := store.CreateLookupsParams{TenantIds: make([]uuid.UUID, len(reqs)), IdempotencyKeys: make([]string, len(reqs))}
		for i, r := range reqs {
			lp.TenantIds[i], lp.IdempotencyKeys[i] = r.a.Tenant, r.key
		}
		looks, err := q.CreateLookups(ctx, lp)
		if err != nil {
			return err
		}
		if len(looks) != len(reqs) {
			return fmt.Errorf("job: %d lookups for %d creations", len(looks), len(reqs))
		}
		now := looks[0].Now.UTC()
		rooms, err := usage.JobRooms(ctx, q, lp.TenantIds)
		if err != nil {
			return err
		}
		var p store.CreateJobsParams
		p.Now = now
		pending := map[uuid.UUID]int{}
		type tenantKey struct {
			tenant uuid.UUID
			key    string
		}
		keys := map[tenantKey]bool{}
		for i, r := range reqs {
			out[i] = createRes{}
			if look := looks[i]; r.key != "" && look.RequestHash != nil {
				if string(look.RequestHash) != string(r.reqHash) {
					out[i].err = ErrIdempotencyConflict
					continue
				}
				out[i].job = new(Job)
				out[i].err = json.Unmarshal(look.Response, out[i].job)
				continue
			}
			if r.key != "" {
				k := tenantKey{r.a.Tenant, r.key}
				if keys[k] {
					later = append(later, i)
					continue
				}
				keys[k] = true
			}
			if err := rooms.Add(r.a.Tenant, usage.Usage{Jobs: 1, DefinitionBytes: usage.TextBytes(r.spec)}); err != nil {
				out[i].err = err
				continue
			}
			j, err := s.newJob(r.a, r.res, now, nil)
			if err != nil {
				out[i].err = err
				continue
			}
			pending[j.ID] = i
			out[i].job = j
			addCreate(&p, j, r.spec, r.key, r.reqHash)
		}
		if len(pending) == 0 {
			return nil
		}
		p.CountUsage = true // in the statement, which commits alone
		written, err := s.writeJobs(ctx, p, len(pending) > 1)
		if err != nil {
			return err
		}
		for _, w := range written {
			delete(pending, w.ID)
		}
		for _, i := range pending { // a live job has the name
			out[i] = createRes{err: ErrAlreadyExists}
		}
		return nil
	})
	switch {
	case err != nil && len(reqs) > 1 && store.IsLockTimeout(err):
		// Some creation of the batch waits on another transaction (its
		// namespace or name being created there): each caller writes its
		// own alone, so that only that one waits.
		for i := range out {
			out[i] = createRes{alone: true}
		}
		return out, nil
	case err != nil && len(reqs) > 1 && !store.IsServerError(err):
		// Whether the batch was written is unknown (a connection lost at
		// its commit): each is told so; written again alone, a creation
		// would find its own job and call its name taken.
		for i := range out {
			out[i] = createRes{err: err}
		}
		return out, nil
	case err != nil:
		return nil, err // the batcher serves each alone
	}
	for _, i := range later {
		if out[i], err = s.createAlone(ctx, reqs[i]); err != nil {
			out[i] = createRes{err: err}
		}
	}
	return out, nil
}

// writeJobs runs CreateJobs: alone, as one statement that waits for the
// rows it needs as long as it takes; for a batch, in a transaction whose
// waits end after a second (SetBatchLockTimeout: a namespace or a name
// another transaction is creating; each creation is then written alone by
// its caller, so that the wait of one does not hold up the others).
func (s *Service) writeJobs(ctx context.Context, p store.CreateJobsParams, batch bool) ([]store.CreateJobsRow, error) {
	if !batch {
		return store.New(s.pool).CreateJobs(ctx, p)
	}
	var written []store.CreateJobsRow
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := store.New(tx)
		if err := q.SetBatchLockTimeout(ctx); err != nil {
			return err
		}
		var err error
		written, err = q.CreateJobs(ctx, p)
		return err
	})
	return written, err
}

// newJob is a new job as of now, not yet written: version 1, its shard
// and its first fire time.
func (s *Service) newJob(a Actor, res dag.Resource, now time.Time, src *Source) (*Job, error) {
	sched, err := schedule.Parse(res.Spec.Schedule)
	if err != nil {
		return nil, err // validated already; kept for safety
	}
	now = now.UTC()
	id := uuid.Must(uuid.NewV7())
	out := &Job{
		ID: id, Tenant: a.Tenant, Namespace: res.Metadata.Namespace, Name: res.Metadata.Name,
		Description: res.Metadata.Description, Labels: res.Metadata.Labels, Spec: res.Spec, Source: src,
		Status: StatusActive, Version: 1, Shard: shard.Of(id, s.shards), NextFireAt: firstFire(sched, now),
		CreatedAt: now, CreatedBy: a.Name, UpdatedAt: now, UpdatedBy: a.Name,
	}
	if len(out.Labels) == 0 {
		out.Labels = nil
	}
	return out, nil
}

// insertJob writes a new job (spec: its definition as JSON, from
// prepareSpec) in q's transaction (CreateJobs, for one):
// the job, its namespace, version 1 and the audit row (apply's creations;
// the API's are batched by createJobs), counting it in d.
func (s *Service) insertJob(ctx context.Context, q *store.Queries, a Actor, res dag.Resource, spec []byte, now time.Time, src *Source, d usage.Delta) (*Job, error) {
	out, err := s.newJob(a, res, now, src)
	if err != nil {
		return nil, err
	}
	p := store.CreateJobsParams{Now: out.CreatedAt}
	addCreate(&p, out, spec, "", nil)
	written, err := q.CreateJobs(ctx, p)
	if err != nil {
		return nil, err
	}
	if len(written) == 0 { // a live job has the name
		return nil, ErrAlreadyExists
	}
	d.Add(out.Tenant, int32(out.Shard), usage.Usage{Jobs: 1, DefinitionBytes: written[0].Bytes})
	return out, nil
}

// addCreate adds new job j (spec: its definition as JSON; key and its
// request's hash, or "" and nil) to a CreateJobs statement.
func addCreate(p *store.CreateJobsParams, j *Job, spec []byte, key string, reqHash []byte) {
	var next time.Time // the zero time: none
	if j.NextFireAt != nil {
		next = *j.NextFireAt
	}
	p.Ids = append(p.Ids, j.ID)
	p.TenantIds = append(p.TenantIds, j.Tenant)
	p.Namespaces = append(p.Namespaces, j.Namespace)
	p.Names = append(p.Names, j.Name)
	p.Descriptions = append(p.Descriptions, j.Description)
	p.Labels = append(p.Labels, string(labelsJSON(j.Labels)))
	p.Specs = append(p.Specs, string(spec))
	p.Sources = append(p.Sources, string(sourceJSON(j.Source)))
	p.Shards = append(p.Shards, int32(j.Shard))
	p.NextFireAts = append(p.NextFireAts, next)
	p.Actors = append(p.Actors, j.CreatedBy)
	p.AuditIds = append(p.AuditIds, uuid.Must(uuid.NewV7()))
	p.Snapshots = append(p.Snapshots, string(snapshot(j)))
	p.IdempotencyKeys = append(p.IdempotencyKeys, key)
	p.RequestHashes = append(p.RequestHashes, reqHash)
}

// firstFire is a new job's first instant: the next after now for cron, and
// the instant itself for one-time schedules, even when already past (the
// misfire policy then decides; nothing is dropped silently).
func firstFire(s *schedule.Schedule, now time.Time) *time.Time {
	if s.OneTime() {
		at := s.At()
		return &at
	}
	next, ok := s.Next(now)
	if !ok {
		return nil
	}
	return &next
}

// sameInstant reports whether two one-time schedules name one instant in
// other words ("2030-01-01T00:00:00Z" and "2030-01-01T01:00:00+01:00"):
// such an edit must not fire the instant again, whose run may be pruned
// by now.
func sameInstant(a, b schedule.Spec) bool {
	sa, errA := schedule.Parse(a)
	sb, errB := schedule.Parse(b)
	return errA == nil && errB == nil && sa.OneTime() && sb.OneTime() && sa.At().Equal(sb.At())
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

func audit(ctx context.Context, q *store.Queries, a Actor, action string, before, after *Job) error {
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
	return q.InsertAudit(ctx, p)
}

// Get returns one job of the actor's tenant (deleted ones too, by ID).
func (s *Service) Get(ctx context.Context, a Actor, ref Ref) (*Job, error) {
	q := store.New(s.pool)
	row, err := lookup(ctx, q, a, ref, false)
	if err != nil {
		return nil, err
	}
	rows := []store.Job{row}
	if err := withSchedules(ctx, q, rows); err != nil {
		return nil, err
	}
	j, err := fromRow(rows[0])
	if err != nil {
		return nil, err
	}
	return j, s.fillLastRuns(ctx, a, []*Job{j})
}

// Lock reads one job of the actor's tenant (deleted ones too, by ID) in
// q's transaction and locks its row, then its schedule row, until the
// transaction ends: a firing of the job commits before, or waits. For one
// job that order cannot deadlock with a firing (see GetJobForUpdate). A
// transaction that locks several jobs one after another (apply) can: a
// firing locks due schedule rows in fire-time order, so it may hold a
// later job's row while waiting for an earlier one's. The database
// detects that (deadlock_timeout, 1 s by default) and fails one of the
// two, which is retried; no lock outlives it.
//
// A job without a schedule row (one written by a node older than the
// table, which the upgrade rules out) reads as its jobs row says, and the
// change that follows writes the row.
func Lock(ctx context.Context, q *store.Queries, a Actor, ref Ref) (store.Job, error) {
	row, err := lookup(ctx, q, a, ref, true)
	if err != nil {
		return row, err
	}
	next, err := q.JobScheduleForUpdate(ctx, row.ID)
	switch {
	case store.IsNotFound(err):
		return row, nil
	case err != nil:
		return row, fmt.Errorf("job %s: schedule: %w", row.ID, err)
	}
	if row.Status == StatusActive {
		row.NextFireAt = next
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
	if err := q.SetJobSchedule(ctx, store.SetJobScheduleParams{JobID: row.ID, Shard: row.Shard, NextFireAt: next}); err != nil {
		return fmt.Errorf("job %s: schedule: %w", row.ID, err)
	}
	return nil
}

// setJobStatus changes a live job's status (pause, resume, delete) and
// its schedule row with it, in q's transaction; a deletion is counted in d.
func setJobStatus(ctx context.Context, q *store.Queries, p store.SetJobStatusParams, d usage.Delta) (store.Job, error) {
	row, err := q.SetJobStatus(ctx, p)
	if err != nil {
		return row, err
	}
	if row.Status == StatusDeleted {
		d.Add(row.TenantID, row.Shard, usage.Usage{Jobs: -1, DefinitionBytes: -int64(len(row.Spec))})
	}
	return row, writeSchedule(ctx, q, row)
}

// withSchedules sets the next fire time of each active job of rows to its
// schedule's, the live one (firing advances job_schedules only; a jobs
// row holds the time its last definition change set, which a paused job
// resumes from).
func withSchedules(ctx context.Context, q *store.Queries, rows []store.Job) error {
	var ids []uuid.UUID
	for _, r := range rows {
		if r.Status == StatusActive {
			ids = append(ids, r.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	live, err := q.JobSchedules(ctx, ids)
	if err != nil {
		return err
	}
	next := make(map[uuid.UUID]*time.Time, len(live))
	for _, l := range live {
		next[l.JobID] = l.NextFireAt
	}
	for i := range rows {
		if rows[i].Status == StatusActive {
			rows[i].NextFireAt = next[rows[i].ID]
		}
	}
	return nil
}

func lookup(ctx context.Context, q *store.Queries, a Actor, ref Ref, forUpdate bool) (store.Job, error) {
	var row store.Job
	var err error
	switch {
	case ref.ID != uuid.Nil && forUpdate:
		row, err = q.GetJobForUpdate(ctx, store.GetJobForUpdateParams{TenantID: a.Tenant, ID: ref.ID})
	case ref.ID != uuid.Nil:
		row, err = q.GetJob(ctx, store.GetJobParams{TenantID: a.Tenant, ID: ref.ID})
	case ref.Name != "":
		ns := ref.Namespace
		if ns == "" {
			ns = dag.DefaultNamespace
		}
		// Locked, the job found by its name may turn out deleted (under
		// READ COMMITTED the lock reads the row as another transaction
		// committed it meanwhile, and that one may have given the name to
		// a new job): look the name up again.
		for range 3 {
			row, err = q.GetLiveJobByName(ctx, store.GetLiveJobByNameParams{TenantID: a.Tenant, Namespace: ns, Name: ref.Name})
			if err != nil || !forUpdate {
				break
			}
			if row, err = q.GetJobForUpdate(ctx, store.GetJobForUpdateParams{TenantID: a.Tenant, ID: row.ID}); err != nil || row.Status != StatusDeleted {
				break
			}
			err = pgx.ErrNoRows
		}
	default:
		return row, &dag.FieldError{Field: "id", Message: "give the job's id, or its namespace and name"}
	}
	if store.IsNotFound(err) {
		return row, fmt.Errorf("%w: %s", ErrNotFound, ref)
	}
	return row, err
}

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
	rooms, err := usage.JobRooms(ctx, store.New(s.pool), []uuid.UUID{a.Tenant})
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
	next := before.NextFireAt
	if before.Spec.Schedule != res.Spec.Schedule && before.Status == StatusActive && !sameInstant(before.Spec.Schedule, res.Spec.Schedule) {
		now, err := q.DatabaseNow(ctx)
		if err != nil {
			return nil, err
		}
		sched, err := schedule.Parse(res.Spec.Schedule)
		if err != nil {
			return nil, err
		}
		next = firstFire(sched, now)
	}
	row, err := q.UpdateJobDefinition(ctx, store.UpdateJobDefinitionParams{
		TenantID: a.Tenant, ID: before.ID, ExpectedVersion: before.Version,
		Description: res.Metadata.Description, Labels: labelsJSON(res.Metadata.Labels), Spec: spec,
		NextFireAt: next, Actor: a.Name, Source: sourceJSON(src),
	})
	if err != nil {
		return nil, err
	}
	d.Add(row.TenantID, row.Shard, usage.Usage{DefinitionBytes: int64(len(row.Spec)) - before.specBytes})
	if err := writeSchedule(ctx, q, row); err != nil {
		return nil, err
	}
	out, err := fromRow(row)
	if err != nil {
		return nil, err
	}
	if err := q.InsertJobVersion(ctx, versionParams(out, a)); err != nil {
		return nil, err
	}
	return out, audit(ctx, q, a, "update", before, out)
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
		next, ok := sched.CatchUp(lifecycle.MisfireKeep(j.Spec.Misfire, j.Spec.MaxBackfill), *j.NextFireAt, now)
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
		if err := audit(ctx, q, a, action, before, out); err != nil {
			return err
		}
		return d.Write(ctx, q)
	})
	return out, err
}

// ListFilter selects jobs. Empty fields do not filter; without Status,
// deleted jobs are left out.
type ListFilter struct {
	Namespace string
	// NameContains keeps jobs whose name contains it (at most 200 bytes).
	NameContains string
	Status       string
	Labels       map[string]string
	PageSize     int
	PageToken    string
	// WithSteps lists whole definitions; without it each job comes
	// without its steps (Spec.Steps and Spec.Run empty), the summary a
	// list shows.
	WithSteps bool
}

// Page sizes of every list call.
const (
	DefaultPageSize = 50
	MaxPageSize     = 500
)

// ListBudgetBytes bounds the definitions one page of List carries (their
// specs as JSON): a page stops at the job that passes it (the first one
// whatever its size), and its page token says where the next begins. A
// definition is at most MaxDefinitionBytes.
const ListBudgetBytes = 4 << 20

// ListBudgetValues bounds the payload values (dag.Payload.Values) one
// page of List carries in the same way: an API answer turns each into an
// object of its own (a protobuf Value, about 80 times the value's bytes
// for [[],[],...]), which the byte budget alone would not see.
const ListBudgetValues = 100_000

// PageSize checks a requested page size: 0 means the default.
func PageSize(n int) (int, error) {
	switch {
	case n < 0 || n > MaxPageSize:
		return 0, &dag.FieldError{Field: "page_size", Message: fmt.Sprintf("%d is outside 0..%d", n, MaxPageSize)}
	case n == 0:
		return DefaultPageSize, nil
	}
	return n, nil
}

type pageToken struct {
	Name string    `json:"n"`
	ID   uuid.UUID `json:"i"`
}

// List returns one page of jobs sorted by name, and the token of the next
// page ("" after the last).
func (s *Service) List(ctx context.Context, a Actor, f ListFilter) ([]*Job, string, error) {
	size, err := PageSize(f.PageSize)
	if err != nil {
		return nil, "", err
	}
	var after pageToken
	if f.PageToken != "" {
		if err := store.DecodePageToken(f.PageToken, &after); err != nil {
			return nil, "", &dag.FieldError{Field: "page_token", Message: "malformed; pass back the next_page_token of the previous page"}
		}
	}
	switch f.Status {
	case "", StatusActive, StatusPaused, StatusDeleted:
	default:
		return nil, "", &dag.FieldError{Field: "status", Message: fmt.Sprintf("%q is not one of active, paused, deleted", f.Status)}
	}
	p := store.ListJobsParams{
		TenantID: a.Tenant, Labels: labelsJSON(f.Labels), AfterName: after.Name, AfterID: after.ID,
		PageSize: int32(size + 1), WithSteps: f.WithSteps, Budget: ListBudgetBytes,
	}
	p.Scoped, p.ScopeNamespaces, p.ScopeJobs = a.Scope.Params()
	if f.Namespace != "" {
		p.Namespace = &f.Namespace
	}
	if f.Status != "" {
		p.Status = &f.Status
	}
	switch {
	case len(f.NameContains) > 200:
		return nil, "", &dag.FieldError{Field: "name_contains", Message: "at most 200 characters"}
	case strings.ContainsRune(f.NameContains, 0):
		return nil, "", &dag.FieldError{Field: "name_contains", Message: "contains a NUL character"}
	case f.NameContains != "":
		p.NameContains = &f.NameContains
	}
	q := store.New(s.pool)
	listed, err := q.ListJobs(ctx, p)
	if err != nil {
		return nil, "", err
	}
	rows := make([]store.Job, len(listed))
	for i, r := range listed {
		rows[i] = store.Job{ID: r.ID, TenantID: r.TenantID, Namespace: r.Namespace, Name: r.Name, Description: r.Description,
			Labels: r.Labels, Status: r.Status, Version: r.Version, Spec: r.Spec, Source: r.Source, Shard: r.Shard,
			NextFireAt: r.NextFireAt, CreatedAt: r.CreatedAt, CreatedBy: r.CreatedBy, UpdatedAt: r.UpdatedAt,
			UpdatedBy: r.UpdatedBy, DeletedAt: r.DeletedAt}
	}
	var pageRows int64
	if len(listed) > 0 {
		pageRows = listed[0].PageRows
	}
	token := func(r store.Job) any { return pageToken{Name: r.Name, ID: r.ID} }
	rows, next := store.NextBudgetedPage(rows, size, pageRows, token)
	if err := withSchedules(ctx, q, rows); err != nil {
		return nil, "", err
	}
	out := make([]*Job, 0, len(rows))
	values := 0
	for i, r := range rows {
		j, err := fromRow(r)
		if err != nil {
			return nil, "", err
		}
		for _, st := range j.Spec.Steps {
			values += st.Payload.Values()
		}
		if i > 0 && values > ListBudgetValues { // the page ends before this job
			next = store.EncodePageToken(token(rows[i-1]))
			break
		}
		out = append(out, j)
	}
	if err := s.fillLastRuns(ctx, a, out); err != nil {
		return nil, "", err
	}
	return out, next, nil
}

// fillLastRuns sets each job's LastRun, in one query.
func (s *Service) fillLastRuns(ctx context.Context, a Actor, jobs []*Job) error {
	if len(jobs) == 0 {
		return nil
	}
	ids := make([]uuid.UUID, len(jobs))
	byID := make(map[uuid.UUID]*Job, len(jobs))
	for i, j := range jobs {
		ids[i], byID[j.ID] = j.ID, j
	}
	rows, err := store.New(s.pool).LastRuns(ctx, store.LastRunsParams{TenantID: a.Tenant, JobIds: ids})
	if err != nil {
		return err
	}
	for _, r := range rows {
		byID[r.JobID].LastRun = &LastRun{ID: r.ID, Status: lifecycle.RunStatus(r.Status), ScheduledFor: r.ScheduledFor}
	}
	return nil
}

// MaxHistory bounds RecentHistory.
const MaxHistory = 200

// RecentHistory returns the latest n audit rows of one job, newest first.
func (s *Service) RecentHistory(ctx context.Context, a Actor, id uuid.UUID, n int) ([]store.AuditLog, error) {
	if n < 0 || n > MaxHistory {
		return nil, &dag.FieldError{Field: "history", Message: fmt.Sprintf("%d is outside 0..%d", n, MaxHistory)}
	}
	if n == 0 {
		return nil, nil
	}
	return store.New(s.pool).JobHistory(ctx, store.JobHistoryParams{TenantID: a.Tenant, TargetID: id, MaxRows: int32(n)})
}

// History returns the audit rows of one job, oldest first.
func (s *Service) History(ctx context.Context, a Actor, id uuid.UUID) ([]store.AuditLog, error) {
	return store.New(s.pool).ListAuditForTarget(ctx, store.ListAuditForTargetParams{TenantID: a.Tenant, TargetID: id})
}

package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/store"
	"github.com/orrery-dev/orrery/internal/usage"
	"github.com/orrery-dev/orrery/shard"
)

// Creating jobs: one, or a batch written in one statement (the API's
// create path, with idempotency keys and storage quotas).

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
			j, err := s.newJob(r.a, r.res, now, nil)
			if err != nil {
				out[i].err = err
				continue
			}
			// The definition, and its audit row (history).
			if err := rooms.Add(r.a.Tenant, usage.Usage{Jobs: 1, DefinitionBytes: usage.TextBytes(r.spec), HistoryBytes: usage.TextBytes(snapshot(j))}); err != nil {
				out[i].err = err
				continue
			}
			if err := checkAfter(ctx, q, r.a, r.res); err != nil {
				out[i].err = err
				continue
			}
			if err := checkCalls(ctx, q, r.a, r.res); err != nil {
				out[i].err = err
				continue
			}
			if err := checkProfiles(ctx, q, r.a, r.res); err != nil {
				out[i].err = err
				continue
			}
			pending[j.ID] = i
			out[i].job = j
			addCreate(&p, j, r.spec, r.key, r.reqHash, r.a.Key)
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
		written, err := store.New(s.pool).CreateJobs(ctx, p)
		return written, profileGone(err)
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
		Status: StatusActive, Version: 1, Shard: shard.Of(id, s.shards), NextFireAt: firstFire(sched.For(res.Metadata.Namespace, res.Metadata.Name), now),
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
	if err := checkAfter(ctx, q, a, res); err != nil {
		return nil, err
	}
	if err := checkCalls(ctx, q, a, res); err != nil {
		return nil, err
	}
	if err := checkProfiles(ctx, q, a, res); err != nil {
		return nil, err
	}
	out, err := s.newJob(a, res, now, src)
	if err != nil {
		return nil, err
	}
	p := store.CreateJobsParams{Now: out.CreatedAt}
	addCreate(&p, out, spec, "", nil, a.Key)
	written, err := q.CreateJobs(ctx, p)
	if err != nil {
		return nil, profileGone(err)
	}
	if len(written) == 0 { // a live job has the name
		return nil, ErrAlreadyExists
	}
	d.Add(out.Tenant, int32(out.Shard), usage.Usage{Jobs: 1, DefinitionBytes: written[0].Bytes, HistoryBytes: written[0].HistoryBytes})
	return out, nil
}

// addCreate adds new job j (spec: its definition as JSON; key and its
// request's hash, or "" and nil; author, the writer's API key) to a
// CreateJobs statement.
func addCreate(p *store.CreateJobsParams, j *Job, spec []byte, key string, reqHash []byte, author uuid.UUID) {
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
	p.AuthorKeys = append(p.AuthorKeys, author)
}

// firstFire is a new job's first fire time: that of the next instant after
// now for cron (later by its jitter), and the instant itself for one-time
// schedules, even when already past (the misfire policy then decides;
// nothing is dropped silently).
func firstFire(s *schedule.Schedule, now time.Time) *time.Time {
	if s.OneTime() {
		at := s.At()
		return &at
	}
	next, ok := s.Next(now)
	switch {
	case ok:
		next = s.Fire(next)
	case next.IsZero():
		return nil
	} // else where Next gave up on a run of exclusions: the scheduler searches on from there
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

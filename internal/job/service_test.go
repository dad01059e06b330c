package job_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/enginetest"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/usage"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func newService(t *testing.T) (*job.Service, *pgxpool.Pool) {
	t.Helper()
	pool := pgtest.Pool(t)
	svc, err := job.New(context.Background(), pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	return svc, pool
}

func resource(name, cron string) dag.Resource {
	return dag.Resource{
		Metadata: dag.Metadata{Name: name, Namespace: "analytics", Labels: map[string]string{"team": "data"}},
		Spec: dag.JobSpec{
			Schedule: schedule.Spec{Cron: schedule.Crons(cron), Timezone: "America/New_York"},
			Run:      &dag.Executor{HTTP: &dag.HTTPExecutor{URL: "http://127.0.0.1:9/hook"}},
			Payload:  dag.Payload(`{"b": 1, "a": [1, 2]}`),
		},
	}
}

// counts returns the number of rows in the tables a failed call must not touch.
func counts(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var jobs, versions, audits, keys int
	err := pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM jobs), (SELECT count(*) FROM job_versions),
		(SELECT count(*) FROM audit_log), (SELECT count(*) FROM idempotency_keys)`).Scan(&jobs, &versions, &audits, &keys)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("jobs=%d versions=%d audit=%d keys=%d", jobs, versions, audits, keys)
}

func TestCreateGetAndAudit(t *testing.T) {
	t.Parallel()
	svc, pool := newService(t)
	ctx := context.Background()
	j, err := svc.Create(ctx, job.Anonymous, resource("nightly", "0 2 * * *"), "")
	if err != nil {
		t.Fatal(err)
	}
	if j.Version != 1 || j.Status != job.StatusActive || j.NextFireAt == nil || j.Tenant != job.DefaultTenant || j.CreatedBy != "anonymous" {
		t.Fatalf("created %+v", j)
	}
	now, _ := svc.Now(ctx)
	if !j.NextFireAt.After(now) || j.NextFireAt.Sub(now) > 25*time.Hour {
		t.Fatalf("next fire %s is not the next 02:00 New York after %s", j.NextFireAt, now)
	}
	byName, err := svc.Get(ctx, job.Anonymous, job.Ref{Namespace: "analytics", Name: "nightly"})
	if err != nil || byName.ID != j.ID {
		t.Fatalf("get by name: %v %v", byName, err)
	}
	if got := string(byName.Spec.Steps[0].Payload); got != `{"a":[1,2],"b":1}` {
		t.Fatalf("payload %s", got)
	}
	if up := byName.Upcoming(10); len(up) != 10 || !up[0].Equal(*j.NextFireAt) {
		t.Fatalf("upcoming %v", up)
	}
	if got := counts(t, pool); got != "jobs=1 versions=1 audit=1 keys=0" {
		t.Fatal(got)
	}
	hist, _ := svc.History(ctx, job.Anonymous, j.ID)
	if len(hist) != 1 || hist[0].Action != "create" || hist[0].Actor != "anonymous" || hist[0].Before != nil || len(hist[0].After) == 0 {
		t.Fatalf("audit %+v", hist)
	}
	// Another tenant sees nothing.
	other := job.Actor{Tenant: [16]byte{9}, Name: "mallory"}
	if _, err := svc.Get(ctx, other, job.Ref{ID: j.ID}); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("cross-tenant get: %v", err)
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	svc, pool := newService(t)
	ctx := context.Background()
	if _, err := svc.Create(ctx, job.Anonymous, resource("taken", "@daily"), ""); err != nil {
		t.Fatal(err)
	}
	before := counts(t, pool)
	tests := []struct {
		name  string
		edit  func(*dag.Resource)
		field string
	}{
		{"bad cron", func(r *dag.Resource) { r.Spec.Schedule.Cron = schedule.Crons("61 * * * *") }, "spec.schedule.cron"},
		{"bad zone", func(r *dag.Resource) { r.Spec.Schedule.Timezone = "Nowhere/Land" }, "spec.schedule.timezone"},
		{"bad at", func(r *dag.Resource) { r.Spec.Schedule = schedule.Spec{At: "noon"} }, "spec.schedule.at"},
		{"empty name", func(r *dag.Resource) { r.Metadata.Name = "" }, "metadata.name"},
		{"long name", func(r *dag.Resource) { r.Metadata.Name = strings.Repeat("x", 64) }, "metadata.name"},
		{"bad chars", func(r *dag.Resource) { r.Metadata.Name = "Hello World" }, "metadata.name"},
		{"big payload", func(r *dag.Resource) { r.Spec.Payload = dag.Payload(`"` + strings.Repeat("x", 300<<10) + `"`) }, "spec.steps[0].payload"},
		{"not json", func(r *dag.Resource) { r.Spec.Payload = dag.Payload(`{oops`) }, "spec.steps[0].payload"},
		{"no executor", func(r *dag.Resource) { r.Spec.Run = &dag.Executor{} }, "spec.steps[0].run"},
		{"negative timeout", func(r *dag.Resource) { r.Spec.Defaults.Timeout = dag.D(-time.Second) }, "spec.defaults.timeout"},
		{"negative retries", func(r *dag.Resource) { r.Spec.Defaults.Retry = &dag.Retry{MaxAttempts: -2} }, "spec.defaults.retry.max_attempts"},
		{"a timeout of centuries", func(r *dag.Resource) { r.Spec.Defaults.Timeout = dag.D(time.Duration(1<<63 - 1)) }, "spec.defaults.timeout"},
		{"a backoff of years", func(r *dag.Resource) { r.Spec.Defaults.Retry = &dag.Retry{Max: dag.D(400 * 24 * time.Hour)} }, "spec.defaults.retry.max"},
		{"NUL in the description", func(r *dag.Resource) { r.Metadata.Description = "a\x00b" }, "metadata.description"},
		{"NUL in a label", func(r *dag.Resource) { r.Metadata.Labels["team"] = "d\x00" }, "metadata.labels.team"},
		{"NUL in a URL", func(r *dag.Resource) { r.Spec.Run.HTTP.URL = "http://127.0.0.1:9/\x00" }, "spec.steps[0].run.http.url"},
		{"NUL in the payload", func(r *dag.Resource) { r.Spec.Payload = dag.Payload(`{"a": "\u0000"}`) }, "spec.steps[0].payload.a"},
		{"header injection", func(r *dag.Resource) { r.Spec.Run.HTTP.Headers = map[string]string{"X": "a\r\nInjected: 1"} }, "spec.steps[0].run.http.headers.X"},
		{"bad header name", func(r *dag.Resource) { r.Spec.Run.HTTP.Headers = map[string]string{"X(": "v"} }, "spec.steps[0].run.http.headers"},
		{"long URL", func(r *dag.Resource) { r.Spec.Run.HTTP.URL = "http://127.0.0.1/" + strings.Repeat("x", 3000) }, "spec.steps[0].run.http.url"},
	}
	for _, tt := range tests {
		r := resource("fresh", "@daily")
		tt.edit(&r)
		_, err := svc.Create(ctx, job.Anonymous, r, "key-"+tt.name)
		var es dag.Errors
		if !errors.As(err, &es) || es[0].Field != tt.field {
			t.Errorf("%s: got %v, want an error on %s", tt.name, err, tt.field)
		}
	}
	if _, err := svc.Create(ctx, job.Anonymous, resource("taken", "@hourly"), ""); !errors.Is(err, job.ErrAlreadyExists) {
		t.Errorf("duplicate name: %v", err)
	}
	for _, key := range []string{"k\x00", strings.Repeat("k", job.MaxIdempotencyKey+1)} {
		var inv *dag.FieldError
		if _, err := svc.Create(ctx, job.Anonymous, resource("fresh", "@daily"), key); !errors.As(err, &inv) || inv.Field != "idempotency_key" {
			t.Errorf("key %.10q...: got %v, want an error on idempotency_key", key, err)
		}
	}
	if after := counts(t, pool); after != before {
		t.Fatalf("rejected requests changed the database: %s -> %s", before, after)
	}
}

func TestIdempotentCreate(t *testing.T) {
	t.Parallel()
	svc, pool := newService(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	ids := make([]string, 8)
	for i := range ids {
		wg.Go(func() {
			j, err := svc.Create(ctx, job.Anonymous, resource("once", "@daily"), "k1")
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = j.ID.String()
		})
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("replays of one key returned different jobs: %v", ids)
		}
	}
	if _, err := svc.Create(ctx, job.Anonymous, resource("once", "@hourly"), "k1"); !errors.Is(err, job.ErrIdempotencyConflict) {
		t.Fatalf("different body under one key: %v", err)
	}
	if got := counts(t, pool); got != "jobs=1 versions=1 audit=1 keys=1" {
		t.Fatal(got)
	}
}

func TestUpdateOptimisticConcurrency(t *testing.T) {
	t.Parallel()
	svc, _ := newService(t)
	ctx := context.Background()
	j, _ := svc.Create(ctx, job.Anonymous, resource("etl", "0 2 * * *"), "")
	ref := job.Ref{ID: j.ID}

	r := resource("etl", "0 3 * * *")
	v2, err := svc.Update(ctx, job.Anonymous, ref, r, 1)
	if err != nil {
		t.Fatal(err)
	}
	if v2.Version != 2 || v2.NextFireAt.Equal(*j.NextFireAt) {
		t.Fatalf("update did not bump the version or move the next fire time: %+v", v2)
	}
	var vc *job.VersionConflictError
	if _, err := svc.Update(ctx, job.Anonymous, ref, resource("etl", "0 4 * * *"), 1); !errors.As(err, &vc) || vc.Current != 2 {
		t.Fatalf("stale version: %v", err)
	}
	same, err := svc.Update(ctx, job.Anonymous, ref, r, 2)
	if err != nil || same.Version != 2 {
		t.Fatalf("no-op update bumped the version: %+v %v", same, err)
	}
	renamed := resource("etl2", "0 3 * * *")
	if _, err := svc.Update(ctx, job.Anonymous, ref, renamed, 2); err == nil {
		t.Fatal("rename through update was accepted")
	}
	hist, _ := svc.History(ctx, job.Anonymous, j.ID)
	if len(hist) != 2 || hist[1].Action != "update" || len(hist[1].Before) == 0 {
		t.Fatalf("audit %+v", hist)
	}
}

// scheduleFollows fails unless job id's schedule row says what its jobs
// row does: the shard, and the next fire time if the job is active.
func scheduleFollows(t *testing.T, pool *pgxpool.Pool, id uuid.UUID, after string) {
	t.Helper()
	var ok bool
	err := pool.QueryRow(context.Background(), `SELECT s.shard = j.shard
		AND s.next_fire_at IS NOT DISTINCT FROM CASE WHEN j.status = 'active' THEN j.next_fire_at END
		FROM jobs AS j JOIN job_schedules AS s ON s.job_id = j.id WHERE j.id = $1`, id).Scan(&ok)
	if err != nil || !ok {
		t.Fatalf("after %s: the schedule row does not follow the job (%v)", after, err)
	}
}

func TestPauseResumeDelete(t *testing.T) {
	t.Parallel()
	svc, pool := newService(t)
	ctx := context.Background()
	j, _ := svc.Create(ctx, job.Anonymous, resource("p", "*/5 * * * *"), "")
	scheduleFollows(t, pool, j.ID, "create")
	ref := job.Ref{Namespace: "analytics", Name: "p"}
	u, err := svc.Update(ctx, job.Anonymous, ref, resource("p", "0 3 * * *"), j.Version)
	if err != nil {
		t.Fatal(err)
	}
	scheduleFollows(t, pool, j.ID, "update")
	p, err := svc.Pause(ctx, job.Anonymous, ref)
	if err != nil || p.Status != job.StatusPaused || p.Upcoming(10) != nil {
		t.Fatalf("pause: %+v %v", p, err)
	}
	scheduleFollows(t, pool, j.ID, "pause")
	if again, _ := svc.Pause(ctx, job.Anonymous, ref); again.UpdatedAt != p.UpdatedAt {
		t.Fatal("pausing a paused job changed it")
	}
	if _, err := svc.Update(ctx, job.Anonymous, ref, resource("p", "0 4 * * *"), u.Version); err != nil {
		t.Fatal(err)
	}
	scheduleFollows(t, pool, j.ID, "update while paused")
	r, err := svc.Resume(ctx, job.Anonymous, ref)
	if err != nil || r.Status != job.StatusActive || r.NextFireAt == nil {
		t.Fatalf("resume: %+v %v", r, err)
	}
	scheduleFollows(t, pool, j.ID, "resume")
	d, err := svc.Delete(ctx, job.Anonymous, ref)
	if err != nil || d.Status != job.StatusDeleted || d.NextFireAt != nil || d.DeletedAt == nil {
		t.Fatalf("delete: %+v %v", d, err)
	}
	scheduleFollows(t, pool, j.ID, "delete")
	if _, err := svc.Resume(ctx, job.Anonymous, job.Ref{ID: j.ID}); !errors.Is(err, job.ErrDeleted) {
		t.Fatalf("resume deleted: %v", err)
	}
	// The name is free again, the old job's history stays.
	if _, err := svc.Create(ctx, job.Anonymous, resource("p", "@daily"), ""); err != nil {
		t.Fatal(err)
	}
	hist, _ := svc.History(ctx, job.Anonymous, j.ID)
	var actions []string
	for _, h := range hist {
		actions = append(actions, h.Action)
	}
	if strings.Join(actions, ",") != "create,update,pause,update,resume,delete" {
		t.Fatalf("audit actions %v", actions)
	}
}

func TestResumeFollowsMisfirePolicy(t *testing.T) {
	t.Parallel()
	svc, pool := newService(t)
	ctx := context.Background()
	for _, policy := range []dag.MisfirePolicy{dag.MisfireSkip, dag.MisfireFireOnce, dag.MisfireBackfill} {
		r := resource("m-"+strings.ReplaceAll(string(policy), "_", "-"), "*/10 * * * *")
		r.Spec.Misfire = policy
		if policy == dag.MisfireBackfill {
			r.Spec.MaxBackfill = 3
		}
		j, err := svc.Create(ctx, job.Anonymous, r, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Pause(ctx, job.Anonymous, job.Ref{ID: j.ID}); err != nil {
			t.Fatal(err)
		}
		// Pretend the job was paused for an hour: its pending instant is an hour old.
		if _, err := pool.Exec(ctx, "UPDATE jobs SET next_fire_at = next_fire_at - interval '1 hour' WHERE id = $1", j.ID); err != nil {
			t.Fatal(err)
		}
		now, _ := svc.Now(ctx)
		res, err := svc.Resume(ctx, job.Anonymous, job.Ref{ID: j.ID})
		if err != nil {
			t.Fatal(err)
		}
		next := *res.NextFireAt
		switch policy {
		case dag.MisfireSkip:
			if !next.After(now) {
				t.Errorf("skip: next %s not after now %s", next, now)
			}
		case dag.MisfireFireOnce:
			if next.After(now) || now.Sub(next) >= 10*time.Minute {
				t.Errorf("fire_once: next %s is not the latest missed instant before %s", next, now)
			}
		case dag.MisfireBackfill:
			if d := now.Sub(next); d < 20*time.Minute || d >= 30*time.Minute {
				t.Errorf("backfill 3: next %s is not the third latest missed instant before %s", next, now)
			}
		}
	}
}

func TestListPagesAndFilters(t *testing.T) {
	t.Parallel()
	svc, _ := newService(t)
	ctx := context.Background()
	for i := range 7 {
		r := resource(fmt.Sprintf("job-%02d", i), "@daily")
		if i%2 == 0 {
			r.Metadata.Namespace = "ops"
			r.Metadata.Labels = map[string]string{"team": "ops", "tier": "1"}
		}
		if _, err := svc.Create(ctx, job.Anonymous, r, ""); err != nil {
			t.Fatal(err)
		}
	}
	_, _ = svc.Pause(ctx, job.Anonymous, job.Ref{Namespace: "ops", Name: "job-00"})
	_, _ = svc.Delete(ctx, job.Anonymous, job.Ref{Namespace: "analytics", Name: "job-01"})

	var names []string
	token := ""
	for pages := 0; ; pages++ {
		page, next, err := svc.List(ctx, job.Anonymous, job.ListFilter{PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page {
			names = append(names, j.Name)
		}
		if next == "" {
			break
		}
		token = next
	}
	if got := strings.Join(names, ","); got != "job-00,job-02,job-03,job-04,job-05,job-06" {
		t.Fatalf("paged list %s", got)
	}
	filtered := func(f job.ListFilter) string {
		page, _, err := svc.List(ctx, job.Anonymous, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, j := range page {
			out = append(out, j.Name)
		}
		return strings.Join(out, ",")
	}
	if got := filtered(job.ListFilter{Namespace: "ops", Labels: map[string]string{"tier": "1"}}); got != "job-00,job-02,job-04,job-06" {
		t.Errorf("namespace+label filter: %s", got)
	}
	if got := filtered(job.ListFilter{Status: job.StatusPaused}); got != "job-00" {
		t.Errorf("status filter: %s", got)
	}
	if got := filtered(job.ListFilter{Status: job.StatusDeleted}); got != "job-01" {
		t.Errorf("deleted filter: %s", got)
	}
	if _, _, err := svc.List(ctx, job.Anonymous, job.ListFilter{PageToken: "garbage!"}); err == nil {
		t.Error("a malformed page token was accepted")
	}
}

// Rewriting a one-time job's instant in other words (another offset)
// does not arm it again once it fired: its run may have been pruned, and
// the instant would fire twice. Another instant does arm it.
func TestOneTimeInstantRewrittenDoesNotFireAgain(t *testing.T) {
	t.Parallel()
	svc, pool := newService(t)
	ctx := context.Background()
	res := dag.Resource{APIVersion: dag.APIVersion, Kind: dag.KindJob, Metadata: dag.Metadata{Name: "once", Namespace: "ops"},
		Spec: dag.JobSpec{Schedule: schedule.Spec{At: "2030-01-01T00:00:00Z"}, Run: &dag.Executor{Handler: "h"}}}
	j, err := svc.Create(ctx, job.Anonymous, res, "")
	if err != nil {
		t.Fatal(err)
	}
	// As after it fired: nothing left to fire.
	if _, err := pool.Exec(ctx, "UPDATE job_schedules SET next_fire_at = NULL WHERE job_id = $1", j.ID); err != nil {
		t.Fatal(err)
	}
	res.Spec.Schedule.At = "2030-01-01T01:00:00+01:00"
	j, err = svc.Update(ctx, job.Anonymous, job.Ref{ID: j.ID}, res, j.Version)
	if err != nil || j.NextFireAt != nil {
		t.Fatalf("the same instant rewritten: next fire %v (%v)", j.NextFireAt, err)
	}
	res.Spec.Schedule.At = "2030-06-01T00:00:00Z"
	j, err = svc.Update(ctx, job.Anonymous, job.Ref{ID: j.ID}, res, j.Version)
	if err != nil || j.NextFireAt == nil || !j.NextFireAt.Equal(time.Date(2030, 6, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("another instant: next fire %v (%v)", j.NextFireAt, err)
	}
}

// Concurrent creations are committed together (one statement for a
// batch), each with its own answer: of ten creations of one name exactly
// one is created and the others are told the name is taken, every other
// creation is created, with its version, audit row and schedule, and
// nothing is written for the ones refused.
func TestConcurrentCreatesAnswerEachAlone(t *testing.T) {
	t.Parallel()
	svc, pool := newService(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	created, taken := map[string]int{}, 0
	for i := range 50 {
		name := fmt.Sprintf("n%02d", i)
		if i >= 40 {
			name = "same"
		}
		wg.Go(func() {
			j, err := svc.Create(ctx, job.Anonymous, resource(name, "@daily"), "")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, job.ErrAlreadyExists) && name == "same":
				taken++
			case err != nil:
				t.Errorf("%s: %v", name, err)
			case j.Name != name || j.NextFireAt == nil:
				t.Errorf("%s: answered with %s, next fire %v", name, j.Name, j.NextFireAt)
			default:
				created[name]++
			}
		})
	}
	wg.Wait()
	if len(created) != 41 || created["same"] != 1 || taken != 9 {
		t.Fatalf("%d names created (same: %d), %d refused; want 41, 1, 9", len(created), created["same"], taken)
	}
	if got := counts(t, pool); got != "jobs=41 versions=41 audit=41 keys=0" {
		t.Fatal(got)
	}
	if n := enginetest.Int(t, pool, `SELECT count(*)::int FROM jobs AS j JOIN job_schedules AS s ON s.job_id = j.id
		WHERE s.next_fire_at = j.next_fire_at AND s.shard = j.shard`); n != 41 {
		t.Fatalf("%d of 41 jobs with their schedule", n)
	}
}

// A definition too large to join a batch of creations (over 64 KiB) is
// written alone, beside concurrent small ones, and stored whole.
func TestLargeDefinitionIsCreatedAlone(t *testing.T) {
	t.Parallel()
	svc, pool := newService(t)
	ctx := context.Background()
	big := resource("big", "@daily")
	big.Spec.Payload = dag.Payload(`"` + strings.Repeat("x", 100_000) + `"`)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			if _, err := svc.Create(ctx, job.Anonymous, resource(fmt.Sprintf("small%02d", i), "@daily"), ""); err != nil {
				t.Error(err)
			}
		})
	}
	j, err := svc.Create(ctx, job.Anonymous, big, "")
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if n := enginetest.Int(t, pool, "SELECT length(spec::text)::int FROM jobs WHERE id = $1", j.ID); n < 100_000 {
		t.Fatalf("stored definition of %d bytes, want the whole 100,000-byte payload in it", n)
	}
	if got := counts(t, pool); got != "jobs=21 versions=21 audit=21 keys=0" {
		t.Fatal(got)
	}
}

// A batch of creations that waits on a row another transaction is writing
// (here, a namespace created in a transaction still open) gives up after a
// second and serves each creation alone: only the creations in that
// namespace wait for it, the others are answered meanwhile.
func TestCreationsDoNotWaitOnAnotherNamespace(t *testing.T) {
	t.Parallel()
	svc, pool := newService(t)
	ctx := context.Background()
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := holder.Exec(ctx, "INSERT INTO namespaces (tenant_id, name) VALUES ($1, 'held')", job.DefaultTenant); err != nil {
		t.Fatal(err)
	}
	var others, held sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		r := resource(fmt.Sprintf("j%d", i), "@daily")
		wg := &others
		if i%10 == 0 {
			r.Metadata.Namespace, wg = "held", &held
		}
		wg.Go(func() {
			if _, err := svc.Create(ctx, job.Anonymous, r, ""); err != nil {
				errs <- err
			}
		})
	}
	done := make(chan struct{})
	go func() { others.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("creations in other namespaces waited for the transaction that creates one")
	}
	if n := enginetest.Int(t, pool, "SELECT count(*)::int FROM jobs WHERE namespace = 'held'"); n != 0 {
		t.Fatalf("%d jobs in the held namespace before its transaction ended", n)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	held.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := counts(t, pool); got != "jobs=40 versions=40 audit=40 keys=0" {
		t.Fatal(got)
	}
}

// A job whose schedule row is missing (written by a node older than the
// table) can still be changed, and the change writes the row.
func TestChangeWritesAMissingScheduleRow(t *testing.T) {
	t.Parallel()
	svc, pool := newService(t)
	ctx := context.Background()
	j, err := svc.Create(ctx, job.Anonymous, resource("old", "@hourly"), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "DELETE FROM job_schedules WHERE job_id = $1", j.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Update(ctx, job.Anonymous, job.Ref{ID: j.ID}, resource("old", "@daily"), j.Version); err != nil {
		t.Fatal(err)
	}
	scheduleFollows(t, pool, j.ID, "update without a schedule row")
}

// A list without steps carries each job's summary; a page of whole
// definitions stops where its definitions pass the byte budget, or their
// payloads the node budget, and its token continues after the last job
// returned; every job is listed once.
func TestListBudgets(t *testing.T) {
	t.Parallel()
	svc, _ := newService(t)
	ctx := context.Background()
	// A payload of about 200 KB of strings (few values), and one of about
	// 180 KB of empty lists (many).
	wide := dag.Payload(`["` + strings.Repeat("x", 200<<10) + `"]`)
	deep := dag.Payload("[" + strings.Repeat("[],", 59_999) + "[]]")
	create := func(ns, name string, payload dag.Payload, steps int) {
		t.Helper()
		r := resource(name, "@daily")
		r.Metadata.Namespace = ns
		r.Spec.Run, r.Spec.Payload = nil, nil
		for s := range steps {
			r.Spec.Steps = append(r.Spec.Steps, dag.Step{Name: fmt.Sprintf("s%d", s), Payload: payload,
				Run: dag.Executor{Handler: "h"}})
		}
		if _, err := svc.Create(ctx, job.Anonymous, r, ""); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		create("wide", fmt.Sprintf("w%d", i), wide, 8) // 1.6 MB each: the third passes 4 MiB
		create("deep", fmt.Sprintf("d%d", i), deep, 1) // 60,001 values each: one fits in 100,000
	}
	pages := func(ns string, withSteps bool) (sizes []int, names []string) {
		token := ""
		for {
			page, next, err := svc.List(ctx, job.Anonymous, job.ListFilter{Namespace: ns, PageSize: 500, PageToken: token, WithSteps: withSteps})
			if err != nil {
				t.Fatal(err)
			}
			sizes = append(sizes, len(page))
			for _, j := range page {
				names = append(names, j.Name)
				if withSteps != (len(j.Spec.Steps) > 0) {
					t.Errorf("%s with steps %v: %d steps", j.Name, withSteps, len(j.Spec.Steps))
				}
				if j.Spec.Schedule.Cron[0] != "@daily" {
					t.Errorf("%s: schedule %+v, want it in the summary too", j.Name, j.Spec.Schedule)
				}
			}
			if token = next; token == "" {
				return sizes, names
			}
		}
	}
	for _, tt := range []struct {
		ns        string
		withSteps bool
		want      string
	}{
		{"wide", false, "[5]"},
		{"wide", true, "[3 2]"},
		{"deep", false, "[5]"},
		{"deep", true, "[1 1 1 1 1]"},
	} {
		sizes, names := pages(tt.ns, tt.withSteps)
		if got := fmt.Sprint(sizes); got != tt.want || len(names) != 5 || len(slices.Compact(slices.Sorted(slices.Values(names)))) != 5 {
			t.Errorf("%s with steps %v: pages %s of %v, want %s of every job once", tt.ns, tt.withSteps, got, names, tt.want)
		}
	}
}

// What a tenant holds of jobs and definition bytes follows every
// creation, update and deletion (the sums tenant_job_usage keeps are what
// the jobs table holds), and an update that would pass the tenant's
// definition bytes quota is refused with nothing written.
func TestDefinitionsCountTowardTheQuota(t *testing.T) {
	t.Parallel()
	svc, pool := newService(t)
	ctx := context.Background()
	held := func() string {
		t.Helper()
		var counted, stored string
		if err := pool.QueryRow(ctx, `SELECT concat(sum(jobs), '/', sum(definition_bytes)) FROM tenant_job_usage`).Scan(&counted); err != nil {
			t.Fatal(err)
		}
		if err := pool.QueryRow(ctx, `SELECT concat(count(*), '/', sum(octet_length(spec::text))) FROM jobs WHERE status <> 'deleted'`).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if counted != stored {
			t.Errorf("tenant_job_usage holds %s jobs/bytes, the jobs table %s", counted, stored)
		}
		return counted
	}
	var ids []uuid.UUID
	for _, name := range []string{"a", "b", "c"} {
		j, err := svc.Create(ctx, job.Anonymous, resource(name, "0 2 * * *"), "")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	held()
	bigger := resource("a", "0 2 * * *")
	bigger.Spec.Payload = dag.Payload(`{"pad": "` + strings.Repeat("x", 500) + `"}`)
	if _, err := svc.Update(ctx, job.Anonymous, job.Ref{ID: ids[0]}, bigger, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Delete(ctx, job.Anonymous, job.Ref{ID: ids[1]}); err != nil {
		t.Fatal(err)
	}
	now := held()

	if _, err := pool.Exec(ctx, `UPDATE tenants SET max_definition_bytes = (SELECT sum(definition_bytes) FROM tenant_job_usage) + 100`); err != nil {
		t.Fatal(err)
	}
	before := counts(t, pool)
	biggest := resource("c", "0 2 * * *")
	biggest.Spec.Payload = dag.Payload(`{"pad": "` + strings.Repeat("x", 500) + `"}`)
	var over *usage.ExceededError
	if _, err := svc.Update(ctx, job.Anonymous, job.Ref{ID: ids[2]}, biggest, 1); !errors.As(err, &over) || over.Quota != "max_definition_bytes" {
		t.Fatalf("an update past the quota: %v, want max_definition_bytes exceeded", err)
	}
	if after := counts(t, pool); after != before || held() != now {
		t.Errorf("a refused update wrote: %s -> %s", before, after)
	}
	smaller := resource("a", "0 2 * * *")
	if _, err := svc.Update(ctx, job.Anonymous, job.Ref{ID: ids[0]}, smaller, 2); err != nil {
		t.Errorf("an update that shrinks a definition over the quota: %v, want it allowed", err)
	}
	held()
}

// A loop of updates grows a tenant's history (the version each keeps of
// the definition before, the audit row of both): 2 MB definitions added
// 6.5 MB an update that no quota counted. The history now counts, against
// max_history_bytes: the loop is refused at the quota with nothing
// written, what tenant_job_usage holds is what a recount finds (within
// usage.TextBytes' estimate of the audit rows), and pausing and deleting
// are allowed at the quota. Past MaxVersionsKept, an update prunes the
// oldest version no run pins, with an audit row naming it, and the history
// shrinks by its bytes.
func TestUpdatesCountTowardTheHistoryQuota(t *testing.T) {
	t.Parallel()
	svc, pool := newService(t)
	ctx := context.Background()
	history := func() (counted, found int64) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT sum(history_bytes) FROM tenant_job_usage`).Scan(&counted); err != nil {
			t.Fatal(err)
		}
		if err := pool.QueryRow(ctx, `SELECT
			COALESCE((SELECT sum(octet_length(v.spec::text)) FROM job_versions v JOIN jobs j ON j.id = v.job_id
			          WHERE j.status = 'deleted' OR v.version < j.version), 0)
			+ COALESCE((SELECT sum(COALESCE(octet_length(before::text), 0) + COALESCE(octet_length(after::text), 0)) FROM audit_log
			            WHERE target_kind = 'job'), 0)`).Scan(&found); err != nil {
			t.Fatal(err)
		}
		if counted < found || float64(counted) > 1.05*float64(found) {
			t.Errorf("history counted %d bytes, the tables hold %d", counted, found)
		}
		return counted, found
	}
	if _, err := pool.Exec(ctx, `UPDATE tenants SET max_history_bytes = 4000000 WHERE name = 'default'`); err != nil {
		t.Fatal(err)
	}
	res := resource("loop", "0 2 * * *")
	j, err := svc.Create(ctx, job.Anonymous, res, "")
	if err != nil {
		t.Fatal(err)
	}
	version, updates := j.Version, 0
	var over *usage.ExceededError
	for ; updates < 100; updates++ {
		res.Spec.Payload = dag.Payload(fmt.Sprintf(`{"pad": %q, "n": %d}`, strings.Repeat("x", 200_000), updates))
		j, err = svc.Update(ctx, job.Anonymous, job.Ref{ID: j.ID}, res, version)
		if err != nil {
			break
		}
		version = j.Version
	}
	if !errors.As(err, &over) || over.Quota != "max_history_bytes" || updates < 5 || updates > 8 {
		t.Fatalf("after %d updates of 200 KB: %v, want max_history_bytes exceeded after 5 to 8", updates, err)
	}
	before := counts(t, pool)
	counted, _ := history()
	if _, err := svc.Update(ctx, job.Anonymous, job.Ref{ID: j.ID}, res, version); !errors.As(err, &over) {
		t.Fatalf("an update at the quota: %v", err)
	}
	if after := counts(t, pool); after != before {
		t.Errorf("a refused update wrote: %s -> %s", before, after)
	}
	if now, _ := history(); now != counted {
		t.Errorf("a refused update counted %d bytes of history", now-counted)
	}
	if _, err := svc.Pause(ctx, job.Anonymous, job.Ref{ID: j.ID}); err != nil {
		t.Errorf("a pause at the history quota: %v, want it allowed", err)
	}
	if _, err := svc.Delete(ctx, job.Anonymous, job.Ref{ID: j.ID}); err != nil {
		t.Errorf("a delete at the history quota: %v, want it allowed", err)
	}
	history()

	// MaxVersionsKept: a small job updated past it keeps that many.
	if _, err := pool.Exec(ctx, `UPDATE tenants SET max_history_bytes = 0 WHERE name = 'default'`); err != nil {
		t.Fatal(err)
	}
	small := resource("small", "0 2 * * *")
	s, err := svc.Create(ctx, job.Anonymous, small, "")
	if err != nil {
		t.Fatal(err)
	}
	for i := range job.MaxVersionsKept + 4 {
		small.Spec.Payload = dag.Payload(fmt.Sprintf(`{"n": %d}`, i))
		if s, err = svc.Update(ctx, job.Anonymous, job.Ref{ID: s.ID}, small, s.Version); err != nil {
			t.Fatal(err)
		}
	}
	var kept, oldest, pruned int
	if err := pool.QueryRow(ctx, `SELECT count(*), min(version) FROM job_versions WHERE job_id = $1`, s.ID).Scan(&kept, &oldest); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = 'prune_versions' AND target_id = $1`, s.ID).Scan(&pruned); err != nil {
		t.Fatal(err)
	}
	if kept != job.MaxVersionsKept || oldest != int(s.Version)-job.MaxVersionsKept+1 || pruned != 5 {
		t.Errorf("versions kept %d from %d (latest %d), %d audit rows of prunes; want %d, the oldest pruned by 5 updates", kept, oldest, s.Version, pruned, job.MaxVersionsKept)
	}
	history()
}

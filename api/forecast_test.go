package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/run"
)

// The capacity forecast over REST: each step's resources for the median
// of its attempts (prep 30 minutes, fit an hour after it), against what
// the queue's live worker declares: the hours where an hourly run's fit
// overlaps the next one's are short of cpu, naming the job; another
// tenant's forecast holds none of it.
func TestCapacityForecast(t *testing.T) {
	t.Parallel()
	base, keys, pool := authServerPool(t)
	ctx := context.Background()
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("0 * * * *")}, Steps: []dag.Step{
		{Name: "prep", Run: dag.Executor{Handler: "h"}, Resources: &dag.Resources{CPU: "1"}},
		{Name: "fit", Needs: []string{"prep"}, Run: dag.Executor{Handler: "h"}, Resources: &dag.Resources{CPU: "2", Memory: "1Gi"}},
	}}
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "train"}, Spec: spec}, ""); err != nil {
		t.Fatal(err)
	}
	d, _ := dispatch.New()
	r, err := run.NewService(pool, jobs, d).Trigger(ctx, job.Anonymous, job.Ref{Name: "train"}, "", true)
	if err != nil {
		t.Fatal(err)
	}
	// Its history: prep took 30 minutes, fit an hour.
	if _, err := pool.Exec(ctx, `INSERT INTO attempts (id, task_id, tenant_id, number, fencing_token, worker, started_at, finished_at, outcome)
		SELECT gen_random_uuid(), k.id, k.tenant_id, 1, 1, 'w', now() - interval '2 hours',
		       now() - interval '2 hours' + CASE k.step WHEN 'prep' THEN interval '30 minutes' ELSE interval '1 hour' END, 'succeeded'
		FROM tasks k WHERE k.run_id = $1`, r.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO workers (id, name, queues, started_at, heartbeat_at, lease_expires_at, cap_cpu, cap_memory, cap_gpu)
		VALUES ($1, 'w', '{"default": 2}', now(), now(), now() + interval '1 hour', 2000, 4294967296, 0)`, uuid.New()); err != nil {
		t.Fatal(err)
	}
	from := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
	body := `{"from": "` + from.Format(time.RFC3339) + `", "to": "` + from.Add(3*time.Hour).Format(time.RFC3339) + `"}`
	code, _, b := rest(t, "POST", base+"/api/v1/forecast", keys["reader"], body)
	if code != http.StatusOK {
		t.Fatalf("forecast: %d %s", code, b)
	}
	var got struct {
		Hours []struct {
			Queue, Hour      string
			Demand, Capacity struct{ CPU, Memory string }
			Served           bool
			Short            []string
			Jobs             []struct {
				Job    string
				Demand struct{ CPU string }
			}
			Load float64
		}
		UnmeasuredSteps int
	}
	if err := json.Unmarshal([]byte(b), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Hours) != 3 || got.UnmeasuredSteps != 0 {
		t.Fatalf("%d hours, %d steps unmeasured; want 3 and 0: %s", len(got.Hours), got.UnmeasuredSteps, b)
	}
	// Hour 0: prep 1 core for half of it, fit 2 for the other half: 1.5.
	// Later hours: the last run's fit too: 2.5 of 2 cores.
	for i, h := range got.Hours {
		line := fmt.Sprintf("%s %s cpu %s/%s memory %s/%s served %v short %v load %.2f", h.Queue, h.Hour, h.Demand.CPU, h.Capacity.CPU,
			h.Demand.Memory, h.Capacity.Memory, h.Served, h.Short, h.Load)
		want := fmt.Sprintf("default %s cpu 1500m/2 memory 512Mi/4Gi served true short [] load 0.75", from.Format(time.RFC3339))
		if i > 0 {
			want = fmt.Sprintf("default %s cpu 2500m/2 memory 1Gi/4Gi served true short [cpu] load 1.25", from.Add(time.Duration(i)*time.Hour).Format(time.RFC3339))
			if len(h.Jobs) != 1 || h.Jobs[0].Job != "default/train" || h.Jobs[0].Demand.CPU != "2500m" {
				t.Errorf("hour %d's jobs: %+v", i, h.Jobs)
			}
		}
		if line != want {
			t.Errorf("hour %d: %s\nwant     %s", i, line, want)
		}
	}
	if code, _, b := rest(t, "POST", base+"/api/v1/forecast", keys["other"], body); code != http.StatusOK || strings.Contains(b, `"queue"`) {
		t.Errorf("another tenant's forecast: %d %s", code, b)
	}
	// Jobs given in the request are read as apply reads them, and may
	// name only profiles that exist.
	inline := func(jobs string) string {
		return `{"from": "` + from.Format(time.RFC3339) + `", "to": "` + from.Add(time.Hour).Format(time.RFC3339) + `", "jobs": [` + jobs + `]}`
	}
	j := func(name, step string) string {
		return `{"metadata": {"name": "` + name + `", "namespace": "default"}, "spec": {"schedule": {"cron": "0 * * * *"}, "steps": [` + step + `]}}`
	}
	for _, c := range []struct{ body, want string }{
		{inline(j("a", `{"name": "s", "run": {"handler": "h"}, "resourceProfile": "nope"}`)), `jobs[0].spec.steps[0].resourceProfile: no resource profile \"nope\"`},
		{inline(j("a", `{"name": "s", "run": {"handler": "h"}}`) + "," + j("a", `{"name": "s", "run": {"handler": "h"}}`)), `jobs[1].metadata.name: default/a is also jobs[0]`},
		{inline(j("a", `{"name": "s", "run": {"handler": "h"}, "resources": {"cpu": "lots"}}`)), `jobs[0].spec.steps[0].resources.cpu`},
		{strings.Replace(inline(""), `"jobs"`, `"namespace": "../x", "jobs"`, 1), `namespace:`},
	} {
		if code, _, b := rest(t, "POST", base+"/api/v1/forecast", keys["reader"], c.body); code != http.StatusUnprocessableEntity || !strings.Contains(b, c.want) {
			t.Errorf("%s: %d %s; want 422 naming %s", c.body, code, b, c.want)
		}
	}
}

package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/internal/enginetest"
)

// BenchmarkListJobsMemory is a reader's attempt to make the server
// allocate: five jobs that hold as many JSON values as a definition may
// (dag.MaxDefinitionValues), then four concurrent ListJobs of their
// namespace, b.N times, against an `orrery serve` of its own. It reports
// the server's peak RSS above its idle RSS (VmHWM and VmRSS from /proc),
// for each view. ORRERY_BENCH_LIST_SHAPE says what the values are
// (heavySpec). ORRERY_BENCH_BIN runs another binary (an older build: the
// before of a change; one older than the view ignores it and answers
// whole definitions); ORRERY_BENCH_LIST_ITEMS=N gives each step's payload
// N items instead (83,000 empties is about 250 KB, which definitions
// could hold before values were counted).
func BenchmarkListJobsMemory(b *testing.B) {
	for _, view := range []orreryv1.JobView{orreryv1.JobView_JOB_VIEW_BASIC, orreryv1.JobView_JOB_VIEW_FULL} {
		b.Run("view="+strings.ToLower(strings.TrimPrefix(view.String(), "JOB_VIEW_")), func(b *testing.B) {
			listMemory(b, view)
		})
	}
}

func listMemory(b *testing.B, view orreryv1.JobView) {
	bin := orreryBin
	if v := os.Getenv("ORRERY_BENCH_BIN"); v != "" {
		bin = v
	}
	_, dsn := freshDBDSN(b)
	addr := freeAddr()
	cmd := exec.Command(bin, "serve", "--db", dsn, "--addr", addr, "--auth", "none", "--no-scheduler", "--log-level", "warn")
	var logs lockedBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	client := orreryv1connect.NewJobServiceClient(http.DefaultClient, "http://"+addr)
	ctx := context.Background()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := client.ListJobs(ctx, connect.NewRequest(&orreryv1.ListJobsRequest{})); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("serve did not start:\n%s", logs.String())
		}
	}
	for i := range 5 {
		if _, err := client.CreateJob(ctx, connect.NewRequest(&orreryv1.CreateJobRequest{
			Metadata: &orreryv1.JobMetadata{Name: fmt.Sprintf("heavy-%d", i), Namespace: "heavy"}, Spec: heavySpec(b)})); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(2 * time.Second) // the creations' garbage collected
	idle := enginetest.ProcKB(b, cmd.Process.Pid, "VmRSS")
	var steps int64
	var mu sync.Mutex
	b.ResetTimer()
	for range b.N {
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				req := &orreryv1.ListJobsRequest{Namespace: "heavy", View: view}
				for {
					res, err := client.ListJobs(ctx, connect.NewRequest(req))
					if err != nil {
						b.Error(err)
						return
					}
					mu.Lock()
					for _, j := range res.Msg.GetJobs() {
						steps += int64(len(j.GetSpec().GetSteps()))
					}
					mu.Unlock()
					if req.PageToken = res.Msg.GetNextPageToken(); req.PageToken == "" {
						return
					}
				}
			})
		}
		wg.Wait()
	}
	b.StopTimer()
	peak := enginetest.ProcKB(b, cmd.Process.Pid, "VmHWM")
	b.ReportMetric(float64(idle)/1024, "idle-MB")
	b.ReportMetric(float64(peak-idle)/1024, "peak-above-idle-MB")
	b.ReportMetric(float64(steps)/float64(b.N*4), "steps/list")
}

// heavySpec is a job of seven steps that holds as many JSON values as a
// definition may, in the shape ORRERY_BENCH_LIST_SHAPE names: each step's
// payload a list of objects ({"a":0}, the default), lists ([0]) or
// empties ([]); params (100 params whose enums hold 1,000 values each,
// the most an enum may, and payloads of empties for the rest); or
// enum-attack (one param whose enum is 100 lists of 6,800 empty arrays, 2
// MB: what definitions could hold before enums were bounded, refused
// since, for ORRERY_BENCH_BIN's before).
func heavySpec(b *testing.B) *orreryv1.JobSpec {
	spec := &orreryv1.JobSpec{Schedule: &orreryv1.Schedule{Cron: "@yearly"}, Params: map[string]*orreryv1.Param{}}
	values := dag.MaxDefinitionValues - 7*12 - 20 // each step's own fields, the schedule's
	list := func(n int, item func() any) *structpb.Value {
		items := make([]any, n)
		for i := range items {
			items[i] = item()
		}
		v, err := structpb.NewValue(items)
		if err != nil {
			b.Fatal(err)
		}
		return v
	}
	empty := func() any { return []any{} }
	item, perItem := func() any { return map[string]any{"a": 0} }, 2
	switch shape := os.Getenv("ORRERY_BENCH_LIST_SHAPE"); shape {
	case "", "objects":
	case "lists":
		item = func() any { return []any{0} }
	case "empties":
		item, perItem = empty, 1
	case "params":
		for p := range dag.MaxParams {
			param := &orreryv1.Param{Type: "array"}
			for e := range 10 {
				v := list(98, empty)
				v.GetListValue().Values = append(v.GetListValue().Values, structpb.NewNumberValue(float64(e)))
				param.Enum = append(param.Enum, v) // 100 values
			}
			spec.Params[fmt.Sprintf("p%03d", p)] = param
			values -= 1000 + 3
		}
		item, perItem = empty, 1
	case "enum-attack":
		param := &orreryv1.Param{Type: "array"}
		for e := range dag.MaxParamEnum {
			v := list(6_800, empty)
			v.GetListValue().Values = append(v.GetListValue().Values, structpb.NewNumberValue(float64(e)))
			param.Enum = append(param.Enum, v)
		}
		spec.Params["p"] = param
		values = 0
	default:
		b.Fatalf("ORRERY_BENCH_LIST_SHAPE=%q: want objects, lists, empties, params or enum-attack", shape)
	}
	payload := list(envInt(b, "ORRERY_BENCH_LIST_ITEMS", max(values/7-1, 0)/perItem), item)
	for s := range 7 {
		spec.Steps = append(spec.Steps, &orreryv1.Step{Name: fmt.Sprintf("s%d", s), Payload: payload,
			Run: &orreryv1.Executor{Kind: &orreryv1.Executor_Handler{Handler: "h"}}})
	}
	return spec
}

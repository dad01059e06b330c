package api_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	"github.com/google/uuid"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
	"github.com/orrery-dev/orrery/internal/job"
)

// listAll pages through ListAudit with req (its page token is overwritten)
// and returns every entry and the size of each page.
func listAll(t *testing.T, c orreryv1connect.AuditServiceClient, req *orreryv1.ListAuditRequest) ([]*orreryv1.AuditEntry, []int) {
	t.Helper()
	var all []*orreryv1.AuditEntry
	var pages []int
	req.PageToken = ""
	for {
		res, err := c.ListAudit(context.Background(), connect.NewRequest(req))
		if err != nil {
			t.Fatalf("ListAudit(%v): %v", req, err)
		}
		all = append(all, res.Msg.GetEntries()...)
		pages = append(pages, len(res.Msg.GetEntries()))
		if req.PageToken = res.Msg.GetNextPageToken(); req.PageToken == "" {
			return all, pages
		}
		if len(pages) > 100 {
			t.Fatal("paging does not end")
		}
	}
}

func actions(es []*orreryv1.AuditEntry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.GetAction() + " " + e.GetTargetName()
	}
	return out
}

func changeOf(e *orreryv1.AuditEntry, path string) *orreryv1.FieldChange {
	for _, c := range e.GetChanges() {
		if c.GetPath() == path {
			return c
		}
	}
	return nil
}

// The audit trail of create, update, pause, create, delete reads back
// newest first with the changed fields, filtered and paged by keyset, and
// never shows another tenant's rows even when every filter matches them.
func TestListAuditOverTheWire(t *testing.T) {
	t.Parallel()
	base, pool := servePool(t)
	ctx := context.Background()
	jobs := orreryv1connect.NewJobServiceClient(http.DefaultClient, base)
	audit := orreryv1connect.NewAuditServiceClient(http.DefaultClient, base)

	req := sampleJob("audited")
	req.Spec.Run = &orreryv1.Executor{Kind: &orreryv1.Executor_Http{Http: &orreryv1.HttpExecutor{
		Url: "http://127.0.0.1:9/x", Headers: map[string]string{"Authorization": "secret://env/HOOK_TOKEN"}}}}
	created, err := jobs.CreateJob(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	id := created.Msg.GetJob().GetId()
	ref := &orreryv1.JobRef{Id: id}
	upd := sampleJob("audited")
	upd.Spec.Run = req.Spec.Run
	upd.Spec.Schedule.Cron = "0 3 * * *"
	if _, err := jobs.UpdateJob(ctx, connect.NewRequest(&orreryv1.UpdateJobRequest{Ref: ref, Metadata: upd.Metadata, Spec: upd.Spec, ExpectedVersion: 1})); err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.PauseJob(ctx, connect.NewRequest(&orreryv1.PauseJobRequest{Ref: ref})); err != nil {
		t.Fatal(err)
	}
	other, err := jobs.CreateJob(ctx, connect.NewRequest(sampleJob("bystander")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.DeleteJob(ctx, connect.NewRequest(&orreryv1.DeleteJobRequest{Ref: ref})); err != nil {
		t.Fatal(err)
	}
	// Another tenant's rows, newer than everything and matching every
	// filter used below (same actor, action, kind, target id and name).
	for _, action := range []string{"update", "delete"} {
		if _, err := pool.Exec(ctx, `INSERT INTO audit_log (id, tenant_id, at, actor, action, target_kind, target_id, target_name, before, after)
			VALUES ($1, $2, now(), 'anonymous', $3, 'job', $4, 'analytics/audited', '{"spec":{"schedule":{"cron":"0 2 * * *"}}}', '{"spec":{"schedule":{"cron":"1 1 * * *"}},"leak":true}')`,
			uuid.Must(uuid.NewV7()), uuid.New(), action, id); err != nil {
			t.Fatal(err)
		}
	}

	all, pages := listAll(t, audit, &orreryv1.ListAuditRequest{})
	want := []string{"delete analytics/audited", "create analytics/bystander", "pause analytics/audited", "update analytics/audited", "create analytics/audited"}
	if got := actions(all); !slices.Equal(got, want) || !slices.Equal(pages, []int{5}) {
		t.Fatalf("entries %q in pages %v, want %q in one page", got, pages, want)
	}
	for i, e := range all {
		if e.GetActor() != "anonymous" || e.GetTargetKind() != "job" || e.GetId() == "" || e.GetTime() == nil {
			t.Errorf("entry %d: %v", i, e)
		}
		if strings.Contains(e.GetAfter(), "leak") || strings.Contains(e.GetAfter(), "1 1 * * *") {
			t.Errorf("entry %d is another tenant's: %v", i, e)
		}
		if i > 0 {
			prev, cur := all[i-1], e
			if cur.GetTime().AsTime().After(prev.GetTime().AsTime()) ||
				cur.GetTime().AsTime().Equal(prev.GetTime().AsTime()) && cur.GetId() >= prev.GetId() {
				t.Errorf("entries %d and %d are not newest first by (time, id)", i-1, i)
			}
		}
	}
	del, bys, pause, update, create := all[0], all[1], all[2], all[3], all[4]
	if bys.GetTargetId() != other.Msg.GetJob().GetId() || create.GetTargetId() != id {
		t.Fatalf("target ids: %v %v", bys, create)
	}

	// The diff: the update changed the cron (and the bookkeeping), nothing else of the spec.
	if c := changeOf(update, "spec.schedule.cron"); c == nil || c.GetBefore() != `"0 2 * * *"` || c.GetAfter() != `"0 3 * * *"` {
		t.Errorf("update's cron change: %v (all: %v)", c, update.GetChanges())
	}
	if c := changeOf(update, "version"); c == nil || c.GetBefore() != "1" || c.GetAfter() != "2" {
		t.Errorf("update's version change: %v", c)
	}
	for _, c := range update.GetChanges() {
		if strings.HasPrefix(c.GetPath(), "spec.") && c.GetPath() != "spec.schedule.cron" {
			t.Errorf("update lists an unchanged field: %v", c)
		}
	}
	if c := changeOf(pause, "status"); c == nil || c.GetBefore() != `"active"` || c.GetAfter() != `"paused"` {
		t.Errorf("pause's status change: %v (all: %v)", c, pause.GetChanges())
	}
	if changeOf(pause, "spec.schedule.cron") != nil {
		t.Errorf("pause lists the cron: %v", pause.GetChanges())
	}
	if c := changeOf(del, "status"); c == nil || c.GetAfter() != `"deleted"` {
		t.Errorf("delete's status change: %v", del.GetChanges())
	}
	if c := changeOf(del, "deleted_at"); c == nil || c.GetBefore() != "" || c.GetAfter() == "" {
		t.Errorf("delete's deleted_at: %v", c)
	}
	// A create has no before: every field is new.
	if create.GetBefore() != "" || create.GetAfter() == "" {
		t.Errorf("create's sides: %q %q", create.GetBefore(), create.GetAfter())
	}
	if c := changeOf(create, "spec.schedule.cron"); c == nil || c.GetBefore() != "" || c.GetAfter() != `"0 2 * * *"` {
		t.Errorf("create's cron: %v", c)
	}
	if c := changeOf(create, "labels.team"); c == nil || c.GetAfter() != `"data"` {
		t.Errorf("create's label: %v", create.GetChanges())
	}
	// Secrets: the job stores the reference, so the trail holds the reference, never a value.
	if !strings.Contains(create.GetAfter(), `"Authorization": "secret://env/HOOK_TOKEN"`) || !strings.Contains(update.GetBefore(), "secret://env/HOOK_TOKEN") {
		t.Errorf("the secret reference is not kept as written: %s", create.GetAfter())
	}

	// Filters, each alone and together, paged by 2 on the way.
	for _, tt := range []struct {
		name string
		req  *orreryv1.ListAuditRequest
		want []*orreryv1.AuditEntry
	}{
		{"actor", &orreryv1.ListAuditRequest{Actor: "anonymous"}, all},
		{"actor nobody", &orreryv1.ListAuditRequest{Actor: "someone-else"}, nil},
		{"action", &orreryv1.ListAuditRequest{Action: "update"}, []*orreryv1.AuditEntry{update}},
		{"creates", &orreryv1.ListAuditRequest{Action: "create"}, []*orreryv1.AuditEntry{bys, create}},
		{"kind", &orreryv1.ListAuditRequest{TargetKind: "job"}, all},
		{"kind run", &orreryv1.ListAuditRequest{TargetKind: "run"}, nil},
		{"target name", &orreryv1.ListAuditRequest{TargetName: "analytics/audited"}, []*orreryv1.AuditEntry{del, pause, update, create}},
		{"target id", &orreryv1.ListAuditRequest{TargetId: other.Msg.GetJob().GetId()}, []*orreryv1.AuditEntry{bys}},
		{"since", &orreryv1.ListAuditRequest{Since: pause.GetTime()}, []*orreryv1.AuditEntry{del, bys, pause}},
		{"until", &orreryv1.ListAuditRequest{Until: pause.GetTime()}, []*orreryv1.AuditEntry{update, create}},
		{"range", &orreryv1.ListAuditRequest{Since: update.GetTime(), Until: del.GetTime()}, []*orreryv1.AuditEntry{bys, pause, update}},
		{"together", &orreryv1.ListAuditRequest{Actor: "anonymous", TargetName: "analytics/audited", Since: update.GetTime(), TargetKind: "job"}, []*orreryv1.AuditEntry{del, pause, update}},
		{"future", &orreryv1.ListAuditRequest{Since: timestamppb.New(time.Now().Add(time.Hour))}, nil},
	} {
		for _, size := range []int32{0, 2} {
			tt.req.PageSize = size
			got, _ := listAll(t, audit, tt.req)
			if !slices.Equal(ids(got), ids(tt.want)) {
				t.Errorf("%s (page size %d): %q, want %q", tt.name, size, actions(got), actions(tt.want))
			}
		}
	}

	// Keyset paging by 2: pages of 2, 2, 1, together the whole list in order.
	paged, pages := listAll(t, audit, &orreryv1.ListAuditRequest{PageSize: 2})
	if !slices.Equal(ids(paged), ids(all)) || !slices.Equal(pages, []int{2, 2, 1}) {
		t.Fatalf("paged by 2: %q in pages %v", actions(paged), pages)
	}
	// A row written after the first page was read does not shift the next
	// pages (keyset, not offset): it is newer than the position.
	first, err := audit.ListAudit(ctx, connect.NewRequest(&orreryv1.ListAuditRequest{PageSize: 2}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.ResumeJob(ctx, connect.NewRequest(&orreryv1.ResumeJobRequest{Ref: &orreryv1.JobRef{Id: other.Msg.GetJob().GetId()}})); err != nil {
		t.Fatal(err) // active already: no change, no row
	}
	if _, err := jobs.PauseJob(ctx, connect.NewRequest(&orreryv1.PauseJobRequest{Ref: &orreryv1.JobRef{Id: other.Msg.GetJob().GetId()}})); err != nil {
		t.Fatal(err)
	}
	second, err := audit.ListAudit(ctx, connect.NewRequest(&orreryv1.ListAuditRequest{PageSize: 2, PageToken: first.Msg.GetNextPageToken()}))
	if err != nil || !slices.Equal(ids(second.Msg.GetEntries()), ids(all[2:4])) {
		t.Fatalf("second page after a new row: %v %v", second, err)
	}
	if now, _ := listAll(t, audit, &orreryv1.ListAuditRequest{}); len(now) != 6 || now[0].GetAction() != "pause" || now[0].GetTargetName() != "analytics/bystander" {
		t.Fatalf("after the new pause: %q", actions(now))
	}

	// The other tenant's rows are there, and only theirs.
	var theirs int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE tenant_id <> $1`, job.DefaultTenant).Scan(&theirs); err != nil || theirs != 2 {
		t.Fatalf("other tenant's rows: %d %v", theirs, err)
	}
}

func ids(es []*orreryv1.AuditEntry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.GetId()
	}
	return out
}

// Bad requests are InvalidArgument naming the field: times outside
// 1970..9999 or not valid, an empty or reversed range, page sizes out of
// bounds, tokens this server did not hand out, ids that are not UUIDs.
func TestListAuditBadRequests(t *testing.T) {
	t.Parallel()
	base, _ := servePool(t)
	audit := orreryv1connect.NewAuditServiceClient(http.DefaultClient, base)
	t0 := time.Date(2026, 3, 8, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name string
		req  *orreryv1.ListAuditRequest
		want string
	}{
		{"since year 1", &orreryv1.ListAuditRequest{Since: timestamppb.New(time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC))}, "since: 0001-01-01T00:00:00Z is outside 1970"},
		{"since 1969", &orreryv1.ListAuditRequest{Since: timestamppb.New(time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC))}, "since"},
		{"until 10000", &orreryv1.ListAuditRequest{Until: &timestamppb.Timestamp{Seconds: 253402300800}}, "until: not a valid timestamp"},
		{"until nanos", &orreryv1.ListAuditRequest{Until: &timestamppb.Timestamp{Seconds: 1, Nanos: -1}}, "until: not a valid timestamp"},
		{"reversed", &orreryv1.ListAuditRequest{Since: timestamppb.New(t0), Until: timestamppb.New(t0.Add(-time.Second))}, "until: must be after since"},
		{"empty range", &orreryv1.ListAuditRequest{Since: timestamppb.New(t0), Until: timestamppb.New(t0)}, "until: must be after since"},
		{"page size", &orreryv1.ListAuditRequest{PageSize: 501}, "page_size: 501 is outside 0..500"},
		{"negative page size", &orreryv1.ListAuditRequest{PageSize: -1}, "page_size"},
		{"token", &orreryv1.ListAuditRequest{PageToken: "not a token"}, "page_token"},
		{"token json", &orreryv1.ListAuditRequest{PageToken: "eyJhIjoxfQ"}, "page_token"}, // {"a":1}
		{"target id", &orreryv1.ListAuditRequest{TargetId: "nightly"}, "target_id: not a UUID"},
		{"nul", &orreryv1.ListAuditRequest{Actor: "a\x00b"}, "actor: contains a NUL"},
	} {
		_, err := audit.ListAudit(context.Background(), connect.NewRequest(tt.req))
		wantInvalid(t, tt.name, err, tt.want)
	}
}

// AuditService is listed by reflection and health, answers plain JSON as
// curl sends it, and has one method, a read: nothing in the API changes
// or deletes audit rows.
func TestAuditServiceIsReadOnlyAndDiscoverable(t *testing.T) {
	t.Parallel()
	base, _ := servePool(t)
	ctx := context.Background()
	stream := grpcreflect.NewClient(h2cClient(), base).NewStream(ctx)
	services, err := stream.ListServices()
	if err != nil {
		t.Fatal(err)
	}
	_, _ = stream.Close()
	if !slices.Contains(services, protoreflect.FullName(orreryv1connect.AuditServiceName)) {
		t.Fatalf("reflection lists %v", services)
	}
	for path, body := range map[string]string{
		"/grpc.health.v1.Health/Check":        `{"service":"orrery.v1.AuditService"}`,
		"/orrery.v1.AuditService/ListAudit":   `{"action":"create","pageSize":10}`,
		"/orrery.v1.AuditService/DeleteAudit": `{}`,
		"/orrery.v1.AuditService/UpdateAudit": `{}`,
		"/orrery.v1.AuditService/AppendAudit": `{}`,
	} {
		resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case strings.Contains(path, "Health"):
			if resp.StatusCode != 200 || !strings.Contains(string(b), "SERVING_STATUS_SERVING") {
				t.Errorf("health: %d %s", resp.StatusCode, b)
			}
		case strings.HasSuffix(path, "/ListAudit"):
			if resp.StatusCode != 200 || strings.ReplaceAll(string(b), " ", "") != `{}` {
				t.Errorf("ListAudit as JSON: %d %s", resp.StatusCode, b)
			}
		default:
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("POST %s: %d %s, want 404", path, resp.StatusCode, b)
			}
		}
	}
	sd := orreryv1.File_orrery_v1_audit_proto.Services().ByName("AuditService")
	if sd.Methods().Len() != 1 {
		t.Fatalf("AuditService has %d methods; it must only read", sd.Methods().Len())
	}
	m := sd.Methods().Get(0)
	if opts, _ := m.Options().(*descriptorpb.MethodOptions); m.Name() != "ListAudit" || opts.GetIdempotencyLevel() != descriptorpb.MethodOptions_NO_SIDE_EFFECTS {
		t.Fatalf("method %s, idempotency %v", m.Name(), opts.GetIdempotencyLevel())
	}
}

// actor finds an exact actor, or every key of a principal: calls made with
// an API key are audited as "NAME (KEY_PREFIX)".
func TestListAuditActorMatchesPrincipal(t *testing.T) {
	t.Parallel()
	base, pool := servePool(t)
	ctx := context.Background()
	audit := orreryv1connect.NewAuditServiceClient(http.DefaultClient, base)
	for _, actor := range []string{"ci (ork_ab12cd34)", "ci (ork_ef56ab78)", "ci", "ci (x) (ork_00000000)", "cid (ork_11111111)", "c%"} {
		if _, err := pool.Exec(ctx, `INSERT INTO audit_log (id, tenant_id, at, actor, action, target_kind, target_id, target_name, after)
			VALUES ($1, $2, now(), $3, 'create', 'job', $4, 'default/j', '{}')`, uuid.Must(uuid.NewV7()), job.DefaultTenant, actor, uuid.New()); err != nil {
			t.Fatal(err)
		}
	}
	for filter, want := range map[string][]string{
		"ci":                   {"ci (ork_ab12cd34)", "ci (ork_ef56ab78)", "ci"},
		"ci (ork_ef56ab78)":    {"ci (ork_ef56ab78)"},
		"ci (x)":               {"ci (x) (ork_00000000)"},
		"c":                    nil,
		"c%":                   {"c%"},
		"ci (ork_ab12cd34) (x": nil,
	} {
		got, _ := listAll(t, audit, &orreryv1.ListAuditRequest{Actor: filter})
		var actors []string
		for _, e := range got {
			actors = append(actors, e.GetActor())
		}
		slices.Sort(actors)
		slices.Sort(want)
		if !slices.Equal(actors, want) {
			t.Errorf("actor %q: %q, want %q", filter, actors, want)
		}
	}
}

// A page of the audit trail stops where its entries' before and after pass
// 4 MiB, and its token continues after the last entry returned: every
// entry listed once, in order.
func TestListAuditPagesFitTheirBudget(t *testing.T) {
	t.Parallel()
	base, _ := servePool(t)
	ctx := context.Background()
	jobs := orreryv1connect.NewJobServiceClient(http.DefaultClient, base)
	audit := orreryv1connect.NewAuditServiceClient(http.DefaultClient, base)
	for i := range 4 { // each creation's after is about 1.6 MB
		req := sampleJob(fmt.Sprintf("big-%d", i))
		req.Spec.Run, req.Spec.Payload = nil, nil
		for s := range 8 {
			req.Spec.Steps = append(req.Spec.Steps, &orreryv1.Step{Name: fmt.Sprintf("s%d", s), Payload: structpb.NewStringValue(strings.Repeat("x", 200<<10)),
				Run: &orreryv1.Executor{Kind: &orreryv1.Executor_Handler{Handler: "h"}}})
		}
		if _, err := jobs.CreateJob(ctx, connect.NewRequest(req)); err != nil {
			t.Fatal(err)
		}
	}
	got, pages := listAll(t, audit, &orreryv1.ListAuditRequest{PageSize: 500})
	if len(got) != 4 || !slices.Equal(pages, []int{3, 1}) || got[0].GetTargetName() != "analytics/big-3" || got[3].GetTargetName() != "analytics/big-0" {
		t.Fatalf("entries %d in pages %v (the third passes 4 MiB), want 4 newest first in pages [3 1]", len(got), pages)
	}
}

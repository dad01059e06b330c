package main_test

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/orrery-dev/orrery/internal/pgtest"
)

// collector is an OTLP/HTTP trace receiver: it keeps every span's name,
// trace id and links.
type collector struct {
	mu    sync.Mutex
	spans []span
}

type span struct {
	name, trace string
	links       []string // trace ids
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, _ := io.ReadAll(body)
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := span{name: s.GetName(), trace: hex.EncodeToString(s.GetTraceId())}
				for _, l := range s.GetLinks() {
					sp.links = append(sp.links, hex.EncodeToString(l.GetTraceId()))
				}
				c.spans = append(c.spans, sp)
			}
		}
	}
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(nil)
}

func (c *collector) find(name, trace string) *span {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, s := range c.spans {
		if s.name == name && (trace == "" || s.trace == trace) {
			return &c.spans[i]
		}
	}
	return nil
}

// With OTEL_* set, a run is one trace: orrery.run (linked to the API call
// that triggered it), orrery.queue, orrery.attempt and orrery.executor,
// and its webhook receives the same trace in a traceparent header.
func TestTracesFollowARun(t *testing.T) {
	dsn := pgtest.DSN(t)
	admin, _, code := run(t, "keys", "create", "--db", dsn, "--principal", "ops", "--role", "admin")
	admin = strings.TrimSpace(admin)
	if code != 0 {
		t.Fatal("keys create --db failed")
	}
	col := &collector{}
	otlp := httptest.NewServer(col)
	defer otlp.Close()
	got := make(chan string, 4)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Traceparent")
	}))
	defer sink.Close()

	addr := freeAddr(t)
	p := startProcEnv(t, "serve", []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + otlp.URL, "OTEL_BSP_SCHEDULE_DELAY=100"},
		"serve", "--db", dsn, "--addr", addr, "--worker", "default=2", "--allow-egress", "127.0.0.1/32")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if _, _, code := run(t, "--server", addr, "--api-key", admin, "jobs", "list"); code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s", p.Logs())
		}
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "hook.yaml"), []byte(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: hook, namespace: ops}
spec:
  schedule: {cron: "@yearly"}
  run: {http: {url: "`+sink.URL+`/done"}}
`), 0o644)
	if out, errOut, code := run(t, "--server", addr, "--api-key", admin, "apply", "-f", dir); code != 0 {
		t.Fatalf("apply: %s %s", out, errOut)
	}
	if out, errOut, code := run(t, "--server", addr, "--api-key", admin, "jobs", "trigger", "hook", "-n", "ops"); code != 0 {
		t.Fatalf("trigger: %s %s", out, errOut)
	}
	var traceparent string
	select {
	case traceparent = <-got:
	case <-time.After(30 * time.Second):
		t.Fatalf("the webhook was not called:\n%s", p.Logs())
	}
	parts := strings.Split(traceparent, "-")
	if len(parts) != 4 || len(parts[1]) != 32 {
		t.Fatalf("the webhook's traceparent: %q", traceparent)
	}
	trace := parts[1]
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		missing := ""
		for _, name := range []string{"orrery.run", "orrery.queue", "orrery.attempt", "orrery.executor"} {
			if col.find(name, trace) == nil {
				missing = name
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run's trace %s lacks %s; spans: %+v", trace, missing, col.spans)
		}
	}
	// The run's span links to the API call that triggered it.
	call := col.find("orrery.v1.RunService/TriggerJob", "")
	run := col.find("orrery.run", trace)
	if call == nil || len(run.links) != 1 || run.links[0] != call.trace {
		t.Errorf("orrery.run links %v; the TriggerJob call: %+v", run.links, call)
	}
}

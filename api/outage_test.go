package api_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/orrery-dev/orrery/api"
	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/store"
)

// cutProxy forwards TCP connections to target until cut, which closes
// every connection and stops accepting: a database outage as the server
// sees it.
type cutProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	t.Cleanup(p.cut)
	return p
}

func (p *cutProxy) cut() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// With the database gone, the API answers Unavailable (a client may retry),
// not Internal, and the log says so once, not at every call.
func TestDatabaseOutageIsUnavailableAndLoggedOnce(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := newCutProxy(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, err := store.Open(ctx, u.String(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var logs bytes.Buffer
	var mu sync.Mutex
	h, _ := store.OutageHandler(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
	log := slog.New(h)
	jobs, err := job.New(ctx, pool, log)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := api.Listen("127.0.0.1:0", api.NewHandler(api.Services{Jobs: jobs, Auth: api.NoAuth{}}, log))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ctx) }()
	client := orreryv1connect.NewJobServiceClient(h2cClient(), "http://"+srv.Addr())
	if _, err := client.ListJobs(ctx, connect.NewRequest(&orreryv1.ListJobsRequest{})); err != nil {
		t.Fatalf("before the outage: %v", err)
	}

	proxy.cut()
	for range 20 {
		_, err := client.ListJobs(ctx, connect.NewRequest(&orreryv1.ListJobsRequest{}))
		if connect.CodeOf(err) != connect.CodeUnavailable {
			t.Fatalf("during the outage: %v (code %v), want Unavailable", err, connect.CodeOf(err))
		}
	}
	if code, h, body := rest(t, "GET", "http://"+srv.Addr()+"/api/v1/jobs", "", ""); code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" {
		t.Errorf("over REST during the outage: %d %v %s, want 503 with Retry-After", code, h, body)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), "database unavailable"); n != 1 {
		t.Fatalf("%d log lines about the outage for 20 failed calls, want 1:\n%s", n, logs.String())
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

package api_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/orrery-dev/orrery/api"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
)

// gzipBomb is a gzip stream of n zero bytes (about n/1000 bytes long).
func gzipBomb(t *testing.T, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for written := 0; written < n; written += len(chunk) {
		if _, err := zw.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A 1 MB gzip body that expands to 1 GiB is refused as ResourceExhausted
// once it passes the message cap, without the server holding more than a
// few megabytes for it; a body over the cap as sent is refused before it is
// read whole. Nothing is written.
func TestRequestLimits(t *testing.T) {
	pool := pgtest.Pool(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := api.Listen("127.0.0.1:0", api.NewHandler(api.Services{Jobs: jobs, Auth: api.NoAuth{}}, nil))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ctx) }()
	url := "http://" + srv.Addr() + "/orrery.v1.JobService/CreateJob"
	post := func(body []byte, encoding string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/proto")
		if encoding != "" {
			req.Header.Set("Content-Encoding", encoding)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}

	bomb := gzipBomb(t, 1<<30)
	t.Logf("gzip bomb: %d bytes, 1 GiB decompressed", len(bomb))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	code, body := post(bomb, "gzip")
	runtime.ReadMemStats(&after)
	if code != http.StatusTooManyRequests || !strings.Contains(body, "resource_exhausted") {
		t.Fatalf("gzip bomb: %d %s; want 429 resource_exhausted", code, body)
	}
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("the server allocated %d MB for the bomb (client included)", allocated>>20)
	if allocated > 100<<20 {
		t.Fatalf("the bomb cost %d MB of allocations, want under 100 MB", allocated>>20)
	}

	big := bytes.Repeat([]byte{0}, api.DefaultMaxRequestBytes+1)
	if code, body := post(big, ""); code == http.StatusOK || (code != 0 && !strings.Contains(body, "resource_exhausted") && code != http.StatusRequestEntityTooLarge) {
		t.Fatalf("oversized body: %d %s; want it refused", code, body)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM jobs").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d jobs written (%v), want 0", n, err)
	}
}

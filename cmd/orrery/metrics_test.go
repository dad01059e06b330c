package main_test

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orrery-dev/orrery/internal/pgtest"
)

// scrape reads /metrics with key and returns the status and the text.
func scrape(t *testing.T, addr, key string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// sample is the value of one series of the exposition (-1 when absent).
func sample(text, series string) float64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// `orrery serve` serves Prometheus metrics at /metrics for a system admin
// key; a job firing every second moves the counters: runs finished,
// attempts, schedule lag, firing batches; the shards, queues and dead
// letters gauges are there.
func TestMetricsMoveWhenRunsFire(t *testing.T) {
	dsn := pgtest.DSN(t)
	sys, _, code := run(t, "keys", "create", "--db", dsn, "--principal", "prometheus", "--role", "none", "--system-admin")
	reader, _, code2 := run(t, "keys", "create", "--db", dsn, "--principal", "r", "--role", "reader")
	sys, reader = strings.TrimSpace(sys), strings.TrimSpace(reader)
	if code != 0 || code2 != 0 {
		t.Fatal("keys create --db failed")
	}
	addr := freeAddr(t)
	metricsAddr := freeAddr(t)
	p := startProc(t, "serve", "serve", "--db", dsn, "--addr", addr, "--metrics-addr", metricsAddr, "--worker", "default=2",
		"--allow-command", "/bin/true", "--allow-command", "/bin/sleep", "--shard-ttl", "2s", "--capacity", "cpu=3,memory=4Gi,licence=2")
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "tick.yaml"), []byte(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: tick, namespace: ops}
spec:
  schedule: {cron: "* * * * * *"}
  run: {command: {argv: ["/bin/true"]}}
`), 0o644)
	os.WriteFile(filepath.Join(dir, "stranded.yaml"), []byte(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: stranded, namespace: ops}
spec:
  schedule: {cron: "@yearly"}
  defaults: {queue: nobody}
  run: {command: {argv: ["/bin/true"]}}
`), 0o644)
	os.WriteFile(filepath.Join(dir, "slow.yaml"), []byte(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: slow, namespace: ops}
spec:
  schedule: {cron: "@yearly"}
  run: {command: {argv: ["/bin/sleep", "30"]}}
`), 0o644)
	os.WriteFile(filepath.Join(dir, "held.yaml"), []byte(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: held, namespace: ops}
spec:
  schedule: {cron: "@yearly"}
  defaults: {resources: {cpu: "1", memory: 256Mi}}
  run: {command: {argv: ["/bin/sleep", "30"]}}
`), 0o644)
	os.WriteFile(filepath.Join(dir, "rated.yaml"), []byte(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: rated, namespace: ops}
spec:
  schedule: {cron: "@yearly"}
  overlap: allow
  steps:
    - name: call
      rate_limit: {key: metrics-vendor, limit: 1, per: 1h}
      run: {command: {argv: ["/bin/true"]}}
`), 0o644)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if _, _, code := run(t, "--server", addr, "--api-key", reader, "jobs", "list"); code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s", p.Logs())
		}
	}
	admin, _, _ := run(t, "keys", "create", "--db", dsn, "--principal", "ops", "--role", "admin")
	if out, errOut, code := run(t, "--server", addr, "--api-key", strings.TrimSpace(admin), "apply", "-f", dir); code != 0 {
		t.Fatalf("apply: %s %s", out, errOut)
	}

	// A run holding a core and 256Mi while the metrics are read.
	if out, errOut, code := run(t, "--server", addr, "--api-key", strings.TrimSpace(admin), "jobs", "trigger", "held", "-n", "ops"); code != 0 {
		t.Fatalf("trigger: %s %s", out, errOut)
	}
	// A run in a queue no worker serves waits for admission.
	if out, errOut, code := run(t, "--server", addr, "--api-key", strings.TrimSpace(admin), "jobs", "trigger", "stranded", "-n", "ops"); code != 0 {
		t.Fatalf("trigger: %s %s", out, errOut)
	}

	// Two runs of a step of 1 an hour: the second waits in its key's line.
	for range 2 {
		if out, errOut, code := run(t, "--server", addr, "--api-key", strings.TrimSpace(admin), "jobs", "trigger", "rated", "-n", "ops"); code != 0 {
			t.Fatalf("trigger: %s %s", out, errOut)
		}
	}

	// A run cancelled over the API counts as finished, cancelled.
	out, errOut, code := run(t, "--server", addr, "--api-key", strings.TrimSpace(admin), "jobs", "trigger", "slow", "-n", "ops")
	runID := regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`).FindString(out)
	if code != 0 || runID == "" {
		t.Fatalf("trigger: %s %s", out, errOut)
	}
	if out, errOut, code := run(t, "--server", addr, "--api-key", strings.TrimSpace(admin), "runs", "cancel", runID); code != 0 {
		t.Fatalf("cancel: %s %s", out, errOut)
	}

	if status, _ := scrape(t, addr, ""); status != http.StatusUnauthorized {
		t.Errorf("/metrics without a key: %d", status)
	}
	if status, _ := scrape(t, addr, reader); status != http.StatusForbidden {
		t.Errorf("/metrics with a reader key: %d", status)
	}
	var text string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		var status int
		status, text = scrape(t, addr, sys)
		if status != http.StatusOK {
			t.Fatalf("/metrics as a system admin: %d %s", status, text)
		}
		if sample(text, `orrery_runs_finished_total{outcome="succeeded"}`) >= 4 && sample(text, `orrery_schedule_lag_seconds_count`) >= 3 &&
			sample(text, `orrery_flow_key_waiting{key="metrics-vendor",kind="rate",tenant="default"}`) == 1 { // (tick's 3, rated's first)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 3 succeeded runs counted in 30 s:\n%s\n%s", text, p.Logs())
		}
	}
	for _, name := range []string{"orrery_schedule_lag_seconds", "orrery_runs_finished_total", "orrery_attempts_total",
		"orrery_lease_expirations_total", "orrery_queue_depth", "orrery_queue_oldest_ready_seconds", "orrery_shards_owned",
		"orrery_shard_takeovers_total", "orrery_firing_batch_seconds", "orrery_admission_wait_seconds", "go_goroutines",
		"process_resident_memory_bytes"} {
		if !strings.Contains(text, "# TYPE "+name+" ") {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	for series, atLeast := range map[string]float64{
		`orrery_attempts_total{exit_reason="none",outcome="succeeded"}`:                             3,
		`orrery_schedule_lag_seconds_count`:                                                         3,
		`orrery_firing_batch_seconds_count`:                                                         3,
		`orrery_admission_wait_seconds_count{queue="default"}`:                                      3,
		`orrery_shard_takeovers_total`:                                                              64,
		`orrery_queue_depth{queue="default"}`:                                                       0,
		`orrery_runs_finished_total{outcome="cancelled"}`:                                           1,
		`orrery_admission_waiting{queue="nobody"}`:                                                  1,
		`orrery_admission_oldest_waiting_seconds{queue="nobody"}`:                                   0.001,
		`orrery_worker_capacity{resource="cpu"}`:                                                    3,
		`orrery_worker_capacity{resource="memory"}`:                                                 4 << 30,
		`orrery_worker_capacity{resource="licence"}`:                                                2,
		`orrery_tenant_allocated{resource="cpu",tenant="default"}`:                                  1,
		`orrery_tenant_allocated{resource="memory",tenant="default"}`:                               256 << 20,
		`orrery_flow_key_oldest_waiting_seconds{key="metrics-vendor",kind="rate",tenant="default"}`: 0.001,
		`orrery_flow_keys_waiting{kind="rate"}`:                                                     1,
	} {
		if v := sample(text, series); v < atLeast {
			t.Errorf("%s = %v, want at least %v", series, v, atLeast)
		}
	}
	if !strings.Contains(text, `orrery_worker_allocated{resource="licence"} 0`) {
		t.Errorf("orrery_worker_allocated has no licence series at 0")
	}
	if v := sample(text, `orrery_shards_owned{node="`+nodeName(text)+`"}`); v != 64 {
		t.Errorf("orrery_shards_owned = %v, want 64", v)
	}
	// The same on --metrics-addr, without a key.
	if status, body := scrape(t, metricsAddr, ""); status != http.StatusOK || !strings.Contains(body, "orrery_runs_finished_total") {
		t.Errorf("--metrics-addr: %d", status)
	}
}

// nodeName is the node label of orrery_shards_owned.
func nodeName(text string) string {
	m := regexp.MustCompile(`orrery_shards_owned\{node="([^"]+)"\}`).FindStringSubmatch(text)
	if m == nil {
		return ""
	}
	return m[1]
}

package main_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// consoleErrors collects what a tab's console reports as an error (a
// resource the page's Content-Security-Policy refused, an exception).
type consoleErrors struct {
	mu   sync.Mutex
	seen []string
}

func listenConsole(t *testing.T, ctx context.Context) *consoleErrors {
	t.Helper()
	c := &consoleErrors{}
	err := chromedp.Listen(ctx, func(ev any) {
		var msg string
		switch e := ev.(type) {
		case *cdplog.EventEntryAdded:
			if e.Entry.Level == cdplog.EntryLevelError {
				msg = e.Entry.Text + " " + e.Entry.URL
			}
		case *runtime.EventExceptionThrown:
			msg = "exception: " + e.ExceptionDetails.Text
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError {
				msg = "console.error"
			}
		}
		if msg != "" {
			c.mu.Lock()
			c.seen = append(c.seen, msg)
			c.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, cdplog.Enable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	return c
}

// take answers the errors seen since the last take.
func (c *consoleErrors) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.seen
	c.seen = nil
	return out
}

// browser starts headless Chromium (Debian's package; `make test`
// installs it), with extra options, and returns a context that drives one
// tab.
func browser(t *testing.T, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	path := os.Getenv("ORRERY_CHROMIUM")
	if path == "" {
		var err error
		if path, err = exec.LookPath("chromium"); err != nil {
			t.Fatal("chromium is not installed: `make test` installs it (apt-get install chromium), or set ORRERY_CHROMIUM")
		}
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1000),
		// This machine's network is closed: no background calls home.
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true),
	}
	opts = append(opts, extra...)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	ctx, cancelC := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelC(); cancelB(); cancelA() })
	return ctx
}

// screenshot saves the page as docs/screenshots/NAME.png when
// ORRERY_SCREENSHOTS names the folder (`make screenshots`).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("ORRERY_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The web UI in a real browser against `orrery dev`: sign in, list jobs,
// trigger the example pipeline and watch every node of its graph turn
// green without a reload, open a task's attempts, replay a dead letter,
// see each action in the audit trail; a reader sees no buttons and is
// refused if it posts anyway; another tenant's job is a 404 by URL;
// unknown ids are 404s; user text renders as text.
func TestWebUIInABrowser(t *testing.T) {
	dataDir := filepath.Join(reachableDir(t), "data")
	addr := freeAddr(t)
	stop := startDev(t, dataDir, addr)
	defer stop()
	base := "http://" + addr
	cli := func(args ...string) string {
		t.Helper()
		out, errOut, code := runEnv(t, []string{"ORRERY_DATA_DIR=" + dataDir}, append([]string{"--server", addr}, args...)...)
		if code != 0 {
			t.Fatalf("orrery %v: %s %s", args, out, errOut)
		}
		return strings.TrimSpace(out)
	}
	b, err := os.ReadFile(filepath.Join(dataDir, "api-key"))
	if err != nil {
		t.Fatal(err)
	}
	admin := strings.TrimSpace(string(b))
	reader := cli("keys", "create", "--principal", "viewer", "--role", "reader")
	// The example remote step, run by the example Python worker with the
	// worker key dev wrote: the cluster page lists that worker.
	wk, err := os.ReadFile(filepath.Join(dataDir, "worker-key"))
	if err != nil {
		t.Fatal(err)
	}
	startPython(t, "py-web", addr, strings.TrimSpace(string(wk)))
	cli("jobs", "trigger", "remote-invoice", "-n", "billing")

	// A job that always fails (one attempt): a dead letter to replay; its
	// description and a label carry markup that must render as text.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte(`apiVersion: orrery.dev/v1
kind: Job
metadata:
  name: broken
  namespace: qa
  description: "<script>alert('desc')</script>"
  labels: {note: "<img src=x onerror=alert(1)>"}
spec:
  schedule: {cron: "0 3 * * *"}
  defaults: {retry: {max_attempts: 1}}
  alerts: {on: [dead_letter]}
  steps:
    - name: fail
      run: {command: {argv: ["/bin/false"]}}
`), 0o644)
	cli("apply", "-f", dir)
	cli("jobs", "trigger", "broken", "-n", "qa")
	// Another tenant's job.
	cli("tenants", "create", "acme")
	acme := cli("keys", "create", "--tenant", "acme", "--principal", "acme-admin", "--role", "admin")
	os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte("apiVersion: orrery.dev/v1\nkind: Job\nmetadata: {name: secret-plan, namespace: acme-ns}\nspec:\n  schedule: {cron: \"@daily\"}\n  run: {handler: h}\n"), 0o644)
	if out, errOut, code := run(t, "--server", addr, "--api-key", acme, "apply", "-f", dir); code != 0 {
		t.Fatalf("apply as acme: %s %s", out, errOut)
	}

	ctx := browser(t)
	console := listenConsole(t, ctx)
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	html := func(sel string) string {
		t.Helper()
		out, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("outer HTML of %s: %v", sel, err)
		}
		return out
	}
	text := func(sel string) string {
		t.Helper()
		out, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return out
	}
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	eval := func(expr string) any {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[any](expr, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		return v
	}
	signIn := func(key string) {
		t.Helper()
		do("sign in",
			chromedp.Navigate(base+"/jobs"),
			chromedp.WaitVisible(css(`input[name=key]`)),
			chromedp.SendKeys(css(`input[name=key]`), key),
			chromedp.Submit(css(`input[name=key]`)),
			chromedp.WaitVisible(css(`tr[data-job]`)),
		)
	}
	signIn(admin)
	jobsHTML := html(`#jobs`)
	for _, j := range []string{"analytics/nightly-sales", "integrations/hourly-sync", "qa/broken"} {
		if !strings.Contains(jobsHTML, `data-job="`+j+`"`) {
			t.Errorf("the jobs page lacks %s", j)
		}
	}
	if strings.Contains(jobsHTML, "secret-plan") {
		t.Error("the jobs page shows another tenant's job")
	}
	// Search as you type narrows the list without a reload.
	eval(`window.__kept = 1`)
	do("search",
		chromedp.SendKeys(css(`input[name=q]`), "nightly"),
		chromedp.WaitNotPresent(css(`tr[data-job="qa/broken"]`)),
		chromedp.WaitVisible(css(`tr[data-job="analytics/nightly-sales"]`)),
	)
	if eval(`window.__kept || 0`) != float64(1) {
		t.Error("searching reloaded the page")
	}
	screenshot(t, ctx, "jobs")

	// Trigger the pipeline from its row; the run page turns every node
	// green while we watch (the page is not reloaded: __marker survives).
	do("trigger",
		chromedp.Click(css(`tr[data-job="analytics/nightly-sales"] button[data-action=trigger]`)),
		chromedp.WaitVisible(css(`#graph svg`)),
	)
	eval(`window.__marker = 42`)
	deadline := time.Now().Add(60 * time.Second)
	for {
		statuses := fmt.Sprint(eval(`Array.from(document.querySelectorAll('#graph .node')).map(n => n.dataset.task + '=' + n.dataset.status).join(' ')`))
		nodes := strings.Fields(statuses)
		green := len(nodes) == 5
		for _, n := range nodes {
			green = green && strings.HasSuffix(n, "=succeeded")
		}
		if green {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run's nodes did not all turn green: %v", statuses)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if eval(`window.__marker || 0`) != float64(42) {
		t.Fatal("the run page reloaded to show the change")
	}
	runPath := fmt.Sprint(eval(`location.pathname`))
	screenshot(t, ctx, "run")

	// A task's attempts.
	do("attempts", chromedp.Click(css(`#graph .node[data-task="transform"]`)), chromedp.WaitVisible(css(`#attempts tr[data-attempt]`)))
	if attempts := text(`#attempts`); !strings.Contains(attempts, "transforming for") || !strings.Contains(attempts, "succeeded") {
		t.Errorf("the transform task's attempts: %s", attempts)
	}

	// The job page: definition, ledger, history; markup in user text is text.
	do("job page", chromedp.Navigate(base+"/jobs/qa/broken"), chromedp.WaitVisible(css(`pre.yaml`)))
	jobPage := html(`main`)
	if !strings.Contains(jobPage, "&lt;script&gt;alert(&#39;desc&#39;)&lt;/script&gt;") && !strings.Contains(jobPage, "&lt;script&gt;alert('desc')&lt;/script&gt;") {
		t.Errorf("the description is not shown as text on the job page:\n%s", jobPage)
	}
	if n := eval(`document.querySelectorAll('main script, main img').length`); n != float64(0) {
		t.Errorf("user text became %v elements on the job page", n)
	}

	// The dead letter: replay it.
	do("dlq", chromedp.Navigate(base+"/dlq"), chromedp.WaitVisible(css(`section.group[data-job="qa/broken"] button[data-action=replay-one]`)))
	screenshot(t, ctx, "dlq")
	do("replay", chromedp.Click(css(`section.group[data-job="qa/broken"] button[data-action=replay-one]`)), chromedp.WaitVisible(css(`.flash`)))
	if flash := text(`.flash`); flash != "Replayed 1 dead letters." {
		t.Errorf("after replay: %q", flash)
	}
	// "Replay all" asks first, with the count.
	do("replay all", chromedp.Navigate(base+"/dlq"), chromedp.Click(css(`button[data-action=replay-all]`)), chromedp.WaitVisible(css(`[data-count]`)))
	if count := text(`[data-count]`); count == "" {
		t.Error("replay all shows no count")
	}

	// A pipeline with params, triggered through its form: dry_run=true
	// skips its last step; the run page shows the params.
	do("the trigger form", chromedp.Navigate(base+"/jobs/analytics/daily-extract"), chromedp.WaitVisible(css(`#trigger-form`)))
	screenshot(t, ctx, "trigger-form")
	do("trigger with params",
		chromedp.SetValue(css(`#trigger-form select[data-param=dry_run]`), "true"),
		chromedp.SetValue(css(`#trigger-form select[data-param=region]`), "us"),
		chromedp.Click(css(`#trigger-form button[data-action=trigger]`)),
		chromedp.WaitVisible(css(`#run-params`)),
	)
	if got := text(`#run-params`); !strings.Contains(got, `dry_run=true`) || !strings.Contains(got, `region="us"`) {
		t.Errorf("the run's params: %q", got)
	}
	deadline = time.Now().Add(60 * time.Second)
	for {
		statuses := fmt.Sprint(eval(`Array.from(document.querySelectorAll('#graph .node')).map(n => n.dataset.task + '=' + n.dataset.status).join(' ')`))
		if statuses == "list=succeeded count=succeeded publish=skipped" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dry run's nodes: %v, want list and count succeeded, publish skipped", statuses)
		}
		time.Sleep(200 * time.Millisecond)
	}
	screenshot(t, ctx, "run-params")

	// A failed run retried from its page: its failed step runs again (and
	// fails again: /bin/false).
	do("failed run", chromedp.Navigate(base+"/jobs/qa/broken"), chromedp.WaitVisible(css(`pre.yaml`)))
	brokenRun := fmt.Sprint(eval(`document.querySelector('main a[href^="/runs/"]').getAttribute('href')`))
	deadline = time.Now().Add(60 * time.Second)
	for {
		do("failed run page", chromedp.Navigate(base+brokenRun), chromedp.WaitVisible(css(`#run-status`)))
		if eval(`document.querySelector('button[data-action=retry-run]') !== null`) == true {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no retry button on %s (status %s)", brokenRun, text(`#run-status`))
		}
		time.Sleep(200 * time.Millisecond)
	}
	attemptsBefore := cli("runs", "get", strings.TrimPrefix(brokenRun, "/runs/"))
	do("retry run", chromedp.Click(css(`button[data-action=retry-run]`)), chromedp.WaitVisible(css(`.flash`)))
	if flash := text(`.flash`); flash != "Retrying the run from its failed steps." {
		t.Errorf("after retry: %q", flash)
	}
	poll(t, 60*time.Second, "the retried step runs again", func() bool {
		return strings.Count(cli("runs", "get", strings.TrimPrefix(brokenRun, "/runs/")), "  attempt ") > strings.Count(attemptsBefore, "  attempt ")
	})

	// The audit trail has each action.
	do("audit", chromedp.Navigate(base+"/audit"), chromedp.WaitVisible(css(`.entry`)))
	audit := html(`main`)
	for _, a := range []string{`data-action="trigger" data-target="analytics/nightly-sales"`, `data-action="replay"`, `data-action="create_api_key"`, `data-action="retry"`} {
		if !strings.Contains(audit, a) {
			t.Errorf("the audit page lacks %s", a)
		}
	}
	screenshot(t, ctx, "audit")
	do("cluster", chromedp.Navigate(base+"/cluster"), chromedp.WaitVisible(css(`tr[data-kind="process"]`)))
	if row := text(`tr[data-kind="process"]`); !strings.Contains(row, "shared") {
		t.Errorf("dev's worker (bound to no tenant) is not shown as shared: %q", row)
	}
	if cell := text(`tr[data-kind="process"] td.resources`); !regexp.MustCompile(`^cpu [0-9.m]+/[1-9][0-9]*, memory \S+/\S+$`).MatchString(cell) {
		t.Errorf("dev's worker's resources: %q, want cpu and memory used of its machine's", cell)
	}
	if cell := text(`tr[data-queue="default"] td.resources`); !regexp.MustCompile(`^cpu [0-9.m]+/[1-9][0-9]*, memory \S+/\S+$`).MatchString(cell) {
		t.Errorf("queue default's resources: %q, want cpu and memory used of its workers'", cell)
	}
	if cell := text(`tr[data-kind="process"] td.enforces`); cell != "memory, cpu" && cell != "memory" && cell != "none" {
		t.Errorf("dev's worker's enforcement: %q, want what its cgroups hold a command step to", cell)
	}
	if row := text(`tr[data-storage="jobs"]`); !regexpLine(row, `live jobs\s*[1-9][0-9]*\s*none`) {
		t.Errorf("the cluster page's storage row for jobs: %q, want the default tenant's jobs and no quota", row)
	}
	do("remote worker", chromedp.WaitVisible(css(`tr[data-kind="remote"][data-worker^="py-web"]`)))
	if row := text(`tr[data-kind="remote"][data-worker^="py-web"]`); !strings.Contains(row, "remote") || !strings.Contains(row, "invoice") || !strings.Contains(row, "default=4") {
		t.Errorf("the remote Python worker's row: %q, want remote, type invoice, queue default=4", row)
	}
	poll(t, 60*time.Second, "the example remote run succeeds", func() bool {
		return regexpLine(cli("runs", "list", "--job", "remote-invoice", "-n", "billing", "--status", "succeeded"), `remote-invoice`)
	})
	screenshot(t, ctx, "cluster")
	// A step no worker has room for waits, and its run page says why.
	// (Both jobs below fire at an hour two hours ahead, wholly inside the
	// forecast's 24 hours whatever the time of day: an hour the window
	// cuts holds its demand in fewer seconds, and would read as short of
	// memory too.)
	cronAt := fmt.Sprintf("0 %d * * *", (time.Now().UTC().Hour()+2)%24)
	bigDir := t.TempDir()
	os.WriteFile(filepath.Join(bigDir, "big.yaml"), []byte("apiVersion: orrery.dev/v1\nkind: Job\nmetadata: {name: too-big, namespace: qa}\n"+
		"spec:\n  schedule: {cron: \""+cronAt+"\"}\n  steps:\n    - name: huge\n      resources: {cpu: 1, memory: 100Gi}\n      run: {command: {argv: [\"/bin/true\"]}}\n"), 0o644)
	// And a step asking for a GPU, which no worker of the queue has: the
	// capacity forecast names its hour short of gpu, and the job.
	os.WriteFile(filepath.Join(bigDir, "render.yaml"), []byte("apiVersion: orrery.dev/v1\nkind: Job\nmetadata: {name: render, namespace: qa}\n"+
		"spec:\n  schedule: {cron: \""+cronAt+"\"}\n  steps:\n    - name: frames\n      resources: {gpu: 1}\n      run: {command: {argv: [\"/bin/true\"]}}\n"), 0o644)
	cli("apply", "-f", bigDir)
	do("the capacity forecast", chromedp.Navigate(base+"/forecast?ns=qa&hours=24"), chromedp.WaitVisible(css(`#capacity`)))
	if row := text(`#capacity tr.short`); !regexpLine(row, `default\s+1 of [1-9][0-9]*`) {
		t.Errorf("the capacity forecast's row of queue default: %q, want one short hour", row)
	}
	if short := text(`table.short-hours`); !strings.Contains(short, "gpu") || !strings.Contains(short, "qa/render (gpu 1)") || !strings.Contains(short, "gpu 1/0") {
		t.Errorf("the short hours of queue default: %q, want gpu 1/0 by qa/render", short)
	}
	screenshot(t, ctx, "forecast-capacity")
	bigRun := regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f-]{27}`).FindString(cli("jobs", "trigger", "too-big", "-n", "qa"))
	do("a step no worker has room for", chromedp.Navigate(base+"/runs/"+bigRun), chromedp.Click(css(`a[href*="task="]`)), chromedp.WaitVisible(css(`p[data-wait]`)))
	if w := text(`p[data-wait]`); !strings.Contains(w, "needs memory 100Gi; the largest worker of queue default has") {
		t.Errorf("the waiting task's reason: %q, want the memory it lacks", w)
	}
	if r := text(`span[data-resources]`); r != "asks cpu 1, memory 100Gi" {
		t.Errorf("the task's resources on its run page: %q", r)
	}
	cli("runs", "cancel", bigRun)
	do("job page", chromedp.Navigate(base+"/jobs/analytics/nightly-sales"), chromedp.WaitVisible(css(`pre.yaml`)))
	screenshot(t, ctx, "job")

	// Schedules (docs/schedules.md): the example with every schedule field
	// warns of its 02:30 on the day Berlin skips 02:00-03:00 and shows its
	// jitter in the next fire times; a backfill from the job page, a dry
	// run first (nothing written), then for real, done with its progress
	// on the page; the forecast page draws the runs to come.
	do("schedule fields", chromedp.Navigate(base+"/jobs/ops/office-report"), chromedp.WaitVisible(css(`#dst-warnings`)))
	if w := text(`#dst-warnings`); !strings.Contains(w, "skip 02:00-03:00") || !strings.Contains(w, "fires it once at 03:00") {
		t.Errorf("the DST warning: %q", w)
	}
	screenshot(t, ctx, "job-schedule")
	bfFrom := time.Now().UTC().Truncate(time.Hour).Add(-5 * time.Hour).Format(time.RFC3339)
	bfTo := time.Now().UTC().Truncate(time.Hour).Add(-time.Hour).Format(time.RFC3339)
	do("backfill dry run", chromedp.Navigate(base+"/jobs/integrations/hourly-sync"), chromedp.WaitVisible(css(`#backfill-form`)),
		chromedp.SendKeys(css(`#backfill-form input[name=from]`), bfFrom), chromedp.SendKeys(css(`#backfill-form input[name=to]`), bfTo),
		chromedp.Click(css(`#backfill-form button`)), chromedp.WaitVisible(css(`p.flash`)))
	if f := text(`p.flash`); !strings.Contains(f, "Dry run: 5 instants") || !strings.Contains(f, "Nothing was written") {
		t.Errorf("the dry run's answer: %q", f)
	}
	do("backfill", chromedp.SendKeys(css(`#backfill-form input[name=from]`), bfFrom), chromedp.SendKeys(css(`#backfill-form input[name=to]`), bfTo),
		chromedp.Click(css(`#backfill-form input[name=dry_run]`)), chromedp.Click(css(`#backfill-form button`)),
		chromedp.WaitVisible(css(`#backfills tr[data-backfill]`)))
	poll(t, 60*time.Second, "the backfill from the job page done", func() bool {
		return regexpLine(cli("jobs", "backfills", "hourly-sync", "-n", "integrations"), `done\s+\d+/5`)
	})
	do("the backfill done on the job page", chromedp.Navigate(base+"/jobs/integrations/hourly-sync"), chromedp.WaitVisible(css(`#backfills tr[data-status="done"]`)))
	screenshot(t, ctx, "backfill")
	do("forecast", chromedp.Navigate(base+"/forecast"), chromedp.WaitVisible(css(`#forecast-chart svg rect.bar`)), chromedp.WaitVisible(css(`#hottest`)))
	if s := text(`#forecast-summary`); !regexpLine(s, `[1-9][0-9]* runs from [1-9][0-9]* jobs`) {
		t.Errorf("the forecast's summary: %q", s)
	}
	screenshot(t, ctx, "forecast")
	do("the forecast of a queue no job names", chromedp.Navigate(base+"/forecast?queue=nowhere"), chromedp.WaitVisible(css(`#forecast-summary`)))
	if s := text(`#forecast-summary`); !regexpLine(s, `^0 runs from 0 jobs`) {
		t.Errorf("the forecast of queue nowhere: %q", s)
	}
	do("the forecast of a queue with a bad name", chromedp.Navigate(base+"/forecast?queue=no%20such"), chromedp.WaitVisible(css(`section.errorpage`)))
	if s := text(`section.errorpage`); !strings.Contains(s, "queue") {
		t.Errorf("a bad queue's error does not name the field: %q", s)
	}

	// The alerts page: the broken job's dead letter, with its job and run.
	do("alerts", chromedp.Navigate(base+"/alerts?state=all&namespace=qa"), chromedp.WaitVisible(css(`#alerts tr[data-kind="dead_letter"] a[href^="/runs/"]`)))
	if s := text(`#alerts`); !strings.Contains(s, "broken") || !strings.Contains(s, "dead-lettered") {
		t.Errorf("the alerts page: %q", s)
	}
	screenshot(t, ctx, "alerts")

	// The runs page across jobs: the broken job's failed run with its
	// first error; a trigger filter; a bad time is a 400 naming the field.
	do("runs", chromedp.Navigate(base+"/runs?namespace=qa&status=failed"), chromedp.WaitVisible(css(`#runs tr[data-status="failed"]`)))
	if s := text(`#runs`); !strings.Contains(s, "broken") || !strings.Contains(s, "exit code 1") {
		t.Errorf("the runs page: %q", s)
	}
	screenshot(t, ctx, "runs")
	// Its run's timeline: the failed attempt, labelled with its outcome.
	do("a failed run's timeline", chromedp.Click(css(`#runs tr[data-status="failed"] td:first-child a`)), chromedp.WaitVisible(css(`#timeline g.try[data-outcome="failed"]`)))
	if s := text(`#timeline`); !strings.Contains(s, "#1 failed") {
		t.Errorf("the timeline: %q", s)
	}
	screenshot(t, ctx, "run-timeline")

	// The overview, the home page: the last 24 hours' runs per hour (the
	// failed hatched, each segment named on hover), the failing job, the
	// open alert, the queues; another tenant's job nowhere. (The replay
	// above resolves the dead_letter alert, if a watchdog pass sees it
	// between the replay and the new dead letter, which raises it again:
	// wait until it is open.)
	poll(t, 30*time.Second, "the broken job's dead_letter alert is open", func() bool {
		return regexpLine(cli("alerts", "--open", "-n", "qa"), `dead_letter\s+qa/broken\s+open`)
	})
	do("overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible(css(`#overview-chart svg g.hour rect.seg`)),
		chromedp.WaitVisible(css(`#failing tr[data-job="qa/broken"]`)))
	if s := text(`#open-alerts`); !strings.Contains(s, "broken") {
		t.Errorf("the overview's open alerts: %q", s)
	}
	if n := eval(`document.querySelectorAll('#overview-chart rect.seg.bad title').length`); n == float64(0) {
		t.Error("the overview's chart draws no failed runs")
	}
	if s := text(`#totals`); !strings.Contains(s, "failed") || !strings.Contains(s, "succeeded") {
		t.Errorf("the overview's totals: %q", s)
	}
	if strings.Contains(html(`main`), "secret-plan") {
		t.Error("the overview shows another tenant's job")
	}
	if s := text(`#utilization`); !regexp.MustCompile(`cpu [0-9.m]+/[1-9][0-9]* \([0-9]+%\), memory \S+/\S+ \([0-9]+%\)`).MatchString(s) {
		t.Errorf("the overview's capacity in use: %q", s)
	}
	screenshot(t, ctx, "overview")
	do("overview of a namespace", chromedp.Navigate(base+"/?namespace=integrations"), chromedp.WaitVisible(css(`#failing`)))
	if strings.Contains(text(`#failing`), "broken") {
		t.Error("the overview of namespace integrations lists qa/broken")
	}

	// The API reference: the OpenAPI document rendered by the vendored
	// viewer, under the page's own policy, loading nothing from elsewhere
	// (it once asked for a web font the policy refused: console errors,
	// and seconds to settle).
	console.take()
	start := time.Now()
	do("api reference", chromedp.Navigate(base+"/api"), chromedp.WaitReady(css(`rapi-doc`)))
	poll(t, 30*time.Second, "the API reference rendered", func() bool {
		v := eval(`(() => { const r = document.querySelector('rapi-doc'); return !!(r && r.shadowRoot && r.shadowRoot.textContent.includes('/api/v1/jobs')); })()`)
		return v == true
	})
	t.Logf("the API reference rendered in %v", time.Since(start).Round(time.Millisecond))
	if errs := console.take(); len(errs) > 0 {
		t.Errorf("the API reference's console: %q", errs)
	}
	if n := eval(`performance.getEntriesByType('resource').filter(e => !e.name.startsWith(location.origin)).length`); n != float64(0) {
		t.Errorf("the API reference asked for %v resources from elsewhere", n)
	}
	screenshot(t, ctx, "api-reference")

	// Every page at a phone's width (390 px): the navigation folds onto
	// lines of its own with every link on the screen, and nothing makes
	// the page scroll sideways (a wide table scrolls in its own box).
	for _, page := range []string{"/", "/jobs", "/jobs/qa/broken", "/jobs/analytics/nightly-sales", runPath, "/runs",
		"/dlq", "/cluster", "/alerts", "/forecast", "/audit", "/api"} {
		do("narrow "+page, chromedp.EmulateViewport(390, 844), chromedp.Navigate(base+page), chromedp.WaitVisible(css(`main`)))
		var fit struct {
			Page, View int
			Cut        []string
		}
		res := eval(`(() => { const vw = document.documentElement.clientWidth;
			const cut = [...document.querySelectorAll('header.top nav a, header.top .who')].filter(a => {
				const b = a.getBoundingClientRect(); return b.width === 0 || b.left < 0 || b.right > vw + 1; }).map(a => a.textContent.trim());
			return JSON.stringify({page: document.documentElement.scrollWidth, view: vw, cut}); })()`)
		if err := json.Unmarshal([]byte(fmt.Sprint(res)), &fit); err != nil {
			t.Fatal(err)
		}
		if fit.Page > fit.View || len(fit.Cut) > 0 {
			wide := eval(`[...document.querySelectorAll('main *')].filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
				.slice(0, 5).map(e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (e.className && typeof e.className === 'string' ? '.' + e.className.split(' ').join('.') : '')).join(' ')`)
			t.Errorf("%s at 390 px: the page is %d px wide in a view of %d; cut off: %q; past the edge: %v", page, fit.Page, fit.View, fit.Cut, wide)
		}
		if page == runPath {
			screenshot(t, ctx, "narrow-run")
		}
	}
	do("wide again", chromedp.EmulateViewport(1400, 1000))
	do("runs by trigger", chromedp.Navigate(base+"/runs?trigger=upstream"), chromedp.WaitVisible(css(`#runs`)))
	if n := eval(`[...document.querySelectorAll('#runs tr[data-run] td:nth-child(3)')].filter(td => td.textContent.trim() !== 'upstream').length`); n != float64(0) {
		t.Errorf("%v rows of another trigger on the page of trigger upstream", n)
	}
	if status := eval(`fetch('/runs?since=yesterday').then(r => r.status)`); status != float64(400) {
		t.Errorf("GET /runs?since=yesterday: %v, want 400", status)
	}

	// A job started by another's end (examples/daily-report.yaml after
	// daily-extract): the job page links its downstream job, the run page
	// of the run it started links the upstream run.
	cli("jobs", "trigger", "daily-extract", "-n", "analytics")
	var reportRun string
	poll(t, 60*time.Second, "daily-report started by daily-extract's end", func() bool {
		for _, line := range strings.Split(cli("runs", "list", "-n", "analytics", "--job", "daily-report"), "\n") {
			if f := strings.Fields(line); len(f) >= 5 && f[3] == "upstream" && f[4] == "succeeded" {
				reportRun = f[0]
				return true
			}
		}
		return false
	})
	do("downstream on the job page", chromedp.Navigate(base+"/jobs/analytics/daily-extract"), chromedp.WaitVisible(css(`#job-links p[data-link=downstream] a`)))
	if s := text(`#job-links`); !strings.Contains(s, "starts daily-report") || !strings.Contains(s, "when it ends succeeded") {
		t.Errorf("daily-extract's links: %q", s)
	}
	// The job's history by step: a row per step, a cell per run, each a
	// link to that step of that run.
	if n := eval(`document.querySelectorAll('#history-grid tbody tr').length`); n != float64(3) {
		t.Errorf("the history grid has %v rows, want daily-extract's 3 steps", n)
	}
	cell := eval(`document.querySelector('#history-grid tbody tr:first-child td[data-status="succeeded"] a').getAttribute('href')`)
	do("a cell of the grid", chromedp.Navigate(base+fmt.Sprint(cell)), chromedp.WaitVisible(css(`#attempts h2`)))
	if s := text(`#attempts h2`); !strings.Contains(s, "Attempts of list") {
		t.Errorf("the grid's cell opened %q, want the attempts of list", s)
	}
	do("upstream on the run page", chromedp.Navigate(base+"/runs/"+reportRun), chromedp.WaitVisible(css(`#run-upstream a`)))
	if s := text(`#run-upstream`); !strings.Contains(s, "of daily-extract") || !strings.Contains(s, "(succeeded)") {
		t.Errorf("the downstream run's upstream: %q", s)
	}

	// A job started by an event (examples/order-paid.yaml): a published
	// event starts its run once (a repeat of its id starts nothing), and
	// the run page shows the event.
	for range 2 {
		cli("events", "publish", "--type", "order.paid", "--id", "ord-web-1", "--data", `{"order": "web-1", "amount": 150}`)
	}
	var eventRun string
	poll(t, 60*time.Second, "reserve-stock started by the event", func() bool {
		for _, line := range strings.Split(cli("runs", "list", "-n", "shop", "--job", "reserve-stock"), "\n") {
			if f := strings.Fields(line); len(f) >= 5 && f[3] == "event" && f[4] == "succeeded" {
				eventRun = f[0]
				return true
			}
		}
		return false
	})
	if n := strings.Count(cli("runs", "list", "-n", "shop", "--job", "reserve-stock", "--trigger", "event"), " event "); n != 1 {
		t.Errorf("%d runs of reserve-stock for one event published twice", n)
	}
	do("the event on the run page", chromedp.Navigate(base+"/runs/"+eventRun), chromedp.WaitVisible(css(`#run-event`)))
	if s := text(`#run-event`); !strings.Contains(s, "event ord-web-1 of type order.paid") || !strings.Contains(s, `"order":"web-1"`) {
		t.Errorf("the event run's event: %q", s)
	}

	// The same job started by a signed delivery to a source (hmac kind,
	// its secret dev's HOOK_TOKEN, granted to analytics): the run page
	// names the source.
	cli("sources", "create", "shop-hook", "--kind", "hmac", "--namespace", "analytics", "--secret", "secret://env/HOOK_TOKEN")
	hookSecret := os.Getenv("HOOK_TOKEN")
	if hookSecret == "" {
		hookSecret = "Bearer dev-token" // dev's value when unset
	}
	delivery := `{"type": "order.paid", "id": "ord-web-2", "data": {"order": "web-2", "amount": 200}}`
	sig := hmac.New(sha256.New, []byte(hookSecret))
	sig.Write([]byte(delivery))
	req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/hooks/default:shop-hook", strings.NewReader(delivery))
	req.Header.Set("X-Signature-256", "sha256="+hex.EncodeToString(sig.Sum(nil)))
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != http.StatusAccepted {
		t.Fatalf("a signed delivery: %v %v", res, err)
	}
	poll(t, 60*time.Second, "reserve-stock started by the delivery", func() bool {
		for _, line := range strings.Split(cli("runs", "list", "-n", "shop", "--job", "reserve-stock", "--trigger", "event"), "\n") {
			if f := strings.Fields(line); len(f) >= 5 && f[0] != eventRun && f[4] == "succeeded" {
				eventRun = f[0]
				return true
			}
		}
		return false
	})
	do("a delivery's event on the run page", chromedp.Navigate(base+"/runs/"+eventRun), chromedp.WaitVisible(css(`#run-event`)))
	if s := text(`#run-event`); !strings.Contains(s, "event ord-web-2 of type order.paid from source shop-hook") {
		t.Errorf("the delivered event's run: %q", s)
	}

	// A parked step (examples/follow-up.yaml): while it sleeps, its
	// attempts panel says until when; then the run goes on and succeeds.
	napRun := strings.Fields(cli("jobs", "trigger", "follow-up", "-n", "shop"))[1]
	poll(t, 30*time.Second, "the nap parks", func() bool { return strings.Contains(cli("runs", "get", napRun), "parked: sleep until") })
	do("a parked step's run", chromedp.Navigate(base+"/runs/"+napRun), chromedp.WaitVisible(css(`#graph a[data-task="nap"]`)))
	napHref := eval(`document.querySelector('#graph a[data-task="nap"]').getAttribute('href')`)
	do("a parked step's attempts", chromedp.Navigate(base+fmt.Sprint(napHref)), chromedp.WaitVisible(css(`#attempts [data-parked]`)))
	if s := text(`#attempts [data-parked]`); !strings.Contains(s, "parked: sleep until 20") {
		t.Errorf("the parked step's panel: %q", s)
	}
	poll(t, 60*time.Second, "follow-up wakes and succeeds", func() bool { return strings.Contains(cli("runs", "get", napRun), "status succeeded") })

	// A job with a concurrency key (examples/customer-sync.yaml): the run
	// page shows the run's key.
	syncRun := strings.Fields(cli("jobs", "trigger", "customer-sync", "-n", "shop", "--param", "customer=grace"))[1]
	do("a keyed run's page", chromedp.Navigate(base+"/runs/"+syncRun), chromedp.WaitVisible(css(`#run-keys`)))
	if s := text(`#run-keys`); !strings.Contains(s, "concurrency keys customer=grace") {
		t.Errorf("the keyed run's keys: %q", s)
	}
	// A step key of limit 1: the second run's step waits, and its attempts
	// panel says for which key; it starts once the first ends.
	keyDir := t.TempDir()
	os.WriteFile(filepath.Join(keyDir, "vendor.yaml"), []byte(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: vendor-call, namespace: qa}
spec:
  schedule: {cron: "0 3 * * *"}
  overlap: allow
  steps:
    - name: call
      concurrency: [{key: vendor-slow, limit: 1}]
      run: {command: {argv: ["/bin/sleep", "3"]}}
`), 0o644)
	cli("apply", "-f", keyDir)
	firstCall := strings.Fields(cli("jobs", "trigger", "vendor-call", "-n", "qa"))[1]
	heldCall := strings.Fields(cli("jobs", "trigger", "vendor-call", "-n", "qa"))[1]
	do("a held step's run", chromedp.Navigate(base+"/runs/"+heldCall), chromedp.WaitVisible(css(`#graph a[data-task="call"]`)))
	callHref := eval(`document.querySelector('#graph a[data-task="call"]').getAttribute('href')`)
	do("a held step's attempts", chromedp.Navigate(base+fmt.Sprint(callHref)), chromedp.WaitVisible(css(`#attempts [data-wait]`)))
	if s := text(`#attempts [data-wait]`); !strings.Contains(s, "concurrency key vendor-slow 1/1") {
		t.Errorf("the held step's panel: %q", s)
	}
	if s := text(`#attempts [data-keys]`); !strings.Contains(s, "keys vendor-slow") {
		t.Errorf("the held step's keys: %q", s)
	}
	screenshot(t, ctx, "held-step")
	for _, id := range []string{firstCall, heldCall} {
		poll(t, 60*time.Second, "vendor-call "+id+" succeeds", func() bool { return strings.Contains(cli("runs", "get", id), "status succeeded") })
	}
	// A step with a rate limit of 1 a minute: the second run's step waits
	// for its token, and its attempts panel says when it comes.
	rateDir := t.TempDir()
	os.WriteFile(filepath.Join(rateDir, "rated.yaml"), []byte(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: vendor-rated, namespace: qa}
spec:
  schedule: {cron: "0 3 * * *"}
  overlap: allow
  steps:
    - name: call
      rate_limit: {key: vendor-strict, limit: 1, per: 1m}
      run: {command: {argv: ["/bin/true"]}}
`), 0o644)
	cli("apply", "-f", rateDir)
	firstRated := strings.Fields(cli("jobs", "trigger", "vendor-rated", "-n", "qa"))[1]
	poll(t, 60*time.Second, "vendor-rated "+firstRated+" succeeds", func() bool { return strings.Contains(cli("runs", "get", firstRated), "status succeeded") })
	ratedRun := strings.Fields(cli("jobs", "trigger", "vendor-rated", "-n", "qa"))[1]
	poll(t, 30*time.Second, "the second waits for its token", func() bool {
		return strings.Contains(cli("runs", "get", ratedRun), "waiting: rate limit vendor-strict 1/1m, next token in")
	})
	do("a rated step's run", chromedp.Navigate(base+"/runs/"+ratedRun), chromedp.WaitVisible(css(`#graph a[data-task="call"]`)))
	ratedHref := eval(`document.querySelector('#graph a[data-task="call"]').getAttribute('href')`)
	do("a rated step's attempts", chromedp.Navigate(base+fmt.Sprint(ratedHref)), chromedp.WaitVisible(css(`#attempts [data-wait]`)))
	if s := text(`#attempts [data-wait]`); !strings.Contains(s, "waiting: rate limit vendor-strict 1/1m, next token in") {
		t.Errorf("the rated step's panel: %q", s)
	}
	if s := text(`#attempts [data-rate]`); !strings.Contains(s, "rate key vendor-strict") {
		t.Errorf("the rated step's key: %q", s)
	}
	screenshot(t, ctx, "rated-step")
	// The cluster page and `orrery cluster` name the key among the busiest.
	do("the busiest keys", chromedp.Navigate(base+"/cluster"), chromedp.WaitVisible(css(`#busiest-keys tr[data-key="vendor-strict"]`)))
	if s := text(`#busiest-keys tr[data-key="vendor-strict"]`); !strings.Contains(s, "rate") || !strings.Contains(s, "vendor-strict") {
		t.Errorf("the cluster page's busiest keys: %q", s)
	}
	screenshot(t, ctx, "busiest-keys")
	if out := cli("cluster"); !regexp.MustCompile(`rate\s+\S+\s+vendor-strict\s+1\s`).MatchString(out) {
		t.Errorf("orrery cluster's busiest keys:\n%s", out)
	}
	cli("runs", "cancel", ratedRun) // (its token would come in a minute)

	// A debounced job: two triggers of one repo make one run, queued, its
	// page saying what it took and when it starts.
	debounceDir := t.TempDir()
	os.WriteFile(filepath.Join(debounceDir, "deploy.yaml"), []byte(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: deploy-site, namespace: qa}
spec:
  schedule: {cron: "0 3 * * *"}
  params: {repo: {type: string, default: web}}
  debounce: {key: "${{ params.repo }}", period: 1h}
  steps:
    - name: ship
      run: {command: {argv: ["/bin/true"]}}
`), 0o644)
	cli("apply", "-f", debounceDir)
	debounced := strings.Fields(cli("jobs", "trigger", "deploy-site", "-n", "qa"))[1]
	if again := strings.Fields(cli("jobs", "trigger", "deploy-site", "-n", "qa"))[1]; again != debounced {
		t.Errorf("a second trigger of the key made run %s, not %s", again, debounced)
	}
	do("a debounced run", chromedp.Navigate(base+"/runs/"+debounced), chromedp.WaitVisible(css(`#run-debounce`)))
	if s := text(`#run-debounce`); !strings.Contains(s, "debounce key web: 2 triggers, starts ") || !strings.Contains(s, "unless triggered again") {
		t.Errorf("the debounced run's page: %q", s)
	}
	if s := text(`#run-status`); !strings.Contains(s, "queued") {
		t.Errorf("the debounced run's status: %q", s)
	}
	screenshot(t, ctx, "debounced-run")
	cli("runs", "cancel", debounced) // (it would start in an hour)

	// A step that asks for an approval (examples/refund.yaml): the run
	// page shows what it asks, and its Approve button, with a comment,
	// ends it; the step after reads who approved. A second run's Reject
	// fails it, naming who and why.
	refundRun := func(id string) string {
		t.Helper()
		cli("events", "publish", "--type", "refund.requested", "--id", id, "--data", `{"order": "`+id+`", "amount": 80}`)
		var r string
		poll(t, 60*time.Second, "the refund for "+id+" asks", func() bool {
			for _, line := range strings.Split(cli("runs", "list", "-n", "shop", "--job", "refund"), "\n") {
				if f := strings.Fields(line); len(f) >= 5 && f[4] == "running" && strings.Contains(cli("runs", "get", f[0]), "Refund 80 for order "+id) {
					r = f[0]
					return strings.Contains(cli("runs", "get", r), "parked: approval by editor 0/1")
				}
			}
			return false
		})
		return r
	}
	approveRun := refundRun("web-r1")
	do("an approval on the run page", chromedp.Navigate(base+"/runs/"+approveRun), chromedp.WaitVisible(css(`section.approval[data-approval="refund-ok"]`)))
	if s := text(`section.approval`); !strings.Contains(s, "Refund 80 for order web-r1?") || !strings.Contains(s, "1 approval holding editor") {
		t.Errorf("the approval's section: %q", s)
	}
	screenshot(t, ctx, "approval")
	do("approve", chromedp.SendKeys(css(`section.approval input[name=comment]`), "looks right"),
		chromedp.Click(css(`section.approval button[data-action=approve]`)), chromedp.WaitVisible(css(`.flash`)))
	if flash := text(`.flash`); !strings.Contains(flash, "step refund-ok is succeeded") {
		t.Errorf("after approve: %q", flash)
	}
	poll(t, 60*time.Second, "the approved refund pays", func() bool { return strings.Contains(cli("runs", "get", approveRun), "status succeeded") })
	if out := cli("runs", "get", approveRun); !strings.Contains(out, `"comment":"looks right"`) || !strings.Contains(out, `"decision":"approved"`) {
		t.Errorf("the approved run: %s", out)
	}
	rejectRun := refundRun("web-r2")
	do("a second approval", chromedp.Navigate(base+"/runs/"+rejectRun), chromedp.WaitVisible(css(`section.approval button[data-action=reject]`)))
	do("reject", chromedp.SendKeys(css(`section.approval input[name=comment]`), "duplicate"),
		chromedp.Click(css(`section.approval button[data-action=reject]`)), chromedp.WaitVisible(css(`.flash`)))
	poll(t, 60*time.Second, "the rejected refund fails", func() bool { return strings.Contains(cli("runs", "get", rejectRun), "status failed") })
	do("the rejected step", chromedp.Navigate(base+"/runs/"+rejectRun+"?step=refund-ok#attempts"), chromedp.WaitVisible(css(`#attempts pre.error`)))
	if s := text(`#attempts pre.error`); !strings.Contains(s, "rejected by ") || !strings.Contains(s, ": duplicate") {
		t.Errorf("the rejected step's error: %q", s)
	}
	if n := eval(`document.querySelectorAll('section.approval').length`); n != float64(0) {
		t.Errorf("a decided step still asks on the run page (%v sections)", n)
	}

	// A fan-out (examples/file-fan-out.yaml): the run page draws the group
	// as one node with its count, counts its items by status in the table
	// and on the timeline, and lists them.
	fanRun := strings.Fields(cli("jobs", "trigger", "file-fan-out", "-n", "analytics", "--param", "count=7"))[1]
	poll(t, 60*time.Second, "the fan-out's run succeeds", func() bool { return strings.Contains(cli("runs", "get", fanRun), "status succeeded") })
	do("a fan-out's run page", chromedp.Navigate(base+"/runs/"+fanRun), chromedp.WaitVisible(css(`#graph a[data-task="load"]`)))
	if s := fmt.Sprint(eval(`document.querySelector('#graph a[data-task="load"]').textContent`)); !strings.Contains(s, "load ×7") {
		t.Errorf("the fan-out's node: %q", s)
	}
	if s := text(`tr.items`); !strings.Contains(s, "fan-out of 7 items: 7 succeeded") {
		t.Errorf("the fan-out's row: %q", s)
	}
	if s := fmt.Sprint(eval(`document.querySelector('#timeline').textContent`)); !strings.Contains(s, "7 items succeeded") {
		t.Errorf("the fan-out on the timeline: %q", s)
	}
	do("a fan-out's items", chromedp.Click(css(`tr.items a[data-items-link]`)), chromedp.WaitVisible(css(`#items tbody tr[data-item]`)))
	if n := eval(`document.querySelectorAll('#items tbody tr[data-item]').length`); n != float64(7) {
		t.Errorf("%v items listed, want 7", n)
	}
	screenshot(t, ctx, "fan-out")

	// A 10,000-item fan-out whose items wait (steps of a remote worker type
	// nobody serves): the run page draws one node and lists a page of
	// items; its size and the browser's time to load it are logged
	// (BENCHMARKS.md, "Web UI"), not asserted.
	wideDir := t.TempDir()
	os.WriteFile(filepath.Join(wideDir, "wide.yaml"), []byte(`apiVersion: orrery.dev/v1
kind: Job
metadata: {name: wide-fan, namespace: qa}
spec:
  schedule: {cron: "0 3 * * *"}
  params:
    items: {type: string, default: "`+strings.Repeat("x,", 9999)+`x"}
  steps:
    - name: each
      for_each: ${{ params.items.split(',') }}
      max_parallel: 10
      run: {worker: nobody-serves-this}
`), 0o644)
	cli("apply", "-f", wideDir)
	wide := strings.Fields(cli("jobs", "trigger", "wide-fan", "-n", "qa"))[1]
	for _, page := range []struct{ path, wait string }{
		{"/runs/" + wide, `#graph a[data-task="each"]`},
		{"/runs/" + wide + "?items=each&from=9500#items", `#items tbody tr[data-item="9999"]`},
	} {
		do("a 10,000-item fan-out's page", chromedp.Navigate(base+page.path), chromedp.WaitVisible(css(page.wait)))
		t.Logf("%s: %.0f KiB, loaded in %v ms (navigation start to load end)", page.path,
			eval(`document.documentElement.outerHTML.length`).(float64)/1024,
			eval(`Math.round(performance.getEntriesByType('navigation')[0].loadEventEnd)`))
	}
	if s := fmt.Sprint(eval(`document.querySelector('#graph a[data-task="each"]').textContent`)); !strings.Contains(s, "each ×10000") {
		t.Errorf("the 10,000-item fan-out's node: %q", s)
	}
	cli("runs", "cancel", wide)

	// A step that runs another job (examples/month-end-close.yaml): the
	// parent's graph and table link the child run, whose page links back;
	// the job pages list the calls both ways.
	closeRun := strings.Fields(cli("jobs", "trigger", "month-end-close", "-n", "billing", "--param", "month=2026-10"))[1]
	poll(t, 60*time.Second, "the close run succeeds", func() bool { return strings.Contains(cli("runs", "get", closeRun), "status succeeded") })
	do("a job step's run page", chromedp.Navigate(base+"/runs/"+closeRun+"?step=invoice#attempts"), chromedp.WaitVisible(css(`#graph a[data-task="invoice"]`)))
	if s := fmt.Sprint(eval(`document.querySelector('#graph a[data-task="invoice"]').textContent`)); !strings.Contains(s, "invoice ↗") {
		t.Errorf("the job step's node: %q", s)
	}
	if s := text(`#attempts`); !strings.Contains(s, "orrery (child run)") || !strings.Contains(s, `"total_eur":5000`) {
		t.Errorf("the job step's attempt: %q", s)
	}
	screenshot(t, ctx, "job-step")
	do("the child run", chromedp.Click(css(`a[data-child-run]`)), chromedp.WaitVisible(css(`#run-parent a`)))
	if s := text(`#run-parent`); !strings.Contains(s, "started by step invoice of run "+closeRun) {
		t.Errorf("the child run's parent: %q", s)
	}
	if s := text(`#run-params`); !strings.Contains(s, `month="2026-10"`) {
		t.Errorf("the child run's params: %q", s)
	}
	do("calls on the job page", chromedp.Navigate(base+"/jobs/billing/invoice-run"), chromedp.WaitVisible(css(`#job-calls p[data-link=callers] a`)))
	if s := text(`#job-calls`); !strings.Contains(s, "run by a step of month-end-close") {
		t.Errorf("invoice-run's callers: %q", s)
	}

	// Unknown ids and other tenants' jobs are 404 pages.
	for _, path := range []string{"/jobs/acme-ns/secret-plan", "/runs/0190aaaa-0000-7000-8000-000000000000", "/runs/not-an-id", "/nope"} {
		if status := eval(fmt.Sprintf(`fetch(%q).then(r => r.status)`, path)); status != float64(404) {
			t.Errorf("GET %s: %v, want 404", path, status)
		}
	}

	// A reader: no buttons; a forged post is refused by the API's policy.
	do("sign out", chromedp.Click(css(`header button.link`)), chromedp.WaitVisible(css(`input[name=key]`)))
	signIn(reader)
	if n := eval(`document.querySelectorAll('main button[data-action], td.actions form').length`); n != float64(0) {
		t.Errorf("a reader sees %v action buttons", n)
	}
	forged := eval(`fetch('/jobs/analytics/nightly-sales/trigger', {method: 'POST', headers: {'Content-Type': 'application/x-www-form-urlencoded'},
		body: 'csrf=' + encodeURIComponent(document.querySelector('input[name=csrf]').value)}).then(r => r.status)`)
	if forged != float64(403) {
		t.Errorf("a reader's trigger: %v, want 403", forged)
	}
}

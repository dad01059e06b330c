package main_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/orrery-dev/orrery/internal/pgtest"
)

// serveAuthNone starts `orrery serve --auth none` (scheduler off) on a
// loopback address with extra flags, and returns the address once the
// API answers.
func serveAuthNone(t *testing.T, extra ...string) string {
	t.Helper()
	addr := freeAddr(t)
	p := startProc(t, "serve", append([]string{"serve", "--db", pgtest.DSN(t), "--addr", addr, "--no-scheduler", "--auth", "none"}, extra...)...)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, _, code := run(t, "--server", addr, "jobs", "list"); code == 0 {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s", p.Logs())
		}
	}
}

// A request that names another host (DNS rebinding: evil.example
// re-pointed at this server) is refused before anything is read or done,
// on every route and in every auth mode, and so is a browser's request
// from another site's origin; --auth none refuses a non-loopback address.
func TestServeAnswersOnlyItsHosts(t *testing.T) {
	addr := serveAuthNone(t, "--allowed-host", "orrery.example.com")
	call := func(method, path, host, origin, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		req.Header.Set("Content-Type", "application/json")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	_, port, _ := strings.Cut(addr, ":")
	evil := "evil.example:" + port
	routes := []struct{ method, path, body string }{
		{"POST", "/orrery.v1.JobService/ListJobs", `{}`},
		{"POST", "/orrery.v1.AccessService/CreateAPIKey", `{"principal":"rebound","role":"admin"}`},
		{"POST", "/orrery.v1.JobService/TriggerJob", `{"job":{"namespace":"default","name":"x"}}`},
		{"GET", "/metrics", ""},
		{"GET", "/", ""},
		{"GET", "/login", ""},
	}
	for _, r := range routes {
		if code, body := call(r.method, r.path, evil, "http://"+evil, r.body); code != http.StatusForbidden || !strings.Contains(body, `does not answer to the host "`+evil+`" (--allowed-host)`) {
			t.Errorf("%s %s as %s: %d %q, want 403 naming the host", r.method, r.path, evil, code, body)
		}
		if code, body := call(r.method, r.path, addr, "http://"+evil, r.body); code != http.StatusForbidden || !strings.Contains(body, "from the origin") {
			t.Errorf("%s %s from the origin %s: %d %q, want 403 naming the origin", r.method, r.path, evil, code, body)
		}
	}
	for _, host := range []string{addr, "localhost:" + port, "orrery.example.com:" + port} {
		if code, body := call("POST", "/orrery.v1.JobService/ListJobs", host, "http://"+host, `{}`); code != http.StatusOK {
			t.Errorf("ListJobs as %s: %d %q, want 200", host, code, body)
		}
	}
	// --auth none on an address others can reach does not start.
	out, errOut, code := run(t, "serve", "--db", pgtest.DSN(t), "--addr", "0.0.0.0:0", "--auth", "none")
	oneLineError(t, []string{"serve"}, out, errOut, code, `--auth none serves a loopback --addr only (127.0.0.1, ::1, localhost), not "0.0.0.0:0"`)
	out, errOut, code = run(t, "serve", "--db", pgtest.DSN(t), "--addr", "127.0.0.1:0", "--allowed-host", "*.example.com")
	oneLineError(t, []string{"serve"}, out, errOut, code, `--allowed-host "*.example.com": want a host name`)
}

// DNS rebinding in a real browser: Chromium resolves evil.example to this
// server's loopback address (the state after an attacker's DNS flips), so
// a page of evil.example and its scripts are same-origin with the server.
// The server refuses the page and the scripts' API calls; the same calls
// from a page of the server's own host succeed, Origin header and all.
func TestDNSRebindingInABrowser(t *testing.T) {
	addr := serveAuthNone(t)
	_, port, _ := strings.Cut(addr, ":")
	ctx := browser(t, chromedp.Flag("host-resolver-rules", "MAP evil.example 127.0.0.1"))
	// fetch POSTs to the API from the page's origin and answers status and
	// body; a browser sends Origin on such a request.
	const fetch = `fetch('/orrery.v1.AccessService/CreateAPIKey', {method: 'POST', headers: {'Content-Type': 'application/json'},
		body: JSON.stringify({principal: 'rebound', role: 'admin'})}).then(async r => r.status + ' ' + await r.text())`
	evil := "http://evil.example:" + port
	page := func(url string) (body, answer string) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
			t.Fatal(err)
		}
		body, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
		if err != nil {
			t.Fatal(err)
		}
		answer, err = chromedp.Run(ctx, chromedp.Evaluate[string](fetch, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatal(err)
		}
		return body, answer
	}
	body, answer := page(evil + "/jobs")
	if !strings.Contains(body, `does not answer to the host "evil.example:`+port+`"`) {
		t.Errorf("the page at %s/jobs: %q, want it refused", evil, body)
	}
	if !strings.HasPrefix(answer, "403 ") || strings.Contains(answer, "ork_") {
		t.Errorf("CreateAPIKey from a script of %s: %q, want 403 and no key", evil, answer)
	}
	for _, host := range []string{"http://localhost:" + port, "http://" + addr} {
		body, answer := page(host + "/jobs")
		if strings.Contains(body, "does not answer") || !strings.HasPrefix(answer, "200 ") || !strings.Contains(answer, "ork_") {
			t.Errorf("from %s: page %q, CreateAPIKey %q; want both served", host, body, answer)
		}
	}
}

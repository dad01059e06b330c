package webui_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/orrery-dev/orrery/api"
	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/internal/access"
	"github.com/orrery-dev/orrery/internal/dispatch"
	"github.com/orrery-dev/orrery/internal/job"
	"github.com/orrery-dev/orrery/internal/pgtest"
	"github.com/orrery-dev/orrery/internal/run"
	"github.com/orrery-dev/orrery/webui"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type site struct {
	t      *testing.T
	url    string
	client *http.Client
	acc    *access.Service
	jobs   *job.Service
	runs   *run.Service
	admin  string
	key    access.Key
}

// newSite serves the API and the UI with API-key authentication, with
// one job (team/nightly) and an admin key.
func newSite(t *testing.T, secure bool) *site {
	t.Helper()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	jobs, err := job.New(ctx, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatch.New()
	if err != nil {
		t.Fatal(err)
	}
	acc := access.New(pool)
	secret, key, err := acc.Create(ctx, access.NewKey{Tenant: "default", Principal: "ops", Role: access.Admin, CreatedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.Create(ctx, job.Anonymous, dag.Resource{Metadata: dag.Metadata{Name: "nightly", Namespace: "team"},
		Spec: dag.JobSpec{Schedule: schedule.Spec{Cron: schedule.Crons("@daily")}, Run: &dag.Executor{Handler: "h"}}}, ""); err != nil {
		t.Fatal(err)
	}
	runs := run.NewService(pool, jobs, d)
	apiHandler := api.NewHandler(api.Services{Jobs: jobs, Runs: runs, State: pool, Auth: api.KeyAuth{Access: acc}}, nil)
	ui, err := webui.New(webui.Config{API: apiHandler, Access: acc, SecureCookies: secure})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.WithClientSource(webui.Mount(apiHandler, ui)))
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &site{t: t, url: srv.URL, client: client, acc: acc, jobs: jobs, runs: runs, admin: secret, key: key}
}

func (s *site) do(method, path string, form url.Values) (*http.Response, string) {
	s.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, s.url+path, body)
	if err != nil {
		s.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	res, err := s.client.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

var (
	tokenRE = regexp.MustCompile(`name="token" value="([^"]+)"`)
	csrfRE  = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
)

// signIn signs in with key and returns the sign-in's answer.
func (s *site) signIn(key, next string) *http.Response {
	s.t.Helper()
	_, page := s.do(http.MethodGet, "/login", nil)
	m := tokenRE.FindStringSubmatch(page)
	if m == nil {
		s.t.Fatalf("no token on the sign-in page:\n%s", page)
	}
	res, _ := s.do(http.MethodPost, "/login", url.Values{"token": {m[1]}, "key": {key}, "next": {next}})
	return res
}

func cookie(res *http.Response, name string) *http.Cookie {
	for _, c := range res.Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// Signing in makes an HttpOnly, SameSite=Strict session cookie (Secure
// when asked); a bad key, a missing login token or a foreign `next` get
// nowhere; forms without the session's CSRF token change nothing;
// signing out, or revoking the key, ends the session.
func TestSessionsAndCSRF(t *testing.T) {
	t.Parallel()
	s := newSite(t, false)
	if res, _ := s.do(http.MethodGet, "/", nil); res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/login?next=%2F" {
		t.Fatalf("signed out: %d %s", res.StatusCode, res.Header.Get("Location"))
	}
	if res, _ := s.do(http.MethodPost, "/login", url.Values{"token": {"forged"}, "key": {s.admin}}); res.StatusCode != http.StatusForbidden {
		t.Fatalf("sign in without the login token: %d", res.StatusCode)
	}
	if res := s.signIn("ork_"+strings.Repeat("x", 43), "/"); res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), "/login?error=1") {
		t.Fatalf("a bad key: %d %s", res.StatusCode, res.Header.Get("Location"))
	}
	for _, next := range []string{"//evil.example/", "/\\evil.example", "https://evil.example/", "/%2F%2Fevil.example"} {
		if got := s.signIn(s.admin, next).Header.Get("Location"); got != "/" {
			t.Errorf("next %q sent the browser to %q", next, got)
		}
	}
	if got := s.signIn(s.admin, "/jobs/team/nightly?x=1").Header.Get("Location"); got != "/jobs/team/nightly?x=1" {
		t.Errorf("a local next became %q", got)
	}
	res := s.signIn(s.admin, "/\t/evil.example")
	c := cookie(res, "orrery_session")
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/" || c == nil {
		t.Fatalf("sign in: %d %q %v", res.StatusCode, res.Header.Get("Location"), res.Cookies())
	}
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Secure || c.Path != "/" || strings.Contains(c.Value, s.admin) {
		t.Errorf("session cookie: %+v", c)
	}
	res, page := s.do(http.MethodGet, "/jobs", nil)
	m := csrfRE.FindStringSubmatch(page)
	if res.StatusCode != http.StatusOK || m == nil || !strings.Contains(page, `data-job="team/nightly"`) {
		t.Fatalf("jobs page: %d\n%s", res.StatusCode, page)
	}
	csrf := m[1]
	paused := func() bool {
		j, err := s.jobs.Get(context.Background(), job.Anonymous, job.Ref{Namespace: "team", Name: "nightly"})
		if err != nil {
			t.Fatal(err)
		}
		return j.Status == job.StatusPaused
	}
	for _, form := range []url.Values{{}, {"csrf": {"wrong"}}} {
		if res, _ := s.do(http.MethodPost, "/jobs/team/nightly/pause", form); res.StatusCode != http.StatusForbidden || paused() {
			t.Fatalf("pause with csrf %q: %d, paused %t", form.Get("csrf"), res.StatusCode, paused())
		}
	}
	// A post the browser marks as from another site or origin is refused,
	// token or not.
	for h, v := range map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:1"} {
		req, _ := http.NewRequest(http.MethodPost, s.url+"/jobs/team/nightly/pause", strings.NewReader(url.Values{"csrf": {csrf}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set(h, v)
		res, err := s.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusForbidden || paused() {
			t.Fatalf("pause with %s: %s: %d", h, v, res.StatusCode)
		}
	}
	res, _ = s.do(http.MethodPost, "/jobs/team/nightly/pause", url.Values{"csrf": {csrf}, "back": {"https://evil.example/"}})
	if res.StatusCode != http.StatusSeeOther || !paused() || res.Header.Get("Location") != "/" || cookie(res, "orrery_flash") == nil {
		t.Fatalf("pause with the token: %d %s, paused %t", res.StatusCode, res.Header.Get("Location"), paused())
	}
	// The message shows once, from the cookie; one in the address does not.
	res, page = s.do(http.MethodGet, "/?flash=Sign+in+at+evil.example", nil)
	if !strings.Contains(page, "Paused team/nightly.") || strings.Contains(page, "evil.example") || res.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("after the pause: %s\n%s", res.Header.Get("Cache-Control"), page)
	}
	if _, page = s.do(http.MethodGet, "/", nil); strings.Contains(page, "Paused team/nightly.") {
		t.Error("the flash message showed twice")
	}
	// What a viewer types in a filter is quoted in the copy-as-CLI line.
	if _, page = s.do(http.MethodGet, "/jobs?ns="+url.QueryEscape("ops $(id)"), nil); !strings.Contains(page, `data-copy="orrery jobs list -n &#39;ops $(id)&#39;"`) {
		t.Errorf("copy as CLI is not quoted:\n%s", page)
	}
	for _, bad := range []string{"/jobs/ops/%00", "/jobs?q=%C3%28", "/jobs?ns=a%09b", "/?namespace=a%09b"} {
		if res, _ := s.do(http.MethodGet, bad, nil); res.StatusCode != http.StatusBadRequest {
			t.Errorf("GET %s: %d, want 400", bad, res.StatusCode)
		}
	}
	if res, _ := s.do(http.MethodGet, "/static/", nil); res.StatusCode != http.StatusNotFound {
		t.Errorf("/static/ lists its files: %d", res.StatusCode)
	}
	if res, _ := s.do(http.MethodPost, "/logout", url.Values{"csrf": {"wrong"}}); res.StatusCode != http.StatusForbidden {
		t.Fatalf("sign out without the token: %d", res.StatusCode)
	}
	if res, _ := s.do(http.MethodPost, "/logout", url.Values{"csrf": {csrf}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign out: %d", res.StatusCode)
	}
	// The old cookie no longer works, even sent again by hand.
	req, _ := http.NewRequest(http.MethodGet, s.url+"/", nil)
	req.AddCookie(c)
	if res, err := (&http.Client{CheckRedirect: s.client.CheckRedirect}).Do(req); err != nil || res.StatusCode != http.StatusSeeOther {
		t.Fatalf("the signed-out session: %v %v", res, err)
	}
	// Revoking the key ends its sessions.
	s.signIn(s.admin, "/")
	if res, _ := s.do(http.MethodGet, "/", nil); res.StatusCode != http.StatusOK {
		t.Fatalf("signed in again: %d", res.StatusCode)
	}
	if err := s.acc.Revoke(context.Background(), access.Principal{Tenant: job.DefaultTenant, Name: "test", Role: access.Admin}, s.key.Prefix); err != nil {
		t.Fatal(err)
	}
	if res, _ := s.do(http.MethodGet, "/", nil); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("after the key's revocation: %d", res.StatusCode)
	}
}

// Behind TLS (SecureCookies), the session cookie is Secure.
func TestSecureCookies(t *testing.T) {
	t.Parallel()
	s := newSite(t, true)
	if c := cookie(s.signIn(s.admin, "/"), "orrery_session"); c == nil || !c.Secure {
		t.Fatalf("session cookie: %+v", c)
	}
}

// One principal holds at most 8 live run pages (event streams) at once on
// a server; the 9th is 429, and a closed one frees its place.
func TestLiveStreamsPerPrincipalAreCapped(t *testing.T) {
	t.Parallel()
	s := newSite(t, false)
	r, err := s.runs.Trigger(context.Background(), job.Anonymous, job.Ref{Namespace: "team", Name: "nightly"}, "", false)
	if err != nil {
		t.Fatal(err)
	}
	s.signIn(s.admin, "/")
	open := func() (*http.Response, context.CancelFunc) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/runs/"+r.ID.String()+"/events", nil)
		res, err := s.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return res, cancel
	}
	var cancels []context.CancelFunc
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	for i := range 8 {
		res, cancel := open()
		cancels = append(cancels, cancel)
		if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("stream %d: %d %s", i+1, res.StatusCode, res.Header.Get("Content-Type"))
		}
	}
	res, cancel := open()
	cancel()
	if res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("stream 9: %d, want 429", res.StatusCode)
	}
	cancels[0]()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		res, cancel := open()
		cancels = append(cancels, cancel)
		if res.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a closed stream did not free its place: %d", res.StatusCode)
		}
	}
}

// The sign-in form is throttled as the API is: past FailuresPerSource bad
// keys from one address, a sign-in is refused (429, Retry-After) before
// its key is looked up.
func TestSignInIsThrottled(t *testing.T) {
	t.Parallel()
	s := newSite(t, false)
	for i := range access.FailuresPerSource {
		if res := s.signIn(fmt.Sprintf("ork_%043d", i), "/"); res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), "/login?error=1") {
			t.Fatalf("bad sign-in %d: %d %s", i, res.StatusCode, res.Header.Get("Location"))
		}
	}
	_, page := s.do(http.MethodGet, "/login", nil)
	m := tokenRE.FindStringSubmatch(page)
	res, body := s.do(http.MethodPost, "/login", url.Values{"token": {m[1]}, "key": {s.admin}, "next": {"/"}})
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" || !strings.Contains(body, "Too many failed sign-ins from your address") {
		t.Fatalf("a sign-in past the allowance: %d %v\n%s", res.StatusCode, res.Header, body)
	}
}

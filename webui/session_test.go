package webui_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/orrery-dev/orrery/api"
	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/dag/schedule"
	"github.com/orrery-dev/orrery/engine/access"
	"github.com/orrery-dev/orrery/engine/dispatch"
	"github.com/orrery-dev/orrery/engine/job"
	"github.com/orrery-dev/orrery/engine/pgtest"
	"github.com/orrery-dev/orrery/engine/run"
	"github.com/orrery-dev/orrery/webui"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type site struct {
	t      *testing.T
	url    string
	client *http.Client
	acc    *access.Service
	jobs   *job.Service
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
		Spec: dag.JobSpec{Schedule: schedule.Spec{Cron: "@daily"}, Run: &dag.Executor{Handler: "h"}}}, ""); err != nil {
		t.Fatal(err)
	}
	apiHandler := api.NewHandler(api.Services{Jobs: jobs, Runs: run.NewService(pool, jobs, d), State: pool, Auth: api.KeyAuth{Access: acc}}, nil)
	ui, err := webui.New(webui.Config{API: apiHandler, Access: acc, SecureCookies: secure})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(webui.Mount(apiHandler, ui))
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &site{t: t, url: srv.URL, client: client, acc: acc, jobs: jobs, admin: secret, key: key}
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
	res := s.signIn(s.admin, "//evil.example/")
	c := cookie(res, "orrery_session")
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/" || c == nil {
		t.Fatalf("sign in: %d %s %v", res.StatusCode, res.Header.Get("Location"), res.Cookies())
	}
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Secure || c.Path != "/" || strings.Contains(c.Value, s.admin) {
		t.Errorf("session cookie: %+v", c)
	}
	res, page := s.do(http.MethodGet, "/", nil)
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
	if res, _ := s.do(http.MethodPost, "/jobs/team/nightly/pause", url.Values{"csrf": {csrf}, "back": {"https://evil.example/"}}); res.StatusCode != http.StatusSeeOther ||
		!paused() || !strings.HasPrefix(res.Header.Get("Location"), "/?flash=") {
		t.Fatalf("pause with the token: %d %s, paused %t", res.StatusCode, res.Header.Get("Location"), paused())
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

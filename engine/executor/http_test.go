package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/orrery-dev/orrery/dag"
)

// recorded is what a test server saw of one request.
type recorded struct {
	method string
	path   string
	header http.Header
	body   []byte
}

// newServer starts a server that records each request on the returned
// channel and answers with the given status and body.
func newServer(t *testing.T, status int, body string) (*httptest.Server, <-chan recorded) {
	t.Helper()
	reqs := make(chan recorded, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		reqs <- recorded{method: r.Method, path: r.URL.Path, header: r.Header.Clone(), body: b}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv, reqs
}

// newBlockingServer starts a server whose handler never answers until the
// client goes away (or the test ends). Each request that reaches the
// handler is signalled on the returned channel.
func newBlockingServer(t *testing.T) (*httptest.Server, <-chan struct{}) {
	t.Helper()
	release := make(chan struct{})
	arrived := make(chan struct{}, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs before srv.Close
	return srv, arrived
}

func httpCall(url, method string, headers map[string]string) Call {
	return testCall(dag.Executor{HTTP: &dag.HTTPExecutor{URL: url, Method: method, Headers: headers}})
}

func TestHTTPStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status int
		want   Result // without Error and Output
	}{
		{200, Result{OK: true}},
		{201, Result{OK: true}},
		{202, Result{OK: true}},
		{204, Result{OK: true}},
		{299, Result{OK: true}},
		{500, Result{ExitReason: ReasonHTTP5xx, FailureClass: ClassSystem, Retryable: true}},
		{502, Result{ExitReason: ReasonHTTP5xx, FailureClass: ClassSystem, Retryable: true}},
		{503, Result{ExitReason: ReasonHTTP5xx, FailureClass: ClassSystem, Retryable: true}},
		{504, Result{ExitReason: ReasonHTTP5xx, FailureClass: ClassSystem, Retryable: true}},
		{599, Result{ExitReason: ReasonHTTP5xx, FailureClass: ClassSystem, Retryable: true}},
		{408, Result{ExitReason: ReasonHTTP4xx, FailureClass: ClassSystem, Retryable: true}},
		{429, Result{ExitReason: ReasonHTTP4xx, FailureClass: ClassSystem, Retryable: true}},
		{400, Result{ExitReason: ReasonHTTP4xx, FailureClass: ClassUser}},
		{401, Result{ExitReason: ReasonHTTP4xx, FailureClass: ClassUser}},
		{403, Result{ExitReason: ReasonHTTP4xx, FailureClass: ClassUser}},
		{404, Result{ExitReason: ReasonHTTP4xx, FailureClass: ClassUser}},
		{409, Result{ExitReason: ReasonHTTP4xx, FailureClass: ClassUser}},
		{410, Result{ExitReason: ReasonHTTP4xx, FailureClass: ClassUser}},
		{422, Result{ExitReason: ReasonHTTP4xx, FailureClass: ClassUser}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			t.Parallel()
			body := fmt.Sprintf("answer %d", tt.status)
			if tt.status == http.StatusNoContent {
				body = "" // a 204 has no body
			}
			srv, reqs := newServer(t, tt.status, body)
			url := srv.URL + "/hook"
			for _, r := range []struct {
				name string
				run  func(context.Context, Call) Result
			}{
				{"HTTPRunner", (&HTTPRunner{Client: srv.Client()}).Run},
				{"Runner", (&Runner{HTTP: &HTTPRunner{Client: srv.Client()}}).Run},
			} {
				got := r.run(context.Background(), httpCall(url, "POST", nil))
				<-reqs
				if got.Output != body {
					t.Errorf("%s: Output = %q, want the response body %q", r.name, got.Output, body)
				}
				switch wantErr := fmt.Sprintf("POST %s: %d", url, tt.status); {
				case tt.want.OK && got.Error != "":
					t.Errorf("%s: Error = %q, want none", r.name, got.Error)
				case !tt.want.OK && http.StatusText(tt.status) != "" && got.Error != wantErr+" "+http.StatusText(tt.status):
					t.Errorf("%s: Error = %q, want %q", r.name, got.Error, wantErr+" "+http.StatusText(tt.status))
				case !tt.want.OK && !strings.HasPrefix(got.Error, wantErr):
					t.Errorf("%s: Error = %q, want it to start with %q", r.name, got.Error, wantErr)
				}
				got.Error, got.Output = "", ""
				if got != tt.want {
					t.Errorf("%s: Run() = %+v\nwant    %+v", r.name, got, tt.want)
				}
			}
		})
	}
}

func TestHTTPRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		method      string
		payload     string
		wantPayload string // "" means the field is absent
	}{
		{name: "POST with a payload", method: "POST", payload: `{"table":"orders","limit":10}`, wantPayload: `{"table":"orders","limit":10}`},
		{name: "POST without a payload", method: "POST"},
		{name: "PUT with a payload", method: "PUT", payload: `[1,2,3]`, wantPayload: `[1,2,3]`},
		{name: "GET still carries the body", method: "GET", payload: `"x"`, wantPayload: `"x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, reqs := newServer(t, 200, "ok")
			c := httpCall(srv.URL+"/hooks/load", tt.method, map[string]string{
				"X-Custom": "plain-value",
				// The runner's own headers win over a step's.
				"Idempotency-Key": "spoofed",
				"Content-Type":    "text/plain",
			})
			if tt.payload != "" {
				c.Payload = json.RawMessage(tt.payload)
			}
			res := (&HTTPRunner{Client: srv.Client()}).Run(context.Background(), c)
			if !res.OK {
				t.Fatalf("Run() = %+v, want OK", res)
			}
			req := <-reqs
			if req.method != tt.method || req.path != "/hooks/load" {
				t.Errorf("request = %s %s, want %s /hooks/load", req.method, req.path, tt.method)
			}
			for k, want := range map[string]string{
				"Idempotency-Key":        "11111111-2222-3333-4444-555555555555/extract/3",
				"Content-Type":           "application/json",
				"User-Agent":             "orrery",
				"X-Orrery-Attempt":       "3",
				"X-Orrery-Fencing-Token": "42",
				"X-Custom":               "plain-value",
			} {
				if got := req.header.Values(k); len(got) != 1 || got[0] != want {
					t.Errorf("header %s = %q, want [%q]", k, got, want)
				}
			}

			var fields map[string]json.RawMessage
			if err := json.Unmarshal(req.body, &fields); err != nil {
				t.Fatalf("body %s is not a JSON object: %v", req.body, err)
			}
			want := map[string]string{
				"run_id":        `"11111111-2222-3333-4444-555555555555"`,
				"task_id":       `"66666666-7777-8888-9999-aaaaaaaaaaaa"`,
				"tenant":        `"acme"`,
				"job":           `"nightly-load"`,
				"namespace":     `"etl"`,
				"step":          `"extract"`,
				"attempt":       `3`,
				"fencing_token": `42`,
				"scheduled_for": `"` + scheduledForUTC + `"`,
				"trigger":       `"schedule"`,
			}
			if tt.wantPayload != "" {
				want["payload"] = tt.wantPayload
			}
			for k, v := range want {
				if got, ok := fields[k]; !ok || string(got) != v {
					t.Errorf("body field %s = %s (present %v), want %s", k, got, ok, v)
				}
			}
			for k := range fields {
				if _, ok := want[k]; !ok {
					t.Errorf("body has unexpected field %s = %s", k, fields[k])
				}
			}
		})
	}
}

// No t.Parallel: t.Setenv.
func TestHTTPSecretHeaders(t *testing.T) {
	t.Setenv("ORRERY_TEST_HTTP_TOKEN", "Bearer tok-123")
	dir := t.TempDir()
	keyFile := dir + "/api-key"
	if err := os.WriteFile(keyFile, []byte("key-456\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, reqs := newServer(t, 200, "")
	secrets := &SecretPolicy{Env: map[string][]string{"acme/etl": {"ORRERY_TEST_HTTP_TOKEN"}}, Dirs: map[string][]string{"acme/etl": {dir}}}
	res := (&HTTPRunner{Client: srv.Client(), Secrets: secrets}).Run(context.Background(), httpCall(srv.URL, "POST", map[string]string{
		"Authorization": "secret://env/ORRERY_TEST_HTTP_TOKEN",
		"X-Api-Key":     "secret://file" + keyFile,
		"X-Plain":       "secret-looking-but-not-a-reference",
	}))
	if !res.OK {
		t.Fatalf("Run() = %+v, want OK", res)
	}
	req := <-reqs
	for k, want := range map[string]string{
		"Authorization": "Bearer tok-123",
		"X-Api-Key":     "key-456",
		"X-Plain":       "secret-looking-but-not-a-reference",
	} {
		if got := req.header.Get(k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
}

func TestHTTPMissingSecret(t *testing.T) {
	t.Parallel()
	srv, reqs := newServer(t, 200, "")
	dir := t.TempDir()
	missing := dir + "/missing"
	// The folder is allowed, the file is missing: retried.
	secrets := &SecretPolicy{Dirs: map[string][]string{"acme/*": {dir}}}
	res := (&Runner{HTTP: &HTTPRunner{Client: srv.Client(), Secrets: secrets}}).Run(context.Background(), httpCall(srv.URL, "POST", map[string]string{
		"Authorization": "secret://file" + missing,
	}))
	if res.OK || res.ExitReason != ReasonError || res.FailureClass != ClassSystem || !res.Retryable {
		t.Errorf("Run() = %+v, want a retryable system error", res)
	}
	if !strings.Contains(res.Error, "secret://file"+missing) {
		t.Errorf("Error = %q, want it to name the reference", res.Error)
	}
	select {
	case r := <-reqs:
		t.Errorf("a request was sent despite the unresolved secret: %+v", r)
	default:
	}
}

func TestHTTPTimeout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		run  func(srv *httptest.Server, arrived <-chan struct{}) Result
		want Result // without Error
	}{
		{
			name: "step timeout through Runner",
			run: func(srv *httptest.Server, _ <-chan struct{}) Result {
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				defer cancel()
				return (&Runner{HTTP: &HTTPRunner{Client: srv.Client()}}).Run(ctx, httpCall(srv.URL, "POST", nil))
			},
			want: Result{ExitReason: ReasonTimeout, FailureClass: ClassUser, Retryable: true},
		},
		{
			name: "step timeout through HTTPRunner",
			run: func(srv *httptest.Server, _ <-chan struct{}) Result {
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				defer cancel()
				return (&HTTPRunner{Client: srv.Client()}).Run(ctx, httpCall(srv.URL, "POST", nil))
			},
			want: Result{ExitReason: ReasonTimeout, FailureClass: ClassSystem, Retryable: true},
		},
		{
			name: "client timeout",
			run: func(srv *httptest.Server, _ <-chan struct{}) Result {
				client := srv.Client()
				client.Timeout = 100 * time.Millisecond
				return (&HTTPRunner{Client: client}).Run(context.Background(), httpCall(srv.URL, "POST", nil))
			},
			want: Result{ExitReason: ReasonTimeout, FailureClass: ClassSystem, Retryable: true},
		},
		{
			name: "worker cancellation through Runner",
			run: func(srv *httptest.Server, arrived <-chan struct{}) Result {
				ctx, cancel := context.WithCancel(context.Background())
				go func() {
					// Cancel once the server holds the request.
					<-arrived
					cancel()
				}()
				defer cancel()
				return (&Runner{HTTP: &HTTPRunner{Client: srv.Client()}}).Run(ctx, httpCall(srv.URL, "POST", nil))
			},
			want: Result{ExitReason: ReasonCancelled, FailureClass: ClassSystem, Retryable: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, arrived := newBlockingServer(t)
			got := tt.run(srv, arrived)
			if got.Error == "" {
				t.Error("Error is empty")
			}
			got.Error = ""
			if got != tt.want {
				t.Errorf("Run() = %+v\nwant    %+v", got, tt.want)
			}
		})
	}
}

func TestHTTPTransportErrors(t *testing.T) {
	t.Parallel()
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()

	tests := []struct {
		name string
		url  string
		meth string
		want Result // without Error
	}{
		{
			name: "connection refused is retryable",
			url:  closedURL, meth: "POST",
			want: Result{ExitReason: ReasonError, FailureClass: ClassSystem, Retryable: true},
		},
		{
			name: "malformed URL is the user's",
			url:  "http://[::1", meth: "POST",
			want: Result{ExitReason: ReasonError, FailureClass: ClassUser},
		},
		{
			name: "malformed method is the user's",
			url:  "http://127.0.0.1:1/", meth: "BAD METHOD",
			want: Result{ExitReason: ReasonError, FailureClass: ClassUser},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The worker's own client, with loopback allowed.
			client := NewHTTPClient(&EgressPolicy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
			got := (&HTTPRunner{Client: client}).Run(context.Background(), httpCall(tt.url, tt.meth, nil))
			if got.Error == "" {
				t.Error("Error is empty")
			}
			got.Error = ""
			if got != tt.want {
				t.Errorf("Run() = %+v\nwant    %+v", got, tt.want)
			}
		})
	}
}

// The response body is kept as an excerpt of at most MaxOutput bytes: its
// first MaxOutput bytes (unlike commands, which keep the last ones).
func TestHTTPOutputExcerpt(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	for i := 0; b.Len() < 3*MaxOutput; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	body := b.String()
	for _, status := range []int{200, 500} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			t.Parallel()
			srv, reqs := newServer(t, status, body)
			got := (&Runner{HTTP: &HTTPRunner{Client: srv.Client()}}).Run(context.Background(), httpCall(srv.URL, "POST", nil))
			<-reqs
			if got.OK != (status == 200) {
				t.Errorf("OK = %v for status %d", got.OK, status)
			}
			if len(got.Output) != MaxOutput || got.Output != body[:MaxOutput] || !got.OutputTruncated {
				t.Errorf("Output has %d bytes (truncated %v), want the first %d bytes of the body, marked", len(got.Output), got.OutputTruncated, MaxOutput)
			}
		})
	}
}

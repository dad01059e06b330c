package executor

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

func prefixes(s ...string) []netip.Prefix {
	out, err := ParseEgress(s)
	if err != nil {
		panic(err)
	}
	return out
}

func TestEgressCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr  string
		allow []string
		kind  string // "" means allowed
	}{
		{addr: "93.184.215.14"},
		{addr: "8.8.8.8"},
		{addr: "172.32.0.1"}, // just past 172.16.0.0/12
		{addr: "2606:4700::1111"},
		{addr: "127.0.0.1", kind: "loopback"},
		{addr: "127.8.9.10", kind: "loopback"},
		{addr: "::1", kind: "loopback"},
		{addr: "::ffff:127.0.0.1", kind: "loopback"}, // IPv4-mapped
		{addr: "169.254.169.254", kind: "link-local"},
		{addr: "fe80::1", kind: "link-local"},
		{addr: "fe80::1%eth0", kind: "link-local"},
		{addr: "10.0.0.1", kind: "private"},
		{addr: "172.16.0.1", kind: "private"},
		{addr: "172.31.255.255", kind: "private"},
		{addr: "192.168.1.1", kind: "private"},
		{addr: "fd00::1", kind: "private"},
		{addr: "fc00::1", kind: "private"},
		{addr: "0.0.0.0", kind: "unspecified"},
		{addr: "::", kind: "unspecified"},
		{addr: "224.0.0.1", kind: "multicast"},
		{addr: "ff02::1", kind: "multicast"},
		{addr: "100.100.100.200", kind: "shared (carrier-grade NAT)"},
		{addr: "255.255.255.255", kind: "reserved"},
		{addr: "64:ff9b::a9fe:a9fe", kind: "NAT64 of a link-local"}, // 169.254.169.254 through NAT64
		{addr: "64:ff9b::808:808"},                                  // 8.8.8.8 through NAT64

		{addr: "127.0.0.1", allow: []string{"127.0.0.1/32"}},
		{addr: "::ffff:127.0.0.1", allow: []string{"127.0.0.1/32"}},
		{addr: "127.0.0.2", allow: []string{"127.0.0.1/32"}, kind: "loopback"},
		{addr: "::1", allow: []string{"127.0.0.1/32"}, kind: "loopback"},
		{addr: "10.1.2.3", allow: []string{"10.1.0.0/16"}},
		{addr: "10.2.0.1", allow: []string{"10.1.0.0/16"}, kind: "private"},
		{addr: "169.254.169.254", allow: []string{"169.254.169.254"}},
		{addr: "::1", allow: []string{"::1/128"}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s allow %v", tt.addr, tt.allow), func(t *testing.T) {
			t.Parallel()
			p := &EgressPolicy{Allow: prefixes(tt.allow...)}
			err := p.Check(netip.MustParseAddr(tt.addr))
			if tt.kind == "" {
				if err != nil {
					t.Fatalf("Check(%s) = %v, want allowed", tt.addr, err)
				}
				return
			}
			e, ok := err.(*EgressError)
			if !ok || e.Kind != tt.kind {
				t.Fatalf("Check(%s) = %v, want a refusal of a %s address", tt.addr, err, tt.kind)
			}
		})
	}
}

func TestParseEgress(t *testing.T) {
	t.Parallel()
	got, err := ParseEgress([]string{"127.0.0.1/32", "10.1.2.3/16, ::1", "169.254.169.254"})
	if err != nil {
		t.Fatal(err)
	}
	want := prefixes("127.0.0.1/32", "10.1.0.0/16", "::1/128", "169.254.169.254/32")
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ParseEgress() = %v, want %v", got, want)
	}
	for _, bad := range []string{"localhost", "10.0.0.0/33", "10.0.0"} {
		if _, err := ParseEgress([]string{bad}); err == nil {
			t.Errorf("ParseEgress(%q) = nil error", bad)
		}
	}
}

// dials records the addresses the egress policy let a client connect to:
// each is recorded just before connect(2), so an address missing from it
// was never connected to.
type dials struct {
	mu    sync.Mutex
	addrs []netip.AddrPort
}

func (d *dials) client(allow ...string) *http.Client {
	return NewHTTPClient(&EgressPolicy{Allow: prefixes(allow...), connecting: func(a netip.AddrPort) {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.addrs = append(d.addrs, a)
	}})
}

func (d *dials) list() []netip.AddrPort {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]netip.AddrPort(nil), d.addrs...)
}

// onlyTo fails unless every connection went to an address of srv.
func (d *dials) onlyTo(t *testing.T, srv *httptest.Server) {
	t.Helper()
	want := netip.MustParseAddrPort(srv.Listener.Addr().String())
	for _, a := range d.list() {
		if a != want {
			t.Errorf("a connection was made to %s", a)
		}
	}
}

// Loopback, link-local and private addresses are refused by default,
// before a connection is made, with an error naming the address and the
// flag that would allow it; for good (the step's URL is the problem).
func TestHTTPEgressRefusedByDefault(t *testing.T) {
	t.Parallel()
	srv, reqs := newServer(t, 200, "ok") // on 127.0.0.1
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	tests := []struct {
		url, addr, kind string
	}{
		{url: srv.URL + "/hook", addr: "127.0.0.1", kind: "loopback"},
		{url: fmt.Sprintf("http://localhost:%d/hook", port), addr: "127.0.0.1", kind: "loopback"}, // the resolved address counts
		{url: fmt.Sprintf("http://0.0.0.0:%d/hook", port), addr: "0.0.0.0", kind: "unspecified"},
		{url: "http://169.254.169.254/latest/meta-data/", addr: "169.254.169.254", kind: "link-local"},
		{url: "http://10.0.0.1:9/hook", addr: "10.0.0.1", kind: "private"},
		{url: "http://192.168.0.1/hook", addr: "192.168.0.1", kind: "private"},
		{url: "http://[fd00::1]:9/hook", addr: "fd00::1", kind: "private"},
		{url: "http://[::ffff:127.0.0.1]:9/hook", addr: "127.0.0.1", kind: "loopback"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			t.Parallel()
			var d dials
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			got := (&Runner{HTTP: &HTTPRunner{Client: d.client()}}).Run(ctx, httpCall(tt.url, "POST", nil))
			want := fmt.Sprintf("egress to %s refused: %s address (this worker's egress policy; allow it with --allow-egress %s/",
				tt.addr, tt.kind, tt.addr)
			if !strings.Contains(got.Error, want) {
				t.Errorf("Error = %q, want it to contain %q", got.Error, want)
			}
			if got.Error = ""; got != (Result{ExitReason: ReasonError, FailureClass: ClassUser}) {
				t.Errorf("Run() = %+v, want a failure for good", got)
			}
			if a := d.list(); len(a) != 0 {
				t.Errorf("connections were made to %v", a)
			}
		})
	}
	select {
	case r := <-reqs:
		t.Errorf("the loopback server got a request: %+v", r)
	default:
	}
}

// HTTPRunner with no client of its own has the default policy.
func TestHTTPRunnerDefaultClientRefusesLoopback(t *testing.T) {
	t.Parallel()
	srv, reqs := newServer(t, 200, "ok")
	got := (&HTTPRunner{}).Run(context.Background(), httpCall(srv.URL, "POST", nil))
	if !strings.Contains(got.Error, "egress to 127.0.0.1 refused: loopback address") || got.Retryable {
		t.Errorf("Run() = %+v, want the loopback call refused for good", got)
	}
	select {
	case r := <-reqs:
		t.Errorf("the server got a request: %+v", r)
	default:
	}
}

// An allowed range lets the call through, to that range only.
func TestHTTPEgressAllowed(t *testing.T) {
	t.Parallel()
	srv, reqs := newServer(t, 200, "ok")
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	for _, url := range []string{srv.URL + "/hook", fmt.Sprintf("http://localhost:%d/hook", port)} {
		var d dials
		got := (&HTTPRunner{Client: d.client("127.0.0.1/32")}).Run(context.Background(), httpCall(url, "POST", nil))
		if !got.OK {
			t.Fatalf("%s: Run() = %+v, want OK", url, got)
		}
		if r := <-reqs; r.path != "/hook" {
			t.Errorf("%s: the server got %s", url, r.path)
		}
		d.onlyTo(t, srv)
		if len(d.list()) == 0 {
			t.Errorf("%s: no connection recorded", url)
		}
	}
}

// redirector answers every request under /to/ with a redirect to the URL
// after it (status 307), and records the paths and headers it saw.
type redirector struct {
	*httptest.Server
	mu   sync.Mutex
	seen []recorded
}

func newRedirector(t *testing.T, tls bool) *redirector {
	t.Helper()
	r := &redirector{}
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.seen = append(r.seen, recorded{method: req.Method, path: req.URL.Path, header: req.Header.Clone(), body: b})
		r.mu.Unlock()
		if to, ok := strings.CutPrefix(req.URL.RequestURI(), "/to/"); ok {
			http.Redirect(w, req, to, http.StatusTemporaryRedirect)
			return
		}
		if req.URL.Path == "/loop" {
			http.Redirect(w, req, "/loop", http.StatusFound)
			return
		}
		io.WriteString(w, "landed")
	})
	if tls {
		r.Server = httptest.NewTLSServer(h)
	} else {
		r.Server = httptest.NewServer(h)
	}
	t.Cleanup(r.Close)
	return r
}

func (r *redirector) requests() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.seen...)
}

// A redirect from an allowed server to a denied address is refused by
// the same check, before any connection to it.
func TestHTTPRedirectToDeniedAddress(t *testing.T) {
	t.Parallel()
	srv := newRedirector(t, false)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	for _, tt := range []struct{ target, addr string }{
		{target: "http://10.0.0.1:9/x", addr: "10.0.0.1"},
		{target: "http://169.254.169.254/latest/meta-data/", addr: "169.254.169.254"},
		{target: fmt.Sprintf("http://127.0.0.2:%d/x", port), addr: "127.0.0.2"}, // loopback, outside the allowed /32
		{target: "http://[::1]:9/x", addr: "::1"},
	} {
		var d dials
		got := (&Runner{HTTP: &HTTPRunner{Client: d.client("127.0.0.1/32")}}).Run(context.Background(),
			httpCall(srv.URL+"/to/"+tt.target, "POST", nil))
		if !strings.Contains(got.Error, "egress to "+tt.addr+" refused") || !strings.Contains(got.Error, "--allow-egress") {
			t.Errorf("%s: Error = %q, want the redirect's address refused", tt.target, got.Error)
		}
		if got.Error = ""; got != (Result{ExitReason: ReasonError, FailureClass: ClassUser}) {
			t.Errorf("%s: Run() = %+v, want a failure for good", tt.target, got)
		}
		d.onlyTo(t, srv.Server)
	}
}

// A step's headers (secrets, perhaps) go to the host it named only; the
// runner's own headers follow a redirect anywhere.
func TestHTTPRedirectToAnotherHostDropsStepHeaders(t *testing.T) {
	t.Parallel()
	srv := newRedirector(t, false)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	var d dials
	client := d.client("127.0.0.1/32")
	headers := map[string]string{"X-Api-Key": "key-456", "Authorization": "Bearer tok"}
	same := srv.URL + "/landing"
	other := fmt.Sprintf("http://localhost:%d/landing", port) // same server, another host name
	for _, tt := range []struct {
		target   string
		wantStep bool
	}{{same, true}, {other, false}} {
		before := len(srv.requests())
		got := (&HTTPRunner{Client: client}).Run(context.Background(), httpCall(srv.URL+"/to/"+tt.target, "POST", headers))
		if !got.OK || got.Output != "landed" {
			t.Fatalf("%s: Run() = %+v, want the redirect followed", tt.target, got)
		}
		reqs := srv.requests()[before:]
		if len(reqs) != 2 {
			t.Fatalf("%s: %d requests, want 2", tt.target, len(reqs))
		}
		first, landed := reqs[0], reqs[1]
		if first.header.Get("X-Api-Key") != "key-456" {
			t.Errorf("the first request lacks the step's header")
		}
		if has := landed.header.Get("X-Api-Key") != ""; has != tt.wantStep {
			t.Errorf("%s: redirected request has the step's X-Api-Key: %v, want %v", tt.target, has, tt.wantStep)
		}
		if !tt.wantStep && landed.header.Get("Authorization") != "" {
			t.Errorf("%s: redirected request has the step's Authorization", tt.target)
		}
		if landed.header.Get("Idempotency-Key") != "11111111-2222-3333-4444-555555555555/extract/3" || landed.header.Get("X-Orrery-Attempt") != "3" {
			t.Errorf("%s: redirected request lacks the runner's headers: %v", tt.target, landed.header)
		}
		if string(landed.body) != string(first.body) || landed.method != "POST" {
			t.Errorf("%s: a 307 must resend the same POST", tt.target)
		}
	}
	d.onlyTo(t, srv.Server)
}

// At most MaxRedirects redirects are followed, with the worker's client
// or one of the worker binary's own.
func TestHTTPRedirectLimit(t *testing.T) {
	t.Parallel()
	srv := newRedirector(t, false)
	var d dials
	for name, client := range map[string]*http.Client{"worker client": d.client("127.0.0.1/32"), "own client": srv.Client()} {
		before := len(srv.requests())
		got := (&HTTPRunner{Client: client}).Run(context.Background(), httpCall(srv.URL+"/loop", "POST", nil))
		if !strings.Contains(got.Error, "redirect refused: stopped after 5 redirects") || got.Retryable || got.FailureClass != ClassUser {
			t.Errorf("%s: Run() = %+v, want the redirect loop refused for good", name, got)
		}
		if n := len(srv.requests()) - before; n != MaxRedirects+1 {
			t.Errorf("%s: %d requests, want %d", name, n, MaxRedirects+1)
		}
	}
}

// A redirect from https to http is refused: it would send the payload in
// the clear.
func TestHTTPRedirectDowngradeRefused(t *testing.T) {
	t.Parallel()
	tlsSrv := newRedirector(t, true)
	plain, reqs := newServer(t, 200, "ok")
	var d dials
	client := d.client("127.0.0.1/32")
	client.Transport.(*http.Transport).TLSClientConfig = tlsSrv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	got := (&HTTPRunner{Client: client}).Run(context.Background(), httpCall(tlsSrv.URL+"/to/"+plain.URL+"/x", "POST", nil))
	if !strings.Contains(got.Error, "redirect refused: from https to http") || got.Retryable {
		t.Errorf("Run() = %+v, want the downgrade refused for good", got)
	}
	select {
	case r := <-reqs:
		t.Errorf("the plain server got %+v", r)
	default:
	}
}

// A step's headers follow a redirect only to the same scheme, host and
// port: another port of the host is another service.
func TestSameOrigin(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"http://h:9002/a", "http://h:9002/b", true},
		{"http://H/a", "http://h:80/b", true},
		{"https://h/a", "https://h:443/b", true},
		{"http://h:9002/a", "http://h:9003/a", false},
		{"https://h/a", "http://h/a", true},       // http:80 upgraded to https:443
		{"http://h/a", "https://h/a", false},      // never downgraded (refused anyway)
		{"https://h:8443/a", "http://h/a", false}, // another port
		{"http://h/a", "http://g/a", false},
	} {
		a, _ := url.Parse(tc.a)
		b, _ := url.Parse(tc.b)
		if got := sameOrigin(a, b); got != tc.want {
			t.Errorf("sameOrigin(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

package api

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestHostPolicy(t *testing.T) {
	t.Parallel()
	p, err := NewHostPolicy("orrery.internal:8080", []string{"Orrery.Example.com", ".corp.example"})
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]bool{
		"127.0.0.1:8080":            true,
		"10.1.2.3":                  true,
		"[::1]:8080":                true,
		"localhost:8080":            true,
		"LOCALHOST.":                true,
		"app.localhost:8080":        true,
		"orrery.internal:8080":      true, // the listen address's name
		"orrery.example.com":        true,
		"orrery.example.com.:8080":  true,
		"api.corp.example":          true,
		"a.b.corp.example:443":      true,
		"corp.example":              false, // .corp.example is the names under it
		"evil.example:8080":         false,
		"example.com":               false,
		"orrery.example.com.evil.a": false,
		"localhost.evil.example":    false,
		"":                          false,
		"notcorp.example":           false,
	} {
		if got := p.Allows(host); got != want {
			t.Errorf("Allows(%q) = %v, want %v", host, got, want)
		}
	}
	for origin, want := range map[string]bool{
		"":                           true, // not a browser page
		"http://127.0.0.1:8080":      true,
		"https://orrery.example.com": true,
		"http://evil.example:8080":   false,
		"null":                       false,
		"file://":                    false,
		"javascript:alert(1)":        false,
	} {
		if got := p.allowsOrigin(origin); got != want {
			t.Errorf("allowsOrigin(%q) = %v, want %v", origin, got, want)
		}
	}
	for _, bad := range []string{"", "evil example", "a..b", "-a.example", "http://x", "x:80", "*.example.com"} {
		if _, err := NewHostPolicy("127.0.0.1:0", []string{bad}); err == nil {
			t.Errorf("NewHostPolicy(%q) = nil error, want one", bad)
		}
	}
	any, _ := NewHostPolicy("127.0.0.1:0", []string{"*"})
	if !any.Allows("evil.example") {
		t.Error("* allows every host")
	}
	wildcard, _ := NewHostPolicy("0.0.0.0:8080", nil)
	if wildcard.Allows("evil.example") || !wildcard.Allows("192.0.2.7:8080") {
		t.Error("a wildcard listen address allows addresses and no name")
	}
}

func TestHostPolicyGuard(t *testing.T) {
	t.Parallel()
	p, _ := NewHostPolicy("127.0.0.1:8080", nil)
	h := p.Guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	for _, tt := range []struct {
		host, origin string
		want         int
	}{
		{"127.0.0.1:8080", "", http.StatusTeapot},
		{"localhost:8080", "http://localhost:8080", http.StatusTeapot},
		{"evil.example:8080", "", http.StatusForbidden},
		{"evil.example:8080", "http://evil.example:8080", http.StatusForbidden},
		{"127.0.0.1:8080", "http://evil.example:8080", http.StatusForbidden},
		{"127.0.0.1:8080", "null", http.StatusForbidden},
	} {
		r := httptest.NewRequest(http.MethodPost, "/orrery.v1.JobService/ListJobs", nil)
		r.Host = tt.host
		if tt.origin != "" {
			r.Header.Set("Origin", tt.origin)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tt.want {
			t.Errorf("Host %q Origin %q: %d, want %d", tt.host, tt.origin, w.Code, tt.want)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.9.9.9:1": true, "[::1]:8080": true, "localhost:8080": true,
		"0.0.0.0:8080": false, ":8080": false, "[::]:8080": false, "192.0.2.1:8080": false, "orrery.internal:8080": false, "garbage": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

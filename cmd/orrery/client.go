package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
)

func (g *globals) baseURL() string {
	server := g.server
	if !strings.Contains(server, "://") {
		server = "http://" + server
	}
	return strings.TrimRight(server, "/")
}

func (g *globals) httpClient() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: bearer{key: g.key(), next: http.DefaultTransport}}
}

// key is the API key client commands send: --api-key (ORRERY_API_KEY), or
// the one `orrery dev` wrote in its data dir (readDevFile).
func (g *globals) key() string {
	if g.apiKey != "" {
		return g.apiKey
	}
	return readDevFile(devKeyFile)
}

// readDevFile reads what `orrery dev` recorded in its data dir
// (ORRERY_DATA_DIR, default .orrery in the current folder) under name: ""
// when there is none.
func readDevFile(name string) string {
	dir := os.Getenv("ORRERY_DATA_DIR")
	if dir == "" {
		dir = ".orrery"
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil || len(b) > 4096 {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// bearer adds `Authorization: Bearer <key>` to every request.
type bearer struct {
	key  string
	next http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.key == "" {
		return b.next.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.next.RoundTrip(r)
}

func (g *globals) jobClient() orreryv1connect.JobServiceClient {
	return orreryv1connect.NewJobServiceClient(g.httpClient(), g.baseURL())
}

func (g *globals) accessClient() orreryv1connect.AccessServiceClient {
	return orreryv1connect.NewAccessServiceClient(g.httpClient(), g.baseURL())
}

func (g *globals) profileClient() orreryv1connect.ProfileServiceClient {
	return orreryv1connect.NewProfileServiceClient(g.httpClient(), g.baseURL())
}

func (g *globals) eventClient() orreryv1connect.EventServiceClient {
	return orreryv1connect.NewEventServiceClient(g.httpClient(), g.baseURL())
}

func (g *globals) sourceClient() orreryv1connect.SourceServiceClient {
	return orreryv1connect.NewSourceServiceClient(g.httpClient(), g.baseURL())
}

package main

import (
	"net/http"
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

func (g *globals) httpClient() *http.Client { return &http.Client{Timeout: 30 * time.Second} }

func (g *globals) jobClient() orreryv1connect.JobServiceClient {
	return orreryv1connect.NewJobServiceClient(g.httpClient(), g.baseURL())
}

package main

import (
	"net/http"
	"strings"
	"time"

	"github.com/orrery-dev/orrery/api/gen/orrery/v1/orreryv1connect"
)

func (g *globals) jobClient() orreryv1connect.JobServiceClient {
	server := g.server
	if !strings.Contains(server, "://") {
		server = "http://" + server
	}
	return orreryv1connect.NewJobServiceClient(&http.Client{Timeout: 30 * time.Second}, strings.TrimRight(server, "/"))
}

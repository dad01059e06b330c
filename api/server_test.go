package api_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/orrery-dev/orrery/api"
)

// Shutting down ends a call that would last as long as its client wants
// (a web page's event stream): it watches api.Draining, so Serve returns
// when the calls that end by themselves have, not at its deadline with
// an error (which made `orrery dev` exit 1 after Ctrl-C while a browser
// watched a running run).
func TestShutdownEndsStreams(t *testing.T) {
	streaming := make(chan struct{})
	srv, err := api.Listen("127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, ": open\n\n")
		w.(http.Flusher).Flush()
		close(streaming)
		select {
		case <-api.Draining(r.Context()):
		case <-r.Context().Done():
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	res, err := http.Get("http://" + srv.Addr() + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if _, err := bufio.NewReader(res.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	<-streaming
	cancel() // the client keeps its stream open
	if err := <-served; err != nil {
		t.Fatalf("Serve after shutdown with a stream open: %v", err)
	}
	if api.Draining(context.Background()) != nil {
		t.Error("Draining outside a server: not nil")
	}
}

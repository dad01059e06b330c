package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/orrery-dev/orrery/engine/executor"
)

// devSinkPath is where `orrery dev` serves, on the API's own address, the
// webhook endpoints the example jobs call: it answers 200 and logs what it
// received (under /dev/sink/status/NNN it answers NNN, to try failures). The examples name it as exampleSink; dev rewrites that to the
// address it serves on, so two dev stacks side by side each call their own.
const (
	devSinkPath = "/dev/sink/"
	exampleSink = "http://127.0.0.1:8080" + devSinkPath
)

func devSink(log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Job     string `json:"job"`
			Step    string `json:"step"`
			Attempt int    `json:"attempt"`
		}
		b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		_ = json.Unmarshal(b, &body)
		log.Info("dev sink: webhook received", "path", r.URL.Path, "job", body.Job, "step", body.Step, "attempt", body.Attempt,
			"idempotency_key", r.Header.Get("Idempotency-Key"), "event", r.Header.Get("Orrery-Event"))
		if code, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, devSinkPath+"status/")); err == nil && code >= 200 && code <= 599 {
			w.WriteHeader(code)
			return
		}
		_, _ = w.Write([]byte(`{"ok":true}`))
	})
}

// resolveAddr turns an address with port 0 into a concrete free one, so
// that the examples can name it before the API listens.
func resolveAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if port != "0" {
		return addr, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	defer ln.Close()
	_, port, _ = net.SplitHostPort(ln.Addr().String())
	return net.JoinHostPort(host, port), nil
}

// sinkBase is the URL of the dev sink served on addr.
func sinkBase(addr string) string {
	host, port, _ := net.SplitHostPort(addr)
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + devSinkPath
}

// devHandlers are the Go handlers the example jobs name.
func devHandlers(log *slog.Logger) map[string]executor.HandlerFunc {
	return map[string]executor.HandlerFunc{
		"load-warehouse": func(ctx context.Context, c executor.Call) error {
			log.Info("dev handler load-warehouse", "run_id", c.RunID, "scheduled_for", c.ScheduledFor)
			return nil
		},
	}
}

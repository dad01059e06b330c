package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/orrery-dev/orrery/engine/executor"
)

// startSink serves the webhook endpoints the example jobs call in dev: it
// answers 200 and logs what it received.
func startSink(addr string, log *slog.Logger) (func(context.Context) error, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Job     string `json:"job"`
			Step    string `json:"step"`
			Attempt int    `json:"attempt"`
		}
		b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		_ = json.Unmarshal(b, &body)
		log.Info("dev sink: webhook received", "path", r.URL.Path, "job", body.Job, "step", body.Step, "attempt", body.Attempt,
			"idempotency_key", r.Header.Get("Idempotency-Key"))
		_, _ = w.Write([]byte(`{"ok":true}`))
	})}
	return func(ctx context.Context) error {
		go func() {
			<-ctx.Done()
			shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(shut)
		}()
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}, nil
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

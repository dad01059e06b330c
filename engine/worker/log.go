package worker

import (
	"context"
	"log/slog"
)

// atLeast passes on only records at or above min: River reports routine
// activity at info level every few seconds.
type atLeast struct {
	slog.Handler
	min slog.Level
}

func (h atLeast) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h atLeast) WithAttrs(as []slog.Attr) slog.Handler {
	return atLeast{h.Handler.WithAttrs(as), h.min}
}

func (h atLeast) WithGroup(name string) slog.Handler {
	return atLeast{h.Handler.WithGroup(name), h.min}
}

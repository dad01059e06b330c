package run

import (
	"context"

	"github.com/orrery-dev/orrery/internal/lifecycle"
)

// Tally counts what one transaction attempt did that metrics report: the
// runs it finished, by status. The caller makes a fresh one for each
// attempt (inside the function store.InTx retries) and reads it after the
// commit, so a retried transaction counts once.
type Tally struct {
	RunsFinished map[string]int
}

type tallyKey struct{}

// WithTally returns ctx carrying a fresh Tally.
func WithTally(ctx context.Context) (context.Context, *Tally) {
	t := &Tally{RunsFinished: map[string]int{}}
	return context.WithValue(ctx, tallyKey{}, t), t
}

// countFinished records a run finished in ctx's transaction, if tallied.
func countFinished(ctx context.Context, status lifecycle.RunStatus) {
	if t, ok := ctx.Value(tallyKey{}).(*Tally); ok {
		t.RunsFinished[string(status)]++
	}
}

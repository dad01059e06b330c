package run

import (
	"encoding/json"
	"testing"

	"github.com/orrery-dev/orrery/internal/job"
)

// A reader whose grants do not show the upstream job sees which run
// started a run, not that run's outputs.
func TestUpstreamOutputsFollowTheReadersScope(t *testing.T) {
	u := json.RawMessage(`{"id":"r1","job":"ledger","namespace":"finance","outcome":"succeeded","outputs":{"main":{"total":12}},"outputs_cut":["x"]}`)
	for _, c := range []struct {
		name    string
		scope   *job.Scope
		outputs bool
	}{
		{"tenant-wide", nil, true},
		{"the namespace", &job.Scope{Namespaces: []string{"finance"}}, true},
		{"the job", &job.Scope{Jobs: []string{"finance/ledger"}}, true},
		{"another namespace", &job.Scope{Namespaces: []string{"reports"}}, false},
	} {
		var got map[string]any
		if err := json.Unmarshal(upstreamFor(job.Actor{Scope: c.scope}, u), &got); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		_, outputs := got["outputs"]
		_, cut := got["outputs_cut"]
		if outputs != c.outputs || cut != c.outputs || got["id"] != "r1" || got["job"] != "ledger" {
			t.Errorf("%s: %v", c.name, got)
		}
	}
}

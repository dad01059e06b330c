package webui

import (
	"slices"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/dag"
)

// grid is a job's history by step: its last runs as columns, oldest on
// the left, its steps as rows, a cell per run and step.
type grid struct {
	Runs []*orreryv1.Run
	Rows []gridRow
}

type gridRow struct {
	Step  string
	Cells []gridCell
}

// gridCell is one step of one run: its status, and a mark that says it
// without colour.
type gridCell struct {
	RunID, Status, Mark string
}

// gridMarks: a mark per task status (a run skipped or cancelled before it
// had tasks has none).
var gridMarks = map[string]string{
	"succeeded": "✓", "dead_lettered": "✗", "failed": "✗", "upstream_failed": "↑", "skipped": "–",
	"cancelled": "⊘", "running": "▶", "retrying": "↻", "queued": "·", "waiting": "·",
}

// buildGrid lays out runs (newest first, as ListRuns answers, with their
// steps) by the steps of spec, then any step a run has that spec does not
// (a run of an older version).
func buildGrid(spec dag.JobSpec, runs []*orreryv1.Run) grid {
	g := grid{Runs: slices.Clone(runs)}
	slices.Reverse(g.Runs)
	var steps []string
	for _, s := range spec.Steps {
		steps = append(steps, s.Name)
	}
	for _, r := range g.Runs {
		for _, st := range r.GetSteps() {
			if !slices.Contains(steps, st.GetStep()) {
				steps = append(steps, st.GetStep())
			}
		}
	}
	for _, step := range steps {
		row := gridRow{Step: step}
		for _, r := range g.Runs {
			c := gridCell{RunID: r.GetId()}
			for _, st := range r.GetSteps() {
				if st.GetStep() == step {
					c.Status, c.Mark = st.GetStatus(), gridMarks[st.GetStatus()]
				}
			}
			row.Cells = append(row.Cells, c)
		}
		g.Rows = append(g.Rows, row)
	}
	return g
}

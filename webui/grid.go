package webui

import (
	"slices"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/dag"
	"github.com/orrery-dev/orrery/internal/lifecycle"
)

// grid is a job's history by step: its last runs as columns, oldest on
// the left, its steps as rows (at most gridMaxRows), a cell per run and
// step.
type grid struct {
	Runs   []*orreryv1.Run
	Rows   []gridRow
	Hidden int // steps not drawn past gridMaxRows
}

// gridMaxRows bounds the steps the grid draws (a job may have 10,000).
const gridMaxRows = 200

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
var gridMarks = map[lifecycle.TaskStatus]string{
	lifecycle.TaskSucceeded: "✓", lifecycle.TaskDeadLettered: "✗", lifecycle.TaskFailed: "✗", lifecycle.TaskUpstreamFailed: "↑",
	lifecycle.TaskSkipped: "–", lifecycle.TaskCancelled: "⊘", lifecycle.TaskRunning: "▶", lifecycle.TaskExpanded: "▶",
	lifecycle.TaskRetrying: "↻", lifecycle.TaskQueued: "·", lifecycle.TaskWaiting: "·",
}

// buildGrid lays out runs (newest first, as ListRuns answers, with their
// steps) by the steps of spec, then any step a run has that spec does not
// (a run of an older version), up to gridMaxRows rows.
func buildGrid(spec dag.JobSpec, runs []*orreryv1.Run) grid {
	g := grid{Runs: slices.Clone(runs)}
	slices.Reverse(g.Runs)
	statuses := make([]map[string]string, len(g.Runs))
	seen := map[string]bool{}
	var steps []string
	add := func(step string) {
		if !seen[step] {
			seen[step] = true
			steps = append(steps, step)
		}
	}
	for _, s := range spec.Steps {
		add(s.Name)
	}
	for i, r := range g.Runs {
		statuses[i] = make(map[string]string, len(r.GetSteps()))
		for _, st := range r.GetSteps() {
			statuses[i][st.GetStep()] = st.GetStatus()
			add(st.GetStep())
		}
	}
	if len(steps) > gridMaxRows {
		g.Hidden, steps = len(steps)-gridMaxRows, steps[:gridMaxRows]
	}
	for _, step := range steps {
		row := gridRow{Step: step, Cells: make([]gridCell, len(g.Runs))}
		for i, r := range g.Runs {
			status := statuses[i][step]
			row.Cells[i] = gridCell{RunID: r.GetId(), Status: status, Mark: gridMarks[lifecycle.TaskStatus(status)]}
		}
		g.Rows = append(g.Rows, row)
	}
	return g
}

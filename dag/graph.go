package dag

import (
	"errors"
	"fmt"
	"strings"

	"github.com/dominikbraun/graph"
)

// validateGraph checks every step's needs and that the steps form a DAG,
// naming the cycle when they do not.
func validateGraph(es *Errors, steps []Step, index map[string]int) {
	g := graph.New(graph.StringHash, graph.Directed(), graph.PreventCycles())
	for name := range index {
		_ = g.AddVertex(name)
	}
	for i, st := range steps {
		if index[st.Name] != i {
			continue // a duplicate, already reported
		}
		seen := make(map[string]bool, len(st.Needs))
		for k, need := range st.Needs {
			p := fmt.Sprintf("spec.steps[%d].needs[%d]", i, k)
			switch _, known := index[need]; {
			case need == st.Name:
				es.add(p, "step %q needs itself", st.Name)
			case !known:
				es.add(p, "unknown step %q", need)
			case seen[need]:
				es.add(p, "%q is listed twice", need)
			default:
				seen[need] = true
				err := g.AddEdge(need, st.Name)
				if errors.Is(err, graph.ErrEdgeCreatesCycle) {
					path, _ := graph.ShortestPath(g, st.Name, need)
					es.add(p, "cycle: %s -> %s", strings.Join(path, " -> "), st.Name)
				}
			}
		}
	}
}

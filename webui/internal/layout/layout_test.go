package layout_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/orrery-dev/orrery/webui/internal/layout"
)

func TestLayeredLayers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		nodes     []layout.Node
		edges     []layout.Edge
		want      map[string]int // id -> layer, for every drawn node
		wantEdges int
	}{
		{
			name:      "empty",
			want:      map[string]int{},
			wantEdges: 0,
		},
		{
			name:      "isolated nodes",
			nodes:     nodes("a", "b", "c"),
			want:      map[string]int{"a": 0, "b": 0, "c": 0},
			wantEdges: 0,
		},
		{
			name:      "chain",
			nodes:     nodes("a", "b", "c", "d"),
			edges:     edges("a>b", "b>c", "c>d"),
			want:      map[string]int{"a": 0, "b": 1, "c": 2, "d": 3},
			wantEdges: 3,
		},
		{
			name:      "chain given backwards",
			nodes:     nodes("d", "c", "b", "a"),
			edges:     edges("c>d", "b>c", "a>b"),
			want:      map[string]int{"a": 0, "b": 1, "c": 2, "d": 3},
			wantEdges: 3,
		},
		{
			name:      "diamond",
			nodes:     nodes("a", "b", "c", "d"),
			edges:     edges("a>b", "a>c", "b>d", "c>d"),
			want:      map[string]int{"a": 0, "b": 1, "c": 1, "d": 2},
			wantEdges: 4,
		},
		{
			name:      "edge skipping a layer",
			nodes:     nodes("a", "b", "c"),
			edges:     edges("a>b", "b>c", "a>c"),
			want:      map[string]int{"a": 0, "b": 1, "c": 2},
			wantEdges: 3,
		},
		{
			name:      "two roots, longest path wins",
			nodes:     nodes("x", "a", "b", "y"),
			edges:     edges("a>b", "b>y", "x>y"),
			want:      map[string]int{"x": 0, "a": 0, "b": 1, "y": 2},
			wantEdges: 3,
		},
		{
			name:      "unknown ids ignored",
			nodes:     nodes("a", "b"),
			edges:     edges("a>b", "a>ghost", "ghost>b", "nobody>none"),
			want:      map[string]int{"a": 0, "b": 1},
			wantEdges: 1,
		},
		{
			name:      "duplicate edges count once",
			nodes:     nodes("a", "b"),
			edges:     edges("a>b", "a>b", "a>b"),
			want:      map[string]int{"a": 0, "b": 1},
			wantEdges: 1,
		},
		{
			name:      "duplicate node id: first wins",
			nodes:     []layout.Node{{ID: "a", Label: "first"}, {ID: "b"}, {ID: "a", Label: "second"}},
			edges:     edges("a>b"),
			want:      map[string]int{"a": 0, "b": 1},
			wantEdges: 1,
		},
		{
			name:      "self-loop dropped",
			nodes:     nodes("a", "b"),
			edges:     edges("a>a", "a>b"),
			want:      map[string]int{"a": 0, "b": 1},
			wantEdges: 1,
		},
		{
			name:      "cycle: back edge found from the first node dropped",
			nodes:     nodes("a", "b", "c"),
			edges:     edges("a>b", "b>c", "c>a"),
			want:      map[string]int{"a": 0, "b": 1, "c": 2},
			wantEdges: 2,
		},
		{
			name:      "two-node cycle",
			nodes:     nodes("b", "a"),
			edges:     edges("a>b", "b>a"),
			want:      map[string]int{"b": 0, "a": 1},
			wantEdges: 1,
		},
		{
			name:      "cycle below a root",
			nodes:     nodes("r", "a", "b", "z"),
			edges:     edges("r>a", "a>b", "b>a", "b>z"),
			want:      map[string]int{"r": 0, "a": 1, "b": 2, "z": 3},
			wantEdges: 3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := layout.Layered(tt.nodes, tt.edges, layout.Options{})
			checkResult(t, res, layout.Options{})
			got := map[string]int{}
			for _, p := range res.Nodes {
				got[p.ID] = p.Layer
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("layers = %v, want %v", got, tt.want)
			}
			if len(res.Edges) != tt.wantEdges {
				t.Errorf("%d edges drawn, want %d: %v", len(res.Edges), tt.wantEdges, res.Edges)
			}
			if len(res.Hidden) != 0 {
				t.Errorf("Hidden = %v, want none", res.Hidden)
			}
		})
	}
}

func TestLayeredDuplicateNodeKeepsFirst(t *testing.T) {
	t.Parallel()
	res := layout.Layered([]layout.Node{{ID: "a", Label: "first"}, {ID: "a", Label: "second"}}, nil, layout.Options{})
	if len(res.Nodes) != 1 || res.Nodes[0].Label != "first" {
		t.Errorf("Nodes = %+v, want only a labelled first", res.Nodes)
	}
}

func TestLayeredCyclesTerminate(t *testing.T) {
	t.Parallel()
	ring := func(n int) ([]layout.Node, []layout.Edge) {
		var ns []layout.Node
		var es []layout.Edge
		for i := range n {
			ns = append(ns, layout.Node{ID: strconv.Itoa(i)})
			es = append(es, layout.Edge{From: strconv.Itoa(i), To: strconv.Itoa((i + 1) % n)})
		}
		return ns, es
	}
	complete := func(n int) ([]layout.Node, []layout.Edge) {
		var ns []layout.Node
		var es []layout.Edge
		for i := range n {
			ns = append(ns, layout.Node{ID: strconv.Itoa(i)})
			for j := range n {
				es = append(es, layout.Edge{From: strconv.Itoa(i), To: strconv.Itoa(j)})
			}
		}
		return ns, es
	}
	tests := []struct {
		name      string
		graph     func(int) ([]layout.Node, []layout.Edge)
		n         int
		wantDepth int // layers
	}{
		{"ring of 3", ring, 3, 3},
		{"ring of 2000", ring, 2000, 2000},
		{"complete graph of 40", complete, 40, 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ns, es := tt.graph(tt.n)
			res := layout.Layered(ns, es, layout.Options{})
			checkResult(t, res, layout.Options{})
			if len(res.Nodes) != tt.n {
				t.Fatalf("%d nodes drawn, want %d", len(res.Nodes), tt.n)
			}
			if depth := res.Nodes[len(res.Nodes)-1].Layer + 1; depth != tt.wantDepth {
				t.Errorf("%d layers, want %d", depth, tt.wantDepth)
			}
		})
	}
}

func TestLayeredOrderingRemovesCrossings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		nodes []layout.Node
		edges []layout.Edge
	}{
		{
			name:  "two parents swapped",
			nodes: nodes("a", "b", "c", "d"),
			edges: edges("a>d", "b>c"),
		},
		{
			name:  "two families interleaved",
			nodes: nodes("a", "b", "c", "d", "e", "f"),
			edges: edges("a>c", "b>d", "a>e", "b>f"),
		},
		{
			name:  "three paths scrambled over three layers",
			nodes: nodes("r1", "r2", "r3", "m1", "m2", "m3", "l1", "l2", "l3"),
			edges: edges("r1>m3", "r2>m2", "r3>m1", "m1>l2", "m2>l3", "m3>l1"),
		},
		{
			name:  "crossing in the second gap",
			nodes: nodes("r", "a", "b", "x", "y"),
			edges: edges("r>a", "r>b", "a>y", "b>x"),
		},
		{
			name:  "tree with crossed subtrees",
			nodes: nodes("r", "a", "b", "a1", "b1", "a2", "b2", "b3"),
			edges: edges("r>a", "r>b", "a>a1", "a>a2", "b>b1", "b>b2", "b>b3"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := layout.Layered(tt.nodes, tt.edges, layout.Options{})
			checkResult(t, res, layout.Options{})

			// The same layers in input order: the crafted case must start
			// with crossings for the test to mean anything.
			layer := map[string]int{}
			for _, p := range res.Nodes {
				layer[p.ID] = p.Layer
			}
			before := map[string]float64{}
			next := map[int]int{}
			for _, n := range tt.nodes {
				l := layer[n.ID]
				before[n.ID] = float64(next[l])
				next[l]++
			}
			if c := crossings(layer, before, tt.edges); c == 0 {
				t.Fatalf("input order has no crossings; the case tests nothing")
			}

			after := map[string]float64{}
			for _, p := range res.Nodes {
				after[p.ID] = p.Y
			}
			if c := crossings(layer, after, tt.edges); c != 0 {
				t.Errorf("layout has %d crossings, want 0: %v", c, order(res))
			}
		})
	}
}

func TestLayeredKeepsCrossingFreeInputOrder(t *testing.T) {
	t.Parallel()
	res := layout.Layered(nodes("a", "b", "c", "d", "e", "f"), edges("a>c", "a>d", "b>e", "c>f", "e>f"), layout.Options{})
	want := [][]string{{"a", "b"}, {"c", "d", "e"}, {"f"}}
	if got := order(res); !reflect.DeepEqual(got, want) {
		t.Errorf("order = %v, want %v", got, want)
	}
}

func TestLayeredCap(t *testing.T) {
	t.Parallel()
	const children = 100
	ns := nodes("root")
	var es []layout.Edge
	for i := range children {
		id := fmt.Sprintf("c%02d", i)
		ns = append(ns, layout.Node{ID: id})
		es = append(es, layout.Edge{From: "root", To: id})
	}
	// The last child, hidden, has a child of its own that stays drawn.
	ns = append(ns, layout.Node{ID: "grandchild"})
	es = append(es, layout.Edge{From: fmt.Sprintf("c%02d", children-1), To: "grandchild"})

	tests := []struct {
		name       string
		max        int
		wantDrawn  map[int]int
		wantHidden map[int]int
		wantEdges  int
	}{
		{"no cap", 0, map[int]int{0: 1, 1: 100, 2: 1}, map[int]int{}, 101},
		{"cap 10", 10, map[int]int{0: 1, 1: 10, 2: 1}, map[int]int{1: 90}, 10},
		{"cap 1", 1, map[int]int{0: 1, 1: 1, 2: 1}, map[int]int{1: 99}, 1},
		{"cap above the widest layer", 100, map[int]int{0: 1, 1: 100, 2: 1}, map[int]int{}, 101},
		{"negative cap is none", -1, map[int]int{0: 1, 1: 100, 2: 1}, map[int]int{}, 101},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opt := layout.Options{MaxPerLayer: tt.max}
			res := layout.Layered(ns, es, opt)
			checkResult(t, res, opt)
			drawn := map[int]int{}
			for _, p := range res.Nodes {
				drawn[p.Layer]++
			}
			if !reflect.DeepEqual(drawn, tt.wantDrawn) {
				t.Errorf("drawn per layer = %v, want %v", drawn, tt.wantDrawn)
			}
			if !reflect.DeepEqual(res.Hidden, tt.wantHidden) {
				t.Errorf("Hidden = %v, want %v", res.Hidden, tt.wantHidden)
			}
			if len(res.Edges) != tt.wantEdges {
				t.Errorf("%d edges drawn, want %d", len(res.Edges), tt.wantEdges)
			}
		})
	}
}

func TestLayeredCapKeepsFirstInFinalOrder(t *testing.T) {
	t.Parallel()
	// Ordering puts b's child y before a's child x (b is drawn first); the
	// cap then keeps y, not x, although x comes first in the input.
	ns := nodes("b", "a", "x", "y")
	es := edges("a>x", "b>y")
	full := layout.Layered(ns, es, layout.Options{})
	if got, want := order(full), [][]string{{"b", "a"}, {"y", "x"}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("uncapped order = %v, want %v", got, want)
	}
	capped := layout.Layered(ns, es, layout.Options{MaxPerLayer: 1})
	if got, want := order(capped), [][]string{{"b"}, {"y"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("capped order = %v, want %v", got, want)
	}
	if want := []layout.Path{{From: "b", To: "y", D: "M 170 28 C 200 28 200 28 230 28"}}; !reflect.DeepEqual(capped.Edges, want) {
		t.Errorf("Edges = %v, want %v", capped.Edges, want)
	}
}

func TestLayeredGeometry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		opt        layout.Options
		nodes      []layout.Node
		edges      []layout.Edge
		wantNodes  []layout.Placed
		wantEdges  []layout.Path
		wantWidth  float64
		wantHeight float64
	}{
		{
			name:       "empty: only the margin",
			wantWidth:  20,
			wantHeight: 20,
		},
		{
			name:  "diamond with defaults, outer layers centred",
			nodes: []layout.Node{{ID: "a", Label: "A"}, {ID: "b"}, {ID: "c"}, {ID: "d"}},
			edges: edges("a>b", "a>c", "b>d", "c>d"),
			wantNodes: []layout.Placed{
				{Node: layout.Node{ID: "a", Label: "A"}, Layer: 0, Index: 0, X: 10, Y: 35, W: 160, H: 36},
				{Node: layout.Node{ID: "b"}, Layer: 1, Index: 0, X: 230, Y: 10, W: 160, H: 36},
				{Node: layout.Node{ID: "c"}, Layer: 1, Index: 1, X: 230, Y: 60, W: 160, H: 36},
				{Node: layout.Node{ID: "d"}, Layer: 2, Index: 0, X: 450, Y: 35, W: 160, H: 36},
			},
			wantEdges: []layout.Path{
				{From: "a", To: "b", D: "M 170 53 C 200 53 200 28 230 28"},
				{From: "a", To: "c", D: "M 170 53 C 200 53 200 78 230 78"},
				{From: "b", To: "d", D: "M 390 28 C 420 28 420 53 450 53"},
				{From: "c", To: "d", D: "M 390 78 C 420 78 420 53 450 53"},
			},
			wantWidth:  620,
			wantHeight: 106,
		},
		{
			name:  "custom sizes, path rounded to a tenth",
			opt:   layout.Options{NodeWidth: 100.04, NodeHeight: 33.37, LayerGap: 20, NodeGap: 5, Margin: 2.5},
			nodes: nodes("a", "b"),
			edges: edges("a>b"),
			wantNodes: []layout.Placed{
				{Node: layout.Node{ID: "a"}, Layer: 0, Index: 0, X: 2.5, Y: 2.5, W: 100.04, H: 33.37},
				{Node: layout.Node{ID: "b"}, Layer: 1, Index: 0, X: 122.54, Y: 2.5, W: 100.04, H: 33.37},
			},
			// 2.5+100.04 = 102.54, 2.5+33.37/2 = 19.185, mid 112.54.
			wantEdges:  []layout.Path{{From: "a", To: "b", D: "M 102.5 19.2 C 112.5 19.2 112.5 19.2 122.5 19.2"}},
			wantWidth:  225.08,
			wantHeight: 38.37,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := layout.Layered(tt.nodes, tt.edges, tt.opt)
			checkResult(t, res, tt.opt)
			if len(res.Nodes) != len(tt.wantNodes) {
				t.Fatalf("Nodes = %+v, want %+v", res.Nodes, tt.wantNodes)
			}
			for i, want := range tt.wantNodes {
				got := res.Nodes[i]
				if got.Node != want.Node || got.Layer != want.Layer || got.Index != want.Index ||
					!near(got.X, want.X) || !near(got.Y, want.Y) || !near(got.W, want.W) || !near(got.H, want.H) {
					t.Errorf("Nodes[%d] = %+v, want %+v", i, got, want)
				}
			}
			if !reflect.DeepEqual(res.Edges, tt.wantEdges) {
				t.Errorf("Edges = %v, want %v", res.Edges, tt.wantEdges)
			}
			if !near(res.Width, tt.wantWidth) || !near(res.Height, tt.wantHeight) {
				t.Errorf("size = %v x %v, want %v x %v", res.Width, res.Height, tt.wantWidth, tt.wantHeight)
			}
		})
	}
}

func TestLayeredRandomDAGs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		n       int
		density float64 // chance of each forward edge
		max     int
	}{
		{"sparse", 60, 0.04, 0},
		{"dense", 30, 0.3, 0},
		{"wide, capped", 200, 0.02, 7},
		{"with back edges", 40, 0.1, 0},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(i), 42))
			var ns []layout.Node
			for j := range tt.n {
				ns = append(ns, layout.Node{ID: fmt.Sprintf("n%d", j)})
			}
			// Shuffle node order so the input is not already topological.
			rng.Shuffle(len(ns), func(a, b int) { ns[a], ns[b] = ns[b], ns[a] })
			var es []layout.Edge
			for a := range tt.n {
				for b := range tt.n {
					forward := a < b || tt.name == "with back edges"
					if a != b && forward && rng.Float64() < tt.density {
						es = append(es, layout.Edge{From: fmt.Sprintf("n%d", a), To: fmt.Sprintf("n%d", b)})
					}
				}
			}
			opt := layout.Options{MaxPerLayer: tt.max}
			res := layout.Layered(ns, es, opt)
			checkResult(t, res, opt)

			again := layout.Layered(ns, es, opt)
			if !reflect.DeepEqual(res, again) {
				t.Errorf("two calls differ")
			}

			if tt.name == "with back edges" {
				return
			}
			// Every drawn edge of a DAG points right; every non-root has a
			// parent exactly one layer left (longest path).
			layer := map[string]int{}
			for _, p := range res.Nodes {
				layer[p.ID] = p.Layer
			}
			tight := map[string]bool{}
			for _, e := range es {
				lf, drawnFrom := layer[e.From]
				lt, drawnTo := layer[e.To]
				if !drawnFrom || !drawnTo {
					continue
				}
				if lf >= lt {
					t.Errorf("edge %v goes from layer %d to %d", e, lf, lt)
				}
				if lf+1 == lt {
					tight[e.To] = true
				}
			}
			if tt.max == 0 {
				for id, l := range layer {
					if l > 0 && !tight[id] {
						t.Errorf("%s in layer %d has no parent in layer %d", id, l, l-1)
					}
				}
			}
		})
	}
}

func TestLayeredDeterministic(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		nodes []layout.Node
		edges []layout.Edge
		opt   layout.Options
	}{
		{"diamond", nodes("a", "b", "c", "d"), edges("a>b", "a>c", "b>d", "c>d"), layout.Options{}},
		{"crossings to remove", nodes("r1", "r2", "r3", "m1", "m2", "m3"), edges("r1>m3", "r2>m2", "r3>m1", "r1>m1"), layout.Options{}},
		{"cycle", nodes("a", "b", "c"), edges("a>b", "b>c", "c>a", "c>b"), layout.Options{MaxPerLayer: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			first := layout.Layered(tt.nodes, tt.edges, tt.opt)
			second := layout.Layered(tt.nodes, tt.edges, tt.opt)
			if !reflect.DeepEqual(first, second) {
				t.Errorf("first = %+v\nsecond = %+v", first, second)
			}
		})
	}
}

func TestLayeredLarge(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		nodes     []layout.Node
		edges     []layout.Edge
		wantDepth int
		wantWide  int // nodes in the widest layer
	}{
		{"fan-out of 1000", fanOutNodes(1000), fanOutEdges(1000), 3, 1000},
		{"chain of 5000", chainNodes(5000), chainEdges(5000), 5000, 1},
		// Too many long edges to count crossings: the sweeps run unchecked.
		{"chain of 600 with shortcuts from its head", chainNodes(600), append(chainEdges(600), shortcuts(600)...), 600, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := layout.Layered(tt.nodes, tt.edges, layout.Options{})
			if len(res.Nodes) != len(tt.nodes) || len(res.Edges) != len(tt.edges) {
				t.Fatalf("%d nodes, %d edges drawn, want %d, %d", len(res.Nodes), len(res.Edges), len(tt.nodes), len(tt.edges))
			}
			perLayer := map[int]int{}
			for _, p := range res.Nodes {
				perLayer[p.Layer]++
			}
			wide := 0
			for _, n := range perLayer {
				wide = max(wide, n)
			}
			if len(perLayer) != tt.wantDepth || wide != tt.wantWide {
				t.Errorf("%d layers, widest %d; want %d, %d", len(perLayer), wide, tt.wantDepth, tt.wantWide)
			}
		})
	}
}

func BenchmarkFanOut1000(b *testing.B) {
	ns, es := fanOutNodes(1000), fanOutEdges(1000)
	for b.Loop() {
		layout.Layered(ns, es, layout.Options{})
	}
}

func BenchmarkChain5000(b *testing.B) {
	ns, es := chainNodes(5000), chainEdges(5000)
	for b.Loop() {
		layout.Layered(ns, es, layout.Options{})
	}
}

func ExampleLayered() {
	res := layout.Layered(
		[]layout.Node{{ID: "fetch"}, {ID: "build"}, {ID: "test"}, {ID: "ship"}},
		[]layout.Edge{{From: "fetch", To: "build"}, {From: "fetch", To: "test"}, {From: "build", To: "ship"}, {From: "test", To: "ship"}},
		layout.Options{NodeWidth: 100, NodeHeight: 20, LayerGap: 40, NodeGap: 10},
	)
	fmt.Printf("svg %gx%g\n", res.Width, res.Height)
	for _, n := range res.Nodes {
		fmt.Printf("%s layer %d at %g,%g\n", n.ID, n.Layer, n.X, n.Y)
	}
	fmt.Println(res.Edges[0].D)
	// Output:
	// svg 400x70
	// fetch layer 0 at 10,25
	// build layer 1 at 150,10
	// test layer 1 at 150,40
	// ship layer 2 at 290,25
	// M 110 35 C 130 35 130 20 150 20
}

// checkResult checks what every layout must satisfy: nodes by layer then
// index, contiguous indices, one column per layer, no overlaps, everything
// inside the drawing, and edges between drawn nodes whose paths start and
// end where the nodes are.
func checkResult(t *testing.T, res layout.Result, opt layout.Options) {
	t.Helper()
	byID := map[string]layout.Placed{}
	for i, p := range res.Nodes {
		if _, dup := byID[p.ID]; dup {
			t.Errorf("node %s drawn twice", p.ID)
		}
		byID[p.ID] = p
		if i == 0 {
			if p.Layer != 0 || p.Index != 0 {
				t.Errorf("first node %s at layer %d index %d", p.ID, p.Layer, p.Index)
			}
		} else {
			prev := res.Nodes[i-1]
			sameLayer := p.Layer == prev.Layer && p.Index == prev.Index+1
			nextLayer := p.Layer == prev.Layer+1 && p.Index == 0
			if !sameLayer && !nextLayer {
				t.Errorf("node %s (layer %d index %d) follows %s (layer %d index %d)", p.ID, p.Layer, p.Index, prev.ID, prev.Layer, prev.Index)
			}
			if p.Layer == prev.Layer && p.X != prev.X {
				t.Errorf("nodes %s and %s of layer %d at x %v and %v", prev.ID, p.ID, p.Layer, prev.X, p.X)
			}
		}
		if opt.MaxPerLayer > 0 && p.Index >= opt.MaxPerLayer {
			t.Errorf("node %s at index %d past the cap %d", p.ID, p.Index, opt.MaxPerLayer)
		}
		if p.W <= 0 || p.H <= 0 || p.X <= 0 || p.Y <= 0 || p.X+p.W >= res.Width || p.Y+p.H >= res.Height {
			t.Errorf("node %s at %v,%v size %vx%v outside %vx%v with a margin", p.ID, p.X, p.Y, p.W, p.H, res.Width, res.Height)
		}
	}
	if n := len(res.Nodes); n < 200 { // quadratic; the large cases have their own checks
		for i, a := range res.Nodes {
			for _, b := range res.Nodes[i+1:] {
				if a.X < b.X+b.W && b.X < a.X+a.W && a.Y < b.Y+b.H && b.Y < a.Y+a.H {
					t.Errorf("nodes %s and %s overlap", a.ID, b.ID)
				}
			}
		}
	}
	for _, e := range res.Edges {
		from, okFrom := byID[e.From]
		to, okTo := byID[e.To]
		if !okFrom || !okTo {
			t.Errorf("edge %s>%s to a node not drawn", e.From, e.To)
			continue
		}
		if from.Layer >= to.Layer {
			t.Errorf("edge %s>%s from layer %d to %d", e.From, e.To, from.Layer, to.Layer)
		}
		f := strings.Fields(e.D)
		if len(f) != 10 || f[0] != "M" || f[3] != "C" {
			t.Errorf("edge %s>%s: path %q is not M x y C x y x y x y", e.From, e.To, e.D)
			continue
		}
		num := func(s string) float64 {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				t.Errorf("edge %s>%s: %v", e.From, e.To, err)
			}
			return v
		}
		if !nearTenth(num(f[1]), from.X+from.W) || !nearTenth(num(f[2]), from.Y+from.H/2) ||
			!nearTenth(num(f[8]), to.X) || !nearTenth(num(f[9]), to.Y+to.H/2) {
			t.Errorf("edge %s>%s: path %q does not join %+v to %+v", e.From, e.To, e.D, from, to)
		}
	}
}

// crossings counts the pairs of edges between adjacent layers that cross,
// given each node's layer and vertical position.
func crossings(layer map[string]int, y map[string]float64, es []layout.Edge) int {
	n := 0
	for i, a := range es {
		for _, b := range es[i+1:] {
			if layer[a.From] != layer[b.From] || layer[a.To] != layer[b.To] || layer[a.To] != layer[a.From]+1 {
				continue
			}
			if (y[a.From]-y[b.From])*(y[a.To]-y[b.To]) < 0 {
				n++
			}
		}
	}
	return n
}

// order lists the drawn ids layer by layer.
func order(res layout.Result) [][]string {
	var out [][]string
	for _, p := range res.Nodes {
		if p.Layer == len(out) {
			out = append(out, nil)
		}
		out[p.Layer] = append(out[p.Layer], p.ID)
	}
	return out
}

func nodes(ids ...string) []layout.Node {
	ns := make([]layout.Node, len(ids))
	for i, id := range ids {
		ns[i] = layout.Node{ID: id}
	}
	return ns
}

// edges turns "a>b" into an edge from a to b.
func edges(specs ...string) []layout.Edge {
	es := make([]layout.Edge, len(specs))
	for i, s := range specs {
		from, to, _ := strings.Cut(s, ">")
		es[i] = layout.Edge{From: from, To: to}
	}
	return es
}

func fanOutNodes(n int) []layout.Node {
	ns := []layout.Node{{ID: "root"}}
	for i := range n {
		ns = append(ns, layout.Node{ID: fmt.Sprintf("task-%d", i)})
	}
	return append(ns, layout.Node{ID: "sink"})
}

func fanOutEdges(n int) []layout.Edge {
	var es []layout.Edge
	for i := range n {
		id := fmt.Sprintf("task-%d", i)
		es = append(es, layout.Edge{From: "root", To: id}, layout.Edge{From: id, To: "sink"})
	}
	return es
}

func chainNodes(n int) []layout.Node {
	ns := make([]layout.Node, n)
	for i := range ns {
		ns[i] = layout.Node{ID: strconv.Itoa(i)}
	}
	return ns
}

// shortcuts links the head of a chain of n to every later node.
func shortcuts(n int) []layout.Edge {
	es := make([]layout.Edge, 0, n-2)
	for i := 2; i < n; i++ {
		es = append(es, layout.Edge{From: "0", To: strconv.Itoa(i)})
	}
	return es
}

func chainEdges(n int) []layout.Edge {
	es := make([]layout.Edge, n-1)
	for i := range es {
		es[i] = layout.Edge{From: strconv.Itoa(i), To: strconv.Itoa(i + 1)}
	}
	return es
}

// near compares computed coordinates.
func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// close compares a coordinate with its rounding to a tenth.
func nearTenth(a, b float64) bool { return a-b <= 0.05+1e-9 && b-a <= 0.05+1e-9 }

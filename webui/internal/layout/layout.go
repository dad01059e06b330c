package layout

import (
	"cmp"
	"math"
	"slices"
	"strconv"
)

// Node is one vertex; ID is unique.
type Node struct{ ID, Label string }

// Edge goes from parent to child.
type Edge struct{ From, To string }

// Options sizes the drawing. A size that is zero or negative takes its
// default.
type Options struct {
	// MaxPerLayer caps the nodes drawn in one layer (column); 0: no cap.
	// Past the cap, the first MaxPerLayer nodes (in final order) are kept and
	// the rest are hidden and counted.
	MaxPerLayer int
	// NodeWidth and NodeHeight size every node: defaults 160 and 36.
	NodeWidth, NodeHeight float64
	// LayerGap is the horizontal gap between columns (default 60), NodeGap
	// the vertical gap between nodes of a column (default 14).
	LayerGap, NodeGap float64
	// Margin surrounds the drawing (default 10).
	Margin float64
}

const (
	defaultNodeWidth  = 160
	defaultNodeHeight = 36
	defaultLayerGap   = 60
	defaultNodeGap    = 14
	defaultMargin     = 10

	// sweeps is how many down-and-up passes of the barycenter heuristic
	// ordering makes at most.
	sweeps = 4
	// maxSegments bounds the work of counting crossings: past this many
	// (edge, gap between adjacent layers) pairs, the sweeps run without
	// comparing orders and the last one stands.
	maxSegments = 1 << 17
)

func (o Options) withDefaults() Options {
	def := func(v *float64, d float64) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.NodeWidth, defaultNodeWidth)
	def(&o.NodeHeight, defaultNodeHeight)
	def(&o.LayerGap, defaultLayerGap)
	def(&o.NodeGap, defaultNodeGap)
	def(&o.Margin, defaultMargin)
	o.MaxPerLayer = max(o.MaxPerLayer, 0)
	return o
}

// Placed is a drawn node.
type Placed struct {
	Node
	Layer, Index int     // column and position in it (after ordering)
	X, Y, W, H   float64 // top-left corner and size
}

// Path is an edge as drawn: a cubic Bezier from the right middle of From
// to the left middle of To, given as the SVG path data "M x y C ...".
type Path struct {
	From, To string
	D        string
}

// Result is a laid-out graph.
type Result struct {
	Nodes  []Placed    // drawn nodes, by layer then index
	Edges  []Path      // edges between drawn nodes only, in input order
	Hidden map[int]int // layer -> how many nodes were hidden there (absent: none); never nil
	// Width and Height are the SVG's size: every drawn node plus the margin.
	Width, Height float64
}

// Layered lays the graph out. Unknown ids in edges are ignored; duplicate
// edges count once, and so does a duplicate node id (the first wins).
// Cycles are broken by ignoring the back edges a depth-first search finds
// when it visits nodes and edges in input order; those edges, and
// self-loops, are not drawn.
func Layered(nodes []Node, edges []Edge, opt Options) Result {
	g := newGraph(nodes, edges)
	g.assignLayers(g.topoOrder())
	g.order()
	return g.place(opt.withDefaults())
}

// graph holds the nodes by index and the state of the layout.
type graph struct {
	nodes    []Node
	from, to []int   // edges, deduplicated, in input order
	out      [][]int // node -> its outgoing edges, in input order
	back     []bool  // edge -> dropped to break a cycle

	parents, children [][]int // node -> neighbours over kept edges

	layer  []int   // node -> layer
	layers [][]int // layer -> nodes in current order; all share ordered
	pos    []int   // node -> index in its layer
	key    []float64

	ordered []int   // backing array of layers, so that an order copies in one go
	gaps    [][]int // gap between layers l and l+1 -> edges crossing it
	segs    []segment
	ys, buf []float64
}

func newGraph(nodes []Node, edges []Edge) *graph {
	g := &graph{nodes: make([]Node, 0, len(nodes))}
	index := make(map[string]int, len(nodes))
	for _, n := range nodes {
		if _, dup := index[n.ID]; dup {
			continue
		}
		index[n.ID] = len(g.nodes)
		g.nodes = append(g.nodes, n)
	}
	g.out = make([][]int, len(g.nodes))
	seen := make(map[[2]int]struct{}, len(edges))
	for _, e := range edges {
		u, okFrom := index[e.From]
		v, okTo := index[e.To]
		if !okFrom || !okTo || u == v {
			continue
		}
		if _, dup := seen[[2]int{u, v}]; dup {
			continue
		}
		seen[[2]int{u, v}] = struct{}{}
		g.out[u] = append(g.out[u], len(g.from))
		g.from = append(g.from, u)
		g.to = append(g.to, v)
	}
	return g
}

// topoOrder runs an iterative depth-first search in input order, marks the
// back edges it meets and returns the nodes in reverse postorder, a
// topological order of the graph without them.
func (g *graph) topoOrder() []int {
	const (
		unseen = iota
		open
		done
	)
	n := len(g.nodes)
	state := make([]uint8, n)
	next := make([]int, n) // node -> its next outgoing edge to follow
	g.back = make([]bool, len(g.from))
	post := make([]int, 0, n)
	var stack []int
	for root := range n {
		if state[root] != unseen {
			continue
		}
		state[root] = open
		stack = append(stack[:0], root)
		for len(stack) > 0 {
			u := stack[len(stack)-1]
			if next[u] == len(g.out[u]) {
				state[u] = done
				post = append(post, u)
				stack = stack[:len(stack)-1]
				continue
			}
			e := g.out[u][next[u]]
			next[u]++
			switch v := g.to[e]; state[v] {
			case unseen:
				state[v] = open
				stack = append(stack, v)
			case open:
				g.back[e] = true
			}
		}
	}
	slices.Reverse(post)
	return post
}

// assignLayers puts each node one layer right of its rightmost parent,
// roots in layer 0, and each layer in input order.
func (g *graph) assignLayers(topo []int) {
	n := len(g.nodes)
	g.parents = make([][]int, n)
	g.children = make([][]int, n)
	for e, u := range g.from {
		if g.back[e] {
			continue
		}
		v := g.to[e]
		g.children[u] = append(g.children[u], v)
		g.parents[v] = append(g.parents[v], u)
	}
	g.layer = make([]int, n)
	depth := 0
	for _, v := range topo {
		for _, u := range g.parents[v] {
			g.layer[v] = max(g.layer[v], g.layer[u]+1)
		}
		depth = max(depth, g.layer[v]+1)
	}

	size := make([]int, depth)
	for _, l := range g.layer {
		size[l]++
	}
	g.ordered = make([]int, 0, n)
	g.layers = make([][]int, depth)
	for l := range depth {
		start := len(g.ordered)
		g.ordered = g.ordered[:start+size[l]]
		g.layers[l] = g.ordered[start:start:len(g.ordered)]
	}
	for v, l := range g.layer {
		g.layers[l] = append(g.layers[l], v)
	}
	g.pos = make([]int, n)
	g.reindex()
}

func (g *graph) reindex() {
	for _, layer := range g.layers {
		for i, v := range layer {
			g.pos[v] = i
		}
	}
}

// y is the position of v in its layer relative to the layer's middle, as
// the layer will be drawn centred: it compares positions across layers.
func (g *graph) y(v int) float64 {
	return float64(g.pos[v]) - float64(len(g.layers[g.layer[v]])-1)/2
}

// order runs the barycenter sweeps and keeps the order with the fewest
// crossings, the earliest on a tie, so an order already free of crossings
// stays as given.
func (g *graph) order() {
	if len(g.layers) < 2 {
		return
	}
	g.key = make([]float64, len(g.nodes))
	if !g.indexGaps() {
		for range sweeps {
			g.sweep(true)
			g.sweep(false)
		}
		return
	}
	best, fewest := slices.Clone(g.ordered), g.crossings()
	for i := 0; i < sweeps && fewest > 0; i++ {
		for _, down := range []bool{true, false} {
			g.sweep(down)
			if c := g.crossings(); c < fewest {
				fewest = c
				copy(best, g.ordered)
			}
		}
	}
	copy(g.ordered, best)
	g.reindex()
}

// sweep reorders every layer but the first (down) or the last (up) by the
// mean position of its nodes' parents (down) or children (up), in whatever
// layer they are. A node without any keeps its own position as key.
func (g *graph) sweep(down bool) {
	last := len(g.layers) - 1
	for i := 1; i <= last; i++ {
		l, neighbours := i, g.parents
		if !down {
			l, neighbours = last-i, g.children
		}
		layer := g.layers[l]
		for _, v := range layer {
			g.key[v] = g.barycenter(v, neighbours[v])
		}
		slices.SortStableFunc(layer, func(a, b int) int { return cmp.Compare(g.key[a], g.key[b]) })
		for i, v := range layer {
			g.pos[v] = i
		}
	}
}

func (g *graph) barycenter(v int, neighbours []int) float64 {
	if len(neighbours) == 0 {
		return g.y(v)
	}
	sum := 0.0
	for _, w := range neighbours {
		sum += g.y(w)
	}
	return sum / float64(len(neighbours))
}

// indexGaps lists, for each gap between adjacent layers, the kept edges
// that cross it, and reports whether there are few enough of those pairs
// to count crossings.
func (g *graph) indexGaps() bool {
	total := 0
	for e, u := range g.from {
		if !g.back[e] {
			total += g.layer[g.to[e]] - g.layer[u]
		}
	}
	if total > maxSegments {
		return false
	}
	g.gaps = make([][]int, len(g.layers)-1)
	for e, u := range g.from {
		if g.back[e] {
			continue
		}
		for k := g.layer[u]; k < g.layer[g.to[e]]; k++ {
			g.gaps[k] = append(g.gaps[k], e)
		}
	}
	return true
}

// segment is an edge within one gap: where it enters and where it leaves.
type segment struct{ left, right float64 }

// crossings counts the pairs of edges that cross, taking each edge as a
// straight line between its endpoints' centred positions, gap by gap.
func (g *graph) crossings() int {
	total := 0
	for k, gap := range g.gaps {
		g.segs = g.segs[:0]
		for _, e := range gap {
			u, v := g.from[e], g.to[e]
			yu, yv := g.y(u), g.y(v)
			span := float64(g.layer[v] - g.layer[u])
			at := func(l int) float64 { return yu + (yv-yu)*float64(l-g.layer[u])/span }
			g.segs = append(g.segs, segment{at(k), at(k + 1)})
		}
		slices.SortFunc(g.segs, func(a, b segment) int {
			return cmp.Or(cmp.Compare(a.left, b.left), cmp.Compare(a.right, b.right))
		})
		g.ys = g.ys[:0]
		for _, s := range g.segs {
			g.ys = append(g.ys, s.right)
		}
		g.buf = slices.Grow(g.buf[:0], len(g.ys))[:len(g.ys)]
		total += inversions(g.ys, g.buf)
	}
	return total
}

// inversions counts the pairs i < j with a[i] > a[j], sorting a with a
// merge sort that uses buf, as long as a, for scratch.
func inversions(a, buf []float64) int {
	if len(a) < 2 {
		return 0
	}
	mid := len(a) / 2
	n := inversions(a[:mid], buf[:mid]) + inversions(a[mid:], buf[mid:])
	i, j, k := 0, mid, 0
	for i < mid && j < len(a) {
		if a[j] < a[i] {
			n += mid - i
			buf[k] = a[j]
			j++
		} else {
			buf[k] = a[i]
			i++
		}
		k++
	}
	k += copy(buf[k:], a[i:mid])
	copy(buf[k:], a[j:])
	copy(a, buf)
	return n
}

// place caps the layers, gives the drawn nodes their coordinates and
// draws the edges between them.
func (g *graph) place(opt Options) Result {
	res := Result{Hidden: make(map[int]int)}
	drawn := make([]int, len(g.layers))
	tallest := 0
	for l, layer := range g.layers {
		drawn[l] = len(layer)
		if opt.MaxPerLayer > 0 && drawn[l] > opt.MaxPerLayer {
			drawn[l] = opt.MaxPerLayer
			res.Hidden[l] = len(layer) - opt.MaxPerLayer
		}
		tallest = max(tallest, drawn[l])
	}
	extent := func(n int, size, gap float64) float64 {
		if n == 0 {
			return 0
		}
		return float64(n)*size + float64(n-1)*gap
	}
	height := extent(tallest, opt.NodeHeight, opt.NodeGap)

	at := make([]int, len(g.nodes)) // node -> index in res.Nodes, or -1
	for v := range at {
		at[v] = -1
	}
	res.Nodes = make([]Placed, 0, len(g.nodes))
	for l, layer := range g.layers {
		x := opt.Margin + float64(l)*(opt.NodeWidth+opt.LayerGap)
		top := opt.Margin + (height-extent(drawn[l], opt.NodeHeight, opt.NodeGap))/2
		for i, v := range layer[:drawn[l]] {
			at[v] = len(res.Nodes)
			res.Nodes = append(res.Nodes, Placed{
				Node:  g.nodes[v],
				Layer: l, Index: i,
				X: x, Y: top + float64(i)*(opt.NodeHeight+opt.NodeGap),
				W: opt.NodeWidth, H: opt.NodeHeight,
			})
		}
	}
	res.Width = 2*opt.Margin + extent(len(g.layers), opt.NodeWidth, opt.LayerGap)
	res.Height = 2*opt.Margin + height

	for e, u := range g.from {
		v := g.to[e]
		if g.back[e] || at[u] < 0 || at[v] < 0 {
			continue
		}
		p, c := res.Nodes[at[u]], res.Nodes[at[v]]
		res.Edges = append(res.Edges, Path{
			From: p.ID, To: c.ID,
			D: curve(p.X+p.W, p.Y+p.H/2, c.X, c.Y+c.H/2),
		})
	}
	return res
}

// curve is the SVG path data of a cubic Bézier from (x1, y1) to (x2, y2)
// that leaves and arrives horizontally.
func curve(x1, y1, x2, y2 float64) string {
	mid := (x1 + x2) / 2
	b := make([]byte, 0, 64)
	b = append(b, "M "...)
	for i, v := range [...]float64{x1, y1, mid, y1, mid, y2, x2, y2} {
		switch i {
		case 0:
		case 2:
			b = append(b, " C "...)
		default:
			b = append(b, ' ')
		}
		b = appendCoord(b, v)
	}
	return string(b)
}

// appendCoord appends v rounded to a tenth, in as few characters as that
// takes.
func appendCoord(b []byte, v float64) []byte {
	v = math.Round(v*10) / 10
	if v == 0 {
		v = 0 // no "-0"
	}
	return strconv.AppendFloat(b, v, 'f', -1, 64)
}

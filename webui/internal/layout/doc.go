// Package layout places the tasks of a run, a directed acyclic graph, in
// columns from left to right so that the web UI can draw them as an inline
// SVG. It computes positions and edge paths only; drawing is the caller's.
//
// [Layered] is a small Sugiyama-style layout, deterministic for the same
// input:
//
//  1. Cycles, which a run should not have, are broken by dropping the back
//     edges a depth-first search finds when it visits nodes and edges in
//     input order.
//  2. A node's layer (column) is the length of the longest path reaching it
//     from a root, so every edge points to the right.
//  3. Each layer starts in input order and is then reordered by a few
//     down and up sweeps of the barycenter heuristic; an edge that spans
//     several layers counts with its far endpoint, without dummy nodes. The
//     order with the fewest crossings seen wins, the earliest on a tie.
//  4. Layers are capped at [Options.MaxPerLayer] nodes, the rest hidden and
//     counted, and each layer is centred vertically against the tallest.
//
// Edges are cubic Bézier curves from the right middle of the parent to the
// left middle of the child, as SVG path data with coordinates rounded to a
// tenth.
package layout

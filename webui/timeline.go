package webui

import (
	"fmt"
	"time"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
)

// timeline is a run's tasks' attempts on one time axis, drawn by the
// server as SVG: a row per task that was released, a thin bar from its
// release to its first attempt (waiting for admission and a worker), and
// a bar per attempt, labelled with its number and outcome (the label, not
// only the colour, says how it ended).
type timeline struct {
	Width, Height float64
	Rows          []timelineRow
	Ticks         []timelineTick
}

type timelineRow struct {
	Step  string
	Y     float64
	Wait  *timelineBar
	Tries []timelineBar
}

type timelineBar struct {
	X, W           float64
	Outcome, Label string
	Title          string
}

type timelineTick struct {
	X     float64
	Label string
}

// timelineMaxRows bounds the rows drawn (a wide fan-out's tasks are in the
// table below).
const timelineMaxRows = 200

// Layout of the timeline, in pixels.
const (
	tlLabel = 160.0 // the step names' column
	tlPlot  = 900.0 // the time axis
	tlRow   = 22.0
	tlTop   = 24.0 // the ticks' row
)

// buildTimeline lays out tasks between their first release and the last
// end (now for what still runs).
func buildTimeline(tasks []*orreryv1.Task, now time.Time) timeline {
	var from, to time.Time
	see := func(t time.Time) {
		if t.IsZero() {
			return
		}
		if from.IsZero() || t.Before(from) {
			from = t
		}
		if t.After(to) {
			to = t
		}
	}
	for _, t := range tasks {
		if t.GetReleaseTime() != nil {
			see(t.GetReleaseTime().AsTime())
			if len(t.GetAttempts()) == 0 { // its wait ends at its end, or goes on
				if t.GetFinishTime() != nil {
					see(t.GetFinishTime().AsTime())
				} else {
					see(now)
				}
			}
		}
		for _, a := range t.GetAttempts() {
			see(a.GetStartTime().AsTime())
			if a.GetFinishTime() != nil {
				see(a.GetFinishTime().AsTime())
			} else {
				see(now)
			}
		}
	}
	tl := timeline{Width: tlLabel + tlPlot + 70} // room for the last tick's label and a short bar's label
	if from.IsZero() {
		return tl
	}
	span := to.Sub(from)
	if span < time.Millisecond {
		span = time.Millisecond
	}
	x := func(t time.Time) float64 { return tlLabel + tlPlot*float64(t.Sub(from))/float64(span) }
	width := func(a, b time.Time) float64 { return max(2, x(b)-x(a)) }
	for i := 0; i <= 4; i++ {
		at := from.Add(span * time.Duration(i) / 4)
		tl.Ticks = append(tl.Ticks, timelineTick{X: x(at), Label: "+" + at.Sub(from).Round(time.Millisecond).String()})
	}
	for _, t := range tasks {
		if t.GetReleaseTime() == nil && len(t.GetAttempts()) == 0 {
			continue // never released: nothing to draw
		}
		if len(tl.Rows) == timelineMaxRows {
			break
		}
		row := timelineRow{Step: t.GetStep(), Y: tlTop + float64(len(tl.Rows))*tlRow}
		if c := t.GetItems(); c != nil && t.GetReleaseTime() != nil { // a fan-out: one bar from its expansion to its end
			rel, end := t.GetReleaseTime().AsTime(), now
			if t.GetFinishTime() != nil {
				end = t.GetFinishTime().AsTime()
			}
			row.Tries = append(row.Tries, timelineBar{X: x(rel), W: width(rel, end), Outcome: t.GetStatus(),
				Label: fmt.Sprintf("%d items %s", c.GetTotal(), t.GetStatus()),
				Title: fmt.Sprintf("%s: %d items (%s), %s", t.GetStep(), c.GetTotal(), itemCounts(c), end.Sub(rel).Round(time.Millisecond))})
			tl.Rows = append(tl.Rows, row)
			continue
		}
		if rel := t.GetReleaseTime(); rel != nil {
			end := now
			if len(t.GetAttempts()) > 0 {
				end = t.GetAttempts()[0].GetStartTime().AsTime()
			} else if t.GetFinishTime() != nil {
				end = t.GetFinishTime().AsTime()
			}
			row.Wait = &timelineBar{X: x(rel.AsTime()), W: width(rel.AsTime(), end),
				Title: fmt.Sprintf("%s waited %s from its release", t.GetStep(), end.Sub(rel.AsTime()).Round(time.Millisecond))}
		}
		for _, a := range t.GetAttempts() {
			start, end := a.GetStartTime().AsTime(), now
			if a.GetFinishTime() != nil {
				end = a.GetFinishTime().AsTime()
			}
			outcome := a.GetOutcome()
			row.Tries = append(row.Tries, timelineBar{X: x(start), W: width(start, end), Outcome: outcome,
				Label: fmt.Sprintf("#%d %s", a.GetNumber(), outcome),
				Title: fmt.Sprintf("%s attempt %d: %s, %s", t.GetStep(), a.GetNumber(), outcome, end.Sub(start).Round(time.Millisecond))})
		}
		tl.Rows = append(tl.Rows, row)
	}
	tl.Height = tlTop + float64(len(tl.Rows))*tlRow + 4
	return tl
}

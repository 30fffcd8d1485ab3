package ui

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/goray-dev/goray/state"
)

// TimelineTasks is how many of the newest tasks the page's timeline
// draws.
const TimelineTasks = 500

// Timeline drawing sizes (SVG user units).
const (
	tlLabelWidth = 390
	tlPlotWidth  = 900
	tlLaneHeight = 22
	tlAxis       = 24
	// tlLabelRunes is the longest lane label that fits tlLabelWidth.
	tlLabelRunes = 60
)

// timelineView is a trace laid out for the SVG: one lane per thread of
// the trace (a worker's runs, or its queue), grouped by process (node).
type timelineView struct {
	Width, Height int
	PlotX         int
	Lanes         []laneView
	Ticks         []tickView
	Events        int
}

type laneView struct {
	Label string
	Y     int
	// TextY is the label's baseline.
	TextY int
	Bars  []barView
}

type barView struct {
	X, W   float64
	Y, H   int
	Phase  string
	Title  string
	TaskID string
}

type tickView struct {
	X     float64
	Label string
}

// drawTimeline lays out the complete events of t: time runs left to
// right over the span of all events, one lane per (process, thread).
func drawTimeline(t state.Trace) *timelineView {
	procs := map[int]string{}
	threads := map[[2]int]string{}
	var evs []state.TraceEvent
	var lo, hi int64
	for _, e := range t.TraceEvents {
		switch {
		case e.Ph == "M" && e.Name == "process_name":
			procs[e.Pid], _ = e.Args["name"].(string)
		case e.Ph == "M" && e.Name == "thread_name":
			threads[[2]int{e.Pid, e.Tid}], _ = e.Args["name"].(string)
		case e.Ph == "X":
			end := e.Ts
			if e.Dur != nil {
				end += *e.Dur
			}
			if len(evs) == 0 || e.Ts < lo {
				lo = e.Ts
			}
			if len(evs) == 0 || end > hi {
				hi = end
			}
			evs = append(evs, e)
		}
	}
	v := &timelineView{Width: tlLabelWidth + tlPlotWidth + 10, PlotX: tlLabelWidth, Events: len(evs)}
	if len(evs) == 0 {
		v.Height = tlAxis
		return v
	}
	span := float64(max(hi-lo, 1))
	var keys [][2]int
	seen := map[[2]int]bool{}
	for _, e := range evs {
		k := [2]int{e.Pid, e.Tid}
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b [2]int) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	lane := map[[2]int]int{}
	for i, k := range keys {
		lane[k] = i
		y := tlAxis + i*tlLaneHeight
		label := []rune(procs[k[0]] + " · " + threads[k])
		if len(label) > tlLabelRunes {
			label = append(label[:tlLabelRunes-1], '…')
		}
		v.Lanes = append(v.Lanes, laneView{Label: string(label), Y: y, TextY: y + tlLaneHeight - 7})
	}
	for _, e := range evs {
		i := lane[[2]int{e.Pid, e.Tid}]
		var dur int64
		if e.Dur != nil {
			dur = *e.Dur
		}
		x := float64(tlLabelWidth) + float64(e.Ts-lo)/span*tlPlotWidth
		w := max(float64(dur)/span*tlPlotWidth, 1)
		task, _ := e.Args["task_id"].(string)
		st, _ := e.Args["state"].(string)
		v.Lanes[i].Bars = append(v.Lanes[i].Bars, barView{X: x, W: w, Y: v.Lanes[i].Y + 3, H: tlLaneHeight - 6, Phase: e.Cat, TaskID: task,
			Title: fmt.Sprintf("%s (%s, %s, task %s)", e.Name, time.Duration(dur)*time.Microsecond, st, short(task))})
	}
	v.Height = tlAxis + len(keys)*tlLaneHeight + 4
	for i := range 5 {
		f := float64(i) / 4
		v.Ticks = append(v.Ticks, tickView{X: float64(tlLabelWidth) + f*tlPlotWidth,
			Label: "+" + (time.Duration(f*span) * time.Microsecond).Round(time.Millisecond).String()})
	}
	return v
}

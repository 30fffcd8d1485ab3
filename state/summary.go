package state

import (
	"cmp"
	"maps"
	"slices"
)

// SummaryRow counts the tasks, actors or objects of one function, class
// or call site by state.
type SummaryRow struct {
	// Key is the function (tasks), class (actors) or call site (objects).
	Key string `json:"key"`
	// Kind is the tasks' kind (NORMAL, ACTOR_CREATION, ACTOR_METHOD);
	// empty for actors and objects.
	Kind  string `json:"kind,omitempty"`
	Total int64  `json:"total"`
	// States counts by state (objects: by where they live too, as
	// "where:state").
	States map[string]int64 `json:"states"`
	// Bytes is the objects' total size (objects only).
	Bytes int64 `json:"bytes,omitempty"`
}

// Summary is the answer of `goray summary`.
type Summary struct {
	Rows   []SummaryRow     `json:"rows"`
	Totals map[string]int64 `json:"totals"`
	Total  int64            `json:"total"`
}

// StateKeys returns the states counted in s, in order.
func (s Summary) StateKeys() []string { return slices.Sorted(maps.Keys(s.Totals)) }

type summarizer struct {
	idx map[[2]string]int
	s   Summary
}

func newSummarizer() *summarizer {
	return &summarizer{idx: map[[2]string]int{}, s: Summary{Rows: []SummaryRow{}, Totals: map[string]int64{}}}
}

func (z *summarizer) add(key, kind, state string, bytes int64) {
	if key == "" {
		key = "(unknown)"
	}
	k := [2]string{key, kind}
	i, ok := z.idx[k]
	if !ok {
		i = len(z.s.Rows)
		z.idx[k] = i
		z.s.Rows = append(z.s.Rows, SummaryRow{Key: key, Kind: kind, States: map[string]int64{}})
	}
	r := &z.s.Rows[i]
	r.Total++
	r.States[state]++
	r.Bytes += bytes
	z.s.Totals[state]++
	z.s.Total++
}

func (z *summarizer) done() Summary {
	slices.SortStableFunc(z.s.Rows, func(a, b SummaryRow) int {
		return cmp.Or(cmp.Compare(b.Total, a.Total), cmp.Compare(a.Key, b.Key), cmp.Compare(a.Kind, b.Kind))
	})
	return z.s
}

// SummarizeTasks counts the task attempts by function and state.
func SummarizeTasks(rows []TaskRow) Summary {
	z := newSummarizer()
	for _, r := range rows {
		key := r.Function
		if r.ActorClass != "" && r.Kind != "ACTOR_CREATION" {
			key = r.ActorClass + "." + r.Function
		}
		z.add(key, r.Kind, r.State, 0)
	}
	return z.done()
}

// ActorSummaryInput is what SummarizeActors needs of an actor.
type ActorSummaryInput struct {
	Class string
	State string
}

// SummarizeActors counts the actors by class and state.
func SummarizeActors(actors []ActorSummaryInput) Summary {
	z := newSummarizer()
	for _, a := range actors {
		z.add(a.Class, "", a.State, 0)
	}
	return z.done()
}

// SummarizeObjects counts the objects by call site, where they live and
// state, with their total size.
func SummarizeObjects(rows []ObjectRow) Summary {
	z := newSummarizer()
	for _, o := range rows {
		st := o.State
		if st == "" {
			st = "UNOWNED"
		}
		z.add(o.CallSite, "", o.Where+":"+st, max(o.Size, 0))
	}
	return z.done()
}

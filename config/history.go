package config

import (
	"github.com/hashicorp/hcl/v2"
)

// GCSHistory is the gcs block's history block: how much of the cluster's
// past the head's GCS keeps. Past each cap the entities that ended first
// are dropped, from the GCS's memory and its storage, and counted (`goray
// status` and `goray list` say how many); nothing alive is dropped. The
// defaults are Ray's:
//
//	gcs {
//	  history {
//	    dead_nodes               = 1000    # Ray's maximum_gcs_dead_node_cached_count
//	    dead_actors              = 100000  # Ray's maximum_gcs_destroyed_actor_cached_count
//	    finished_jobs            = 10000   # also the job supervisor's records and driver logs
//	    removed_placement_groups = 1000
//	    task_events              = 100000  # task attempts; Ray's task_events_max_num_task_in_gcs
//	  }
//	}
//
// Each is a count of at least 1; a field left out (zero) takes its
// default. Only the head uses the block.
type GCSHistory struct {
	DeadNodes              int
	DeadActors             int
	FinishedJobs           int
	RemovedPlacementGroups int
	TaskEvents             int
}

// Defaults of GCSHistory.
const (
	DefaultHistoryDeadNodes              = 1000
	DefaultHistoryDeadActors             = 100000
	DefaultHistoryFinishedJobs           = 10000
	DefaultHistoryRemovedPlacementGroups = 1000
	DefaultHistoryTaskEvents             = 100000
)

// historyFields are the history block's settings: name, default and where
// GCSHistory keeps them.
var historyFields = []struct {
	name string
	def  int
	ptr  func(h *GCSHistory) *int
}{
	{"dead_nodes", DefaultHistoryDeadNodes, func(h *GCSHistory) *int { return &h.DeadNodes }},
	{"dead_actors", DefaultHistoryDeadActors, func(h *GCSHistory) *int { return &h.DeadActors }},
	{"finished_jobs", DefaultHistoryFinishedJobs, func(h *GCSHistory) *int { return &h.FinishedJobs }},
	{"removed_placement_groups", DefaultHistoryRemovedPlacementGroups, func(h *GCSHistory) *int { return &h.RemovedPlacementGroups }},
	{"task_events", DefaultHistoryTaskEvents, func(h *GCSHistory) *int { return &h.TaskEvents }},
}

// keyGCSHistory is the history block's header.
const keyGCSHistory = "gcs.history"

var historySchema = func() *hcl.BodySchema {
	s := &hcl.BodySchema{}
	for _, f := range historyFields {
		s.Attributes = append(s.Attributes, hcl.AttributeSchema{Name: f.name})
	}
	return s
}()

// gcsHistory decodes the gcs block's history block (b may be nil).
func (d *decoder) gcsHistory(b *hcl.Block) {
	if b == nil {
		return
	}
	d.n.ranges[keyGCSHistory] = b.DefRange
	c := d.content(b.Body, historySchema)
	for _, f := range historyFields {
		d.intVal(c.Attributes[f.name], keyGCSHistory+"."+f.name, f.ptr(&d.n.GCS.History))
	}
}

// gcsHistory checks the history block: every cap at least 1, and a
// warning on a node that is not the head (which ignores it).
func (v *validator) gcsHistory() {
	h := v.n.GCS.History
	for _, f := range historyFields {
		key := keyGCSHistory + "." + f.name
		if n := *f.ptr(&h); n < 0 || (n == 0 && v.fromFile(key)) {
			v.errorf(key, "Invalid count",
				"%s is how many of them the GCS keeps once they ended (the oldest are dropped past it) and must be at least 1, got %d; leave it out for %d.",
				key, n, f.def)
		}
	}
	if _, inFile := v.n.ranges[keyGCSHistory]; inFile && !v.n.Head {
		v.warnf(keyGCSHistory, "GCS history settings on a node that is not the head",
			"The history block is only used by the head's GCS; this node joins a head and ignores it. Remove it here, or make this node the head (head block or --head).")
	}
}

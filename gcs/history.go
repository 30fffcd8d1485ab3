package gcs

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	"github.com/goray-dev/goray/gcs/internal/store"
	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
)

// The GCS's bounded history. A cluster that runs for months sees nodes,
// actors, jobs and placement groups come and go; the GCS keeps the dead,
// finished and removed ones for listings, but only up to a cap per kind
// (Ray's defaults: maximum_gcs_dead_node_cached_count,
// maximum_gcs_destroyed_actor_cached_count, task_events_max_num_task_in_gcs).
// Past it, the ones that ended first are dropped, from memory and, through
// the journal, from the storage, and counted; the counts are kept in the
// storage's meta table, so they and the caps hold across GCS restarts (a
// restored GCS with more than a cap drops the excess as it reads the
// tables back). Nothing alive is ever dropped, nor a finished job that a
// live actor still belongs to (a detached actor outliving its job: it is
// restarted with its job's binary, and new work of a finished job must
// stay refused). Task events live in memory only, under the cap of their
// own store (taskevents.go).

// HistoryLimits caps the GCS's history (Options.History; the head's
// gcs { history { ... } } block). Zero fields take the defaults.
type HistoryLimits struct {
	// DeadNodes is how many dead nodes are kept (default 1000, Ray's
	// maximum_gcs_dead_node_cached_count).
	DeadNodes int
	// DeadActors is how many dead actors are kept (default 100000, Ray's
	// maximum_gcs_destroyed_actor_cached_count).
	DeadActors int
	// FinishedJobs is how many finished jobs are kept (default 10000,
	// the job supervisor's bound of its records), besides those a live
	// actor still belongs to.
	FinishedJobs int
	// RemovedPlacementGroups is how many removed placement groups are
	// kept (default 1000).
	RemovedPlacementGroups int
	// TaskEvents is how many task attempts the task event store keeps
	// (default 100000, Ray's task_events_max_num_task_in_gcs); it sets
	// Options.TaskEvents.MaxTasks when that is zero.
	TaskEvents int
}

// Defaults of HistoryLimits.
const (
	DefaultMaxDeadNodes              = 1000
	DefaultMaxDeadActors             = 100000
	DefaultMaxFinishedJobs           = 10000
	DefaultMaxRemovedPlacementGroups = 1000
	DefaultMaxTaskEvents             = DefaultMaxTasks
)

func (l HistoryLimits) withDefaults() HistoryLimits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.DeadNodes, DefaultMaxDeadNodes)
	def(&l.DeadActors, DefaultMaxDeadActors)
	def(&l.FinishedJobs, DefaultMaxFinishedJobs)
	def(&l.RemovedPlacementGroups, DefaultMaxRemovedPlacementGroups)
	def(&l.TaskEvents, DefaultMaxTaskEvents)
	return l
}

// historyKind names a kind of the history: its table and its count's key
// in the meta table.
type historyKind int

const (
	histNodes historyKind = iota
	histActors
	histJobs
	histGroups
	numHistoryKinds
)

var historyKinds = [numHistoryKinds]struct {
	table, metaKey, what string
}{
	histNodes:  {tableNodes, "history_dropped_nodes", "dead nodes"},
	histActors: {tableActors, "history_dropped_actors", "dead actors"},
	histJobs:   {tableJobs, "history_dropped_jobs", "finished jobs"},
	histGroups: {tableGroups, "history_dropped_placement_groups", "removed placement groups"},
}

// endedQueue holds the ids of ended entities (dead, finished, removed) of
// one kind, in the order they ended, oldest first.
type endedQueue struct {
	q    []ids.ID
	head int
}

func (e *endedQueue) push(id ids.ID) { e.q = append(e.q, id) }
func (e *endedQueue) len() int       { return len(e.q) - e.head }

// items returns the queue, oldest first (shared: do not keep it).
func (e *endedQueue) items() []ids.ID { return e.q[e.head:] }

// pop drops the oldest.
func (e *endedQueue) pop() {
	e.q[e.head] = ids.Nil
	e.head++
	if e.head > 64 && e.head > len(e.q)/2 {
		e.q = slices.Clip(append(e.q[:0:0], e.q[e.head:]...))
		e.head = 0
	}
}

// keep keeps only the ids keep returns true for, in order.
func (e *endedQueue) keep(keep func(ids.ID) bool) {
	out := make([]ids.ID, 0, e.len())
	for _, id := range e.items() {
		if keep(id) {
			out = append(out, id)
		}
	}
	e.q, e.head = out, 0
}

// history is the server's part of the bounded history: the ended nodes,
// actors and jobs in the order they ended and the counts dropped, guarded
// by s.mu (the placement groups' by their manager's lock).
type history struct {
	limits  HistoryLimits
	nodes   endedQueue
	actors  endedQueue
	jobs    endedQueue
	dropped [numHistoryKinds]int64
}

// removeIDs removes drop from order, in place (order keeps its order).
func removeIDs(order []ids.ID, drop map[ids.ID]bool) []ids.ID {
	if len(drop) == 1 {
		for id := range drop {
			if i := slices.Index(order, id); i >= 0 {
				return slices.Delete(order, i, i+1)
			}
		}
		return order
	}
	return slices.DeleteFunc(order, func(id ids.ID) bool { return drop[id] })
}

// pruneHistoryLocked drops the dead nodes, dead actors and finished jobs
// past their caps, the ones that ended first first, from memory and from
// the storage, and counts them. s.mu must be held, and no caller up the
// stack may be iterating the tables: handlers defer it right after taking
// the lock, so that it runs after their loops and before the unlock.
func (s *Server) pruneHistoryLocked() {
	h := &s.hist
	if n := s.pruneQueueLocked(histNodes, &h.nodes, h.limits.DeadNodes, func(id ids.ID) {
		delete(s.nodes, id)
	}); len(n) > 0 {
		s.nodeOrder = removeIDs(s.nodeOrder, n)
	}
	if a := s.pruneQueueLocked(histActors, &h.actors, h.limits.DeadActors, func(id ids.ID) {
		delete(s.actors, id)
	}); len(a) > 0 {
		s.actorSeq = removeIDs(s.actorSeq, a)
	}
	if h.jobs.len() > h.limits.FinishedJobs {
		// A finished job a live actor belongs to stays (see above).
		referenced := map[ids.ID]bool{}
		for _, a := range s.actors {
			if a.info.GetState() != gorayv1.ActorState_ACTOR_STATE_DEAD {
				referenced[ids.MustFromBytes(a.info.GetJobId())] = true
			}
		}
		// They do not count against the cap either: it bounds the
		// others.
		unreferenced := 0
		for _, id := range h.jobs.items() {
			if !referenced[id] {
				unreferenced++
			}
		}
		drop := map[ids.ID]bool{}
		for _, id := range h.jobs.items() {
			if len(drop) >= unreferenced-h.limits.FinishedJobs {
				break
			}
			if !referenced[id] {
				drop[id] = true
			}
		}
		if len(drop) > 0 {
			h.jobs.keep(func(id ids.ID) bool { return !drop[id] })
			for id := range drop {
				delete(s.jobs, id)
				s.dropRecordLocked(tableJobs, id)
			}
			s.jobOrder = removeIDs(s.jobOrder, drop)
			s.countDroppedLocked(histJobs, len(drop))
		}
	}
}

// pruneQueueLocked drops the oldest of q past limit with forget, deletes
// their records and counts them; it returns the dropped ids.
func (s *Server) pruneQueueLocked(k historyKind, q *endedQueue, limit int, forget func(ids.ID)) map[ids.ID]bool {
	if q.len() <= limit {
		return nil
	}
	drop := make(map[ids.ID]bool, q.len()-limit)
	for q.len() > limit {
		id := q.items()[0]
		q.pop()
		drop[id] = true
		forget(id)
		s.dropRecordLocked(historyKinds[k].table, id)
	}
	s.countDroppedLocked(k, len(drop))
	return drop
}

// dropRecordLocked deletes a dropped entity's record: through the
// journal, or in the batch of the restore under way.
func (s *Server) dropRecordLocked(table string, id ids.ID) {
	switch {
	case s.restoring != nil:
		s.restoring.batch = append(s.restoring.batch, store.Write{Table: table, Key: id.String(), Delete: true})
	case s.journal != nil:
		s.journal.del(table, id.String())
	}
}

// saveDroppedLocked saves kind k's count of dropped entities in the meta
// table, as dropRecordLocked deletes.
func (s *Server) saveDroppedLocked(k historyKind, n int64) {
	v := []byte(strconv.FormatInt(n, 10))
	switch {
	case s.restoring != nil:
		s.restoring.batch = append(s.restoring.batch, store.Write{Table: tableMeta, Key: historyKinds[k].metaKey, Value: v})
	case s.journal != nil:
		s.journal.putRaw(tableMeta, historyKinds[k].metaKey, v)
	}
}

// countDroppedLocked adds n to kind k's count and saves it.
func (s *Server) countDroppedLocked(k historyKind, n int) {
	s.hist.dropped[k] += int64(n)
	s.log.Debug("history: dropped the oldest past the cap", "kind", historyKinds[k].what, "dropped", n, "total", s.hist.dropped[k])
	s.saveDroppedLocked(k, s.hist.dropped[k])
}

// pruneLocked drops the removed placement groups past their cap,
// the ones removed first first, from memory and the storage, and counts
// them (in the meta table, as the others). p.mu must be held.
func (p *placementGroups) pruneLocked() {
	limit := p.s.hist.limits.RemovedPlacementGroups
	if p.ended.len() <= limit {
		return
	}
	drop := map[ids.ID]bool{}
	for p.ended.len() > limit {
		id := p.ended.items()[0]
		p.ended.pop()
		drop[id] = true
		delete(p.groups, id)
		p.s.dropRecordLocked(tableGroups, id)
	}
	p.order = removeIDs(p.order, drop)
	p.dropped += int64(len(drop))
	p.s.saveDroppedLocked(histGroups, p.dropped)
}

// restoreHistory rebuilds the ended queues of the restored tables (in the
// order the entities ended), reads the dropped counts back from meta, and
// drops what is past the caps now (a GCS restarted with smaller caps, or
// a storage written by a GCS that did not prune): their records are
// deleted in the restore's batch, with the updated counts. A count that
// is not a number is set aside and starts again from zero.
func (s *Server) restoreHistory(r *restorer, meta map[string][]byte) {
	h := &s.hist
	p := s.pgs
	for k := range numHistoryKinds {
		raw, ok := meta[historyKinds[k].metaKey]
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil || n < 0 {
			key := historyKinds[k].metaKey
			r.setAside(tableMeta, key, raw, &StoredRecordError{Table: tableMeta, Key: key, Err: fmt.Errorf("not a count of %s dropped: %q", historyKinds[k].what, clip(string(raw)))}, false)
			continue
		}
		if k == histGroups {
			p.dropped = n
		} else {
			h.dropped[k] = n
		}
	}
	ended := func(q *endedQueue, order []ids.ID, isEnded func(ids.ID) bool, at func(ids.ID) int64) {
		var xs []ids.ID
		for _, id := range order {
			if isEnded(id) {
				xs = append(xs, id)
			}
		}
		slices.SortStableFunc(xs, func(a, b ids.ID) int { return cmp.Compare(at(a), at(b)) })
		for _, id := range xs {
			q.push(id)
		}
	}
	ended(&h.nodes, s.nodeOrder, func(id ids.ID) bool { return s.nodes[id].info.GetState() == StateDead },
		func(id ids.ID) int64 { return s.nodes[id].info.GetEndTimeMs() })
	ended(&h.actors, s.actorSeq, func(id ids.ID) bool { return s.actors[id].info.GetState() == gorayv1.ActorState_ACTOR_STATE_DEAD },
		func(id ids.ID) int64 { return s.actors[id].info.GetEndTimeMs() })
	ended(&h.jobs, s.jobOrder, func(id ids.ID) bool { return s.jobs[id].GetState() == StateFinished },
		func(id ids.ID) int64 { return s.jobs[id].GetEndTimeMs() })
	ended(&p.ended, p.order, func(id ids.ID) bool {
		return p.groups[id].info.GetState() == gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_REMOVED
	}, func(id ids.ID) int64 { return p.groups[id].info.GetRemoveTimeMs() })

	// Prune: with no journal yet, the deletions and counts go into the
	// restore's batch (dropRecordLocked, countDroppedLocked).
	before, groupsBefore := h.dropped, p.dropped
	s.restoring = r
	s.pruneHistoryLocked() // (no lock needed yet: nothing serves)
	p.pruneLocked()
	s.restoring = nil
	for k := range numHistoryKinds {
		was, now := before[k], h.dropped[k]
		if k == histGroups {
			was, now = groupsBefore, p.dropped
		}
		if now != was {
			s.log.Info("history: a restored table held more than its cap; the oldest are dropped", "kind", historyKinds[k].what,
				"dropped", now-was, "cap", s.historyCap(k))
		}
	}
}

// historyCap is kind k's cap.
func (s *Server) historyCap(k historyKind) int {
	l := s.hist.limits
	switch k {
	case histNodes:
		return l.DeadNodes
	case histActors:
		return l.DeadActors
	case histJobs:
		return l.FinishedJobs
	}
	return l.RemovedPlacementGroups
}

// History describes the bounded history: per kind, how many are kept,
// the cap and how many were dropped (GetClusterInfo's history).
func (s *Server) History() *gorayv1.History {
	h := &gorayv1.History{}
	s.mu.Lock()
	h.DeadNodes = &gorayv1.HistoryBound{Kept: int64(s.hist.nodes.len()), Cap: int64(s.hist.limits.DeadNodes), Dropped: s.hist.dropped[histNodes]}
	h.DeadActors = &gorayv1.HistoryBound{Kept: int64(s.hist.actors.len()), Cap: int64(s.hist.limits.DeadActors), Dropped: s.hist.dropped[histActors]}
	h.FinishedJobs = &gorayv1.HistoryBound{Kept: int64(s.hist.jobs.len()), Cap: int64(s.hist.limits.FinishedJobs), Dropped: s.hist.dropped[histJobs]}
	s.mu.Unlock()
	p := s.pgs
	p.mu.Lock()
	h.RemovedPlacementGroups = &gorayv1.HistoryBound{Kept: int64(p.ended.len()), Cap: int64(s.hist.limits.RemovedPlacementGroups), Dropped: p.dropped}
	p.mu.Unlock()
	t := s.taskEvents
	t.mu.Lock()
	h.TaskEvents = &gorayv1.HistoryBound{Kept: int64(len(t.tasks)), Cap: int64(t.limits.MaxTasks), Dropped: t.evicted}
	t.mu.Unlock()
	return h
}

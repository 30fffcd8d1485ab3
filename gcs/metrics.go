package gcs

import (
	"strings"

	"github.com/goray-dev/goray/internal/metrics"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// MetricsStats counts the cluster's tasks, actors, nodes and jobs by
// state, and the storage's records set aside (restore.go), for the head's
// metrics (metrics.ClusterCollector calls it at each
// scrape). Actor states are named as `goray list actors` shows them
// (ALIVE, DEAD, PENDING, RESTARTING); every actor state is present.
func (s *Server) MetricsStats() metrics.ClusterStats {
	st := metrics.ClusterStats{Tasks: s.TaskStateCounts(), Actors: map[string]int64{}, Nodes: map[string]int64{}, Jobs: map[string]int64{}, StorageSetAside: s.setAside}
	for _, name := range gorayv1.ActorState_name {
		st.Actors[actorStateName(gorayv1.ActorState(gorayv1.ActorState_value[name]))] = 0
	}
	st.Nodes[StateAlive], st.Nodes[StateDead] = 0, 0
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.actors {
		st.Actors[actorStateName(a.info.GetState())]++
	}
	for _, n := range s.nodes {
		if n.viewableLocked() { // as views show them (restore.go)
			st.Nodes[n.info.GetState()]++
		}
	}
	for _, j := range s.jobs {
		st.Jobs[j.GetState()]++
	}
	return st
}

// actorStateName is st without its enum prefix ("ALIVE").
func actorStateName(st gorayv1.ActorState) string {
	return strings.TrimPrefix(st.String(), "ACTOR_STATE_")
}

package gcs

import (
	"slices"
	"time"
)

// Node health: a node is declared dead when the GCS has not heard from it
// for FailureThreshold heartbeat periods (the limit), or for twice that
// while the GCS itself is behind. A heartbeat counts when the GCS handles
// it, not when the node sent it, so a GCS too busy to read heartbeats (a
// thousand nodes joining at once, each first refresh a whole table:
// docs/scale.md) sees nodes fall silent together, and would turn its own
// lateness into deaths. The evidence of a node's death is its silence
// compared with the others':
//
//   - the GCS is behind when more than half its alive nodes have not been
//     heard from for more than two periods (the lower median of their
//     silences exceeds two periods: nodes report every period or more
//     often). Its lateness is then uneven (some nodes' heartbeats wait
//     much longer than others'), so the median alone is no measure of it:
//     the limit doubles while the GCS is behind;
//   - otherwise a node silent for the limit is declared dead, as before.
//
// So a node that stopped is declared dead within the limit plus one
// period while at least half the others report on time, and within twice
// the limit plus one period in any case: when the GCS is behind, or more
// than half the nodes stopped at once (a one-node cluster's node too).
// A GCS that reads no heartbeat for longer than twice the limit declares
// its nodes dead. With the defaults (1 s × 5) that is 6 s and 11 s.

// behindFactor: the GCS is behind when the lower median of silences
// exceeds this many periods.
const behindFactor = 2

// healthGrace returns the extra silence the health check allows a node:
// limit while the GCS is behind (the lower median of silences, each alive
// node's time since its last heartbeat, exceeds behindFactor periods),
// else 0. It sorts silences.
func healthGrace(silences []time.Duration, period, limit time.Duration) time.Duration {
	if len(silences) == 0 {
		return 0
	}
	slices.Sort(silences)
	if silences[(len(silences)-1)/2] > behindFactor*period {
		return limit
	}
	return 0
}

// noteGraceLocked records the grace of a health check and logs when the
// GCS falls behind reading heartbeats and when it caught up. s.mu must be
// held.
func (s *Server) noteGraceLocked(grace time.Duration) {
	switch {
	case grace > 0 && s.grace == 0:
		s.log.Warn("the GCS is behind reading heartbeats: more than half the nodes unheard for two periods; nodes are declared dead after twice the limit", "limit", grace)
	case grace == 0 && s.grace > 0:
		s.log.Info("the GCS reads heartbeats on time again")
	}
	s.grace = grace
}

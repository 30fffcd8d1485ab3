package memory

import (
	"cmp"
	"slices"
	"time"
)

// Candidate is a worker the memory monitor may kill: one running work
// under a lease.
type Candidate struct {
	// Key names the worker to the caller (the policy never reads it).
	Key any
	// Owner is the process that holds the lease (its submitter).
	Owner string
	// Retriable: a task that has retries left, or an actor that may
	// restart.
	Retriable bool
	// Actor: the worker hosts an actor.
	Actor bool
	// Granted is when the worker was leased: the newest is killed first.
	Granted time.Time
}

// Tiers, killed in this order: retriable tasks, other tasks, actors that
// restart, other actors. Ray prefers retriable work; goray also spares
// actors (whose state a kill loses) while any task is left.
func tier(c Candidate) int {
	t := 0
	if !c.Retriable {
		t++
	}
	if c.Actor {
		t += 2
	}
	return t
}

// Pick chooses which candidate to kill, after Ray's group-by-owner
// policy: candidates are grouped by tier and, within a retriable tier, by
// owner (the non-retriable work of a tier is one group); the groups of
// the lowest tier come first, the largest group of it, and among groups
// of one size the one whose first lease is newest; in that group the
// newest lease is killed. Killing the newest of the largest group spares
// the work that has run longest and thins out the owner submitting the
// most. ok is false when there is no candidate. why says in words why
// the chosen one was picked.
func Pick(cs []Candidate) (i int, why string, ok bool) {
	if len(cs) == 0 {
		return -1, "", false
	}
	type groupKey struct {
		tier  int
		owner string
	}
	type group struct {
		key      groupKey
		members  []int
		earliest time.Time
	}
	groups := map[groupKey]*group{}
	var order []*group
	for i, c := range cs {
		k := groupKey{tier: tier(c)}
		if c.Retriable {
			k.owner = c.Owner
		}
		g := groups[k]
		if g == nil {
			g = &group{key: k, earliest: c.Granted}
			groups[k] = g
			order = append(order, g)
		}
		g.members = append(g.members, i)
		if c.Granted.Before(g.earliest) {
			g.earliest = c.Granted
		}
	}
	slices.SortStableFunc(order, func(a, b *group) int {
		if c := cmp.Compare(a.key.tier, b.key.tier); c != 0 {
			return c
		}
		if c := cmp.Compare(len(b.members), len(a.members)); c != 0 {
			return c
		}
		return b.earliest.Compare(a.earliest) // newest group first
	})
	g := order[0]
	best := g.members[0]
	for _, m := range g.members[1:] {
		if cs[m].Granted.After(cs[best].Granted) {
			best = m
		}
	}
	return best, whyPicked(cs[best], len(g.members)), true
}

func whyPicked(c Candidate, groupSize int) string {
	var kind string
	switch {
	case !c.Actor && c.Retriable:
		kind = "retriable task"
	case !c.Actor:
		kind = "task that cannot be retried"
	case c.Retriable:
		kind = "actor that may restart (no task was left to kill)"
	default:
		kind = "actor that cannot restart (nothing else was left to kill)"
	}
	s := "it was the most recently started " + kind
	if groupSize > 1 && c.Retriable && !c.Actor {
		s += " of the owner with the most such tasks on the node"
	}
	return s
}

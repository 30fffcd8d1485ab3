package ray

import (
	"fmt"

	"github.com/goray-dev/goray/internal/limits"
	"github.com/goray-dev/goray/sdk/ray/internal/core"
)

// Concurrency groups (Ray's concurrency_groups): an actor declares named
// groups, each with its own limit, and each call runs in one of them, so
// that the calls of one group never wait for another's.
//
//	A := ray.Actor0(NewService, ray.ConcurrencyGroup("io", 2), ray.ConcurrencyGroup("compute", 4))
//	Fetch := ray.Method1((*Service).Fetch, ray.InGroup("io"))
//	Health := ray.Method0((*Service).Health) // the default group
//	Crunch := ray.Method1((*Service).Crunch, ray.InGroup("compute"))
//	r := Health.On(h).Options(ray.InGroup("io")).Remote(ctx) // this call in "io"
//
// See docs/concurrency-groups.md.

// ConcurrencyGroup declares a concurrency group of an actor: up to limit
// calls of the methods in group name (InGroup) run at once, whatever the
// actor's other groups are doing, in the order they arrived at the actor
// (a group of limit 1 runs them one at a time). Methods in no group run in
// the default group, whose limit is MaxConcurrency. Give it once per
// group; a later declaration of the same name (say in Options) replaces
// the earlier one. An empty name, one over 256 bytes, a limit outside 1
// to MaxGroupLimit or more than MaxConcurrencyGroups groups fail the
// creation with an error naming the group.
func ConcurrencyGroup(name string, limit int) Option {
	return func(c *callOptions) {
		c.groups = append(c.groups, groupDecl{name: name, limit: limit})
	}
}

// groupDecl is one ConcurrencyGroup option.
type groupDecl struct {
	name  string
	limit int
}

// actorGroups checks the concurrency groups declared for actor class name
// and sets them in o.
func (c callOptions) actorGroups(name string, o *core.TaskOptions) error {
	if len(c.groups) == 0 {
		return nil
	}
	o.ConcurrencyGroups = make(map[string]int, len(c.groups))
	for _, g := range c.groups {
		switch {
		case g.name == "":
			return fmt.Errorf("goray: %s: ConcurrencyGroup(%q, %d): a group needs a name (the default group's limit is MaxConcurrency)", name, g.name, g.limit)
		case len(g.name) > limits.MaxTaskNameLen:
			return fmt.Errorf("goray: %s: ConcurrencyGroup(%.32q..., %d): the name has %d bytes, more than the %d allowed", name, g.name, g.limit, len(g.name), limits.MaxTaskNameLen)
		case g.limit < 1 || g.limit > MaxGroupLimit:
			return fmt.Errorf("goray: %s: ConcurrencyGroup(%q, %d): the limit must be from 1 to %d", name, g.name, g.limit, MaxGroupLimit)
		}
		o.ConcurrencyGroups[g.name] = g.limit
	}
	if len(o.ConcurrencyGroups) > MaxConcurrencyGroups {
		return fmt.Errorf("goray: %s: %d concurrency groups, more than the %d allowed", name, len(o.ConcurrencyGroups), MaxConcurrencyGroups)
	}
	return nil
}

// Bounds of ConcurrencyGroup: how many groups an actor may declare, and
// the largest limit of one.
const (
	MaxConcurrencyGroups = 256
	MaxGroupLimit        = 1 << 20
)

// MethodOption sets an option of an actor method: given to MethodN it
// applies to every call of the method, given to Options to the calls made
// through the copy it returns.
type MethodOption func(*methodBase)

// InGroup runs the method's calls in the actor's concurrency group name
// (declared with ConcurrencyGroup); "" means the default group. A call
// naming a group its actor does not declare fails with an
// *UnknownConcurrencyGroupError (ErrUnknownConcurrencyGroup), at
// submission when the caller knows the actor's groups (it created the
// actor, or a call has reached it), else from the actor.
func InGroup(name string) MethodOption { return func(m *methodBase) { m.group = name } }

// ErrUnknownConcurrencyGroup matches a call naming a concurrency group its
// actor does not declare; see *UnknownConcurrencyGroupError.
var ErrUnknownConcurrencyGroup = core.ErrUnknownConcurrencyGroup

// UnknownConcurrencyGroupError says an actor call named a concurrency group
// its actor does not declare. It names the group, the actor and the groups
// it declares (Group, ActorID, Class and Groups are set when the caller
// found the error; when the actor did, its message says all that and
// Detail holds it). It matches ErrUnknownConcurrencyGroup.
type UnknownConcurrencyGroupError = core.UnknownConcurrencyGroupError

// withOptions returns m with opts applied.
func (m methodBase) withOptions(opts []MethodOption) methodBase {
	for _, o := range opts {
		o(&m)
	}
	return m
}

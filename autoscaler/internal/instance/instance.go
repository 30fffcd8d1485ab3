package instance

import (
	"errors"
	"fmt"
	"time"
)

// Default timeouts.
const (
	// DefaultAllocateTimeout is how long a requested instance may take to
	// be listed by the provider (cloud capacity can take minutes).
	DefaultAllocateTimeout = 10 * time.Minute
	// DefaultInstallTimeout is how long an allocated instance may take to
	// join the cluster.
	DefaultInstallTimeout = 5 * time.Minute
	// DefaultTerminateTimeout is how long a terminating instance may stay
	// listed by the provider.
	DefaultTerminateTimeout = 5 * time.Minute
	// DefaultHistoryLimit is how many history entries an instance keeps.
	DefaultHistoryLimit = 32
)

// Timeouts bound the states that wait for something outside the
// autoscaler. A zero field means its default.
type Timeouts struct {
	// AllocateTimeout bounds Requested: not listed by the provider in time
	// moves the instance to AllocationFailed.
	AllocateTimeout time.Duration
	// InstallTimeout bounds Allocated and Installing together, from
	// entering the first of them: not joined in time moves the instance to
	// InstallFailed.
	InstallTimeout time.Duration
	// TerminateTimeout bounds Terminating: still listed after it moves the
	// instance to TerminationFailed.
	TerminateTimeout time.Duration
}

// timeout returns the timeout of state s, the failure state it expires
// to and whether s has one.
func (t Timeouts) timeout(s State) (time.Duration, State, bool) {
	pick := func(d, def time.Duration) time.Duration {
		if d > 0 {
			return d
		}
		return def
	}
	switch s {
	case Requested:
		return pick(t.AllocateTimeout, DefaultAllocateTimeout), AllocationFailed, true
	case Allocated, Installing:
		return pick(t.InstallTimeout, DefaultInstallTimeout), InstallFailed, true
	case Terminating:
		return pick(t.TerminateTimeout, DefaultTerminateTimeout), TerminationFailed, true
	}
	return 0, 0, false
}

// ErrInvalidTransition is what every TransitionError matches with
// errors.Is.
var ErrInvalidTransition = errors.New("invalid instance transition")

// TransitionError is an event that is not valid in the instance's state.
type TransitionError struct {
	// Instance is the instance's ID.
	Instance string
	// State is the state the instance is in (and stays in).
	State State
	// Event is the refused event.
	Event Event
}

// Error names the instance, its state and the event.
func (e *TransitionError) Error() string {
	return fmt.Sprintf("instance %q: event %s is not valid in state %s", e.Instance, e.Event, e.State)
}

// Is makes errors.Is(err, ErrInvalidTransition) true.
func (e *TransitionError) Is(target error) bool { return target == ErrInvalidTransition }

// Entry is one entry of an instance's history: the state it entered, when
// and why.
type Entry struct {
	// State is the state entered.
	State State
	// At is when.
	At time.Time
	// Event is the event that moved it (0 for the first entry).
	Event EventKind
	// Reason says why: the event's reason, or a description of the event
	// or of the expired timeout.
	Reason string
}

// Instance is one instance the autoscaler launches or adopted. Only Apply
// changes its state; the identifying fields are the caller's to keep.
type Instance struct {
	// ID is the autoscaler's id of the instance.
	ID string
	// NodeType is the node type it was launched as.
	NodeType string
	// RequestID is the launch request that creates it.
	RequestID string
	// ProviderID is the provider's instance id, once listed.
	ProviderID string
	// NodeID is its node's id, once joined.
	NodeID string
	// Timeouts bound its waiting states.
	Timeouts Timeouts
	// HistoryLimit is how many history entries it keeps (0: the default).
	HistoryLimit int

	state        State
	since        time.Time // when state was entered
	installStart time.Time // when Allocated or Installing was entered
	history      []Entry
}

// New returns a Queued instance.
func New(id, nodeType string, now time.Time) *Instance {
	i := &Instance{ID: id, NodeType: nodeType}
	i.enter(Queued, now, 0, "queued for launch")
	return i
}

// Adopt returns an instance found in the provider's list (by a restarted
// autoscaler): pending is Allocated, running Installing (a NodeJoined
// moves it on) and terminating Terminating. Its install timeout starts
// now.
func Adopt(id, nodeType string, listed ProviderState, now time.Time) (*Instance, error) {
	var s State
	switch listed {
	case ProviderPending:
		s = Allocated
	case ProviderRunning:
		s = Installing
	case ProviderTerminating:
		s = Terminating
	default:
		return nil, fmt.Errorf("instance %q: cannot adopt an instance the provider lists as %q (want %q, %q or %q)",
			id, listed, ProviderPending, ProviderRunning, ProviderTerminating)
	}
	i := &Instance{ID: id, NodeType: nodeType}
	i.enter(s, now, ProviderListed, fmt.Sprintf("adopted: the provider lists it %s", listed))
	return i, nil
}

// State returns the instance's state.
func (i *Instance) State() State { return i.state }

// Since returns when the instance entered its state.
func (i *Instance) Since() time.Time { return i.since }

// History returns the last HistoryLimit states the instance entered,
// oldest first (a copy).
func (i *Instance) History() []Entry { return append([]Entry(nil), i.history...) }

// Apply applies ev at time now. An event the transition table does not
// allow in the current state returns a *TransitionError (matching
// ErrInvalidTransition) and changes nothing. Tick moves the instance to
// the state's failure state once its timeout expired (Requested:
// AllocationFailed; Allocated, Installing: InstallFailed; Terminating:
// TerminationFailed) and does nothing otherwise. An event that keeps the
// state (a repeated observation) records nothing.
func (i *Instance) Apply(ev Event, now time.Time) error {
	if ev.Kind == Tick && i.state >= Queued && i.state <= TerminationFailed {
		d, to, ok := i.Timeouts.timeout(i.state)
		if !ok {
			return nil
		}
		start := i.since
		if to == InstallFailed {
			start = i.installStart
		}
		if now.Before(start.Add(d)) {
			return nil
		}
		reason := ev.Reason
		if reason == "" {
			switch to {
			case AllocationFailed:
				reason = fmt.Sprintf("the provider did not list it within %s", d)
			case InstallFailed:
				reason = fmt.Sprintf("its node did not join the cluster within %s", d)
			default:
				reason = fmt.Sprintf("the provider still lists it %s after the terminate", d)
			}
		}
		i.enter(to, now, Tick, reason)
		return nil
	}
	to, ok := table[key{i.state, ev.Kind, ev.Listed}]
	if !ok || (ev.Kind != ProviderListed && ev.Listed != "") {
		return &TransitionError{Instance: i.ID, State: i.state, Event: ev}
	}
	if to == i.state {
		return nil
	}
	reason := ev.Reason
	if reason == "" {
		reason = describe(ev)
	}
	i.enter(to, now, ev.Kind, reason)
	return nil
}

// enter moves the instance to s and records it.
func (i *Instance) enter(s State, now time.Time, kind EventKind, reason string) {
	if (s == Allocated || s == Installing) && i.state != Allocated && i.state != Installing {
		i.installStart = now
	}
	i.state, i.since = s, now
	limit := i.HistoryLimit
	if limit <= 0 {
		limit = DefaultHistoryLimit
	}
	if len(i.history) >= limit {
		// Drop the oldest, reusing the array so it never grows past limit.
		n := copy(i.history, i.history[len(i.history)-limit+1:])
		i.history = i.history[:n]
	}
	i.history = append(i.history, Entry{State: s, At: now, Event: kind, Reason: reason})
}

// describe is the default reason of an event.
func describe(ev Event) string {
	switch ev.Kind {
	case LaunchSent:
		return "launch request sent"
	case ProviderListed:
		return fmt.Sprintf("the provider lists it %s", ev.Listed)
	case ProviderGone:
		return "the provider no longer lists it"
	case NodeJoined:
		return "its node joined the cluster"
	case NodeDead:
		return "its node died"
	case Idle:
		return "idle: draining"
	case DrainDone:
		return "drained"
	case DrainRejected:
		return "drain rejected: the node is busy"
	case TerminateSent:
		return "terminate request sent"
	case Error:
		return "the provider reported an error"
	}
	return ev.String()
}

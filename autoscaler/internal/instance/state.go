// Package instance is the autoscaler's view of one instance (a node it
// launches): a state machine driven by what the autoscaler does (launch,
// terminate), what the provider lists and what the GCS says of the node,
// with timeouts checked on Tick events, and a per-node-type failure
// Backoff. It is pure logic: no goroutines, no clocks of its own (every
// call is given the time), not safe for concurrent use (the autoscaler's
// loop owns its instances).
//
// The life of an instance:
//
//	Queued --LaunchSent--> Requested --ProviderListed(pending)--> Allocated
//	  --ProviderListed(running)--> Installing --NodeJoined--> Running
//	  --Idle--> Draining --DrainDone--> Terminating --ProviderGone--> Terminated
//
// with the failure states AllocationFailed (the launch failed or nothing
// was allocated within Timeouts.Allocate), InstallFailed (the instance
// never joined the cluster within Timeouts.Install, or it failed or
// vanished before) and TerminationFailed (the terminate failed or the
// provider still lists the instance after Timeouts.Terminate). From a
// failure state the autoscaler terminates the instance (TerminateSent) and
// counts the failure against the node type (Backoff.Failed). The whole
// table is Transitions.
package instance

import (
	"fmt"
	"slices"
)

// State is where an instance is in its life.
type State int

// The states. The zero State is not one of them.
const (
	// Queued: the autoscaler decided to launch it; no request sent yet.
	Queued State = iota + 1
	// Requested: the launch request was sent to the provider.
	Requested
	// Allocated: the provider lists the instance (pending).
	Allocated
	// Installing: the provider reports the instance running; its node is
	// starting (setup commands, goray start).
	Installing
	// Running: the instance's node registered with the GCS.
	Running
	// Draining: the node is idle and being drained (no new leases, its
	// primary objects moved or spilled) before it is terminated.
	Draining
	// Terminating: the instance is to be or being terminated.
	Terminating
	// Terminated: the provider no longer lists it. Final.
	Terminated
	// AllocationFailed: the launch failed or timed out.
	AllocationFailed
	// InstallFailed: the instance never joined the cluster.
	InstallFailed
	// TerminationFailed: terminating it failed or timed out.
	TerminationFailed
)

var stateNames = [...]string{
	Queued:            "queued",
	Requested:         "requested",
	Allocated:         "allocated",
	Installing:        "installing",
	Running:           "running",
	Draining:          "draining",
	Terminating:       "terminating",
	Terminated:        "terminated",
	AllocationFailed:  "allocation_failed",
	InstallFailed:     "install_failed",
	TerminationFailed: "termination_failed",
}

// States lists every state, in order.
var States = []State{Queued, Requested, Allocated, Installing, Running, Draining, Terminating, Terminated, AllocationFailed, InstallFailed, TerminationFailed}

// String returns the state's name ("allocation_failed").
func (s State) String() string {
	if s > 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// MarshalText encodes the state as its name (for JSON status output).
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Pending reports whether the instance is on its way to running (Queued,
// Requested, Allocated, Installing): capacity the autoscaler counts on.
func (s State) Pending() bool { return s >= Queued && s <= Installing }

// Failed reports whether s is one of the failure states.
func (s State) Failed() bool {
	return s == AllocationFailed || s == InstallFailed || s == TerminationFailed
}

// EventKind is what happened to an instance.
type EventKind int

// The events.
const (
	// LaunchSent: the launch request was sent to the provider.
	LaunchSent EventKind = iota + 1
	// ProviderListed: the provider lists the instance, in Event.Listed.
	ProviderListed
	// ProviderGone: the provider no longer lists an instance it listed.
	ProviderGone
	// NodeJoined: the instance's node registered with the GCS.
	NodeJoined
	// NodeDead: the GCS marked the instance's node dead.
	NodeDead
	// Idle: the node has been idle for the idle timeout; drain it.
	Idle
	// DrainDone: the drain finished; the instance may be terminated.
	DrainDone
	// DrainRejected: the drain was refused or given up (work arrived); the
	// node keeps running.
	DrainRejected
	// TerminateSent: the terminate request was sent to the provider.
	TerminateSent
	// Error: the provider reported an error for the instance (a launch
	// error before it joined, a terminate error while terminating).
	Error
	// Tick: time passed; checks the state's timeout.
	Tick
)

var eventNames = [...]string{
	LaunchSent:     "launch_sent",
	ProviderListed: "provider_listed",
	ProviderGone:   "provider_gone",
	NodeJoined:     "node_joined",
	NodeDead:       "node_dead",
	Idle:           "idle",
	DrainDone:      "drain_done",
	DrainRejected:  "drain_rejected",
	TerminateSent:  "terminate_sent",
	Error:          "error",
	Tick:           "tick",
}

// EventKinds lists every event kind, in order.
var EventKinds = []EventKind{LaunchSent, ProviderListed, ProviderGone, NodeJoined, NodeDead, Idle, DrainDone, DrainRejected, TerminateSent, Error, Tick}

// String returns the event kind's name ("provider_listed").
func (k EventKind) String() string {
	if k > 0 && int(k) < len(eventNames) {
		return eventNames[k]
	}
	return fmt.Sprintf("event(%d)", int(k))
}

// MarshalText encodes the event kind as its name.
func (k EventKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// ProviderState is an instance's state as its provider lists it (the
// provider kind's InstanceState values).
type ProviderState string

// The provider's states.
const (
	// ProviderPending: launched, the node not started yet.
	ProviderPending ProviderState = "pending"
	// ProviderRunning: the instance is up (its node starting or started).
	ProviderRunning ProviderState = "running"
	// ProviderTerminating: the instance is being terminated.
	ProviderTerminating ProviderState = "terminating"
)

// ProviderStates lists the provider's states.
var ProviderStates = []ProviderState{ProviderPending, ProviderRunning, ProviderTerminating}

// Event is something that happened to an instance.
type Event struct {
	// Kind is what happened.
	Kind EventKind
	// Listed is the provider's state of the instance, for ProviderListed.
	Listed ProviderState
	// Reason says why (an error's cause); recorded in the history. Empty:
	// a description of the event.
	Reason string
}

// String describes the event ("provider_listed(running)").
func (e Event) String() string {
	if e.Kind == ProviderListed {
		return fmt.Sprintf("%s(%s)", e.Kind, e.Listed)
	}
	return e.Kind.String()
}

// Transition is one row of the transition table: in state From, event
// Kind (for ProviderListed, with Listed) moves the instance to To. To ==
// From is a valid event that changes nothing (an observation repeated).
type Transition struct {
	// From is the state the event arrives in.
	From State
	// Kind is the event.
	Kind EventKind
	// Listed is the provider's state, for ProviderListed only.
	Listed ProviderState
	// To is the state the event moves the instance to.
	To State
}

// listed expands a ProviderListed row for each provider state, mapping
// terminating to Terminating and the others to to.
func listed(from, to State) []Transition {
	return []Transition{
		{from, ProviderListed, ProviderPending, to},
		{from, ProviderListed, ProviderRunning, to},
		{from, ProviderListed, ProviderTerminating, Terminating},
	}
}

// row is a transition on an event other than ProviderListed.
func row(from State, kind EventKind, to State) Transition {
	return Transition{From: from, Kind: kind, To: to}
}

// Transitions is the transition table: every valid (state, event) pair but
// Tick, which is valid in every state and moves an instance only when the
// state's timeout expired (see Timeouts). Any pair not here is an invalid
// transition.
var Transitions = slices.Concat(
	[]Transition{
		row(Queued, LaunchSent, Requested),
		row(Queued, Error, AllocationFailed),
		row(Queued, TerminateSent, Terminated), // cancelled: nothing was launched

		row(Requested, LaunchSent, Requested), // resent, same request id
		{Requested, ProviderListed, ProviderPending, Allocated},
		{Requested, ProviderListed, ProviderRunning, Installing},
		{Requested, ProviderListed, ProviderTerminating, Terminating},
		row(Requested, NodeJoined, Running),
		row(Requested, Error, AllocationFailed),
		row(Requested, TerminateSent, Terminating),

		{Allocated, ProviderListed, ProviderPending, Allocated},
		{Allocated, ProviderListed, ProviderRunning, Installing},
		{Allocated, ProviderListed, ProviderTerminating, Terminating},
		row(Allocated, NodeJoined, Running),
		row(Allocated, ProviderGone, InstallFailed),
		row(Allocated, Error, InstallFailed),
		row(Allocated, TerminateSent, Terminating),
	},
	listed(Installing, Installing),
	[]Transition{
		row(Installing, NodeJoined, Running),
		row(Installing, ProviderGone, InstallFailed),
		row(Installing, Error, InstallFailed),
		row(Installing, TerminateSent, Terminating),
	},
	listed(Running, Running),
	[]Transition{
		row(Running, NodeJoined, Running),
		row(Running, NodeDead, Terminating),
		row(Running, Idle, Draining),
		row(Running, TerminateSent, Terminating),
		row(Running, ProviderGone, Terminated),
	},
	listed(Draining, Draining),
	[]Transition{
		row(Draining, NodeJoined, Draining),
		row(Draining, Idle, Draining),
		row(Draining, DrainDone, Terminating),
		row(Draining, DrainRejected, Running),
		row(Draining, NodeDead, Terminating),
		row(Draining, TerminateSent, Terminating),
		row(Draining, ProviderGone, Terminated),
	},
	listed(Terminating, Terminating),
	[]Transition{
		row(Terminating, NodeJoined, Terminating),
		row(Terminating, NodeDead, Terminating),
		row(Terminating, DrainDone, Terminating),
		row(Terminating, TerminateSent, Terminating), // resent
		row(Terminating, ProviderGone, Terminated),
		row(Terminating, Error, TerminationFailed),

		row(Terminated, ProviderGone, Terminated),
		row(Terminated, NodeDead, Terminated),
		row(Terminated, TerminateSent, Terminated),
	},
	failed(AllocationFailed),
	failed(InstallFailed),
	failed(TerminationFailed),
)

// failed is the rows of a failure state: observations change nothing;
// the autoscaler terminates the instance.
func failed(s State) []Transition {
	return []Transition{
		{s, ProviderListed, ProviderPending, s},
		{s, ProviderListed, ProviderRunning, s},
		{s, ProviderListed, ProviderTerminating, s},
		row(s, NodeJoined, s),
		row(s, NodeDead, s),
		row(s, Error, s),
		row(s, TerminateSent, Terminating),
		row(s, ProviderGone, Terminated),
	}
}

// key indexes the transition table.
type key struct {
	from   State
	kind   EventKind
	listed ProviderState
}

var table = func() map[key]State {
	m := make(map[key]State, len(Transitions))
	for _, t := range Transitions {
		k := key{t.From, t.Kind, t.Listed}
		if _, dup := m[k]; dup {
			panic(fmt.Sprintf("instance: duplicate transition %v", t))
		}
		m[k] = t.To
	}
	return m
}()

package instance

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func ev(k EventKind) Event           { return Event{Kind: k} }
func listedAs(s ProviderState) Event { return Event{Kind: ProviderListed, Listed: s} }

// paths are the events that bring a new instance to each state.
var paths = map[State][]Event{
	Queued:            nil,
	Requested:         {ev(LaunchSent)},
	Allocated:         {ev(LaunchSent), listedAs(ProviderPending)},
	Installing:        {ev(LaunchSent), listedAs(ProviderPending), listedAs(ProviderRunning)},
	Running:           {ev(LaunchSent), listedAs(ProviderPending), listedAs(ProviderRunning), ev(NodeJoined)},
	Draining:          {ev(LaunchSent), listedAs(ProviderRunning), ev(NodeJoined), ev(Idle)},
	Terminating:       {ev(LaunchSent), listedAs(ProviderRunning), ev(NodeJoined), ev(Idle), ev(DrainDone)},
	Terminated:        {ev(LaunchSent), listedAs(ProviderRunning), ev(NodeJoined), ev(TerminateSent), ev(ProviderGone)},
	AllocationFailed:  {ev(LaunchSent), ev(Error)},
	InstallFailed:     {ev(LaunchSent), listedAs(ProviderPending), ev(Error)},
	TerminationFailed: {ev(LaunchSent), ev(TerminateSent), ev(Error)},
}

// reach returns an instance brought to state s at t0.
func reach(t *testing.T, s State, tm Timeouts) *Instance {
	t.Helper()
	in := New("i-1", "cpu", t0)
	in.Timeouts = tm
	for _, e := range paths[s] {
		if err := in.Apply(e, t0); err != nil {
			t.Fatalf("reaching %s: %v", s, err)
		}
	}
	if in.State() != s {
		t.Fatalf("reaching %s: got %s", s, in.State())
	}
	return in
}

// allEvents is every event but Tick, ProviderListed once per provider state.
func allEvents() []Event {
	var out []Event
	for _, k := range EventKinds {
		switch k {
		case Tick:
		case ProviderListed:
			for _, s := range ProviderStates {
				out = append(out, listedAs(s))
			}
		default:
			out = append(out, ev(k))
		}
	}
	return out
}

// TestTransitions applies every event in every state and checks the
// outcome against the expected moves; any pair not listed must be refused.
func TestTransitions(t *testing.T) {
	pending, running, terminating := listedAs(ProviderPending).String(), listedAs(ProviderRunning).String(), listedAs(ProviderTerminating).String()
	observed := func(s State) map[string]State {
		return map[string]State{pending: s, running: s, terminating: s, "node_joined": s, "node_dead": s, "error": s,
			"terminate_sent": Terminating, "provider_gone": Terminated}
	}
	want := map[State]map[string]State{
		Queued: {"launch_sent": Requested, "error": AllocationFailed, "terminate_sent": Terminated},
		Requested: {"launch_sent": Requested, pending: Allocated, running: Installing, terminating: Terminating,
			"node_joined": Running, "error": AllocationFailed, "terminate_sent": Terminating},
		Allocated: {pending: Allocated, running: Installing, terminating: Terminating, "node_joined": Running,
			"provider_gone": InstallFailed, "error": InstallFailed, "terminate_sent": Terminating},
		Installing: {pending: Installing, running: Installing, terminating: Terminating, "node_joined": Running,
			"provider_gone": InstallFailed, "error": InstallFailed, "terminate_sent": Terminating},
		Running: {pending: Running, running: Running, terminating: Terminating, "node_joined": Running,
			"node_dead": Terminating, "idle": Draining, "terminate_sent": Terminating, "provider_gone": Terminated},
		Draining: {pending: Draining, running: Draining, terminating: Terminating, "node_joined": Draining,
			"idle": Draining, "drain_done": Terminating, "drain_rejected": Running, "node_dead": Terminating,
			"terminate_sent": Terminating, "provider_gone": Terminated},
		Terminating: {pending: Terminating, running: Terminating, terminating: Terminating, "node_joined": Terminating,
			"node_dead": Terminating, "drain_done": Terminating, "terminate_sent": Terminating,
			"provider_gone": Terminated, "error": TerminationFailed},
		Terminated:        {"provider_gone": Terminated, "node_dead": Terminated, "terminate_sent": Terminated},
		AllocationFailed:  observed(AllocationFailed),
		InstallFailed:     observed(InstallFailed),
		TerminationFailed: observed(TerminationFailed),
	}
	for _, from := range States {
		for _, e := range allEvents() {
			to, valid := want[from][e.String()]
			t.Run(fmt.Sprintf("%s/%s", from, e), func(t *testing.T) {
				in := reach(t, from, Timeouts{})
				histBefore := len(in.History())
				later := t0.Add(time.Second)
				err := in.Apply(e, later)
				if !valid {
					var te *TransitionError
					if !errors.As(err, &te) || !errors.Is(err, ErrInvalidTransition) {
						t.Fatalf("Apply = %v, want a TransitionError", err)
					}
					if te.State != from || te.Event != e || te.Instance != "i-1" {
						t.Errorf("error fields %+v", te)
					}
					for _, s := range []string{`"i-1"`, from.String(), e.String()} {
						if !strings.Contains(err.Error(), s) {
							t.Errorf("error %q does not name %s", err, s)
						}
					}
					if in.State() != from || len(in.History()) != histBefore {
						t.Errorf("a refused event changed the instance: %s, history %d", in.State(), len(in.History()))
					}
					return
				}
				if err != nil {
					t.Fatalf("Apply: %v", err)
				}
				if in.State() != to {
					t.Fatalf("state %s, want %s", in.State(), to)
				}
				h := in.History()
				if to == from {
					if len(h) != histBefore || in.Since() != t0 {
						t.Errorf("an event keeping the state recorded %d entries (had %d), since %v", len(h), histBefore, in.Since())
					}
					return
				}
				last := h[len(h)-1]
				if len(h) != histBefore+1 || last.State != to || !last.At.Equal(later) || last.Event != e.Kind || last.Reason == "" {
					t.Errorf("history %+v", h)
				}
				if !in.Since().Equal(later) {
					t.Errorf("since %v, want %v", in.Since(), later)
				}
			})
		}
	}
}

func TestTransitionTableHasNoUnknowns(t *testing.T) {
	for _, tr := range Transitions {
		if tr.From.String() == "" || strings.HasPrefix(tr.From.String(), "state(") || strings.HasPrefix(tr.To.String(), "state(") ||
			strings.HasPrefix(tr.Kind.String(), "event(") || tr.Kind == Tick || (tr.Kind == ProviderListed) != (tr.Listed != "") {
			t.Errorf("bad row %+v", tr)
		}
	}
}

func TestInvalidEvents(t *testing.T) {
	tests := []struct {
		name string
		in   *Instance
		ev   Event
	}{
		{"unknown provider state", reach(t, Requested, Timeouts{}), listedAs("rebooting")},
		{"listed state on another event", reach(t, Requested, Timeouts{}), Event{Kind: NodeJoined, Listed: ProviderRunning}},
		{"unknown event kind", reach(t, Running, Timeouts{}), ev(99)},
		{"zero event", reach(t, Running, Timeouts{}), Event{}},
		{"zero instance", &Instance{ID: "z"}, ev(LaunchSent)},
		{"tick on a zero instance", &Instance{ID: "z"}, ev(Tick)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.in.State()
			if err := tc.in.Apply(tc.ev, t0); !errors.Is(err, ErrInvalidTransition) {
				t.Fatalf("Apply = %v, want ErrInvalidTransition", err)
			}
			if tc.in.State() != before {
				t.Fatalf("state changed to %s", tc.in.State())
			}
		})
	}
}

func TestTimeouts(t *testing.T) {
	custom := Timeouts{AllocateTimeout: time.Minute, InstallTimeout: 2 * time.Minute, TerminateTimeout: 3 * time.Minute}
	tests := []struct {
		name     string
		state    State
		tm       Timeouts
		then     []Event       // applied at t0+thenAt after reaching state
		thenAt   time.Duration // when
		tick     time.Duration // the Tick's time after t0
		want     State
		inReason string
	}{
		{"requested before the allocate timeout", Requested, Timeouts{}, nil, 0, DefaultAllocateTimeout - 1, Requested, ""},
		{"requested at the allocate timeout", Requested, Timeouts{}, nil, 0, DefaultAllocateTimeout, AllocationFailed, "did not list"},
		{"custom allocate timeout", Requested, custom, nil, 0, time.Minute, AllocationFailed, "1m0s"},
		{"allocated before the install timeout", Allocated, Timeouts{}, nil, 0, DefaultInstallTimeout - 1, Allocated, ""},
		{"allocated at the install timeout", Allocated, Timeouts{}, nil, 0, DefaultInstallTimeout, InstallFailed, "did not join"},
		{"installing: the clock started at allocated", Allocated, Timeouts{},
			[]Event{listedAs(ProviderRunning)}, 4 * time.Minute, DefaultInstallTimeout, InstallFailed, "5m0s"},
		{"installing: not yet", Allocated, Timeouts{},
			[]Event{listedAs(ProviderRunning)}, 4 * time.Minute, DefaultInstallTimeout - 1, Installing, ""},
		{"installing straight from requested: the clock starts there", Requested, Timeouts{},
			[]Event{listedAs(ProviderRunning)}, 4 * time.Minute, 4*time.Minute + DefaultInstallTimeout - 1, Installing, ""},
		{"custom install timeout", Installing, custom, nil, 0, 2 * time.Minute, InstallFailed, "2m0s"},
		{"terminating before the terminate timeout", Terminating, Timeouts{}, nil, 0, DefaultTerminateTimeout - 1, Terminating, ""},
		{"terminating at the terminate timeout", Terminating, Timeouts{}, nil, 0, DefaultTerminateTimeout, TerminationFailed, "still lists"},
		{"custom terminate timeout", Terminating, custom, nil, 0, 3 * time.Minute, TerminationFailed, "3m0s"},
		{"terminate retried: a new clock", TerminationFailed, custom,
			[]Event{ev(TerminateSent)}, time.Hour, time.Hour + 3*time.Minute - 1, Terminating, ""},
		{"a tick before the state was entered", Requested, Timeouts{}, nil, 0, -time.Hour, Requested, ""},
	}
	for _, s := range []State{Queued, Running, Draining, Terminated, AllocationFailed, InstallFailed, TerminationFailed} {
		tests = append(tests, struct {
			name     string
			state    State
			tm       Timeouts
			then     []Event
			thenAt   time.Duration
			tick     time.Duration
			want     State
			inReason string
		}{fmt.Sprintf("%s has no timeout", s), s, Timeouts{}, nil, 0, 1000 * time.Hour, s, ""})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := reach(t, tc.state, tc.tm)
			for _, e := range tc.then {
				if err := in.Apply(e, t0.Add(tc.thenAt)); err != nil {
					t.Fatal(err)
				}
			}
			before := in.State()
			n := len(in.History())
			at := t0.Add(tc.tick)
			if err := in.Apply(ev(Tick), at); err != nil {
				t.Fatalf("Tick: %v", err)
			}
			if in.State() != tc.want {
				t.Fatalf("state %s, want %s", in.State(), tc.want)
			}
			h := in.History()
			if tc.want == before {
				if len(h) != n {
					t.Errorf("a tick without expiry recorded %+v", h[n:])
				}
				return
			}
			last := h[len(h)-1]
			if last.Event != Tick || !last.At.Equal(at) || !strings.Contains(last.Reason, tc.inReason) {
				t.Errorf("last history entry %+v, want a tick at %v saying %q", last, at, tc.inReason)
			}
		})
	}
}

// TestInstallFailedThenTerminate is the life of an instance that never
// joins: it times out, is terminated and ends Terminated.
func TestInstallFailedThenTerminate(t *testing.T) {
	in := New("i-9", "gpu", t0)
	steps := []struct {
		ev   Event
		at   time.Duration
		want State
	}{
		{ev(LaunchSent), 0, Requested},
		{listedAs(ProviderPending), time.Minute, Allocated},
		{ev(Tick), 3 * time.Minute, Allocated},
		{listedAs(ProviderRunning), 4 * time.Minute, Installing},
		{ev(Tick), 6 * time.Minute, InstallFailed},
		{ev(TerminateSent), 6 * time.Minute, Terminating},
		{listedAs(ProviderTerminating), 7 * time.Minute, Terminating},
		{ev(ProviderGone), 8 * time.Minute, Terminated},
		{ev(Tick), 100 * time.Minute, Terminated},
	}
	for i, s := range steps {
		if err := in.Apply(s.ev, t0.Add(s.at)); err != nil {
			t.Fatalf("step %d (%s): %v", i, s.ev, err)
		}
		if in.State() != s.want {
			t.Fatalf("step %d (%s): state %s, want %s", i, s.ev, in.State(), s.want)
		}
	}
	var states []State
	for _, e := range in.History() {
		states = append(states, e.State)
	}
	want := []State{Queued, Requested, Allocated, Installing, InstallFailed, Terminating, Terminated}
	if fmt.Sprint(states) != fmt.Sprint(want) {
		t.Fatalf("history %v, want %v", states, want)
	}
}

func TestHistoryIsBounded(t *testing.T) {
	for _, limit := range []int{0, 1, 3} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			in := reach(t, Running, Timeouts{})
			in.HistoryLimit = limit
			for i := range 100 {
				at := t0.Add(time.Duration(i+1) * time.Second)
				if err := in.Apply(ev(Idle), at); err != nil {
					t.Fatal(err)
				}
				if err := in.Apply(ev(DrainRejected), at); err != nil {
					t.Fatal(err)
				}
			}
			want := limit
			if limit == 0 {
				want = DefaultHistoryLimit
			}
			h := in.History()
			if len(h) != want || cap(in.history) > 2*want+8 {
				t.Fatalf("history has %d entries (cap %d), want %d", len(h), cap(in.history), want)
			}
			if last := h[len(h)-1]; last.State != Running || !last.At.Equal(t0.Add(100*time.Second)) {
				t.Fatalf("last entry %+v", last)
			}
			h[0].Reason = "changed"
			if in.History()[0].Reason == "changed" {
				t.Fatal("History returned the instance's own slice")
			}
		})
	}
}

func TestAdopt(t *testing.T) {
	tests := []struct {
		listed ProviderState
		want   State
	}{
		{ProviderPending, Allocated},
		{ProviderRunning, Installing},
		{ProviderTerminating, Terminating},
	}
	for _, tc := range tests {
		in, err := Adopt("i-2", "cpu", tc.listed, t0)
		if err != nil || in.State() != tc.want || in.ID != "i-2" || in.NodeType != "cpu" {
			t.Fatalf("Adopt(%s) = %+v, %v; want state %s", tc.listed, in, err, tc.want)
		}
		if h := in.History(); len(h) != 1 || !strings.Contains(h[0].Reason, "adopted") {
			t.Fatalf("history %+v", h)
		}
	}
	// The adopted install clock starts at adoption.
	in, _ := Adopt("i-3", "cpu", ProviderRunning, t0)
	if _ = in.Apply(ev(Tick), t0.Add(DefaultInstallTimeout-1)); in.State() != Installing {
		t.Fatalf("state %s", in.State())
	}
	if _ = in.Apply(ev(Tick), t0.Add(DefaultInstallTimeout)); in.State() != InstallFailed {
		t.Fatalf("state %s", in.State())
	}
	if _, err := Adopt("i-4", "cpu", "gone", t0); err == nil || !strings.Contains(err.Error(), `"i-4"`) {
		t.Fatalf("Adopt of an unknown provider state: %v", err)
	}
}

func TestStateHelpers(t *testing.T) {
	for _, s := range States {
		pending := s == Queued || s == Requested || s == Allocated || s == Installing
		failed := s == AllocationFailed || s == InstallFailed || s == TerminationFailed
		if s.Pending() != pending || s.Failed() != failed {
			t.Errorf("%s: Pending %v Failed %v", s, s.Pending(), s.Failed())
		}
		if b, _ := s.MarshalText(); string(b) != s.String() || strings.HasPrefix(s.String(), "state(") {
			t.Errorf("%d: name %q", int(s), b)
		}
	}
	if State(0).String() != "state(0)" || EventKind(42).String() != "event(42)" {
		t.Errorf("unknown values print as %s, %s", State(0), EventKind(42))
	}
}

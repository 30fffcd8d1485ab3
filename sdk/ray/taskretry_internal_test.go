package ray

import (
	"testing"

	"github.com/goray-dev/goray/sdk/ray/internal/core"
)

// TestMaxTaskRetriesOption: the option reaches the core options of an
// actor's creation (default 0: no retries, -1: no limit), a budget below
// -1 is an error naming the class and the option, and a handle's budget
// belongs to the actor's creation.
func TestMaxTaskRetriesOption(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []Option
		want    int
		wantErr string
	}{
		{"default", nil, 0, ""},
		{"some", []Option{MaxRestarts(1), MaxTaskRetries(3)}, 3, ""},
		{"no limit", []Option{MaxTaskRetries(-1)}, -1, ""},
		{"last wins", []Option{MaxTaskRetries(5), MaxTaskRetries(0)}, 0, ""},
		{"below -1", []Option{MaxTaskRetries(-2)}, 0, "goray: Counter: MaxTaskRetries(-2): -2 retries: want -1 (without limit), 0 (never) or more"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o core.TaskOptions
			err := newCallOptions(tc.opts).actorTaskRetries("Counter", &o)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("actorTaskRetries: %v; want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || o.MaxTaskRetries != tc.want {
				t.Fatalf("actorTaskRetries: MaxTaskRetries %d, %v; want %d", o.MaxTaskRetries, err, tc.want)
			}
		})
	}

}

// TestMaxCallRetries: a method's budget replaces the handle's for its
// calls, a later option wins, and a budget below -1 is an error naming
// the method and the option.
func TestMaxCallRetries(t *testing.T) {
	actor := core.ActorRef{MaxTaskRetries: 2}
	for _, tc := range []struct {
		name    string
		opts    []MethodOption
		want    int
		wantErr string
	}{
		{"the handle's", nil, 2, ""},
		{"exempt", []MethodOption{MaxCallRetries(0)}, 0, ""},
		{"no limit", []MethodOption{MaxCallRetries(-1)}, -1, ""},
		{"later wins", []MethodOption{MaxCallRetries(-1), MaxCallRetries(4)}, 4, ""},
		{"below -1", []MethodOption{MaxCallRetries(-3)}, 0, "goray: main.(*T).M: MaxCallRetries(-3): -3 retries: want -1 (without limit), 0 (never) or more"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := methodBase{name: "main.(*T).M"}.withOptions(tc.opts)
			got, err := m.withRetries(actor)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("withRetries: %v; want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got.MaxTaskRetries != tc.want {
				t.Fatalf("withRetries: MaxTaskRetries %d, %v; want %d", got.MaxTaskRetries, err, tc.want)
			}
		})
	}
	if actor.MaxTaskRetries != 2 {
		t.Fatalf("the handle's budget changed to %d", actor.MaxTaskRetries)
	}
}

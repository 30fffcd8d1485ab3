package main

import (
	"errors"
	"strings"
	"testing"
)

// TestLifecycleFlags: --fresh and --resume go with a head, never together,
// and each refusal is a usage error naming the flag.
func TestLifecycleFlags(t *testing.T) {
	for _, c := range []struct {
		name string
		lc   lifecycle
		head bool
		want string // "" for none
	}{
		{"neither", lifecycle{}, false, ""},
		{"fresh head", lifecycle{fresh: true}, true, ""},
		{"resume head", lifecycle{resume: true}, true, ""},
		{"both", lifecycle{fresh: true, resume: true}, true, "give one of them"},
		{"fresh node", lifecycle{fresh: true}, false, "--fresh starts a new cluster: it goes with --head"},
		{"resume node", lifecycle{resume: true}, false, "--resume resumes the cluster a head's storage holds: it goes with --head"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.lc.check(c.head)
			if c.want == "" {
				if err != nil {
					t.Fatalf("check: %v", err)
				}
				return
			}
			var ue *usageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("check: %v, want a usage error saying %q", err, c.want)
			}
		})
	}
}

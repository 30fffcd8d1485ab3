package acceptance

import (
	"regexp"
	"testing"
	"time"
)

// TestDocDetached runs the detached actor walk-through of the example's
// doc and of docs/detached.md on a real head: a driver creates a detached
// actor named "inventory" in namespace "shop" and exits; two later drivers
// (new processes, new jobs) find it in "shop" and add to its state, served
// by the same worker process; a driver in "other" does not find it, one in
// its own namespace finds it with InNamespace; `goray list actors` shows
// it ALIVE, detached, in "shop"; after a kill its name is free.
func TestDocDetached(t *testing.T) {
	for _, c := range []struct{ name, file string }{
		{"example", "examples/detached/main.go"},
		{"doc", "docs/detached.md"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := newDocRun(t, testCtxFor(t, 4*time.Minute))
			out := d.runBlock("", c.file, "goray start --head --port 6379", 0)
			wantLines(t, out[0].stdout, "Started goray head node")
			wantLines(t, out[1].stdout, `actor "inventory" is ready in namespace "shop", holding 0 items; it outlives this job`)
			pid := regexp.MustCompile(`\(actor pid (\d+)\)`)
			first, second := pid.FindStringSubmatch(out[2].stdout), pid.FindStringSubmatch(out[3].stdout)
			wantLines(t, out[2].stdout, "added apples: the inventory holds 1 items")
			wantLines(t, out[3].stdout, "added pears: the inventory holds 2 items")
			if first == nil || second == nil || first[1] != second[1] {
				t.Errorf("the two jobs after the creator's were served by actor pids %v and %v, want one live worker", first, second)
			}
			wantLines(t, out[4].stdout, `no actor "inventory" in namespace "other"`)
			wantLines(t, out[5].stdout, `found actor "inventory" in namespace "shop", holding 2 items`)
			if !regexp.MustCompile(`inventory\s+shop\s+detached\s+ALIVE`).MatchString(out[6].stdout) {
				t.Errorf("goray list actors does not show inventory in shop, detached and ALIVE:\n%s", out[6].stdout)
			}
			wantLines(t, out[7].stdout, `killed actor "inventory" of namespace "shop"`)
			wantLines(t, out[8].stdout, `no actor "inventory" in namespace "shop"`)
			wantLines(t, out[9].stdout, "Stopped goray head node")
			d.checkNothingLeft()
		})
	}
}

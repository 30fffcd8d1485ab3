package acceptance

import (
	"testing"
	"time"
)

// TestDocConcurrencyGroups runs the concurrency groups example as its doc
// and docs/concurrency-groups.md show it, on an embedded node and on a
// started head: the model server's health check answers, in its own
// group, while its compute group (limit 2) runs 2 predictions and queues
// 2 more; the predictions finish once the default group's Load ran; a
// call in an undeclared group fails with the typed error naming the
// actor's groups.
func TestDocConcurrencyGroups(t *testing.T) {
	wantRun := func(t *testing.T, r cliResult) {
		t.Helper()
		wantLines(t, r.stdout,
			"health answered while compute was saturated: 2 predictions running, model loaded: false",
			"predictions: [2 4 6 8]",
			`a call in group "gpu" fails: the actor declares map[compute:2 health:1]`,
			"OK")
	}
	for _, c := range []struct{ name, file string }{
		{"example", "examples/concurrency-groups/main.go"},
		{"doc", "docs/concurrency-groups.md"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := newDocRun(t, testCtxFor(t, 3*time.Minute))
			out := d.runBlock("", c.file, "go run ./examples/concurrency-groups", 0)
			wantRun(t, out[0])
			d.checkNothingLeft()
		})
	}
	t.Run("cluster", func(t *testing.T) {
		d := newDocRun(t, testCtxFor(t, 3*time.Minute))
		out := d.runBlock("", "docs/concurrency-groups.md", "goray start --head --port 6379", 0)
		wantLines(t, out[0].stdout, "Started goray head node")
		wantRun(t, out[1])
		wantLines(t, out[2].stdout, "Stopped goray head node")
		d.checkNothingLeft()
	})
}

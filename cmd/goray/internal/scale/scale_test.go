package scale

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/sdk/ray"
)

func TestMain(m *testing.M) {
	if ray.IsWorker() {
		_, _ = ray.Init(context.Background()) // the real nodes' workers: serves tasks, never returns
	}
	os.Exit(m.Run())
}

// smokeNodes is the smoke run's size.
const smokeNodes = 200

var (
	smokeOnce sync.Once
	smokeRes  *Result
	smokeErr  error
)

// smoke runs the harness once at smokeNodes simulated nodes for the tests
// that read its result.
func smoke(t *testing.T) *Result {
	t.Helper()
	smokeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		var rep *Report
		rep, smokeErr = Run(ctx, Options{Nodes: []int{smokeNodes}, Duration: 2 * time.Second, Events: 3, BurstQuiet: time.Minute, Log: testLog{t}})
		if smokeErr == nil {
			smokeRes = &rep.Results[0]
			if len(smokeRes.Errors) > 0 {
				smokeErr = fmt.Errorf("errors: %v", smokeRes.Errors)
			}
		}
	})
	if smokeErr != nil {
		t.Fatal(smokeErr)
	}
	return smokeRes
}

// TestSmoke runs the harness at 200 simulated nodes: it fails only on
// errors, never on figures; the report must print and plot.
func TestSmoke(t *testing.T) {
	r := smoke(t)
	rep := &Report{Results: []Result{*r}}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
}

// TestMessageBounds asserts what each event sends to the simulated nodes,
// as bounds the current code meets. An object free goes to the nodes that
// may hold a copy (the object put by the driver has one, on the driver's
// real node: no simulated node hears of it); a placement group's removal
// to the node holding its one bundle. A worker's death still reaches every
// node (O(N), as in Ray), deaths close together in shared messages.
func TestMessageBounds(t *testing.T) {
	r := smoke(t)
	n := int64(r.Nodes)
	tests := []struct {
		name     string
		got, max int64
	}{
		{"object free of an object with one copy: O(1), not one per node", r.Free.Messages, 1},
		{"worker death: at most one message per node (O(N), as in Ray)", r.WorkerDeath.Messages, n},
		{"node death: no message of its own (it rides on every node's next refresh)", r.NodeDeath.Messages, 0},
		{"cluster view refresh in steady state: the changes since, not the table (bytes ≤ a tenth of it)", int64(r.Steady.RefreshBytes), n * int64(r.EntryBytes) / 10},
		{"placement group creation: prepare and commit on the one node of its bundle", int64(r.PGMessages), 2},
		{"placement group removal: one cancel per node holding a bundle (one bundle)", int64(math.Ceil(r.PGRemovalMessages)), 1},
	}
	for _, tt := range tests {
		if tt.got > tt.max {
			t.Errorf("%s: %d messages, want at most %d", tt.name, tt.got, tt.max)
		}
	}
	// Batched deaths lose none: every node gets every id of a burst (how
	// many messages that takes depends on timing, so it is not bounded).
	if b := r.DeathBurst; r.PerNodeConnections && (b.Deaths == 0 || b.Complete != r.Nodes || b.IDs != int64(b.Deaths)*n) {
		t.Errorf("worker deaths in a burst of %d: %d of %d nodes got every id (%d ids in all); want all", b.Deaths, b.Complete, r.Nodes, b.IDs)
	}
	if r.PerNodeConnections && r.Free.Reached != int(r.Free.Messages) {
		t.Errorf("object free: %d messages reached %d distinct nodes; want one each", r.Free.Messages, r.Free.Reached)
	}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(b []byte) (int, error) { l.t.Log(string(b)); return len(b), nil }

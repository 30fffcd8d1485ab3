package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// historyCluster is a fakeCluster whose GCS reports a bounded history.
type historyCluster struct{ *fakeCluster }

func (h historyCluster) ClusterInfo(ctx context.Context) (*pb.GetClusterInfoReply, error) {
	r, _ := h.fakeCluster.ClusterInfo(ctx)
	r.History = &pb.History{
		DeadNodes:              &pb.HistoryBound{Kept: 1000, Cap: 1000, Dropped: 3},
		DeadActors:             &pb.HistoryBound{Kept: 100000, Cap: 100000, Dropped: 1234},
		FinishedJobs:           &pb.HistoryBound{Kept: 2, Cap: 10000},
		RemovedPlacementGroups: &pb.HistoryBound{Cap: 1000},
		TaskEvents:             &pb.HistoryBound{Cap: 100000},
	}
	return r, nil
}

// TestHistoryDropped: goray list says how many of a kind the GCS dropped
// (on stderr, only for a kind with drops), and goray status's GCS lines
// say it for each such kind.
func TestHistoryDropped(t *testing.T) {
	for _, tc := range []struct{ kind, want string }{
		{"actors", "note: 1,234 dead actors dropped, oldest first; cap 100,000"},
		{"nodes", "note: 3 dead nodes dropped, oldest first; cap 1,000"},
		{"jobs", ""},
		{"placement-groups", ""},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			a := &app{stdout: &stdout, stderr: &stderr}
			if err := a.list(context.Background(), historyCluster{newFakeCluster()}, tc.kind, listOptions{}); err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if strings.Contains(stderr.String(), "dropped") {
					t.Fatalf("goray list %s says something was dropped:\n%s", tc.kind, stderr.String())
				}
				return
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("goray list %s stderr lacks %q:\n%s", tc.kind, tc.want, stderr.String())
			}
		})
	}
	info, _ := historyCluster{newFakeCluster()}.ClusterInfo(context.Background())
	g := gcsStatusOf(info)
	if b := g.History["dead_actors"]; b.Dropped != 1234 || b.Cap != 100000 || b.Kept != 100000 {
		t.Fatalf("status --json history dead_actors = %+v", b)
	}
	var out bytes.Buffer
	writeGCSLine(&out, g)
	for _, want := range []string{"history: (1,234 dead actors dropped, oldest first; cap 100,000)", "history: (3 dead nodes dropped, oldest first; cap 1,000)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("goray status lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "finished jobs") {
		t.Errorf("goray status mentions a kind nothing was dropped of:\n%s", out.String())
	}
}

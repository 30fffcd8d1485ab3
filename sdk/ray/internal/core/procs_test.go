package core

import (
	"testing"

	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
)

func TestProcsFor(t *testing.T) {
	cpus := func(units int64) *pb.Resources {
		return &pb.Resources{Amounts: map[string]int64{resources.CPU: units, resources.GPU: 8 * resources.Unit}}
	}
	for _, tc := range []struct {
		name  string
		res   *pb.Resources
		limit int
		want  int
	}{
		{"no resources", nil, 8, 1},
		{"no CPU", &pb.Resources{}, 8, 1},
		{"a sliver", cpus(1), 8, 1},
		{"one", cpus(resources.Unit), 8, 1},
		{"one and a half", cpus(3 * resources.Unit / 2), 8, 2},
		{"four", cpus(4 * resources.Unit), 8, 4},
		{"more than the machine", cpus(64 * resources.Unit), 8, 8},
		{"a one-core machine", cpus(4 * resources.Unit), 1, 1},
	} {
		if got := procsFor(tc.res, tc.limit); got != tc.want {
			t.Errorf("%s: procsFor = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestProcLimitFixed: only a worker sizes itself, and not when its
// environment sets GOMAXPROCS.
func TestProcLimitFixed(t *testing.T) {
	if !newProcLimit(ModeDriver).fixed {
		t.Error("a driver sizes its scheduler")
	}
	t.Setenv("GOMAXPROCS", "3")
	if !newProcLimit(ModeWorker).fixed {
		t.Error("a worker with GOMAXPROCS in its environment sizes its scheduler")
	}
}

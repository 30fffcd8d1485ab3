package ray_test

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"testing"

	"github.com/goray-dev/goray/sdk/ray"
)

func workerProcs(context.Context) (int, error) { return runtime.GOMAXPROCS(0), nil }

type procsActor struct{}

func newProcsActor(context.Context) (*procsActor, error) { return &procsActor{}, nil }

func (*procsActor) procs(context.Context) (int, error) { return runtime.GOMAXPROCS(0), nil }

var (
	WorkerProcs     = ray.Task0(workerProcs)
	ProcsActorClass = ray.Actor0(newProcsActor)
	ActorProcs      = ray.Method0((*procsActor).procs)
)

// TestWorkerGOMAXPROCS: a worker runs a task or an actor with GOMAXPROCS
// set to the CPUs it asked for, rounded up, at least 1 and at most the
// process's default (tasks default to 1 CPU, actors to 0); a worker whose
// environment sets GOMAXPROCS keeps it.
func TestWorkerGOMAXPROCS(t *testing.T) {
	ctx := testCtx(t)
	limit := runtime.GOMAXPROCS(0) // a worker's default is the driver's: same machine, no GOMAXPROCS set
	want := func(cpus int) int { return max(1, min(cpus, limit)) }
	if v := os.Getenv("GOMAXPROCS"); v != "" { // inherited by the workers: kept
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("GOMAXPROCS=%q", v)
		}
		want = func(int) int { return n }
	}
	for _, tc := range []struct {
		name string
		opts []ray.Option
		cpus int
	}{
		{"default", nil, 1},
		{"two CPUs", []ray.Option{ray.CPUs(2)}, 2},
		{"half a CPU", []ray.Option{ray.CPUs(0.5)}, 1},
		{"default again", nil, 1}, // a reused worker is sized again
	} {
		got, err := WorkerProcs.Options(tc.opts...).Remote(ctx).Get(ctx)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got != want(tc.cpus) {
			t.Errorf("task with %s: GOMAXPROCS %d, want %d", tc.name, got, want(tc.cpus))
		}
	}
	a := ProcsActorClass.Remote(ctx)
	defer a.Kill(ctx)
	got, err := ActorProcs.On(a).Remote(ctx).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got != want(0) {
		t.Errorf("actor with no CPUs: GOMAXPROCS %d, want %d", got, want(0))
	}
}

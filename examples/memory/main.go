// Command memory shows memory protection (Ray's memory monitor): a task
// that allocates without bound is killed by its node's memory monitor
// before the kernel's OOM killer would end a process of its own choosing;
// it is retried, killed again and fails with *ray.OutOfMemoryError naming
// the node and its memory use. An actor on the same node answers
// throughout, and the node runs tasks afterwards.
//
// So that it is safe on any machine, the example sets its embedded node's
// memory_monitor.usage_threshold 1 GiB above the machine's use when it
// starts (measured as the monitor measures it: usage.go), and the hog
// gives up after 3 GiB, so that a monitor that failed to act would take
// no more than that. It runs on an embedded single-node cluster with
//
//	go run ./examples/memory
//
// (not against a running cluster: the threshold is the embedded node's
// configuration). Stdout says what happened; stderr has the monitor's
// account of the kill. It exits non-zero if the machine has less than
// 4 GiB available or any result is wrong.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/sdk/ray"
)

const (
	// marginMiB is how far above the machine's use the threshold is.
	marginMiB = 1024
	// capMiB is where the hog gives up if the monitor has not killed it.
	capMiB = 3072
	// stepMiB is what the hog allocates at a time; it reports to the
	// tracker every reportMiB.
	stepMiB   = 32
	reportMiB = 128
	// refresh is how often the monitor reads the node's memory (Ray's
	// memory_monitor_refresh_ms; the default is 250ms).
	refresh = 50 * time.Millisecond
	// hogRetries is the hog's MaxOOMRetries: how often it runs again after
	// a kill by the memory monitor (a budget apart from MaxRetries).
	hogRetries = 1
)

// Tracker is the well-behaved work next to the hog: it records how far
// the hog got.
type Tracker struct {
	grown int // the most MiB the hog reported holding
}

// NewTracker starts a tracker that saw nothing.
func NewTracker(ctx context.Context) (*Tracker, error) { return &Tracker{}, nil }

// Grew records that the hog holds mib MiB.
func (t *Tracker) Grew(ctx context.Context, mib int) (bool, error) {
	t.grown = max(t.grown, mib)
	return true, nil
}

// Seen returns the most MiB the hog reported holding.
func (t *Tracker) Seen(ctx context.Context) (int, error) { return t.grown, nil }

// hog allocates stepMiB at a time, touching every page so that it is
// resident, until its worker is killed; it gives up (an error) at
// limitMiB.
func hog(ctx context.Context, tracker ray.ActorHandle[Tracker], limitMiB int) (int, error) {
	var hold [][]byte
	for mib := stepMiB; mib <= limitMiB; mib += stepMiB {
		b := make([]byte, stepMiB<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		hold = append(hold, b)
		if mib%reportMiB == 0 {
			if _, err := Grew.On(tracker).Remote(ctx, ray.V(mib)).Get(ctx); err != nil {
				return 0, err
			}
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(20 * time.Millisecond): // growth the monitor can follow
		}
	}
	runtime.KeepAlive(hold)
	return 0, fmt.Errorf("allocated %d MiB and was not killed by the memory monitor", limitMiB)
}

// square is the work the node runs after the kills.
func square(ctx context.Context, x int) (int, error) { return x * x, nil }

var (
	// Hog allocates until it is killed.
	Hog          = ray.Task2(hog)
	Square       = ray.Task1(square)
	TrackerActor = ray.Actor0(NewTracker)
	Grew         = ray.Method1((*Tracker).Grew)
	Seen         = ray.Method0((*Tracker).Seen)
)

func main() {
	if ray.IsWorker() {
		ray.MustInit(context.Background()) // serves calls and never returns
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "memory:", err)
		os.Exit(1)
	}
	fmt.Println("OK")
}

// run configures the embedded node's memory monitor from the machine's
// use now, starts the node and runs the hog next to the tracker.
func run() error {
	if os.Getenv(ray.EnvAddress) != "" {
		return fmt.Errorf("%s is set, but this example runs only on an embedded node, whose memory monitor it configures: unset it", ray.EnvAddress)
	}
	used, total, source, err := nodeMemory()
	if err != nil {
		return err
	}
	if need := int64(marginMiB+capMiB) << 20; total-used < need {
		return fmt.Errorf("this machine has %d MiB of memory available (%s: %d of %d MiB used); the example needs %d MiB (the %d MiB margin and the hog's %d MiB)",
			(total-used)>>20, source, used>>20, total>>20, need>>20, marginMiB, capMiB)
	}
	threshold := float64(used+marginMiB<<20) / float64(total)
	cfg := config.Default()
	cfg.MemoryMonitor = config.MemoryMonitor{UsageThreshold: threshold, RefreshInterval: refresh}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, err := ray.Init(ctx, ray.WithConfig(cfg), ray.NumCPUs(4))
	if err != nil {
		return err
	}
	defer func() { _ = rt.Shutdown(context.Background()) }()
	fmt.Printf("memory monitor: usage threshold %d MiB above this machine's use, read every %s\n", marginMiB, refresh)
	fmt.Fprintf(os.Stderr, "memory monitor: %s: %d of %d MiB used; usage_threshold = %.4f\n", source, used>>20, total>>20, threshold)
	return hogAndTracker(ctx, total, threshold)
}

// hogAndTracker runs the hog while asking the tracker how far it got,
// then checks the hog's error, the tracker and the node.
func hogAndTracker(ctx context.Context, total int64, threshold float64) error {
	tracker, err := TrackerActor.New(ctx)
	if err != nil {
		return err
	}
	defer tracker.Kill(ctx)

	ref := Hog.Options(ray.MaxOOMRetries(hogRetries)).Remote(ctx, ray.V(tracker), ray.V(capMiB))
	fmt.Printf("hog: allocating %d MiB at a time, MaxOOMRetries(%d); the tracker actor answers meanwhile\n", stepMiB, hogRetries)
	done := make(chan error, 1)
	go func() {
		_, err := ref.Get(ctx)
		done <- err
	}()
	// Ask the tracker every 20ms until the hog fails.
	answered, afterGrowth := 0, 0
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var hogErr error
	for waiting := true; waiting; {
		select {
		case hogErr = <-done:
			waiting = false
		case <-tick.C:
			seen, err := Seen.On(tracker).Remote(ctx).Get(ctx)
			if err != nil {
				return trackerErr("while the hog grew", err)
			}
			answered++
			if seen > 0 {
				afterGrowth++
			}
		}
	}

	var oom *ray.OutOfMemoryError
	if !errors.As(hogErr, &oom) || !errors.Is(hogErr, ray.ErrOutOfMemory) {
		return fmt.Errorf("the hog: want a *ray.OutOfMemoryError, got %T: %v", hogErr, hogErr)
	}
	fmt.Fprintln(os.Stderr, "the hog's error:", hogErr)
	fmt.Printf("hog: killed by the memory monitor on each of its %d attempts (OutOfMemoryError)\n", oom.Attempts)
	switch {
	case oom.Attempts != hogRetries+1:
		return fmt.Errorf("the hog ran %d attempts, want %d", oom.Attempts, hogRetries+1)
	case oom.Node != ray.NodeID():
		return fmt.Errorf("the error names node %s, not this one (%s)", oom.Node, ray.NodeID())
	case oom.TotalBytes != total:
		return fmt.Errorf("the node measured %d bytes of memory, this example %d: the threshold was computed from another measure", oom.TotalBytes, total)
	case oom.Threshold != threshold:
		return fmt.Errorf("the error gives the threshold %g, the node was configured with %g", oom.Threshold, threshold)
	case float64(oom.UsedBytes)/float64(oom.TotalBytes) <= oom.Threshold:
		return fmt.Errorf("the error gives %d of %d bytes used, not above the threshold %g", oom.UsedBytes, oom.TotalBytes, oom.Threshold)
	}
	fmt.Println("hog: the error names this node and its memory use, above the threshold")
	fmt.Fprintf(os.Stderr, "  node %s (%s) at %s: %d of %d MiB used (%.3f), above usage_threshold %.3f\n",
		oom.Node[:8], oom.NodeName, oom.NodeIP, oom.UsedBytes>>20, oom.TotalBytes>>20,
		float64(oom.UsedBytes)/float64(oom.TotalBytes), oom.Threshold)

	// The tracker is the same actor, with its state: it was never killed.
	seen, err := Seen.On(tracker).Remote(ctx).Get(ctx)
	if err != nil {
		return trackerErr("after the kills", err)
	}
	answered++
	if afterGrowth == 0 || seen < reportMiB {
		return fmt.Errorf("the tracker answered %d calls, %d after the hog reported growing; it saw %d MiB", answered, afterGrowth, seen)
	}
	fmt.Println("the other work kept running: the tracker actor answered every call, while the hog grew and after the kills")
	fmt.Fprintf(os.Stderr, "  the tracker answered %d calls; the hog reported holding up to %d MiB\n", answered, seen)

	v, err := Square.Remote(ctx, ray.V(7)).Get(ctx)
	if err != nil {
		return fmt.Errorf("a task after the kills: %w", err)
	}
	fmt.Printf("the node still runs tasks: square(7) = %d\n", v)
	return nil
}

// trackerErr is the error of a call to the tracker that failed when. The
// monitor kills an actor only when no task is left to kill: if it killed
// the tracker, the machine's other work raised its memory use past the
// threshold while no hog attempt was running.
func trackerErr(when string, err error) error {
	var died *ray.ActorDiedError
	if errors.As(err, &died) && strings.Contains(err.Error(), "memory monitor") {
		return fmt.Errorf("the tracker %s: %w (other programs on this machine took more than the %d MiB margin while the hog was not running; run the example again when the machine is quieter)", when, err, marginMiB)
	}
	return fmt.Errorf("the tracker %s: %w", when, err)
}

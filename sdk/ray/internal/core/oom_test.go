package core

import (
	"errors"
	"strings"
	"testing"

	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

func TestOutOfMemoryError(t *testing.T) {
	node, worker, task := ids.New(), ids.New(), ids.New()
	rec := &taskRecord{spec: &pb.TaskSpec{Function: "main.hog", TaskId: task.Bytes(), Attempt: 1, MaxRetries: 1}}
	k := &pb.MemoryKill{
		NodeId: node.Bytes(), NodeName: "n1", NodeIp: "127.0.0.2", WorkerId: worker.Bytes(), Pid: 77,
		UsedBytes: 950 << 20, TotalBytes: 1000 << 20, Threshold: 0.9, Source: "/proc/meminfo",
		Why: "it was the most recently started retriable task",
	}
	err := error(outOfMemory(rec, k))
	var oom *OutOfMemoryError
	if !errors.Is(err, ErrOutOfMemory) || !errors.As(err, &oom) || errors.Is(err, ErrWorkerCrashed) {
		t.Fatalf("want an *OutOfMemoryError matching only ErrOutOfMemory, got %T %v", err, err)
	}
	if oom.Attempts != 2 || oom.Node != node.String() || oom.NodeName != "n1" || oom.UsedBytes != 950<<20 || oom.Threshold != 0.9 {
		t.Fatalf("fields: %+v", oom)
	}
	msg := err.Error()
	for _, want := range []string{"task main.hog (" + task.Short() + ")", "last of 2 attempts", "node " + node.Short() + " (n1) at 127.0.0.2",
		"950 MiB of 1000 MiB (0.950), above the usage threshold 0.900", "worker " + worker.Short() + " (pid 77)", "most recently started retriable task",
		"memory_monitor.usage_threshold"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not say %q", msg, want)
		}
	}

	// Returned by a parent task, it crosses a process boundary as a
	// RemoteError of its kind, and stays usable with errors.Is and As.
	if got := kindOf(err); got != KindOutOfMemory {
		t.Fatalf("kindOf = %q, want %q", got, KindOutOfMemory)
	}
	remote := error(&RemoteError{Function: "main.parent", Kind: kindOf(err), Message: msg})
	var back *OutOfMemoryError
	if !errors.Is(remote, ErrOutOfMemory) || !errors.As(remote, &back) || back.Error() != msg || errors.Is(remote, ErrWorkerCrashed) {
		t.Fatalf("across a process boundary: Is %v, As %v (%v)", errors.Is(remote, ErrOutOfMemory), back, remote)
	}
}

// TestActorOutOfMemoryErrors: an actor whose worker the memory monitor
// killed fails its calls with errors that match ErrOutOfMemory, as Ray
// raises OutOfMemoryError for them: when it died of it (ActorDiedError,
// from the GCS's death_cause) and when a call under way had no retry left
// as it restarts (ActorUnavailableError); other deaths do not match.
func TestActorOutOfMemoryErrors(t *testing.T) {
	ref := ActorRef{ID: ids.New(), Class: "main.Hog"}
	reason := "killed by the memory monitor: node n1 used 95% of its memory"
	for _, tc := range []struct {
		name string
		err  error
		oom  bool
	}{
		{"died of it", &ActorDiedError{ActorID: ref.ID, Cause: deathError(ref, &pb.ActorInfo{DeathCause: "out_of_memory", DeathReason: reason})}, true},
		{"died otherwise", &ActorDiedError{ActorID: ref.ID, Cause: deathError(ref, &pb.ActorInfo{DeathReason: "worker crashed"})}, false},
		{"restarting from it", &ActorUnavailableError{ActorID: ref.ID, Reason: reason, Cause: actorOutOfMemory(ref, reason)}, true},
		{"restarting otherwise", &ActorUnavailableError{ActorID: ref.ID, Reason: "worker crashed"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var oe *OutOfMemoryError
			if errors.Is(tc.err, ErrOutOfMemory) != tc.oom || errors.As(tc.err, &oe) != tc.oom {
				t.Fatalf("%v: matches ErrOutOfMemory %v, want %v", tc.err, !tc.oom, tc.oom)
			}
			if tc.oom && (!strings.Contains(oe.Error(), reason) || !strings.Contains(oe.Error(), ref.ID.Short())) {
				t.Fatalf("the out-of-memory error %q does not name the actor and the monitor's reason", oe.Error())
			}
		})
	}
}

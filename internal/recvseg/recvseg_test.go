package recvseg

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

func newSegment(t *testing.T) string {
	t.Helper()
	seg, err := shmem.Create(shmem.NewName(shmem.Prefix+"recvseg-test-"), 4096)
	if err != nil {
		t.Fatal(err)
	}
	_ = seg.Close()
	t.Cleanup(func() { _ = shmem.Unlink(seg.Name()) })
	return seg.Name()
}

// The ledger unlinks what is recorded and not removed, tolerates segments
// already gone, refuses bad names, and SweepAll covers every process.
func TestLedger(t *testing.T) {
	session := t.TempDir()
	a, b := ids.New(), ids.New()
	kept, released, gone, other := newSegment(t), newSegment(t), newSegment(t), newSegment(t)
	if err := Add(Dir(session, a), kept, released, gone); err != nil {
		t.Fatal(err)
	}
	if err := Add(Dir(session, b), other); err != nil {
		t.Fatal(err)
	}
	if err := Add(Dir(session, a), "../escape"); err == nil {
		t.Fatal("Add accepted a name with a slash")
	}
	Remove(Dir(session, a), released)
	if err := shmem.Unlink(gone); err != nil { // unlinked by someone else meanwhile
		t.Fatal(err)
	}
	got, err := Sweep(Dir(session, a))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{kept}) {
		t.Fatalf("Sweep unlinked %v, want only %s", got, kept)
	}
	if shmem.Exists(kept) || !shmem.Exists(released) || !shmem.Exists(other) {
		t.Fatalf("after Sweep: kept exists %v (want false), released %v (want true), other process's %v (want true)",
			shmem.Exists(kept), shmem.Exists(released), shmem.Exists(other))
	}
	if _, err := os.Stat(Dir(session, a)); !os.IsNotExist(err) {
		t.Fatalf("the swept ledger is still there: %v", err)
	}
	if got, err := Sweep(Dir(session, a)); err != nil || len(got) != 0 {
		t.Fatalf("sweeping a missing ledger: %v, %v", got, err)
	}
	got, err = SweepAll(session)
	if err != nil || !slices.Equal(got, []string{other}) || shmem.Exists(other) {
		t.Fatalf("SweepAll: %v, %v (other exists %v)", got, err, shmem.Exists(other))
	}
	if entries, _ := os.ReadDir(filepath.Join(session, "tensors")); len(entries) != 0 {
		t.Fatalf("ledgers left after SweepAll: %v", entries)
	}
}

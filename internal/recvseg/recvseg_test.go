package recvseg

import (
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
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

// TestLedgerCompacts: a long-lived process's ledger is rewritten with its
// live segments once it has grown well past them, and still lists exactly
// those.
func TestLedgerCompacts(t *testing.T) {
	dir := Dir(t.TempDir(), ids.New())
	t.Cleanup(func() { forget(dir) })
	var keep []string
	for i := range 3000 {
		name := shmem.NewName(shmem.Prefix + "recvseg-test-")
		if err := Add(dir, name); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 0 {
			keep = append(keep, name)
			continue
		}
		Remove(dir, name)
	}
	b, err := os.ReadFile(filepath.Join(dir, File))
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(b), "\n"); lines > 2*compactAfter {
		t.Errorf("the ledger has %d lines for %d live segments: never compacted", lines, len(keep))
	}
	live, err := read(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := slices.Sorted(maps.Keys(live))
	slices.Sort(keep)
	if !slices.Equal(got, keep) {
		t.Fatalf("the compacted ledger lists %v, want %v", got, keep)
	}
	// Appends go on after a compaction.
	last := newSegment(t)
	if err := Add(dir, last); err != nil {
		t.Fatal(err)
	}
	if got, err := Sweep(dir); err != nil || !slices.Equal(got, []string{last}) {
		t.Fatalf("Sweep after compaction: %v, %v; want only %s unlinked (the others never existed)", got, err, last)
	}
}

// TestLedgerSkipsDamage: lines that are not "+" or "-" and a segment name
// (a name with a slash, a line longer than any name, garbage) are skipped,
// and what follows them is still read.
func TestLedgerSkipsDamage(t *testing.T) {
	dir := Dir(t.TempDir(), ids.New())
	seg := newSegment(t)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	junk := "+../../escape\n+" + strings.Repeat("x", 10000) + "\nx\n+\n-" + seg + "\n"
	if err := os.WriteFile(filepath.Join(dir, File), []byte(junk+"+"+seg+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Sweep(dir)
	if err != nil || !slices.Equal(got, []string{seg}) {
		t.Fatalf("Sweep of a damaged ledger: %v, %v; want %s unlinked", got, err, seg)
	}
}

// TestLedgerOutlivesItsProcess: what a process added before a kill -9 is in
// its ledger (each Add is one write(2), nothing buffered in the process),
// and a sweep by another process unlinks it.
func TestLedgerOutlivesItsProcess(t *testing.T) {
	if dir := os.Getenv("RECVSEG_TEST_CHILD"); dir != "" {
		segs := strings.Split(os.Getenv("RECVSEG_TEST_SEGS"), ",")
		if err := Add(dir, segs...); err != nil {
			os.Exit(3)
		}
		Remove(dir, segs[0])
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	dir := Dir(t.TempDir(), ids.New())
	released, owned := newSegment(t), newSegment(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestLedgerOutlivesItsProcess$")
	cmd.Env = append(os.Environ(), "RECVSEG_TEST_CHILD="+dir, "RECVSEG_TEST_SEGS="+released+","+owned)
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the child was to die by SIGKILL: %v", err)
	}
	got, err := Sweep(dir)
	if err != nil || !slices.Equal(got, []string{owned}) {
		t.Fatalf("Sweep after the process was killed: %v, %v; want %s unlinked", got, err, owned)
	}
	if !shmem.Exists(released) {
		t.Fatalf("the segment the process had released was unlinked")
	}
}

// BenchmarkAddRemove is what a tensor costs its ledger: recorded when it
// is created, forgotten when it is handed to a transport.
func BenchmarkAddRemove(b *testing.B) {
	dir := Dir(b.TempDir(), ids.New())
	b.Cleanup(func() { _, _ = Sweep(dir) })
	names := make([]string, 1024)
	for i := range names {
		names[i] = shmem.NewName(shmem.Prefix + "recvseg-bench-")
	}
	for i := 0; b.Loop(); i++ {
		name := names[i%len(names)]
		if err := Add(dir, name); err != nil {
			b.Fatal(err)
		}
		Remove(dir, name)
	}
}

// TestLedgerOfAnOlderProcess: a process built with an older SDK recorded
// each segment as an empty file of its name; a sweep unlinks those too.
func TestLedgerOfAnOlderProcess(t *testing.T) {
	dir := Dir(t.TempDir(), ids.New())
	old, seg := newSegment(t), newSegment(t)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, old), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Add(dir, seg); err != nil {
		t.Fatal(err)
	}
	got, err := Sweep(dir)
	slices.Sort(got)
	want := []string{old, seg}
	slices.Sort(want)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("Sweep: %v, %v; want %v unlinked", got, err, want)
	}
}

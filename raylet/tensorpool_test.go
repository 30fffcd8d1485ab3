package raylet

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// poolOf makes a segment pool holding n free 1 MiB segments, removed at
// the end of the test.
func poolOf(t *testing.T, n int) *shmem.Pool {
	t.Helper()
	p, err := shmem.NewPool()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Remove() })
	pre := shmem.NewName(shmem.Prefix+"raylet-pool-test-") + "-"
	for i := 0; i < n; i++ {
		s, err := shmem.Create(shmem.NewName(pre), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
		if err := p.Put(s.Name()); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// TestMemoryMonitorEmptiesTensorPoolFirst: above the threshold, the memory
// monitor gives back the tensor pool's memory and kills nothing while that
// frees something; with an empty pool it kills as before.
func TestMemoryMonitorEmptiesTensorPoolFirst(t *testing.T) {
	p := poolOf(t, 2)
	tp := newTensorPool(TensorPoolConfig{Pool: p, MaxMemory: 1 << 30, IdleTimeout: time.Hour}, hclog.NewNullLogger())
	cand := memoryCandidate{w: &worker{id: ids.New()}, leaseID: ids.New(), holder: ids.New(), pid: 11, retriable: true, function: "main.hog", granted: time.Now()}
	mem := &fakeMemory{}
	ws := &fakeWorkers{cands: []memoryCandidate{cand}, exits: map[*worker]chan struct{}{}}
	m := newTestMonitor(t, mem, ws)
	m.release = tp.release

	mem.set(950, nil)
	if k := m.check(time.Now()); k != nil || len(ws.killed) != 0 {
		t.Fatalf("killed %v with 2 MiB in the tensor pool", ws.killed)
	}
	if n, _, _ := p.Usage(); n != 0 {
		t.Fatalf("the pool still holds %d segments above the threshold", n)
	}
	if k := m.check(time.Now()); k == nil || len(ws.killed) != 1 {
		t.Fatalf("with the pool empty and memory still high: killed %v", ws.killed)
	}
}

// TestTensorPoolTrimsIdle: the raylet's trimming keeps the pool within its
// idle timeout and its memory bound.
func TestTensorPoolTrimsIdle(t *testing.T) {
	p := poolOf(t, 3)
	tp := newTensorPool(TensorPoolConfig{Pool: p, MaxMemory: 2 << 20, IdleTimeout: time.Hour}, hclog.NewNullLogger())
	if got := tp.trim(tp.cfg.IdleTimeout, tp.cfg.MaxMemory); got != 1<<20 {
		t.Fatalf("trimmed %d bytes, want 1 MiB (the pool holds 3 MiB, bound 2 MiB)", got)
	}
	if got := tp.trim(0, tp.cfg.MaxMemory); got != 2<<20 {
		t.Fatalf("trimmed %d bytes of idle segments, want 2 MiB", got)
	}
}

// TestTensorPoolRunGivesBackIdle: left running, the trimming loop empties a
// pool nobody uses within its idle timeout, and stops with its context.
func TestTensorPoolRunGivesBackIdle(t *testing.T) {
	p := poolOf(t, 2)
	tp := newTensorPool(TensorPoolConfig{Pool: p, MaxMemory: 1 << 30, IdleTimeout: 100 * time.Millisecond}, hclog.NewNullLogger())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); tp.run(ctx, nil) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, _, err := p.Usage()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d idle segments still pooled after 30s with a 100ms idle timeout", n)
		}
		time.Sleep(10 * time.Millisecond) // polling the pool, not synchronising
	}
	cancel()
	<-done
}

// TestTensorPoolRunZeroesFreed: left running, the loop zeroes a segment
// freed into the pool when the pool's directory says one arrived (not only
// at its tick), so that the next tensor made from it needs no fill; its
// bytes are gone, and it stops with its context.
func TestTensorPoolRunZeroesFreed(t *testing.T) {
	p := poolOf(t, 0)
	tp := newTensorPool(TensorPoolConfig{Pool: p, MaxMemory: 1 << 30, IdleTimeout: 4 * time.Hour}, hclog.NewNullLogger())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); tp.run(ctx, nil) }()
	defer func() { cancel(); <-done }()
	pre := shmem.NewName(shmem.Prefix+"raylet-pool-test-") + "-"
	for i := 0; i < 3; i++ {
		s, err := shmem.Create(shmem.NewName(pre), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		copy(s.Bytes(), "a tensor's bytes")
		_ = s.Close()
		if err := p.Put(s.Name()); err != nil { // freed, after the watch began or not
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			name, zeroed, err := p.Get(pre, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if zeroed {
				seg, err := shmem.Open(name)
				if err != nil {
					t.Fatal(err)
				}
				if got := string(seg.Bytes()[:16]); got != string(make([]byte, 16)) {
					t.Fatalf("a segment said zeroed reads %q", got)
				}
				_ = seg.Close()
				_ = shmem.Unlink(name)
				break
			}
			if name != "" {
				if err := p.Put(name); err != nil { // not zeroed yet: back it goes
					t.Fatal(err)
				}
			}
			if time.Now().After(deadline) {
				t.Fatal("a freed segment was not zeroed within 30s")
			}
			time.Sleep(5 * time.Millisecond) // polling the pool, not synchronising
		}
	}
	if tp.zeroedOnEvent.Load() == 0 {
		t.Fatal("every segment was zeroed at a tick: the pool's events woke no round")
	}
}

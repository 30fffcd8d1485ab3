package shmem

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
)

// zeroed reports whether every byte of the named segment is zero.
func zeroed(t *testing.T, name string) bool {
	t.Helper()
	s, err := Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	return !bytes.ContainsFunc(s.Bytes(), func(r rune) bool { return r != 0 })
}

// TestScrubber: a pooled segment is zeroed and marked so, and Get hands it
// out saying it is zeroed; a segment a reader still maps is left alone
// (the reader keeps its bytes) and zeroed once it is released; the
// mappings kept for reuse go with the segments.
func TestScrubber(t *testing.T) {
	pre := testPrefix(t)
	p := testPool(t)
	s := NewScrubber(p, 4)
	defer s.Close()
	ctx := context.Background()

	a := pooledSegment(t, pre, 1<<20, "tensor A")
	if err := p.Put(a); err != nil {
		t.Fatal(err)
	}
	if n, b, err := s.Scrub(ctx, -1); err != nil || n != 1 || b != 1<<20 {
		t.Fatalf("Scrub = %d segments, %d bytes, %v; want 1, 1 MiB", n, b, err)
	}
	if n, _, _ := s.Scrub(ctx, -1); n != 0 {
		t.Fatalf("a second Scrub zeroed %d segments again", n)
	}
	got, z, err := p.Get(pre, 1<<20)
	if err != nil || got == "" || !z {
		t.Fatalf("Get = %q, zeroed %v, %v; want a zeroed segment", got, z, err)
	}
	if !zeroed(t, got) {
		t.Fatal("the segment Get said was zeroed holds bytes")
	}

	// A reader outlives the writer's reference: its bytes stay.
	copy(mustAcquire(t, Default, got), "tensor B")
	reader := NewCache(4)
	r, err := reader.Acquire(got, 0, 8)
	if err != nil {
		t.Fatal(err)
	}
	Default.Release(got)
	if err := p.Put(got); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := s.Scrub(ctx, -1); n != 0 || string(r) != "tensor B" {
		t.Fatalf("Scrub while a reader maps the segment: zeroed %d, the reader reads %q", n, r)
	}
	reader.Release(got)
	if n, _, _ := s.Scrub(ctx, -1); n != 1 {
		t.Fatalf("Scrub after the reader released: zeroed %d, want 1", n)
	}
	if s.mapped() != 1 {
		t.Fatalf("the scrubber holds %d mappings; want the one it reuses", s.mapped())
	}
	if _, _, err := p.Trim(0, 0); err != nil {
		t.Fatal(err)
	}
	_, _, _ = s.Scrub(ctx, -1)
	if s.mapped() != 0 {
		t.Fatalf("the scrubber still maps %d trimmed segments", s.mapped())
	}
	Default.Purge()
	reader.Purge()
}

func mustAcquire(t *testing.T, c *Cache, name string) []byte {
	t.Helper()
	b, err := c.Acquire(name, 0, 8)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestScrubberNeverZeroesATakenSegment: scrubbing while Get takes segments
// and their new owners write them never zeroes an owner's bytes.
func TestScrubberNeverZeroesATakenSegment(t *testing.T) {
	pre := testPrefix(t)
	p := testPool(t)
	s := NewScrubber(p, 8)
	defer s.Close()
	for i := 0; i < 4; i++ {
		if err := p.Put(pooledSegment(t, pre, 64<<10, "x")); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				if _, _, err := s.Scrub(context.Background(), -1); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	for i := 0; i < 300; i++ {
		name, _, err := p.Get(pre, 64<<10)
		if err != nil {
			t.Fatal(err)
		}
		if name == "" {
			continue // all being zeroed just now
		}
		seg, err := Open(name)
		if err != nil {
			t.Fatal(err)
		}
		msg := fmt.Sprintf("owner %d", i)
		copy(seg.Bytes(), msg)
		// Give the scrubber every chance to touch it while it is owned.
		for j := 0; j < 3; j++ {
			_, _, _ = s.Scrub(context.Background(), -1)
		}
		if got := string(seg.Bytes()[:len(msg)]); got != msg {
			t.Fatalf("an owned segment reads %q, want %q: the scrubber zeroed it", got, msg)
		}
		_ = seg.Close()
		if err := p.Put(name); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}

// mapped returns how many mappings s holds.
func (s *Scrubber) mapped() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.maps)
}

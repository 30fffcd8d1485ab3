package shmem

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
)

// testPrefix returns a unique prefix for one test and checks at the end
// that nothing with it is left in /dev/shm.
func testPrefix(t *testing.T) string {
	t.Helper()
	p := NewName(Prefix+"shmemtest-") + "-"
	t.Cleanup(func() {
		left, err := List(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(left) > 0 {
			t.Errorf("segments left in %s: %v", Dir, left)
			_, _ = CleanupPrefix(p)
		}
	})
	return p
}

func TestCreateOpenUnlink(t *testing.T) {
	p := testPrefix(t)
	name := NewName(p)
	s, err := Create(name, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if s.Name() != name || s.Size() != 4096 || len(s.Bytes()) != 4096 {
		t.Fatalf("segment %q size %d len %d", s.Name(), s.Size(), len(s.Bytes()))
	}
	copy(s.Bytes(), "hello")

	o, err := Open(name)
	if err != nil {
		t.Fatal(err)
	}
	if string(o.Bytes()[:5]) != "hello" {
		t.Fatalf("second mapping reads %q", o.Bytes()[:5])
	}
	o.Bytes()[0] = 'j'
	if s.Bytes()[0] != 'j' {
		t.Fatal("writes through one mapping are not seen through the other")
	}

	if _, err := Create(name, 10); !errors.Is(err, ErrExists) {
		t.Fatalf("Create of an existing name: %v, want ErrExists", err)
	}
	if size, err := Stat(name); err != nil || size != 4096 {
		t.Fatalf("Stat = %d, %v", size, err)
	}
	if err := s.Unlink(); err != nil {
		t.Fatal(err)
	}
	if Exists(name) {
		t.Fatal("segment exists after Unlink")
	}
	// Mappings outlive the name.
	if o.Bytes()[0] != 'j' {
		t.Fatal("mapping lost its bytes after unlink")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what string
		err  error
	}{
		{"Open", func() error { _, err := Open(name); return err }()},
		{"Unlink", Unlink(name)},
		{"Stat", func() error { _, err := Stat(name); return err }()},
	} {
		if !errors.Is(tc.err, ErrNotFound) {
			t.Errorf("%s of an unlinked segment: %v, want ErrNotFound", tc.what, tc.err)
		}
		var se *Error
		if !errors.As(tc.err, &se) || se.Segment != name {
			t.Errorf("%s error %v does not name the segment", tc.what, tc.err)
		}
	}
}

func TestZeroSize(t *testing.T) {
	p := testPrefix(t)
	name := NewName(p)
	s, err := Create(name, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Unlink()
	defer s.Close()
	if len(s.Bytes()) != 0 {
		t.Fatal("zero-size segment has bytes")
	}
	o, err := Open(name)
	if err != nil {
		t.Fatal(err)
	}
	_ = o.Close()
}

func TestBadNames(t *testing.T) {
	for _, name := range []string{"", ".", "..", "a/b", "../etc/passwd", string(make([]byte, MaxNameLen+1))} {
		if _, err := Create(name, 1); !errors.Is(err, ErrBadName) {
			t.Errorf("Create(%.20q): %v, want ErrBadName", name, err)
		}
		if _, err := Open(name); !errors.Is(err, ErrBadName) {
			t.Errorf("Open(%.20q): %v, want ErrBadName", name, err)
		}
		if err := Unlink(name); !errors.Is(err, ErrBadName) {
			t.Errorf("Unlink(%.20q): %v, want ErrBadName", name, err)
		}
	}
	if _, err := Create(NewName(Prefix+"x"), -1); err == nil {
		t.Error("Create with a negative size succeeded")
	}
}

func TestCleanupPrefix(t *testing.T) {
	p := testPrefix(t)
	var want []string
	for range 3 {
		n := NewName(p)
		s, err := Create(n, 16)
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
		want = append(want, n)
	}
	other := NewName(Prefix + "othertest-")
	s, err := Create(other, 1)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	defer Unlink(other)

	listed, err := List(p)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	if !slices.Equal(listed, want) {
		t.Fatalf("List = %v, want %v", listed, want)
	}
	removed, err := CleanupPrefix(p)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if !slices.Equal(removed, want) {
		t.Fatalf("CleanupPrefix removed %v, want %v", removed, want)
	}
	if !Exists(other) {
		t.Fatal("CleanupPrefix removed a segment with another prefix")
	}
	if _, err := CleanupPrefix(""); !errors.Is(err, ErrBadName) {
		t.Fatalf("CleanupPrefix(\"\"): %v, want ErrBadName", err)
	}
}

func TestPublishReadAll(t *testing.T) {
	p := testPrefix(t)
	name := NewName(p)
	if err := Publish(name, []byte("manifest")); err != nil {
		t.Fatal(err)
	}
	defer Unlink(name)
	if err := Publish(name, []byte("again")); !errors.Is(err, ErrExists) {
		t.Fatalf("second Publish: %v, want ErrExists", err)
	}
	got, err := ReadAll(name, 100)
	if err != nil || string(got) != "manifest" {
		t.Fatalf("ReadAll = %q, %v", got, err)
	}
	if _, err := ReadAll(name, 3); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("ReadAll over its limit: %v, want ErrOutOfRange", err)
	}
	if _, err := ReadAll(NewName(p), 100); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ReadAll of a missing segment: %v, want ErrNotFound", err)
	}
}

func TestCacheSharesAndReleases(t *testing.T) {
	p := testPrefix(t)
	name := NewName(p)
	s, err := Create(name, 1024)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defer Unlink(name)
	copy(s.Bytes()[100:], "abc")

	c := NewCache(1)
	a, err := c.Acquire(name, 100, 3)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Acquire(name, 0, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != "abc" || &a[0] != &b[100] {
		t.Fatal("two acquires of one segment do not share a mapping")
	}
	if cap(a) != 3 {
		t.Fatalf("acquired slice has capacity %d, want 3 (no access past the range)", cap(a))
	}
	if m, r := c.Stats(); m != 1 || r != 1 {
		t.Fatalf("Stats = %d mapped, %d referenced; want 1, 1", m, r)
	}
	c.Release(name)
	c.Release(name)
	if m, r := c.Stats(); m != 1 || r != 0 {
		t.Fatalf("after release: %d mapped, %d referenced; want 1 idle mapping", m, r)
	}
	// A second segment pushes the first out (idle limit 1).
	name2 := NewName(p)
	s2, err := Create(name2, 10)
	if err != nil {
		t.Fatal(err)
	}
	_ = s2.Close()
	defer Unlink(name2)
	if _, err := c.Acquire(name2, 0, 10); err != nil {
		t.Fatal(err)
	}
	c.Release(name2)
	if m, _ := c.Stats(); m != 1 {
		t.Fatalf("%d mappings held, idle limit is 1", m)
	}
	c.Purge()
	if m, _ := c.Stats(); m != 0 {
		t.Fatalf("%d mappings held after Purge", m)
	}
}

func TestCacheErrors(t *testing.T) {
	p := testPrefix(t)
	name := NewName(p)
	s, err := Create(name, 64)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	c := NewCache(4)
	for _, tc := range []struct {
		off, n int64
	}{{0, 65}, {60, 5}, {-1, 4}, {0, -1}} {
		if _, err := c.Acquire(name, tc.off, tc.n); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("Acquire(%d, %d): %v, want ErrOutOfRange", tc.off, tc.n, err)
		}
	}
	if b, err := c.Acquire("", 0, 0); err != nil || len(b) != 0 {
		t.Errorf("zero-length Acquire = %v, %v", b, err)
	}
	// An idle mapping of an unlinked segment is not served, and is dropped.
	if _, err := c.Acquire(name, 0, 64); err != nil {
		t.Fatal(err)
	}
	c.Release(name)
	if err := Unlink(name); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(name, 0, 64); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Acquire of an unlinked segment: %v, want ErrNotFound", err)
	}
	if m, _ := c.Stats(); m != 0 {
		t.Fatalf("cache still maps %d segments after the only one was unlinked", m)
	}
}

func TestCacheReplacedSegment(t *testing.T) {
	p := testPrefix(t)
	name := NewName(p)
	s, err := Create(name, 8)
	if err != nil {
		t.Fatal(err)
	}
	copy(s.Bytes(), "old")
	_ = s.Close()
	c := NewCache(4)
	old, err := c.Acquire(name, 0, 3)
	if err != nil {
		t.Fatal(err)
	}
	// Same name, new file: the cache must map the new one.
	if err := Unlink(name); err != nil {
		t.Fatal(err)
	}
	s, err = Create(name, 8)
	if err != nil {
		t.Fatal(err)
	}
	copy(s.Bytes(), "new")
	_ = s.Close()
	defer Unlink(name)
	cur, err := c.Acquire(name, 0, 3)
	if err != nil {
		t.Fatal(err)
	}
	if string(cur) != "new" || string(old) != "old" {
		t.Fatalf("old view %q, new view %q", old, cur)
	}
	c.Release(name)
	c.Release(name)
	c.Purge()
	if m, r := c.Stats(); m != 0 || r != 0 {
		t.Fatalf("Stats = %d, %d after releasing everything", m, r)
	}
}

func TestCacheConcurrent(t *testing.T) {
	p := testPrefix(t)
	var names []string
	for range 4 {
		n := NewName(p)
		s, err := Create(n, 4096)
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
		names = append(names, n)
	}
	defer func() {
		for _, n := range names {
			_ = Unlink(n)
		}
	}()
	c := NewCache(2)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				n := names[(g+i)%len(names)]
				b, err := c.Acquire(n, int64(g*8), 8)
				if err != nil {
					errs <- err
					return
				}
				b[0] = byte(g)
				if b[0] != byte(g) {
					errs <- fmt.Errorf("goroutine %d lost its write", g)
				}
				c.Release(n)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if _, r := c.Stats(); r != 0 {
		t.Fatalf("%d mappings still referenced", r)
	}
	c.Purge()
}

func TestErrorMessageNamesSegment(t *testing.T) {
	_, err := Open(Prefix + "does-not-exist-" + fmt.Sprint(os.Getpid()))
	if err == nil || !errors.Is(err, ErrNotFound) {
		t.Fatalf("Open: %v", err)
	}
	if want := Prefix + "does-not-exist-"; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not name the segment", err)
	}
}

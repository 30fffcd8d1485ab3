package shmem

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/waitfor"
)

// envHold makes the test binary a process that maps the named segment,
// says so and waits to be killed.
const envHold = "SHMEM_TEST_HOLD"

func TestClassSize(t *testing.T) {
	for _, tc := range []struct{ n, want int64 }{
		{-1, MinPooled}, {0, MinPooled}, {1, MinPooled}, {MinPooled, MinPooled},
		{MinPooled + 1, 80 << 10}, // 64 KiB · 1.25
		{96 << 10, 96 << 10}, {100 << 10, 112 << 10}, {128 << 10, 128 << 10},
		{1 << 20, 1 << 20}, {1<<20 + 1, 1280 << 10},
		{64 << 20, 64 << 20}, {65 << 20, 80 << 20}, {100 << 20, 112 << 20}, {129 << 20, 160 << 20},
	} {
		got := ClassSize(tc.n)
		if got != tc.want {
			t.Errorf("ClassSize(%d) = %d, want %d", tc.n, got, tc.want)
		}
		if got < tc.n || ClassSize(got) != got {
			t.Errorf("ClassSize(%d) = %d: not a fixed point at least n", tc.n, got)
		}
		if tc.n > MinPooled && float64(got) > 1.25*float64(tc.n) {
			t.Errorf("ClassSize(%d) = %d wastes more than a fifth", tc.n, got)
		}
	}
}

// testPool makes a pool removed at the end of the test.
func testPool(t *testing.T) *Pool {
	t.Helper()
	p, err := NewPool()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Remove(); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(p.Dir()); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("pool %s still there after Remove", p.Dir())
		}
	})
	return p
}

// pooledSegment creates a segment of class size holding text.
func pooledSegment(t *testing.T, prefix string, size int64, text string) string {
	t.Helper()
	name := NewName(prefix)
	s, err := Create(name, ClassSize(size))
	if err != nil {
		t.Fatal(err)
	}
	copy(s.Bytes(), text)
	_ = s.Close()
	return name
}

func TestPoolPutGetTrim(t *testing.T) {
	pre := testPrefix(t)
	p := testPool(t)
	a := pooledSegment(t, pre, 1<<20, "tensor one")
	if err := p.Put(a); err != nil {
		t.Fatal(err)
	}
	if Exists(a) {
		t.Fatal("a pooled segment keeps its name")
	}
	if n, b, err := p.Usage(); err != nil || n != 1 || b != 1<<20 {
		t.Fatalf("Usage = %d, %d, %v; want 1 segment of 1 MiB", n, b, err)
	}
	// Another size class finds nothing.
	if name, _, err := p.Get(pre, 2<<20); err != nil || name != "" {
		t.Fatalf("Get of another size = %q, %v; want nothing", name, err)
	}
	// Any size of the class gets it, under a fresh name, pages intact.
	b, _, err := p.Get(pre, 1<<20-100)
	if err != nil || b == "" {
		t.Fatalf("Get = %q, %v", b, err)
	}
	if b == a || !strings.HasPrefix(b, pre) {
		t.Fatalf("Get named it %q (was %q, prefix %q)", b, a, pre)
	}
	if got, err := ReadAll(b, 2<<20); err != nil || !strings.HasPrefix(string(got), "tensor one") {
		t.Fatalf("the segment from the pool holds %.10q, %v", got, err)
	}
	if name, _, _ := p.Get(pre, 1<<20); name != "" {
		t.Fatalf("a second Get found %q in a pool of one", name)
	}
	// Sizes that are not a class, and small ones, are unlinked.
	for _, size := range []int64{1000, 1<<20 + 4096} {
		odd := NewName(pre)
		s, err := Create(odd, size)
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
		if err := p.Put(odd); err != nil || Exists(odd) {
			t.Fatalf("Put(%d bytes) = %v, exists %v: want it unlinked", size, err, Exists(odd))
		}
	}
	if err := p.Put(NewName(pre)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Put of no segment = %v, want ErrNotFound", err)
	}
	// Trim: the idle timeout first, then the memory bound, oldest first.
	if err := p.Put(b); err != nil {
		t.Fatal(err)
	}
	c := pooledSegment(t, pre, 2<<20, "two")
	if err := p.Put(c); err != nil {
		t.Fatal(err)
	}
	if n, _, err := p.Trim(time.Hour, -1); err != nil || n != 0 {
		t.Fatalf("Trim(1h, no bound) removed %d, %v", n, err)
	}
	if n, bytes, err := p.Trim(time.Hour, 2<<20); err != nil || n != 1 || bytes != 1<<20 {
		t.Fatalf("Trim(1h, 2 MiB) removed %d (%d bytes), %v; want the older 1 MiB one", n, bytes, err)
	}
	if name, _, _ := p.Get(pre, 2<<20); name == "" {
		t.Fatal("the newer segment was trimmed")
	} else if err := p.Put(name); err != nil {
		t.Fatal(err)
	}
	if n, _, err := p.Trim(0, 0); err != nil || n != 1 {
		t.Fatalf("Trim(0, 0) removed %d, %v", n, err)
	}
	if n, _, _ := p.Usage(); n != 0 {
		t.Fatalf("%d segments left after emptying", n)
	}
}

// TestPoolNeverHandsOutAReadSegment: a reader that outlives the writer's
// reference keeps the tensor's bytes; the pool gives the segment to a new
// tensor only once every reader released it, and a reader asking by the
// old name afterwards gets ErrNotFound, never the new tensor's bytes.
func TestPoolNeverHandsOutAReadSegment(t *testing.T) {
	pre := testPrefix(t)
	p := testPool(t)
	writer, reader1, reader2 := NewCache(4), NewCache(4), NewCache(4)
	a := pooledSegment(t, pre, 1<<20, "tensor A")
	r1, err := reader1.Acquire(a, 0, 8)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := reader2.Acquire(a, 0, 8)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Put(a); err != nil { // the writer's reference goes
		t.Fatal(err)
	}
	for i, release := range []func(){func() { reader1.Release(a) }, func() { reader2.Release(a) }} {
		if name, _, err := p.Get(pre, 1<<20); err != nil || name != "" {
			t.Fatalf("Get while %d reader(s) still map the segment = %q, %v", 2-i, name, err)
		}
		if string(r2) != "tensor A" {
			t.Fatalf("a reader reads %q", r2)
		}
		release()
	}
	if string(r1) != "tensor A" {
		t.Fatalf("reader 1 read %q before releasing", r1)
	}
	b, _, err := p.Get(pre, 1<<20)
	if err != nil || b == "" {
		t.Fatalf("Get after every reader released = %q, %v", b, err)
	}
	w, err := writer.Acquire(b, 0, 8)
	if err != nil {
		t.Fatal(err)
	}
	copy(w, "tensor B")
	writer.Release(b)
	if _, err := reader1.Acquire(a, 0, 8); !errors.Is(err, ErrNotFound) {
		t.Fatalf("reader asking for tensor A after it was freed: %v, want ErrNotFound", err)
	}
	got, err := reader1.Acquire(b, 0, 8)
	if err != nil || string(got) != "tensor B" {
		t.Fatalf("tensor B reads %q, %v", got, err)
	}
	reader1.Release(b)
	if err := Unlink(b); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*Cache{writer, reader1, reader2} {
		c.Purge()
	}
}

// TestCacheKeepsMappingAcrossNames: a segment that comes back from the pool
// under a new name is served from the mapping the process already has.
func TestCacheKeepsMappingAcrossNames(t *testing.T) {
	pre := testPrefix(t)
	p := testPool(t)
	c := NewCache(4)
	a := pooledSegment(t, pre, 1<<20, "x")
	first, mapped, err := c.AcquireMapping(a, 0, 1<<20)
	if err != nil || !mapped {
		t.Fatalf("first AcquireMapping: new mapping %v, %v", mapped, err)
	}
	c.Release(a)
	if err := p.Put(a); err != nil {
		t.Fatal(err)
	}
	b, _, err := p.Get(pre, 1<<20)
	if err != nil || b == "" {
		t.Fatalf("Get = %q, %v", b, err)
	}
	again, mapped, err := c.AcquireMapping(b, 0, 1<<20)
	if err != nil || mapped {
		t.Fatalf("AcquireMapping under the new name: new mapping %v, %v; want the kept one", mapped, err)
	}
	if &again[0] != &first[0] {
		t.Fatal("the segment under its new name was mapped again")
	}
	if m, r := c.Stats(); m != 1 || r != 1 {
		t.Fatalf("Stats = %d mapped, %d referenced; want 1, 1", m, r)
	}
	c.Release(b)
	// Unlinked (trimmed from the pool), its idle mapping goes within the
	// sweep interval even if the process does nothing.
	if err := p.Put(b); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.Trim(0, 0); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * sweepEvery)
	for {
		m, _ := c.Stats()
		if m == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("an idle mapping of a trimmed segment is still mapped after %s", 10*sweepEvery)
		}
		time.Sleep(20 * time.Millisecond) // polling the cache's state, not synchronising
	}
}

// TestPoolReaderKilled: a reader process killed with SIGKILL while it maps
// a segment does not pin it: its lock goes with it.
func TestPoolReaderKilled(t *testing.T) {
	pre := testPrefix(t)
	p := testPool(t)
	a := pooledSegment(t, pre, 1<<20, "held")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHold+"="+a)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "held held" {
		t.Fatalf("helper said %q, %v", line, err)
	}
	if err := p.Put(a); err != nil {
		t.Fatal(err)
	}
	if name, _, _ := p.Get(pre, 1<<20); name != "" {
		t.Fatalf("Get handed out %q while another process maps it", name)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	name, _, err := p.Get(pre, 1<<20)
	if err != nil || name == "" {
		t.Fatalf("Get after the reader was killed = %q, %v", name, err)
	}
	if err := Unlink(name); err != nil {
		t.Fatal(err)
	}
}

// TestMain runs the reader process of TestPoolReaderKilled when asked.
func TestMain(m *testing.M) {
	if name := os.Getenv(envHold); name != "" {
		b, err := Default.Acquire(name, 0, 4)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("held", string(b))
		select {} // until killed
	}
	os.Exit(m.Run())
}

func TestRemoveDeadPools(t *testing.T) {
	mine := testPool(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(Dir, fmt.Sprintf("%s%d-%s", PoolPrefix, dead.Process.Pid, NewName("")[:16]))
	// Another dead process's pool nobody names: left alone.
	unnamed := filepath.Join(Dir, fmt.Sprintf("%s%d-%s", PoolPrefix, dead.Process.Pid, NewName("")[:16]))
	for _, dir := range []string{orphan, unnamed} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
	}
	if err := os.WriteFile(filepath.Join(orphan, "1048576-1-x"), []byte("left"), 0o600); err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(Dir, fmt.Sprintf("%s%d-%s", PoolPrefix, dead.Process.Pid, NewName("")[:16]))
	// A process killed and not reaped yet (a zombie) holds nothing: its
	// pool goes too.
	zombie := exec.Command("sleep", "60")
	if err := zombie.Start(); err != nil {
		t.Fatal(err)
	}
	defer zombie.Wait()
	if err := zombie.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	zombiePool := filepath.Join(Dir, fmt.Sprintf("%s%d-%s", PoolPrefix, zombie.Process.Pid, NewName("")[:16]))
	if err := os.Mkdir(zombiePool, 0o700); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(zombiePool)
	waitfor.Cond(t, time.Minute, "the killed process to be a zombie", func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", zombie.Process.Pid))
		return bytes.Contains(b, []byte(") Z "))
	})
	removed, err := RemoveDeadPools([]string{orphan, mine.Dir(), gone, zombiePool})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{orphan, zombiePool}) {
		t.Fatalf("RemoveDeadPools removed %v, want only the dead processes' %s and %s", removed, orphan, zombiePool)
	}
	if _, err := os.Stat(orphan); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the dead process's pool is still there")
	}
	for _, kept := range []string{mine.Dir(), unnamed} {
		if _, err := os.Stat(kept); err != nil {
			t.Fatalf("%s: %v", kept, err)
		}
	}
	// What is not a pool directory is refused, whatever its process.
	for _, bad := range []string{filepath.Join(t.TempDir(), PoolPrefix+"999999999-x"), filepath.Join(Dir, "goray-other-1-x"), filepath.Join(Dir, PoolPrefix+"x-y"), filepath.Join(Dir, "sub", PoolPrefix+"999999999-x")} {
		if _, err := RemoveDeadPools([]string{bad}); !errors.Is(err, ErrBadName) {
			t.Errorf("RemoveDeadPools(%s): %v, want ErrBadName", bad, err)
		}
	}
	if _, err := OpenPool(filepath.Join(t.TempDir(), PoolPrefix+"1-x")); !errors.Is(err, ErrBadName) {
		t.Fatalf("OpenPool outside %s: %v, want ErrBadName", Dir, err)
	}
}

// TestPoolConcurrent: goroutines taking, using and returning segments
// never hold one file at the same time.
func TestPoolConcurrent(t *testing.T) {
	pre := testPrefix(t)
	p := testPool(t)
	for i := 0; i < 3; i++ {
		if err := p.Put(pooledSegment(t, pre, 1<<20, "")); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	inUse := map[uint64]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := NewCache(2)
			defer c.Purge()
			for i := 0; i < 50; i++ {
				name, _, err := p.Get(pre, 1<<20)
				if err != nil {
					errs <- err
					return
				}
				if name == "" {
					name = pooledSegment(t, pre, 1<<20, "")
				}
				b, err := c.Acquire(name, 0, 8)
				if err != nil {
					errs <- err
					return
				}
				_, ino, _ := stat(name)
				mu.Lock()
				if inUse[ino] {
					mu.Unlock()
					errs <- fmt.Errorf("file %d handed to two holders", ino)
					return
				}
				inUse[ino] = true
				mu.Unlock()
				copy(b, "busy")
				mu.Lock()
				delete(inUse, ino)
				mu.Unlock()
				c.Release(name)
				if err := p.Put(name); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

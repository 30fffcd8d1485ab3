package storagetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/sdk/plugin/plugintest"
	"github.com/goray-dev/goray/sdk/storage"
	"golang.org/x/sys/unix"
)

func testInfo(e *env) {
	ctx, cancel := e.ctx()
	defer cancel()
	r, err := e.s.Info(ctx, &storage.InfoRequest{})
	if err != nil {
		e.t.Fatalf("Info: %v", err)
	}
	if r.Name == "" {
		e.t.Error("Info: empty backend name")
	}
	if r.Location == "" {
		e.t.Error("Info: empty location for a configured storage")
	}
	r2, err := e.s.Info(ctx, nil)
	if err != nil {
		e.t.Fatalf("Info(nil): %v", err)
	}
	if *r2 != *r {
		e.t.Errorf("Info changed between calls: %+v then %+v", *r, *r2)
	}
}

func testRoundTrip(e *env) {
	sizes := []int64{0, 1, 4096, storage.ChunkSize - 1, storage.ChunkSize, storage.ChunkSize + 1, 3*storage.ChunkSize + 17, 64 << 20}
	for i, size := range sizes {
		e.t.Run(strconv.FormatInt(size, 10), func(t *testing.T) {
			e := e.with(t)
			ctx, cancel := e.ctx()
			defer cancel()
			key := e.key(fmt.Sprintf("obj-%d.spill", size))
			seed := uint64(1000 + i)
			w := e.mustWrite(ctx, key, seed, size)
			if w.URL == "" {
				t.Error("Write returned an empty URL")
			}
			e.mustCheck(ctx, key, seed, size, 0, storage.ToEnd)
			e.mustCheck(ctx, key, seed, size, 0, size)
			if size <= 4096 { // small objects also byte for byte through ReadAll
				r, err := e.s.Read(ctx, &storage.ReadRequest{Key: key, Length: storage.ToEnd})
				if err != nil {
					t.Fatalf("Read: %v", err)
				}
				got, err := io.ReadAll(r.Body)
				r.Body.Close()
				if err != nil || !bytes.Equal(got, content(seed, 0, size)) {
					t.Errorf("ReadAll: %d bytes, err %v; want the %d bytes written", len(got), err, size)
				}
			}
			l, err := e.s.List(ctx, &storage.ListRequest{Prefix: key})
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			if want := []storage.ObjectInfo{{Key: key, Size: size}}; !slices.Equal(l.Objects, want) {
				t.Errorf("List %q: %v, want %v", key, l.Objects, want)
			}
		})
	}
}

func testLarge(e *env) {
	ctx, cancel := context.WithTimeout(context.Background(), e.o.LargeTimeout)
	defer cancel()
	size := e.o.LargeSize
	key := e.key("large.spill")
	const seed = 77
	start := time.Now()
	e.mustWrite(ctx, key, seed, size)
	wrote := time.Since(start)
	start = time.Now()
	e.mustCheck(ctx, key, seed, size, 0, storage.ToEnd)
	read := time.Since(start)
	mb := float64(size) / 1e6
	e.t.Logf("%d bytes: write %v (%.0f MB/s), read %v (%.0f MB/s)", size, wrote.Round(time.Millisecond), mb/wrote.Seconds(), read.Round(time.Millisecond), mb/read.Seconds())
	// Ranges near the end, across the 2 GiB and 4 GiB marks when the object
	// is that large, and one unaligned in the middle.
	ranges := [][2]int64{{size - 1, 1}, {size - 5000, storage.ToEnd}, {size / 2, 12345}, {size, 0}}
	for _, mark := range []int64{1 << 31, 1 << 32} {
		if size > mark+4096 {
			ranges = append(ranges, [2]int64{mark - 4093, 8191})
		}
	}
	for _, rg := range ranges {
		if rg[0] < 0 {
			continue
		}
		e.mustCheck(ctx, key, seed, size, rg[0], rg[1])
	}
	l, err := e.s.List(ctx, &storage.ListRequest{Prefix: key})
	if err != nil {
		e.t.Fatalf("List: %v", err)
	}
	if len(l.Objects) != 1 || l.Objects[0].Size != size {
		e.t.Errorf("List %q: %v, want one object of %d bytes", key, l.Objects, size)
	}
}

// testFusedRanges stores many objects fused into one file, as the runtime
// spills them, and reads each back by offset and length.
func testFusedRanges(e *env) {
	ctx, cancel := e.ctx()
	defer cancel()
	rng := rand.New(rand.NewPCG(1, 2))
	type part struct{ off, n int64 }
	var parts []part
	var total int64
	for i := range 60 {
		var n int64
		switch {
		case i%7 == 3:
			n = 0
		case i%11 == 5:
			n = storage.ChunkSize + rng.Int64N(4096) // across chunk boundaries
		default:
			n = rng.Int64N(300 << 10)
		}
		parts = append(parts, part{total, n})
		total += n
	}
	key := e.key("fused/000001.spill")
	const seed = 4242
	e.mustWrite(ctx, key, seed, total)
	for i, p := range parts {
		if err := e.check(ctx, key, seed, total, p.off, p.n); err != nil {
			e.t.Errorf("object %d of the fused file: %v", i, err)
		}
	}
	// Edges.
	e.mustCheck(ctx, key, seed, total, 0, 0)                   // empty at the start
	e.mustCheck(ctx, key, seed, total, total/2, 0)             // empty in the middle
	e.mustCheck(ctx, key, seed, total, total, 0)               // empty at the end
	e.mustCheck(ctx, key, seed, total, total, storage.ToEnd)   // to the end, from the end
	e.mustCheck(ctx, key, seed, total, total-1, storage.ToEnd) // the last byte
	e.mustCheck(ctx, key, seed, total, total-3, 3)             // the last bytes, exactly
	e.mustCheck(ctx, key, seed, total, parts[5].off, storage.ToEnd)
	// Ranges that do not fit fail clearly, from Read itself.
	bad := []struct {
		off, n int64
		what   string
	}{
		{total + 1, 0, "an empty range past the end"},
		{total + 1, storage.ToEnd, "to the end from past the end"},
		{total + 100, 10, "a range past the end"},
		{total - 10, 11, "a range running past the end"},
		{0, total + 1, "the whole object plus one byte"},
		{-1, 1, "a negative offset"},
		{0, -2, "a negative length other than ToEnd"},
	}
	for _, b := range bad {
		r, err := e.s.Read(ctx, &storage.ReadRequest{Key: key, Offset: b.off, Length: b.n})
		if err == nil {
			n, _ := io.Copy(io.Discard, r.Body)
			r.Body.Close()
			e.t.Errorf("Read of %s (offset %d, length %d of %d): no error (%d bytes); want ErrInvalidRange", b.what, b.off, b.n, total, n)
			continue
		}
		wantErr(e.t, "Read of "+b.what, err, storage.ErrInvalidRange)
	}
	// A body closed early does not disturb later reads.
	r, err := e.s.Read(ctx, &storage.ReadRequest{Key: key, Length: storage.ToEnd})
	if err != nil {
		e.t.Fatalf("Read: %v", err)
	}
	if _, err := io.ReadFull(r.Body, make([]byte, 1000)); err != nil {
		e.t.Errorf("reading 1000 bytes: %v", err)
	}
	if err := r.Body.Close(); err != nil {
		e.t.Errorf("closing a body early: %v", err)
	}
	e.mustCheck(ctx, key, seed, total, parts[1].off, parts[1].n)
}

func testNotFound(e *env) {
	ctx, cancel := e.ctx()
	defer cancel()
	key := e.key("never-written.spill")
	for _, rg := range [][2]int64{{0, storage.ToEnd}, {0, 0}, {10, 5}} {
		_, err := e.s.Read(ctx, &storage.ReadRequest{Key: key, Offset: rg[0], Length: rg[1]})
		wantErr(e.t, fmt.Sprintf("Read of a missing key, range %v", rg), err, storage.ErrNotFound)
		if err != nil && !strings.Contains(err.Error(), key) {
			e.t.Errorf("the error %q does not name the key %q", err, key)
		}
	}
	// A directory-like prefix of stored keys is not an object.
	e.mustWrite(ctx, e.key("dir/child.spill"), 1, 10)
	_, err := e.s.Read(ctx, &storage.ReadRequest{Key: e.prefix + "dir", Length: storage.ToEnd})
	wantErr(e.t, "Read of a prefix of another key", err, storage.ErrNotFound)
}

// testAtomic checks that an object is invisible while its write is in
// progress and appears complete once Write returns.
func testAtomic(e *env) {
	ctx, cancel := e.ctx()
	defer cancel()
	key := e.key("atomic.spill")
	const size = 3*storage.ChunkSize + 5
	reached := make(chan struct{})
	resume := make(chan struct{})
	body := &hookBody{r: newPattern(5, size), n: 2 * storage.ChunkSize, hook: func() {
		close(reached)
		select {
		case <-resume:
		case <-ctx.Done():
		}
	}}
	done := make(chan error, 1)
	go func() {
		_, err := e.s.Write(ctx, &storage.WriteRequest{Key: key, Size: size, Body: body})
		done <- err
	}()
	select {
	case <-reached:
	case err := <-done:
		e.t.Fatalf("Write returned before it read its body: %v", err)
	case <-ctx.Done():
		e.t.Fatal("the write never read 2 MiB of its body")
	}
	e.absent(ctx, key, "during the write")
	close(resume)
	if err := <-done; err != nil {
		e.t.Fatalf("Write: %v", err)
	}
	e.mustCheck(ctx, key, 5, size, 0, storage.ToEnd)
}

func testOverwrite(e *env) {
	ctx, cancel := e.ctx()
	defer cancel()
	key := e.key("over.spill")
	e.mustWrite(ctx, key, 1, 5000)
	e.mustWrite(ctx, key, 2, 3000) // shorter
	e.mustCheck(ctx, key, 2, 3000, 0, storage.ToEnd)
	e.mustWrite(ctx, key, 3, 2*storage.ChunkSize+1) // longer
	e.mustCheck(ctx, key, 3, 2*storage.ChunkSize+1, 0, storage.ToEnd)
	l, err := e.s.List(ctx, &storage.ListRequest{Prefix: key})
	if err != nil {
		e.t.Fatalf("List: %v", err)
	}
	if want := []storage.ObjectInfo{{Key: key, Size: 2*storage.ChunkSize + 1}}; !slices.Equal(l.Objects, want) {
		e.t.Errorf("List after overwrites: %v, want %v", l.Objects, want)
	}
	// A failed overwrite leaves the old object.
	boom := errors.New("body failed on purpose")
	_, err = e.s.Write(ctx, &storage.WriteRequest{Key: key, Size: 4000, Body: &failingBody{r: newPattern(4, 4000), n: 2000, err: boom}})
	if err == nil {
		e.t.Fatal("Write with a failing body: no error")
	}
	_, err = e.s.Write(ctx, &storage.WriteRequest{Key: key, Size: 4000, Body: newPattern(4, 3999)})
	wantErr(e.t, "short overwrite", err, storage.ErrSizeMismatch)
	e.mustCheck(ctx, key, 3, 2*storage.ChunkSize+1, 0, storage.ToEnd)
	e.noLeftovers("after failed overwrites")

	// Concurrent writers of one key: the winner's object, whole.
	const writers = 8
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			if _, err := e.write(ctx, key, uint64(100+i), int64(200000+i)); err != nil {
				e.t.Errorf("concurrent Write %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	r, err := e.s.Read(ctx, &storage.ReadRequest{Key: key, Length: storage.ToEnd})
	if err != nil {
		e.t.Fatalf("Read after concurrent writes: %v", err)
	}
	i := r.Size - 200000
	r.Body.Close()
	if i < 0 || i >= writers {
		e.t.Fatalf("after concurrent writes the object has %d bytes, not one writer's size", r.Size)
	}
	e.mustCheck(ctx, key, uint64(100+i), r.Size, 0, storage.ToEnd)
}

func testDelete(e *env) {
	ctx, cancel := e.ctx()
	defer cancel()
	k1, k2, k3 := e.key("a/1.spill"), e.key("a/2.spill"), e.key("b/3.spill")
	for i, k := range []string{k1, k2, k3} {
		e.mustWrite(ctx, k, uint64(i), 1000)
	}
	missing := e.key("a/missing.spill")
	if _, err := e.s.Delete(ctx, &storage.DeleteRequest{Keys: []string{k1, missing, k3}}); err != nil {
		e.t.Fatalf("Delete with a missing key: %v", err)
	}
	e.absent(ctx, k1, "after Delete")
	e.absent(ctx, k3, "after Delete")
	e.mustCheck(ctx, k2, 1, 1000, 0, storage.ToEnd)
	if _, err := e.s.Delete(ctx, &storage.DeleteRequest{Keys: []string{k1, k1}}); err != nil {
		e.t.Errorf("Delete of deleted keys: %v", err)
	}
	if _, err := e.s.Delete(ctx, &storage.DeleteRequest{}); err != nil {
		e.t.Errorf("Delete of no keys: %v", err)
	}
	if _, err := e.s.Delete(ctx, nil); err != nil {
		e.t.Errorf("Delete(nil): %v", err)
	}
	_, err := e.s.Delete(ctx, &storage.DeleteRequest{Keys: []string{k2, "../escape"}})
	wantErr(e.t, "Delete with a bad key", err, storage.ErrBadKey)
	// The key can be written again.
	e.mustWrite(ctx, k1, 9, 10)
	e.mustCheck(ctx, k1, 9, 10, 0, storage.ToEnd)
	// Many keys at once.
	var many []string
	for i := range 50 {
		many = append(many, e.key(fmt.Sprintf("many/%03d", i)))
		e.mustWrite(ctx, many[i], uint64(i), int64(i))
	}
	if _, err := e.s.Delete(ctx, &storage.DeleteRequest{Keys: many}); err != nil {
		e.t.Fatalf("Delete of 50 keys: %v", err)
	}
	l, err := e.s.List(ctx, &storage.ListRequest{Prefix: e.prefix + "many/"})
	if err != nil {
		e.t.Fatalf("List: %v", err)
	}
	if len(l.Objects) != 0 {
		e.t.Errorf("List after deleting every key: %v", l.Objects)
	}
}

func testList(e *env) {
	ctx, cancel := e.ctx()
	defer cancel()
	names := []string{"p1/a", "p1/b/c", "p1/b/d", "p10/x", "p2/y", "p1.z", "q"}
	var all []storage.ObjectInfo
	for i, n := range names {
		k := e.key(n)
		e.mustWrite(ctx, k, uint64(i), int64(10*i))
		all = append(all, storage.ObjectInfo{Key: k, Size: int64(10 * i)})
	}
	slices.SortFunc(all, func(a, b storage.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	sel := func(prefix string) []storage.ObjectInfo {
		var out []storage.ObjectInfo
		for _, o := range all {
			if strings.HasPrefix(o.Key, prefix) {
				out = append(out, o)
			}
		}
		return out
	}
	for _, p := range []string{"", "p1/", "p1", "p1/b/", "p1/b/c", "p10/", "p", "q", "nothing/", "p1/b/cc"} {
		prefix := e.prefix + p
		l, err := e.s.List(ctx, &storage.ListRequest{Prefix: prefix})
		if err != nil {
			e.t.Errorf("List %q: %v", prefix, err)
			continue
		}
		if want := sel(prefix); !slices.Equal(l.Objects, want) {
			e.t.Errorf("List %q:\n got %v\nwant %v", prefix, l.Objects, want)
		}
	}
	// The whole store holds at least ours, sorted.
	l, err := e.s.List(ctx, &storage.ListRequest{})
	if err != nil {
		e.t.Fatalf("List of everything: %v", err)
	}
	if !slices.IsSortedFunc(l.Objects, func(a, b storage.ObjectInfo) int { return strings.Compare(a.Key, b.Key) }) {
		e.t.Error("List of everything is not sorted by key")
	}
	if got := sel(e.prefix); len(got) != len(all) {
		e.t.Errorf("suite bug: %d objects", len(got))
	}
	found := 0
	for _, o := range l.Objects {
		if strings.HasPrefix(o.Key, e.prefix) {
			found++
		}
	}
	if found != len(all) {
		e.t.Errorf("List of everything shows %d of the %d objects written", found, len(all))
	}
	for _, p := range []string{"/abs", "../up", "a/../b", "a\x00"} {
		_, err := e.s.List(ctx, &storage.ListRequest{Prefix: p})
		wantErr(e.t, fmt.Sprintf("List %q", p), err, storage.ErrBadKey)
	}
}

var badKeys = []string{
	"", "/abs", "/", "..", "../x", "a/../b", "a/..", ".", "./a", "a/./b", "a//b", "a/", "a\x00b", "line\nbreak", "\xff\xfe", strings.Repeat("k", storage.MaxKeyLen+1),
}

func testBadKeys(e *env) {
	ctx, cancel := e.ctx()
	defer cancel()
	for _, k := range badKeys {
		name := strconv.Quote(k)
		if len(name) > 40 {
			name = name[:40] + "..."
		}
		_, err := e.s.Write(ctx, &storage.WriteRequest{Key: k, Size: 3, Body: strings.NewReader("abc")})
		wantErr(e.t, "Write "+name, err, storage.ErrBadKey)
		if err != nil && k != "" && len(k) < 100 && !strings.Contains(err.Error(), strconv.Quote(k)) && !strings.Contains(err.Error(), k) {
			e.t.Errorf("Write %s: the error %q does not name the key", name, err)
		}
		if err != nil && k == "" && !strings.Contains(err.Error(), "empty") {
			e.t.Errorf("Write of an empty key: the error %q does not say it is empty", err)
		}
		_, err = e.s.Read(ctx, &storage.ReadRequest{Key: k, Length: storage.ToEnd})
		wantErr(e.t, "Read "+name, err, storage.ErrBadKey)
		_, err = e.s.Delete(ctx, &storage.DeleteRequest{Keys: []string{k}})
		wantErr(e.t, "Delete "+name, err, storage.ErrBadKey)
	}
	// Nothing escaped the store's root.
	l, err := e.s.List(ctx, &storage.ListRequest{Prefix: "a"})
	if err == nil {
		for _, o := range l.Objects {
			if o.Key == "a" || o.Key == "a/b" {
				e.t.Errorf("a bad key was stored as %q", o.Key)
			}
		}
	}
	var se *storage.StorageError
	_, err = e.s.Read(ctx, &storage.ReadRequest{Key: "../x"})
	if !errors.As(err, &se) || se.Op != storage.OpRead {
		e.t.Errorf("Read of a bad key: %v is not a *StorageError for op read", err)
	}
}

func testUnusualKeys(e *env) {
	ctx, cancel := e.ctx()
	defer cancel()
	names := []string{
		"with space/and more.spill", "ünïcødé/ключ/鍵", "dots.in.name/x..y", "deep/a/b/c/d/e/f/g/h", "dot/.hidden", "tilde~-_+=,;@!$&'()",
		strings.Repeat("long", 40) + "/" + strings.Repeat("x", 200),
	}
	for i, n := range names {
		k := e.key(n)
		e.mustWrite(ctx, k, uint64(i), int64(100+i))
		e.mustCheck(ctx, k, uint64(i), int64(100+i), 0, storage.ToEnd)
		l, err := e.s.List(ctx, &storage.ListRequest{Prefix: k})
		if err != nil || len(l.Objects) != 1 || l.Objects[0].Key != k {
			e.t.Errorf("List %q: %v %v", k, l, err)
		}
	}
}

func testConcurrent(e *env) {
	ctx, cancel := e.ctx()
	defer cancel()
	n := e.o.Concurrency
	sizes := make([]int64, n)
	keys := make([]string, n)
	for i := range n {
		sizes[i] = int64(i)*200_000 + int64(i%3)*storage.ChunkSize + 7
		keys[i] = e.key(fmt.Sprintf("c/%02d.spill", i))
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			if _, err := e.write(ctx, keys[i], uint64(i), sizes[i]); err != nil {
				e.t.Errorf("concurrent Write %d: %v", i, err)
				return
			}
			if err := e.check(ctx, keys[i], uint64(i), sizes[i], 0, storage.ToEnd); err != nil {
				e.t.Errorf("concurrent read-back %d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	// Concurrent readers of one object, ranges and whole.
	key, size := keys[n-1], sizes[n-1]
	for i := range n {
		wg.Go(func() {
			off := int64(i) * size / int64(2*n)
			var length int64 = storage.ToEnd
			if i%2 == 0 {
				length = size / 3
			}
			if err := e.check(ctx, key, uint64(n-1), size, off, length); err != nil {
				e.t.Errorf("concurrent Read %d: %v", i, err)
			}
		})
	}
	wg.Wait()
}

func testBodyFails(e *env) {
	boom := errors.New("body failed on purpose")
	cases := []struct {
		name       string
		size, good int64
	}{
		{"at-once", 5000, 0},
		{"mid-chunk", 5000, 1234},
		{"after-chunks", 3*storage.ChunkSize + 11, storage.ChunkSize + storage.ChunkSize/2},
		// Every byte arrives, then the body fails instead of ending: the
		// write must still fail.
		{"after-last-byte", 2*storage.ChunkSize + 3, 2*storage.ChunkSize + 3},
	}
	for _, c := range cases {
		e.t.Run(c.name, func(t *testing.T) {
			e := e.with(t)
			ctx, cancel := e.ctx()
			defer cancel()
			key := e.key("fail-" + c.name)
			_, err := e.s.Write(ctx, &storage.WriteRequest{Key: key, Size: c.size, Body: &failingBody{r: newPattern(1, c.size), n: c.good, err: boom}})
			if err == nil {
				t.Fatal("Write with a failing body: no error")
			}
			if !errors.Is(err, boom) && !strings.Contains(err.Error(), boom.Error()) {
				t.Errorf("Write with a failing body: %q does not carry the body's error %q", err, boom)
			}
			e.absent(ctx, key, "after a failed write")
			e.noLeftovers("after a failed write")
		})
	}
}

func testCancel(e *env) {
	e.t.Run("mid-write", func(t *testing.T) {
		e := e.with(t)
		key := e.key("cancelled.spill")
		const size = 4*storage.ChunkSize + 1
		ctx, cancel := e.ctx()
		defer cancel()
		// The body cancels the write half way and keeps yielding bytes: the
		// storage must notice the context, not only a failing body.
		body := &hookBody{r: newPattern(3, size), n: size / 2, hook: cancel}
		err := plugintest.Within(t, e.o.Timeout, "a cancelled Write", func() error {
			_, err := e.s.Write(ctx, &storage.WriteRequest{Key: key, Size: size, Body: body})
			return err
		})
		wantErr(t, "Write cancelled half way", err, context.Canceled)
		actx, acancel := e.ctx()
		defer acancel()
		e.absent(actx, key, "after a cancelled write")
		e.noLeftovers("after a cancelled write")
	})
	e.t.Run("before-write", func(t *testing.T) {
		e := e.with(t)
		key := e.key("precancelled.spill")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := e.write(ctx, key, 1, 100)
		wantErr(t, "Write with a cancelled context", err, context.Canceled)
		actx, acancel := e.ctx()
		defer acancel()
		e.absent(actx, key, "after a write with a cancelled context")
		_, err = e.s.Read(ctx, &storage.ReadRequest{Key: key})
		wantErr(t, "Read with a cancelled context", err, context.Canceled)
	})
	e.t.Run("mid-read", func(t *testing.T) {
		e := e.with(t)
		key := e.key("read-cancelled.spill")
		const size = 16 * storage.ChunkSize
		wctx, wcancel := e.ctx()
		defer wcancel()
		e.mustWrite(wctx, key, 8, size)
		ctx, cancel := context.WithCancel(wctx)
		r, err := e.s.Read(ctx, &storage.ReadRequest{Key: key, Length: storage.ToEnd})
		if err != nil {
			cancel()
			t.Fatalf("Read: %v", err)
		}
		defer r.Body.Close()
		if _, err := io.ReadFull(r.Body, make([]byte, storage.ChunkSize)); err != nil {
			t.Fatalf("reading the first chunk: %v", err)
		}
		cancel()
		err = plugintest.Within(t, promptly, "reading a cancelled body", func() error {
			_, err := io.Copy(io.Discard, r.Body)
			return err
		})
		wantErr(t, "reading after the context was cancelled", err, context.Canceled)
	})
}

func testDeadline(e *env) {
	key := e.key("deadline.spill")
	const size = 3 * storage.ChunkSize
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	// The body stalls until the deadline has passed, then yields the rest.
	body := &hookBody{r: newPattern(2, size), n: storage.ChunkSize + 100, hook: func() { <-ctx.Done() }}
	err := plugintest.Within(e.t, 300*time.Millisecond+promptly, "a Write past its deadline", func() error {
		_, err := e.s.Write(ctx, &storage.WriteRequest{Key: key, Size: size, Body: body})
		return err
	})
	wantErr(e.t, "Write past its deadline", err, context.DeadlineExceeded)
	actx, acancel := e.ctx()
	defer acancel()
	e.absent(actx, key, "after a write past its deadline")
	e.noLeftovers("after a write past its deadline")
}

func testSizeMismatch(e *env) {
	cases := []struct {
		name       string
		size, body int64
	}{
		{"short-by-one", 100, 99},
		{"long-by-one", 100, 101},
		{"empty-announced-1", 1, 0},
		{"zero-announced-1-sent", 0, 1},
		{"short-multi-chunk", 3 * storage.ChunkSize, 2*storage.ChunkSize + 5},
		{"long-at-chunk-boundary", storage.ChunkSize, storage.ChunkSize + 1},
		{"long-by-chunks", storage.ChunkSize + 10, 3 * storage.ChunkSize},
		{"negative-size", -1, 10},
	}
	for _, c := range cases {
		e.t.Run(c.name, func(t *testing.T) {
			e := e.with(t)
			ctx, cancel := e.ctx()
			defer cancel()
			key := e.key("mismatch-" + c.name)
			_, err := e.s.Write(ctx, &storage.WriteRequest{Key: key, Size: c.size, Body: newPattern(6, c.body)})
			wantErr(t, fmt.Sprintf("Write of %d bytes announced as %d", c.body, c.size), err, storage.ErrSizeMismatch)
			e.absent(ctx, key, "after a size mismatch")
			e.noLeftovers("after a size mismatch")
		})
	}
	// A nil body is an empty one.
	ctx, cancel := e.ctx()
	defer cancel()
	key := e.key("nil-body")
	if _, err := e.s.Write(ctx, &storage.WriteRequest{Key: key, Size: 0}); err != nil {
		e.t.Errorf("Write of an empty object with a nil body: %v", err)
	}
	e.mustCheck(ctx, key, 0, 0, 0, storage.ToEnd)
	_, err := e.s.Write(ctx, &storage.WriteRequest{Key: e.key("nil-body-5"), Size: 5})
	wantErr(e.t, "Write of 5 bytes with a nil body", err, storage.ErrSizeMismatch)
}

// testBroken breaks the backend and checks that calls fail promptly with
// ErrUnavailable or ErrPermission (never ErrNotFound, never a hang).
func testBroken(e *env) {
	ctx, cancel := e.ctx()
	defer cancel()
	key := e.key("before-break.spill")
	e.mustWrite(ctx, key, 1, 1000)
	e.mustCheck(ctx, key, 1, 1000, 0, storage.ToEnd)
	e.o.Break(e.topT)
	e.broken = true

	isBroken := func(what string, err error) {
		e.t.Helper()
		switch {
		case err == nil:
			e.t.Errorf("%s on a broken backend: no error", what)
		case errors.Is(err, storage.ErrNotFound):
			e.t.Errorf("%s on a broken backend: %q matches ErrNotFound; a backend that is down must not look empty", what, err)
		case !errors.Is(err, storage.ErrUnavailable) && !errors.Is(err, storage.ErrPermission) && !errors.Is(err, context.DeadlineExceeded):
			e.t.Errorf("%s on a broken backend: %q matches neither ErrUnavailable nor ErrPermission (nor the deadline)", what, err)
		default:
			e.t.Logf("%s on a broken backend: %v", what, err)
		}
	}
	call := func(what string, fn func(ctx context.Context) error) {
		e.t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), e.o.BrokenTimeout)
		defer cancel()
		start := time.Now()
		err := plugintest.Within(e.t, e.o.BrokenTimeout+promptly, what+" on a broken backend", func() error { return fn(ctx) })
		if errors.Is(err, plugintest.ErrHung) {
			e.t.FailNow() // the rest would hang too
		}
		e.t.Logf("%s took %v", what, time.Since(start).Round(time.Millisecond))
		isBroken(what, err)
	}
	call("Write", func(ctx context.Context) error {
		_, err := e.write(ctx, e.key("after-break.spill"), 2, 1000)
		return err
	})
	call("Write of several chunks", func(ctx context.Context) error {
		_, err := e.write(ctx, e.key("after-break-large.spill"), 2, 3*storage.ChunkSize)
		return err
	})
	call("Read", func(ctx context.Context) error {
		r, err := e.s.Read(ctx, &storage.ReadRequest{Key: key, Length: storage.ToEnd})
		if err != nil {
			return err
		}
		defer r.Body.Close()
		_, err = io.Copy(io.Discard, r.Body)
		return err // nil: the whole object was read, which is reported
	})
	call("List", func(ctx context.Context) error {
		_, err := e.s.List(ctx, &storage.ListRequest{Prefix: e.prefix})
		return err
	})
}

// testReadInto applies to plugin clients (storage.ReaderInto): ranges of a
// stored file are written straight into a memfd of this process — by
// another process for a real plugin — at unaligned offsets, and a range
// past the object's end is ErrInvalidRange with the target untouched.
func testReadInto(e *env) {
	ri, ok := e.s.(storage.ReaderInto)
	if !ok {
		e.t.Skipf("%T is not a plugin client: ReadInto is the SDK's (run the suite over gRPC or a plugin process)", e.s)
	}
	ctx, cancel := e.ctx()
	defer cancel()
	const size, seed = 5<<20 + 13, 777
	key := e.key("readinto/000001.spill")
	e.mustWrite(ctx, key, seed, size)
	// Named as the object store names its arena: ReadInto writes into
	// nothing else.
	fd, err := unix.MemfdCreate(storage.ArenaName, unix.MFD_CLOEXEC)
	if err != nil {
		e.t.Fatal(err)
	}
	defer unix.Close(fd)
	const targetSize = 8 << 20
	if err := unix.Ftruncate(fd, targetSize); err != nil {
		e.t.Fatal(err)
	}
	mem, err := unix.Mmap(fd, 0, targetSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		e.t.Fatal(err)
	}
	defer unix.Munmap(mem)
	path := fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), fd)
	for _, c := range []struct{ off, n, at int64 }{
		{0, size, 0},
		{storage.ChunkSize + 5, 2<<20 + 1, 4096 + 7},
		{size - 3, 3, targetSize - 3},
		{17, 0, 0},
	} {
		if _, err := ri.ReadInto(ctx, &storage.ReadIntoRequest{Key: key, Offset: c.off, Length: c.n, TargetPath: path, TargetOffset: c.at}); err != nil {
			e.t.Errorf("ReadInto [%d, %d) at %d: %v", c.off, c.off+c.n, c.at, err)
			continue
		}
		if !bytes.Equal(mem[c.at:c.at+c.n], content(seed, c.off, c.n)) {
			e.t.Errorf("ReadInto [%d, %d) at %d: the target holds other bytes", c.off, c.off+c.n, c.at)
		}
	}
	clear(mem[:16])
	_, err = ri.ReadInto(ctx, &storage.ReadIntoRequest{Key: key, Offset: size - 8, Length: 16, TargetPath: path})
	wantErr(e.t, "ReadInto past the object's end", err, storage.ErrInvalidRange)
	if !bytes.Equal(mem[:16], make([]byte, 16)) {
		e.t.Error("a failed ReadInto wrote into the target")
	}
	// Only the object store's memory is a target: a regular file is
	// refused (ErrPermission) and left as it was.
	file := filepath.Join(e.t.TempDir(), "victim")
	orig := bytes.Repeat([]byte("keep me "), 1<<10)
	if err := os.WriteFile(file, orig, 0o600); err != nil {
		e.t.Fatal(err)
	}
	_, err = ri.ReadInto(ctx, &storage.ReadIntoRequest{Key: key, Length: 64, TargetPath: file})
	wantErr(e.t, "ReadInto a regular file", err, storage.ErrPermission)
	if got, err := os.ReadFile(file); err != nil || !bytes.Equal(got, orig) {
		e.t.Errorf("ReadInto changed the regular file it was refused (%v)", err)
	}
}

package objstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/ids"
)

// Environment of the child process started by the cross-process tests.
const (
	envChild     = "OBJSTORE_CHILD" // set: run as child, value is the socket path
	envWriteOff  = "OBJSTORE_WRITE_OFFSET"
	envWriteSize = "OBJSTORE_WRITE_SIZE"
	envReadOff   = "OBJSTORE_READ_OFFSET"
	envReadSize  = "OBJSTORE_READ_SIZE"
	childSeed    = 0xC0FFEE
	parentSeed   = 0xFACADE
)

func TestMain(m *testing.M) {
	if path := os.Getenv(envChild); path != "" {
		if err := childMain(path); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// childMain maps the store, writes the child pattern into the write region
// and verifies the parent's pattern in the read region.
func childMain(path string) error {
	env := func(k string) int64 {
		v, _ := strconv.ParseInt(os.Getenv(k), 10, 64)
		return v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := Map(ctx, path)
	if err != nil {
		return err
	}
	defer m.Close()
	w, err := m.Slice(env(envWriteOff), env(envWriteSize))
	if err != nil {
		return err
	}
	fillPattern(w, childSeed)
	r, err := m.Slice(env(envReadOff), env(envReadSize))
	if err != nil {
		return err
	}
	if i := checkPattern(r, parentSeed); i >= 0 {
		return fmt.Errorf("parent's data differs at byte %d", i)
	}
	return nil
}

// fillPattern writes a position-dependent pattern (8 bytes at a time).
func fillPattern(b []byte, seed uint64) {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], patternWord(i, seed))
	}
	var tail [8]byte
	binary.LittleEndian.PutUint64(tail[:], patternWord(i, seed))
	copy(b[i:], tail[:])
}

// checkPattern returns the first byte index that differs from fillPattern's
// output, or -1.
func checkPattern(b []byte, seed uint64) int {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		if binary.LittleEndian.Uint64(b[i:]) != patternWord(i, seed) {
			return i
		}
	}
	var tail [8]byte
	binary.LittleEndian.PutUint64(tail[:], patternWord(i, seed))
	for j := i; j < len(b); j++ {
		if b[j] != tail[j-i] {
			return j
		}
	}
	return -1
}

func patternWord(i int, seed uint64) uint64 {
	return (uint64(i)+1)*0x9E3779B97F4A7C15 ^ seed
}

// TestCrossProcessZeroCopy starts the test binary again as a child that maps
// the arena through the socket, writes an object created by the parent and
// reads one the parent wrote. The data never travels over the socket.
func TestCrossProcessZeroCopy(t *testing.T) {
	tests := []struct {
		name     string
		capacity int64
		size     int64
	}{
		{"small odd size", 1 << 20, 100_003},
		{"256MiB in 1GiB arena", 1 << 30, 256 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestStore(t, tt.capacity)
			writer, parent := client(1), client(2)
			wid, rid := oid(1), oid(2)
			woff := mustCreate(t, s, wid, tt.size, writer)
			roff := mustCreate(t, s, rid, 4099, parent)
			fillPattern(s.Data(roff, 4099), parentSeed)
			mustSeal(t, s, rid, parent, true)

			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(),
				envChild+"="+s.SocketPath(),
				envWriteOff+"="+strconv.FormatInt(woff, 10),
				envWriteSize+"="+strconv.FormatInt(tt.size, 10),
				envReadOff+"="+strconv.FormatInt(roff, 10),
				envReadSize+"="+strconv.FormatInt(4099, 10),
			)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			mustSeal(t, s, wid, writer, true)

			e := s.Get([]ids.ObjectID{wid}, parent)[0]
			if !e.Found || e.DataSize != tt.size {
				t.Fatalf("Get: %+v", e)
			}
			if i := checkPattern(s.Data(e.Offset, e.DataSize), childSeed); i >= 0 {
				t.Fatalf("child's data differs at byte %d (store mapping)", i)
			}
			// Another client mapping sees the same memory, and writes
			// through it are visible to the store.
			m, err := Map(ctx, s.SocketPath())
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if m.Capacity() != tt.capacity {
				t.Fatalf("mapping capacity %d, want %d", m.Capacity(), tt.capacity)
			}
			if i := checkPattern(m.Data(e.Offset, e.DataSize), childSeed); i >= 0 {
				t.Fatalf("child's data differs at byte %d (second mapping)", i)
			}
			m.Data(e.Offset, 1)[0] ^= 0xFF
			if got, want := s.Data(e.Offset, 1)[0], byte(patternWord(0, childSeed))^0xFF; got != want {
				t.Fatalf("write through mapping not visible to store: %#x, want %#x", got, want)
			}
			s.Release([]ids.ObjectID{wid}, parent)
		})
	}
}

func TestMappingBounds(t *testing.T) {
	s := newTestStore(t, 8192)
	m, err := Map(t.Context(), s.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		off, size int64
		ok        bool
	}{
		{0, 8192, true}, {8192, 0, true}, {64, 64, true},
		{-1, 1, false}, {0, -1, false}, {8191, 2, false}, {8193, 0, false}, {1 << 62, 1 << 62, false},
	}
	for _, tt := range tests {
		b, err := m.Slice(tt.off, tt.size)
		if tt.ok {
			if err != nil || int64(len(b)) != tt.size || int64(cap(b)) != tt.size {
				t.Errorf("Slice(%d, %d): len %d cap %d err %v", tt.off, tt.size, len(b), cap(b), err)
			}
		} else {
			if !errors.Is(err, ErrOutOfRange) || b != nil || m.Data(tt.off, tt.size) != nil {
				t.Errorf("Slice(%d, %d): %v, want ErrOutOfRange", tt.off, tt.size, err)
			}
		}
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := m.Slice(0, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Slice after Close: %v", err)
	}
	if m.Data(0, 1) != nil {
		t.Fatal("Data after Close returned memory")
	}
}

// fakeServer listens on a unix socket and runs handle on each connection.
func fakeServer(t *testing.T, handle func(*net.UnixConn)) string {
	t.Helper()
	path := filepath.Join(shortTempDir(t), "fake.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			handle(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return path
}

func TestMapHonoursContext(t *testing.T) {
	conns := make(chan *net.UnixConn, 1)
	path := fakeServer(t, func(c *net.UnixConn) { conns <- c }) // never answers
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Map(ctx, path)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Map against a silent server: %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Map took %v after its deadline", d)
	}
	(<-conns).Close()

	cctx, ccancel := context.WithCancel(t.Context())
	ccancel()
	if _, err := Map(cctx, path); !errors.Is(err, context.Canceled) {
		t.Fatalf("Map with cancelled context: %v", err)
	}
}

func TestMapErrors(t *testing.T) {
	noFD := fakeServer(t, func(c *net.UnixConn) {
		c.Write(binary.BigEndian.AppendUint64(nil, 4096))
		c.Close()
	})
	hangup := fakeServer(t, func(c *net.UnixConn) { c.Close() })
	tests := []struct {
		name string
		path string
	}{
		{"no socket", filepath.Join(shortTempDir(t), "missing.sock")},
		{"header without fd", noFD},
		{"server hangs up", hangup},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Map(t.Context(), tt.path)
			if err == nil {
				m.Close()
				t.Fatal("Map succeeded")
			}
		})
	}
}

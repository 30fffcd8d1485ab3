package raylet

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/raylet/internal/dataplane"
)

// panickyStore panics when the bytes of one object are asked for, to
// stand for any bug reached while serving a request.
type panickyStore struct {
	*fakeStore
	badOffset int64
}

func (s *panickyStore) Data(offset, size int64) []byte {
	if offset == s.badOffset {
		panic("injected failure reading the arena")
	}
	return s.fakeStore.Data(offset, size)
}

// dataPlane serves a raylet's object data plane over real TCP on loopback
// with one sealed object of size bytes (byte i = i*7) and returns its
// address, the object and its bytes.
func dataPlane(t *testing.T, store ObjectStore, fs *fakeStore, size int64, log hclog.Logger) (string, ids.ObjectID, []byte) {
	t.Helper()
	om := newObjectManager(Config{NodeID: ids.New(), Store: store}, log, nil, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { om.data.Serve(lis); close(done) }()
	t.Cleanup(func() { lis.Close(); om.closeConns(); <-done })
	oid := ids.ObjectIDFor(ids.New(), 1)
	off, err := fs.Create(oid, size, []byte("M"), ids.New())
	if err != nil {
		t.Fatal(err)
	}
	src := fs.Data(off, size)
	for i := range src {
		src[i] = byte(i * 7)
	}
	if err := fs.Seal(oid, ids.New(), true); err != nil {
		t.Fatal(err)
	}
	return lis.Addr().String(), oid, src
}

// rawRequest encodes a request the way a hostile peer may: any offset and
// length.
func rawRequest(magic uint32, oid ids.ObjectID, off, length uint64) []byte {
	b := make([]byte, dataplane.RequestSize)
	binary.BigEndian.PutUint32(b, magic)
	copy(b[4:], oid[:])
	binary.BigEndian.PutUint64(b[4+ids.ObjectIDSize:], off)
	binary.BigEndian.PutUint64(b[12+ids.ObjectIDSize:], length)
	return b
}

// readWhole reads the whole object over a new connection and compares it.
func readWhole(t *testing.T, addr string, oid ids.ObjectID, want []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	rr, err := dataplane.Dial(ctx, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	size, meta, err := rr.Request(oid, 0, -1)
	if err != nil {
		t.Fatalf("normal request on a new connection: %v", err)
	}
	if size != int64(len(want)) || string(meta) != "M" {
		t.Fatalf("header: size %d meta %q", size, meta)
	}
	got := make([]byte, size)
	if err := rr.ReadInto(got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("object bytes differ")
	}
}

// The request that once crashed a node (offset 1, length 2^63-1: off+length
// overflowed the range check and the slice expression panicked, taking the
// whole node down) and its relatives are refused with an answer; the node
// keeps serving, on the same connection and on new ones.
func TestDataPlaneRefusesHostileRanges(t *testing.T) {
	fs := newFakeStore()
	const size = 1<<20 + 3
	addr, oid, src := dataPlane(t, fs, fs, size, hclog.NewNullLogger())
	tests := []struct {
		name        string
		off, length uint64
		want        string
	}{
		{"offset 1, length 2^63-1 (the crash)", 1, math.MaxInt64, "offset 1 + length 9223372036854775807 overflows"},
		{"offset 2^63-1", math.MaxInt64, 1, "offset 9223372036854775807 is outside"},
		{"negative offset", uint64(1 << 63), 1, "offset -9223372036854775808 is negative"},
		{"offset -1", math.MaxUint64, 5, "offset -1 is negative"},
		{"length -2", 0, math.MaxUint64 - 1, "length -2 is negative"},
		{"length -2^63", 0, 1 << 63, "is negative"},
		{"offset past the end", size + 1, 0, "is outside the object"},
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	rr, err := dataplane.Dial(ctx, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := rawRequest(dataplane.Magic, oid, tt.off, tt.length)
			if len(req) != 4+ids.ObjectIDSize+16 {
				t.Fatalf("request of %d bytes", len(req))
			}
			if _, err := rr.Conn().Write(req); err != nil {
				t.Fatal(err)
			}
			_, _, err := dataplane.ReadResponse(rr.Buffered(), 0)
			var de *dataplane.Error
			if !errors.As(err, &de) || de.Status != dataplane.StatusBadRange {
				t.Fatalf("response = %v, want a bad-range refusal", err)
			}
			if !strings.Contains(de.Msg, tt.want) || !strings.Contains(de.Msg, oid.String()) {
				t.Fatalf("refusal %q does not name the object and say %q", de.Msg, tt.want)
			}
		})
	}
	// The same connection still serves, and so does a new one.
	if _, _, err := rr.Request(oid, size-2, 10); err != nil {
		t.Fatalf("after refusals: %v", err)
	}
	tail := make([]byte, 2)
	if err := rr.ReadInto(tail); err != nil || !bytes.Equal(tail, src[size-2:]) {
		t.Fatalf("clamped range: %x, %v", tail, err)
	}
	readWhole(t, addr, oid, src)
}

// A request with a bad magic puts the stream out of step: the connection
// is dropped, the node keeps serving.
func TestDataPlaneDropsBadMagic(t *testing.T) {
	fs := newFakeStore()
	addr, oid, src := dataPlane(t, fs, fs, 4096, hclog.NewNullLogger())
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	rr, err := dataplane.Dial(ctx, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	if _, err := rr.Conn().Write(rawRequest(0xdeadbeef, oid, 0, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := rr.Buffered().ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("read after a bad magic = %v, want EOF", err)
	}
	readWhole(t, addr, oid, src)
}

// A panic while serving one request is recovered: it is logged at error
// level with its stack, only that connection closes and the node keeps
// serving.
func TestDataPlaneRecoversFromPanic(t *testing.T) {
	fs := newFakeStore()
	var logs syncBuffer
	log := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Error})
	ps := &panickyStore{fakeStore: fs, badOffset: -1}
	addr, good, src := dataPlane(t, ps, fs, 4096, log)
	bad := ids.ObjectIDFor(ids.New(), 1)
	off, err := fs.Create(bad, 100, nil, ids.New())
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Seal(bad, ids.New(), true); err != nil {
		t.Fatal(err)
	}
	ps.badOffset = off

	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	rr, err := dataplane.Dial(ctx, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	if _, _, err := rr.Request(bad, 0, -1); err == nil {
		t.Fatal("request that panicked the server succeeded")
	}
	out := logs.String()
	for _, w := range []string{"[ERROR]", "panic serving an object data connection", "injected failure reading the arena", "serveRange"} {
		if !strings.Contains(out, w) {
			t.Fatalf("log does not contain %q:\n%s", w, out)
		}
	}
	// The pin taken for the request was released during the panic.
	released := func() bool {
		fs.mu.Lock()
		defer fs.mu.Unlock()
		return len(fs.getClient) == 1 && slices.Contains(fs.releases[fs.getClient[0]], bad)
	}
	deadline := time.Now().Add(waitfor.Generous)
	for !released() {
		if time.Now().After(deadline) {
			t.Fatal("the object pinned for the request that panicked was not released")
		}
		<-time.After(5 * time.Millisecond)
	}
	readWhole(t, addr, good, src)
}

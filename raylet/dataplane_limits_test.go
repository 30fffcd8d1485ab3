package raylet

import (
	"bufio"
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
	r := &Raylet{cfg: Config{NodeID: ids.New(), Store: store}, log: log}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { r.ServeData(lis); close(done) }()
	t.Cleanup(func() { lis.Close(); r.closePeerConns(); <-done })
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
	b := make([]byte, dataRequestSize)
	binary.BigEndian.PutUint32(b, magic)
	copy(b[4:], oid[:])
	binary.BigEndian.PutUint64(b[4+ids.ObjectIDSize:], off)
	binary.BigEndian.PutUint64(b[12+ids.ObjectIDSize:], length)
	return b
}

// readWhole reads the whole object over a new connection and compares it.
func readWhole(t *testing.T, addr string, oid ids.ObjectID, want []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rr, err := dialData(ctx, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	size, meta, err := rr.request(oid, 0, -1)
	if err != nil {
		t.Fatalf("normal request on a new connection: %v", err)
	}
	if size != int64(len(want)) || string(meta) != "M" {
		t.Fatalf("header: size %d meta %q", size, meta)
	}
	got := make([]byte, size)
	if err := rr.readInto(got); err != nil {
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rr, err := dialData(ctx, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := rawRequest(dataMagic, oid, tt.off, tt.length)
			if len(req) != 4+ids.ObjectIDSize+16 {
				t.Fatalf("request of %d bytes", len(req))
			}
			if _, err := rr.conn.Write(req); err != nil {
				t.Fatal(err)
			}
			_, _, err := readResponse(rr.br, 0)
			var de *dataError
			if !errors.As(err, &de) || de.status != dataBadRange {
				t.Fatalf("response = %v, want a bad-range refusal", err)
			}
			if !strings.Contains(de.msg, tt.want) || !strings.Contains(de.msg, oid.String()) {
				t.Fatalf("refusal %q does not name the object and say %q", de.msg, tt.want)
			}
		})
	}
	// The same connection still serves, and so does a new one.
	if _, _, err := rr.request(oid, size-2, 10); err != nil {
		t.Fatalf("after refusals: %v", err)
	}
	tail := make([]byte, 2)
	if err := rr.readInto(tail); err != nil || !bytes.Equal(tail, src[size-2:]) {
		t.Fatalf("clamped range: %x, %v", tail, err)
	}
	readWhole(t, addr, oid, src)
}

// A request with a bad magic puts the stream out of step: the connection
// is dropped, the node keeps serving.
func TestDataPlaneDropsBadMagic(t *testing.T) {
	fs := newFakeStore()
	addr, oid, src := dataPlane(t, fs, fs, 4096, hclog.NewNullLogger())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rr, err := dialData(ctx, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	if _, err := rr.conn.Write(rawRequest(0xdeadbeef, oid, 0, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := rr.br.ReadByte(); !errors.Is(err, io.EOF) {
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

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rr, err := dialData(ctx, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	if _, _, err := rr.request(bad, 0, -1); err == nil {
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
	deadline := time.Now().Add(5 * time.Second)
	for !released() {
		if time.Now().After(deadline) {
			t.Fatal("the object pinned for the request that panicked was not released")
		}
		<-time.After(5 * time.Millisecond)
	}
	readWhole(t, addr, good, src)
}

func TestDataRange(t *testing.T) {
	tests := []struct {
		off, length, size int64
		wantOff, wantLen  int64
		err               string
	}{
		{0, -1, 10, 0, 10, ""},
		{3, -1, 10, 3, 7, ""},
		{10, -1, 10, 10, 0, ""},
		{0, 0, 0, 0, 0, ""},
		{2, 5, 10, 2, 5, ""},
		{8, 5, 10, 8, 2, ""},
		{0, math.MaxInt64, 10, 0, 10, ""},
		{1, math.MaxInt64, 10, 0, 0, "overflows"},
		{math.MaxInt64, 1, 10, 0, 0, "outside"},
		{11, 0, 10, 0, 0, "outside"},
		{-1, 1, 10, 0, 0, "negative"},
		{math.MinInt64, 1, 10, 0, 0, "negative"},
		{0, -2, 10, 0, 0, "negative"},
		{0, math.MinInt64, 10, 0, 0, "negative"},
		{0, 1, -1, 0, 0, "size -1 is negative"},
	}
	for _, tt := range tests {
		off, n, err := dataRange(tt.off, tt.length, tt.size)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("dataRange(%d, %d, %d) = %v, want an error saying %q", tt.off, tt.length, tt.size, err, tt.err)
			}
			continue
		}
		if err != nil || off != tt.wantOff || n != tt.wantLen {
			t.Errorf("dataRange(%d, %d, %d) = %d, %d, %v; want %d, %d", tt.off, tt.length, tt.size, off, n, err, tt.wantOff, tt.wantLen)
		}
	}
}

// okHeader is a response header saying ok, size, metadata length n.
func okHeader(size int64, n uint32) []byte {
	b := make([]byte, 13)
	binary.BigEndian.PutUint64(b[1:], uint64(size))
	binary.BigEndian.PutUint32(b[9:], n)
	return b
}

// refusal is a refusal with a message length field of l and msg.
func refusal(status byte, l uint32, msg string) []byte {
	b := make([]byte, 17)
	b[0] = status
	binary.BigEndian.PutUint32(b[13:], l)
	return append(b, msg...)
}

func TestReadResponse(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		off  int64
		size int64
		meta string
		err  string
	}{
		{"ok", append(okHeader(10, 1), 'M'), 0, 10, "M", ""},
		{"ok at the end", okHeader(10, 0), 10, 10, "", ""},
		{"refusal", refusal(dataNotFound, 4, "gone"), 0, 0, "", "gone"},
		{"negative size", okHeader(-1, 0), 0, 0, "", "announces -1 bytes"},
		{"size below the offset", okHeader(5, 0), 6, 0, "", "announces 5 bytes for a read at offset 6"},
		{"huge size", okHeader(math.MaxInt64, 0), 0, 0, "", "announces 9223372036854775807 bytes"},
		{"huge metadata", okHeader(1, math.MaxUint32), 0, 0, "", "4294967295 bytes of metadata"},
		{"huge refusal", refusal(dataBadRange, math.MaxUint32, "x"), 0, 0, "", "message of 4294967295 bytes"},
		{"truncated header", okHeader(1, 0)[:7], 0, 0, "", "unexpected EOF"},
		{"truncated metadata", okHeader(1, 5), 0, 0, "", "EOF"},
		{"truncated refusal", refusal(dataBadRange, 10, "abc"), 0, 0, "", "unexpected EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			size, meta, err := readResponse(bufio.NewReader(bytes.NewReader(tt.in)), tt.off)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("readResponse = %d, %q, %v; want an error saying %q", size, meta, err, tt.err)
				}
				return
			}
			if err != nil || size != tt.size || string(meta) != tt.meta {
				t.Fatalf("readResponse = %d, %q, %v; want %d, %q", size, meta, err, tt.size, tt.meta)
			}
		})
	}
}

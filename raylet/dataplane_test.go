package raylet

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/raylet/internal/dataplane"
)

func TestDataPlaneRanges(t *testing.T) {
	store := newFakeStore()
	om := newObjectManager(Config{NodeID: ids.New(), Store: store}, hclog.NewNullLogger(), nil, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { om.data.Serve(lis); close(done) }()
	defer func() { lis.Close(); om.closeConns(); <-done }()

	oid := ids.ObjectIDFor(ids.New(), 1)
	const size = 3<<20 + 7
	off, err := store.Create(oid, size, []byte("M"), ids.New())
	if err != nil {
		t.Fatal(err)
	}
	src := store.Data(off, size)
	for i := range src {
		src[i] = byte(i * 7)
	}
	if err := store.Seal(oid, ids.New(), true); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	rr, err := dataplane.Dial(ctx, lis.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	// Several requests on one connection, including an empty and a clamped range.
	for _, c := range []struct{ off, length, want int64 }{{0, 1 << 20, 1 << 20}, {size - 10, -1, 10}, {5, 0, 0}, {size - 3, 100, 3}} {
		gotSize, meta, err := rr.Request(oid, c.off, c.length)
		if err != nil {
			t.Fatalf("range %+v: %v", c, err)
		}
		if gotSize != size || string(meta) != "M" {
			t.Fatalf("header: size %d meta %q", gotSize, meta)
		}
		dst := make([]byte, c.want)
		if err := rr.ReadInto(dst); err != nil {
			t.Fatal(err)
		}
		for i, b := range dst {
			if b != src[c.off+int64(i)] {
				t.Fatalf("range %+v: byte %d = %d, want %d", c, i, b, src[c.off+int64(i)])
			}
		}
	}
	// Refusals name the problem and keep the connection usable.
	_, _, err = rr.Request(ids.ObjectIDFor(ids.New(), 1), 0, -1)
	var de *dataplane.Error
	if !errors.As(err, &de) || de.Status != dataplane.StatusNotFound || !strings.Contains(de.Msg, "is not in the store") {
		t.Fatalf("unknown object: %v", err)
	}
	_, _, err = rr.Request(oid, size+1, 1)
	if !errors.As(err, &de) || de.Status != dataplane.StatusBadRange || !strings.Contains(de.Msg, "outside") {
		t.Fatalf("bad offset: %v", err)
	}
	if _, _, err := rr.Request(oid, 0, 1); err != nil {
		t.Fatalf("after refusals: %v", err)
	}
	// A cancelled context unblocks a read.
	cctx, ccancel := context.WithCancel(context.Background())
	rr2, err := dataplane.Dial(cctx, lis.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rr2.Close()
	ccancel()
	if err := rr2.ReadInto(make([]byte, 1)); err == nil {
		t.Fatal("read after cancel succeeded")
	}
}

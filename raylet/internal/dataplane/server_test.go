package dataplane

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/waitfor"
)

// mapSource serves objects from a map and counts the pins it gave out and
// got back.
type mapSource struct {
	mu     sync.Mutex
	objs   map[ids.ObjectID][]byte
	pinned int
}

func (m *mapSource) Open(oid ids.ObjectID) ([]byte, []byte, func(), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.objs[oid]
	if !ok {
		return nil, nil, nil, errors.New("object " + oid.String() + " is not here")
	}
	m.pinned++
	return b, []byte("M"), func() { m.mu.Lock(); m.pinned--; m.mu.Unlock() }, nil
}

// TestServerWithFakeSource: the server answers ranges of its source's
// objects (pinned only while they are written) and passes the source's
// refusals on.
func TestServerWithFakeSource(t *testing.T) {
	oid := ids.ObjectIDFor(ids.New(), 1)
	src := &mapSource{objs: map[ids.ObjectID][]byte{oid: []byte("0123456789")}}
	srv := NewServer(src, nil, hclog.NewNullLogger())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { srv.Serve(lis); close(done) }()
	defer func() { lis.Close(); srv.Close(); <-done }()
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	rr, err := Dial(ctx, lis.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	for _, tt := range []struct {
		name        string
		oid         ids.ObjectID
		off, length int64
		want        string
		status      byte // of a refusal
	}{
		{"whole", oid, 0, -1, "0123456789", StatusOK},
		{"middle", oid, 2, 3, "234", StatusOK},
		{"clamped", oid, 8, 5, "89", StatusOK},
		{"past the end", oid, 11, 1, "", StatusBadRange},
		{"unknown", ids.ObjectIDFor(ids.New(), 2), 0, -1, "", StatusNotFound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			size, meta, err := rr.Request(tt.oid, tt.off, tt.length)
			if tt.status != StatusOK {
				var de *Error
				if !errors.As(err, &de) || de.Status != tt.status {
					t.Fatalf("Request = %v, want a refusal with status %d", err, tt.status)
				}
				return
			}
			if err != nil || size != 10 || string(meta) != "M" {
				t.Fatalf("Request = %d, %q, %v", size, meta, err)
			}
			got := make([]byte, len(tt.want))
			if err := rr.ReadInto(got); err != nil || string(got) != tt.want {
				t.Fatalf("ReadInto = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	if src.pinned != 0 {
		t.Fatalf("%d pins left", src.pinned)
	}
}

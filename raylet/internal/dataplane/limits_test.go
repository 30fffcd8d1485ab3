package dataplane

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/connlimit"
	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/leaktest"
	"github.com/goray-dev/goray/internal/waitfor"
)

// TestServerMarksAuthenticated: on a connlimit listener, as the node
// serves it, a connection that passed the handshake is marked (it
// outlives the deadline and keeps being answered) and one that says
// nothing is closed at the deadline.
func TestServerMarksAuthenticated(t *testing.T) {
	leaktest.Goroutines(t)
	creds, err := auth.New("dataplane-limits-token", nil)
	if err != nil {
		t.Fatal(err)
	}
	oid := ids.ObjectIDFor(ids.New(), 1)
	srv := NewServer(&mapSource{objs: map[ids.ObjectID][]byte{oid: []byte("abc")}}, creds, hclog.NewNullLogger())
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := connlimit.Wrap(inner, connlimit.Options{Deadline: 2 * time.Second})
	done := make(chan struct{})
	go func() { srv.Serve(lis); close(done) }()
	defer func() { lis.Close(); srv.Close(); <-done }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	rr, err := Dial(ctx, lis.Addr().String(), creds)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	idle, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	_ = idle.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := io.Copy(io.Discard, idle); err != nil {
		t.Fatalf("the idle connection was not closed: %v", err)
	}
	waitfor.Cond(t, time.Minute, "no unauthenticated connection held", func() bool { return lis.Pending() == 0 })
	if lis.Expired() != 1 {
		t.Fatalf("%d connections closed at the deadline, want 1", lis.Expired())
	}
	// The authenticated connection outlived the deadline.
	if size, _, err := rr.Request(oid, 0, -1); err != nil || size != 3 {
		t.Fatalf("request after the deadline: %d, %v", size, err)
	}
	got := make([]byte, 3)
	if err := rr.ReadInto(got); err != nil || string(got) != "abc" {
		t.Fatalf("ReadInto = %q, %v", got, err)
	}
}

package core

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/gcs"
	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/rpc"
	"github.com/goray-dev/goray/internal/waitfor"
)

// boltGCS serves a GCS keeping its tables in a bolt file on a unix socket;
// stop ends it (the socket goes away) and releases the file, so that
// another can be started on the same socket and storage.
type boltGCS struct {
	srv    *grpc.Server
	gcs    *gcs.Server
	served chan struct{}
}

func startBoltGCS(t *testing.T, sock, db string) *boltGCS {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	g, err := gcs.Open(ctx, gcs.Options{Storage: gcs.Storage{Backend: gcs.BackendBolt, Path: db}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		_ = g.Close(ctx)
		t.Fatal(err)
	}
	b := &boltGCS{srv: grpc.NewServer(rpc.ServerOptions(nil)...), gcs: g, served: make(chan struct{})}
	g.Register(b.srv)
	go func() {
		defer close(b.served)
		_ = b.srv.Serve(lis)
	}()
	t.Cleanup(b.stop)
	return b
}

func (b *boltGCS) stop() {
	if b.srv == nil {
		return
	}
	b.srv.Stop()
	<-b.served
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	_ = b.gcs.Close(ctx)
	b.srv = nil
}

// TestGCSCallsWaitForARestartedGCS: calls a driver or worker makes to the
// GCS while it is down (a KV read, an actor lookup) wait for it and return
// what the restarted GCS (same storage) answers; a caller whose deadline
// passes first gets the context's error, not a refusal.
func TestGCSCallsWaitForARestartedGCS(t *testing.T) {
	dir, err := os.MkdirTemp("", "go")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock, db := filepath.Join(dir, "gcs.sock"), filepath.Join(dir, "gcs.db")
	g := startBoltGCS(t, sock, db)
	cw := newActorTestWorker(t, sock)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	actor := ids.New()
	if _, err := cw.gcs.KVPut(ctx, &pb.KVPutRequest{Ns: "test", Key: "k", Value: []byte("v"), Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := cw.gcs.RegisterActor(ctx, &pb.RegisterActorRequest{Actor: &pb.ActorInfo{ActorId: actor.Bytes(), JobId: cw.jobID.Bytes(), ClassName: "Fake", Name: "named"}}); err != nil {
		t.Fatal(err)
	}
	g.stop()

	t.Run("deadline passes first", func(t *testing.T) {
		dctx, dcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer dcancel()
		_, err := cw.gcs.KVGet(dctx, &pb.KVGetRequest{Ns: "test", Key: "k"})
		if !errors.Is(err, context.DeadlineExceeded) || status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("KVGet with the GCS down: %v (code %s); want the context's deadline", err, status.Code(err))
		}
		_, err = cw.LookupActor(dctx, "named")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("LookupActor with the GCS down: %v; want the context's deadline", err)
		}
		if dctx.Err() == nil {
			t.Errorf("the calls returned before their deadline")
		}
	})

	t.Run("calls return once the GCS is back", func(t *testing.T) {
		type kvResult struct {
			rep *pb.KVGetReply
			err error
		}
		type lookupResult struct {
			ref ActorRef
			err error
		}
		kv, lookup := make(chan kvResult, 1), make(chan lookupResult, 1)
		go func() {
			rep, err := cw.gcs.KVGet(ctx, &pb.KVGetRequest{Ns: "test", Key: "k"})
			kv <- kvResult{rep, err}
		}()
		go func() {
			ref, err := cw.LookupActor(ctx, "named")
			lookup <- lookupResult{ref, err}
		}()
		select {
		case r := <-kv:
			t.Fatalf("KVGet returned while the GCS is down: %v, %v", r.rep, r.err)
		case r := <-lookup:
			t.Fatalf("LookupActor returned while the GCS is down: %v, %v", r.ref, r.err)
		default:
		}
		startBoltGCS(t, sock, db)
		if r := <-kv; r.err != nil || string(r.rep.GetValue()) != "v" {
			t.Errorf("KVGet across the restart: %v, %v; want \"v\"", r.rep, r.err)
		}
		if r := <-lookup; r.err != nil || r.ref.ID != actor {
			t.Errorf("LookupActor across the restart: %v, %v; want %s", r.ref, r.err, actor)
		}
	})
}

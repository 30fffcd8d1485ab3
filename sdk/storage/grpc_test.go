package storage_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/sdk/storage"
	"github.com/goray-dev/goray/sdk/storage/internal/memstore"
	"github.com/goray-dev/goray/sdk/storage/storagetest"
)

// TestErrorsAcrossGRPC checks that every error kind keeps its identity, its
// operation and its key through the plugin bridge.
func TestErrorsAcrossGRPC(t *testing.T) {
	s := storagetest.OverGRPC(t, memstore.New())
	ctx := context.Background()
	if _, err := s.Write(ctx, &storage.WriteRequest{Key: "k", Size: 5, Body: strings.NewReader("hello")}); err != nil {
		t.Fatal(err)
	}
	check := func(what string, err, target error, op, key string) {
		t.Helper()
		if !errors.Is(err, target) {
			t.Errorf("%s: %v does not match %v", what, err, target)
		}
		var se *storage.StorageError
		if !errors.As(err, &se) || se.Op != op || se.Key != key {
			t.Errorf("%s: %v is not a *StorageError for %s of %q", what, err, op, key)
		}
	}
	_, err := s.Read(ctx, &storage.ReadRequest{Key: "missing"})
	check("missing key", err, storage.ErrNotFound, storage.OpRead, "missing")
	_, err = s.Read(ctx, &storage.ReadRequest{Key: "k", Offset: 6})
	check("range past the end", err, storage.ErrInvalidRange, storage.OpRead, "k")
	_, err = s.Write(ctx, &storage.WriteRequest{Key: "k2", Size: 6, Body: strings.NewReader("hello")})
	check("short body", err, storage.ErrSizeMismatch, storage.OpWrite, "k2")
	_, err = s.Write(ctx, &storage.WriteRequest{Key: "../k", Size: 0})
	check("bad key", err, storage.ErrBadKey, storage.OpWrite, "../k")
	_, err = s.Delete(ctx, &storage.DeleteRequest{Keys: []string{"ok", "/bad"}})
	check("bad key in Delete", err, storage.ErrBadKey, storage.OpDelete, "/bad")
	_, err = s.List(ctx, &storage.ListRequest{Prefix: "../"})
	check("bad prefix", err, storage.ErrBadKey, storage.OpList, "../")
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = s.List(cctx, nil)
	check("cancelled List", err, context.Canceled, storage.OpList, "")
	dctx, dcancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer dcancel()
	_, err = s.Read(dctx, &storage.ReadRequest{Key: "k"})
	check("expired Read", err, context.DeadlineExceeded, storage.OpRead, "k")
}

// panicky panics in Write.
type panicky struct{ storage.Storage }

func (panicky) Write(context.Context, *storage.WriteRequest) (*storage.WriteResponse, error) {
	panic("write exploded")
}

func TestPanicBecomesInternal(t *testing.T) {
	s := storagetest.OverGRPC(t, panicky{memstore.New()})
	_, err := s.Write(context.Background(), &storage.WriteRequest{Key: "k", Size: 1, Body: strings.NewReader("x")})
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "write exploded") {
		t.Errorf("a panicking Write: %v (code %v), want Internal naming the panic", err, status.Code(err))
	}
	// The server survived it.
	if _, err := s.Read(context.Background(), &storage.ReadRequest{Key: "k"}); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("Read after the panic: %v", err)
	}
}

// TestPluginGone checks that a plugin that is not there (dead, restarting)
// gives ErrUnavailable, promptly.
func TestPluginGone(t *testing.T) {
	dir, err := os.MkdirTemp("", "gs")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "nobody.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s := storage.NewClient(conn, storage.APIVersion)
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	_, err = s.Write(ctx, &storage.WriteRequest{Key: "k", Size: 1, Body: strings.NewReader("x")})
	if !errors.Is(err, storage.ErrUnavailable) || status.Code(err) != codes.Unavailable {
		t.Errorf("Write to a missing plugin: %v, want ErrUnavailable with code Unavailable", err)
	}
	_, err = s.Read(ctx, &storage.ReadRequest{Key: "k"})
	if !errors.Is(err, storage.ErrUnavailable) {
		t.Errorf("Read from a missing plugin: %v, want ErrUnavailable", err)
	}
}

// TestListBatches lists more objects than one stream message carries.
func TestListBatches(t *testing.T) {
	mem := memstore.New()
	s := storagetest.OverGRPC(t, mem)
	ctx := context.Background()
	var keys []string
	for i := range 2500 {
		k := fmt.Sprintf("many/%05d", i)
		keys = append(keys, k)
		if _, err := mem.Write(ctx, &storage.WriteRequest{Key: k, Size: int64(i % 7), Body: strings.NewReader(strings.Repeat("x", i%7))}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := s.List(ctx, &storage.ListRequest{Prefix: "many/"})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Objects) != 2500 || l.Objects[2499].Key != "many/02499" || l.Objects[13].Size != 6 {
		t.Fatalf("listed %d objects", len(l.Objects))
	}
	if _, err := s.Delete(ctx, &storage.DeleteRequest{Keys: keys}); err != nil {
		t.Fatal(err)
	}
	if l, err := mem.List(ctx, nil); err != nil || len(l.Objects) != 0 {
		t.Fatalf("after deleting 2500 keys in batches: %d left, %v", len(l.Objects), err)
	}
}

// TestNoGoroutinesLeft runs writes and reads of every outcome over gRPC
// (success, failing body, size mismatch, cancelled, bodies closed early or
// abandoned by their context) and checks that no goroutine stays behind
// once the connection is closed.
func TestNoGoroutinesLeft(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Run("work", func(t *testing.T) {
		s := storagetest.OverGRPC(t, memstore.New())
		ctx := context.Background()
		big := strings.Repeat("b", 5<<20)
		for i := range 5 {
			key := fmt.Sprintf("k%d", i)
			if _, err := s.Write(ctx, &storage.WriteRequest{Key: key, Size: int64(len(big)), Body: strings.NewReader(big)}); err != nil {
				t.Fatal(err)
			}
			_, _ = s.Write(ctx, &storage.WriteRequest{Key: key + "x", Size: 10, Body: strings.NewReader("short")})
			_, _ = s.Write(ctx, &storage.WriteRequest{Key: key + "y", Size: 10, Body: io.MultiReader(strings.NewReader("ab"), errReader{})})
			cctx, cancel := context.WithCancel(ctx)
			_, _ = s.Write(cctx, &storage.WriteRequest{Key: key + "z", Size: int64(len(big)), Body: &cancelAfter{r: strings.NewReader(big), n: 2 << 20, cancel: cancel}})
			r, err := s.Read(ctx, &storage.ReadRequest{Key: key, Length: storage.ToEnd})
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.ReadFull(r.Body, make([]byte, 100))
			r.Body.Close() // early
			rctx, rcancel := context.WithCancel(ctx)
			r, err = s.Read(rctx, &storage.ReadRequest{Key: key, Offset: 7, Length: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			rcancel() // abandoned without Close
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = s.List(ctx, nil)
		}
	})
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines before, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("body broke") }

// cancelAfter yields r, calling cancel once n bytes went out.
type cancelAfter struct {
	r      io.Reader
	n      int
	cancel func()
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	if c.n <= 0 {
		c.cancel()
	}
	m, err := c.r.Read(p)
	c.n -= m
	return m, err
}

// TestServeOnOwnServer checks that Register works on a caller's server.
// serveOnUnix serves a gRPC server set up by register on a unix socket of
// a fresh directory and returns a connection to it; both end with t.
func serveOnUnix(t *testing.T, register func(*grpc.Server)) *grpc.ClientConn {
	t.Helper()
	dir, err := os.MkdirTemp("", "gs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	lis, err := net.Listen("unix", filepath.Join(dir, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	register(srv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("unix://"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestServeOnOwnServer(t *testing.T) {
	conn := serveOnUnix(t, func(srv *grpc.Server) { storage.Register(srv, memstore.New()) })
	info, err := storage.NewClient(conn, storage.APIVersion).Info(context.Background(), nil)
	if err != nil || info.Name != "memory" {
		t.Fatalf("Info: %+v %v", info, err)
	}
}

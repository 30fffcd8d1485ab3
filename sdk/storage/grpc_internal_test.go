package storage

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/goray-dev/goray/internal/proto/storagev1"
	"github.com/goray-dev/goray/internal/waitfor"
)

// Status errors without goray's detail (an older plugin, a dead
// connection) still map to the sentinel errors by code.
func TestFromStatusByCode(t *testing.T) {
	tests := []struct {
		code  codes.Code
		match error
	}{
		{codes.NotFound, ErrNotFound},
		{codes.InvalidArgument, ErrBadKey},
		{codes.FailedPrecondition, ErrSizeMismatch},
		{codes.OutOfRange, ErrInvalidRange},
		{codes.PermissionDenied, ErrPermission},
		{codes.Unauthenticated, ErrPermission},
		{codes.Unavailable, ErrUnavailable},
		{codes.DeadlineExceeded, context.DeadlineExceeded},
		{codes.Canceled, context.Canceled},
	}
	// The caller's context has ended, as when its own cancel ended the call.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range tests {
		err := fromStatus(done, OpRead, "k", status.Error(tc.code, "x"))
		if !errors.Is(err, tc.match) {
			t.Errorf("code %v: %v does not match %v", tc.code, err, tc.match)
		}
		if status.Code(err) != tc.code {
			t.Errorf("code %v: the status code is lost: %v", tc.code, status.Code(err))
		}
		var se *StorageError
		if !errors.As(err, &se) || se.Op != OpRead || se.Key != "k" {
			t.Errorf("code %v: %v is not a StorageError for read of k", tc.code, err)
		}
	}
	err := fromStatus(context.Background(), OpWrite, "k", status.Error(codes.Unimplemented, "no such method"))
	for _, s := range []error{ErrNotFound, ErrBadKey, ErrUnavailable, ErrPermission, ErrSizeMismatch, ErrInvalidRange} {
		if errors.Is(err, s) {
			t.Errorf("Unimplemented matches %v", s)
		}
	}
	if err := fromStatus(context.Background(), OpInfo, "", errors.New("plain")); err == nil || err.Error() != "storage info: plain" {
		t.Errorf("non-status error became %v", err)
	}
}

func TestToStatusRoundTrip(t *testing.T) {
	for _, e := range []error{ErrNotFound, ErrBadKey, ErrUnavailable, ErrPermission, ErrSizeMismatch, ErrInvalidRange, context.Canceled, context.DeadlineExceeded} {
		in := Errorf(OpWrite, "a/b", "%w: details", e)
		out := fromStatus(context.Background(), OpRead, "other", toStatus(OpRead, "other", in))
		if !errors.Is(out, e) {
			t.Errorf("%v became %v", e, out)
		}
		var se *StorageError
		if !errors.As(out, &se) || se.Op != OpWrite || se.Key != "a/b" {
			t.Errorf("%v: op and key not kept: %v", e, out)
		}
		if out.Error() != in.Error() {
			t.Errorf("message %q became %q", in.Error(), out.Error())
		}
	}
	if toStatus(OpRead, "k", nil) != nil {
		t.Error("nil error became a status")
	}
	if got := status.Code(toStatus(OpRead, "k", errors.New("x"))); got != codes.Unknown {
		t.Errorf("an unknown error got code %v", got)
	}
}

// recorder is a Storage whose Write reads its body and records what it saw;
// it stores nothing.
type recorder struct {
	Storage
	mu   sync.Mutex
	got  []byte
	err  error
	done chan struct{}
}

func (r *recorder) Write(ctx context.Context, req *WriteRequest) (*WriteResponse, error) {
	defer close(r.done)
	b, err := io.ReadAll(req.Body)
	r.mu.Lock()
	r.got, r.err = b, err
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return &WriteResponse{URL: "rec:///" + req.Key}, nil
}

// rawServer serves impl and returns a raw protocol client.
func rawServer(t *testing.T, impl Storage) pb.StorageClient {
	t.Helper()
	dir, err := os.MkdirTemp("", "gs")
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("unix", filepath.Join(dir, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	Register(srv, impl)
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("unix://"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); srv.Stop(); <-served; os.RemoveAll(dir) })
	return pb.NewStorageClient(conn)
}

// TestWriteProtocol drives the Write stream by hand, as a client in another
// language could, and checks what the implementation's Body yields.
func TestWriteProtocol(t *testing.T) {
	header := func(size int64) *pb.WriteRequest {
		return &pb.WriteRequest{Msg: &pb.WriteRequest_Header{Header: &pb.WriteHeader{Key: "k", Size: size}}}
	}
	chunk := func(s string) *pb.WriteRequest {
		return &pb.WriteRequest{Msg: &pb.WriteRequest_Chunk{Chunk: []byte(s)}}
	}
	abort := func(kind string) *pb.WriteRequest {
		return &pb.WriteRequest{Msg: &pb.WriteRequest_Abort{Abort: &pb.WriteAbort{Kind: kind, Message: "gave up"}}}
	}
	tests := []struct {
		name    string
		msgs    []*pb.WriteRequest
		bodyErr error // what the implementation's Body must fail with; nil: success
		code    codes.Code
	}{
		{"whole", []*pb.WriteRequest{header(6), chunk("abc"), chunk(""), chunk("def")}, nil, codes.OK},
		{"empty", []*pb.WriteRequest{header(0)}, nil, codes.OK},
		{"short", []*pb.WriteRequest{header(6), chunk("abc")}, ErrSizeMismatch, codes.FailedPrecondition},
		{"long", []*pb.WriteRequest{header(3), chunk("abcd")}, ErrSizeMismatch, codes.FailedPrecondition},
		{"long-after-last", []*pb.WriteRequest{header(3), chunk("abc"), chunk("d")}, ErrSizeMismatch, codes.FailedPrecondition},
		{"empty-then-data", []*pb.WriteRequest{header(0), chunk("x")}, ErrSizeMismatch, codes.FailedPrecondition},
		{"abort-mid", []*pb.WriteRequest{header(6), chunk("abc"), abort("")}, errClientAborted, codes.Unknown},
		{"abort-after-last", []*pb.WriteRequest{header(3), chunk("abc"), abort("size_mismatch")}, ErrSizeMismatch, codes.FailedPrecondition},
		{"second-header", []*pb.WriteRequest{header(3), header(3)}, errClientAborted, codes.Unknown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{done: make(chan struct{})}
			c := rawServer(t, rec)
			ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
			defer cancel()
			stream, err := c.Write(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range tc.msgs {
				if err := stream.Send(m); err != nil {
					break // the server ended the stream: its status follows
				}
			}
			_, err = stream.CloseAndRecv()
			if status.Code(err) != tc.code {
				t.Errorf("status %v (%v), want %v", status.Code(err), err, tc.code)
			}
			<-rec.done
			if tc.bodyErr == nil {
				if rec.err != nil {
					t.Errorf("the body failed: %v", rec.err)
				}
			} else if !errors.Is(rec.err, tc.bodyErr) {
				t.Errorf("the body failed with %v, want %v (it yielded %q)", rec.err, tc.bodyErr, rec.got)
			}
		})
	}
	// A stream that does not start with a header is refused.
	c := rawServer(t, &recorder{done: make(chan struct{})})
	stream, err := c.Write(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.Send(&pb.WriteRequest{Msg: &pb.WriteRequest_Chunk{Chunk: []byte("x")}})
	if _, err := stream.CloseAndRecv(); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a stream without a header: %v, want InvalidArgument", err)
	}
}

// TestBodyConfirmsEndBeforeLastByte checks that the last bytes reach the
// implementation only once the client has closed its side: an
// implementation that stops reading at Size bytes never stores an object
// the client then aborts.
func TestBodyConfirmsEndBeforeLastByte(t *testing.T) {
	rec := &exactSizeReader{done: make(chan error, 1)}
	c := rawServer(t, rec)
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	stream, err := c.Write(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.Send(&pb.WriteRequest{Msg: &pb.WriteRequest_Header{Header: &pb.WriteHeader{Key: "k", Size: 3}}})
	_ = stream.Send(&pb.WriteRequest{Msg: &pb.WriteRequest_Chunk{Chunk: []byte("abc")}})
	select {
	case err := <-rec.done:
		t.Fatalf("the implementation got all 3 bytes (err %v) before the client confirmed the end", err)
	case <-time.After(100 * time.Millisecond): // it must still be waiting
	}
	_ = stream.Send(&pb.WriteRequest{Msg: &pb.WriteRequest_Abort{Abort: &pb.WriteAbort{Message: "no"}}})
	_, _ = stream.CloseAndRecv()
	if err := <-rec.done; !errors.Is(err, errClientAborted) {
		t.Errorf("ReadFull of the aborted object: %v, want the abort", err)
	}
}

// exactSizeReader reads exactly Size bytes, the way a careless
// implementation might, and reports the result.
type exactSizeReader struct {
	Storage
	done chan error
}

func (r *exactSizeReader) Write(_ context.Context, req *WriteRequest) (*WriteResponse, error) {
	_, err := io.ReadFull(req.Body, make([]byte, req.Size))
	r.done <- err
	return nil, errors.New("stop")
}

// A call cancelled while the caller's context is alive lost its connection:
// the plugin died and the host restarts it.
func TestCanceledWithLiveContextIsUnavailable(t *testing.T) {
	err := fromStatus(context.Background(), OpWrite, "k", status.Error(codes.Canceled, "grpc: the client connection is closing"))
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, context.Canceled) {
		t.Fatalf("%v: want ErrUnavailable, not context.Canceled", err)
	}
}

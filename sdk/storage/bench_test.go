package storage_test

import (
	"context"
	"crypto/rand"
	"io"
	"testing"

	"github.com/goray-dev/goray/sdk/storage"
	"github.com/goray-dev/goray/sdk/storage/storagetest"
)

// The benchmarks measure the gRPC bridge alone (a unix socket, as between
// the host and a plugin): the storage behind it discards what it is given
// and serves bytes from memory.
//
//	go test -run '^$' -bench GRPC ./sdk/storage

const benchObject = 256 << 20

// nullStore stores nothing and reads back bytes from memory.
type nullStore struct{ block []byte }

func newNullStore() *nullStore {
	b := make([]byte, storage.ChunkSize)
	_, _ = rand.Read(b)
	return &nullStore{block: b}
}

func (s *nullStore) Info(context.Context, *storage.InfoRequest) (*storage.InfoResponse, error) {
	return &storage.InfoResponse{Name: "null", Location: "nowhere"}, nil
}

func (s *nullStore) Write(ctx context.Context, req *storage.WriteRequest) (*storage.WriteResponse, error) {
	if _, err := io.Copy(io.Discard, storage.ExactReader(req.Body, req.Size)); err != nil {
		return nil, err
	}
	return &storage.WriteResponse{URL: "null:///" + req.Key}, nil
}

func (s *nullStore) Read(ctx context.Context, req *storage.ReadRequest) (*storage.ReadResponse, error) {
	n := req.Length
	if n == storage.ToEnd {
		n = benchObject - req.Offset
	}
	return &storage.ReadResponse{Size: n, Body: io.NopCloser(&repeatReader{block: s.block, left: n})}, nil
}

func (s *nullStore) Delete(context.Context, *storage.DeleteRequest) (*storage.DeleteResponse, error) {
	return &storage.DeleteResponse{}, nil
}

func (s *nullStore) List(context.Context, *storage.ListRequest) (*storage.ListResponse, error) {
	return &storage.ListResponse{}, nil
}

// repeatReader yields left bytes copied from block over and over.
type repeatReader struct {
	block []byte
	off   int
	left  int64
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n := copy(p, r.block[r.off:])
	r.off = (r.off + n) % len(r.block)
	r.left -= int64(n)
	return n, nil
}

func BenchmarkGRPCWrite(b *testing.B) {
	s := storagetest.OverGRPC(b, newNullStore())
	block := newNullStore().block
	ctx := context.Background()
	b.SetBytes(benchObject)
	for b.Loop() {
		_, err := s.Write(ctx, &storage.WriteRequest{Key: "bench", Size: benchObject, Body: &repeatReader{block: block, left: benchObject}})
		if err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGRPCRead(b *testing.B) {
	s := storagetest.OverGRPC(b, newNullStore())
	ctx := context.Background()
	b.SetBytes(benchObject)
	for b.Loop() {
		r, err := s.Read(ctx, &storage.ReadRequest{Key: "bench", Length: storage.ToEnd})
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, r.Body)
		r.Body.Close()
		if err != nil || n != benchObject {
			b.Fatalf("read %d bytes: %v", n, err)
		}
	}
}

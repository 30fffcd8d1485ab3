package storage_test

import (
	"context"
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
type nullStore struct{}

func (nullStore) Info(context.Context, *storage.InfoRequest) (*storage.InfoResponse, error) {
	return &storage.InfoResponse{Name: "null", Location: "nowhere"}, nil
}

func (nullStore) Write(ctx context.Context, req *storage.WriteRequest) (*storage.WriteResponse, error) {
	if _, err := io.Copy(io.Discard, storage.ExactReader(req.Body, req.Size)); err != nil {
		return nil, err
	}
	return &storage.WriteResponse{URL: "null:///" + req.Key}, nil
}

func (nullStore) Read(ctx context.Context, req *storage.ReadRequest) (*storage.ReadResponse, error) {
	n := req.Length
	if n == storage.ToEnd {
		n = benchObject - req.Offset
	}
	return &storage.ReadResponse{Size: n, Body: io.NopCloser(storagetest.RepeatReader(n))}, nil
}

func (nullStore) Delete(context.Context, *storage.DeleteRequest) (*storage.DeleteResponse, error) {
	return &storage.DeleteResponse{}, nil
}

func (nullStore) List(context.Context, *storage.ListRequest) (*storage.ListResponse, error) {
	return &storage.ListResponse{}, nil
}

// BenchmarkGRPC writes and reads objects of benchObject bytes through the
// bridge (storagetest.BenchmarkWriteRead).
func BenchmarkGRPC(b *testing.B) {
	storagetest.BenchmarkWriteRead(b, storagetest.OverGRPC(b, nullStore{}), "bench", benchObject)
}

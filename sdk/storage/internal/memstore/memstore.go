// Package memstore is a storage.Storage held in memory, for the SDK's own
// tests: it passes the conformance suite (with a small LargeSize) and is the
// base the suite's tests break on purpose.
package memstore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/goray-dev/goray/sdk/storage"
)

// Store is an in-memory storage. The zero value is not usable; call New.
type Store struct {
	mu      sync.Mutex
	objects map[string][]byte
	broken  atomic.Bool
}

// New returns an empty store.
func New() *Store { return &Store{objects: map[string][]byte{}} }

// Break makes every later call fail with storage.ErrUnavailable (as a
// backend that went down).
func (s *Store) Break() { s.broken.Store(true) }

func (s *Store) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.broken.Load() {
		return fmt.Errorf("%w: the memory store is broken", storage.ErrUnavailable)
	}
	return nil
}

// Info implements storage.Storage.
func (s *Store) Info(context.Context, *storage.InfoRequest) (*storage.InfoResponse, error) {
	return &storage.InfoResponse{Name: "memory", Location: "memory"}, nil
}

// Write implements storage.Storage.
func (s *Store) Write(ctx context.Context, req *storage.WriteRequest) (*storage.WriteResponse, error) {
	if req == nil {
		req = &storage.WriteRequest{}
	}
	if err := storage.ValidKey(req.Key); err != nil {
		return nil, &storage.StorageError{Op: storage.OpWrite, Key: req.Key, Err: err}
	}
	if err := s.check(ctx); err != nil {
		return nil, &storage.StorageError{Op: storage.OpWrite, Key: req.Key, Err: err}
	}
	var buf bytes.Buffer
	if req.Size > 0 {
		buf.Grow(int(min(req.Size, 64<<20)))
	}
	if _, err := io.Copy(&buf, storage.ContextReader(ctx, storage.ExactReader(req.Body, req.Size))); err != nil {
		return nil, &storage.StorageError{Op: storage.OpWrite, Key: req.Key, Err: err}
	}
	if err := s.check(ctx); err != nil {
		return nil, &storage.StorageError{Op: storage.OpWrite, Key: req.Key, Err: err}
	}
	s.mu.Lock()
	s.objects[req.Key] = buf.Bytes()
	s.mu.Unlock()
	return &storage.WriteResponse{URL: "memory:///" + req.Key}, nil
}

// Read implements storage.Storage.
func (s *Store) Read(ctx context.Context, req *storage.ReadRequest) (*storage.ReadResponse, error) {
	if req == nil {
		req = &storage.ReadRequest{}
	}
	fail := func(err error) (*storage.ReadResponse, error) {
		return nil, &storage.StorageError{Op: storage.OpRead, Key: req.Key, Err: err}
	}
	if err := storage.ValidKey(req.Key); err != nil {
		return fail(err)
	}
	if err := s.check(ctx); err != nil {
		return fail(err)
	}
	s.mu.Lock()
	b, ok := s.objects[req.Key]
	s.mu.Unlock()
	if !ok {
		return fail(storage.ErrNotFound)
	}
	n, err := storage.CheckRange(req.Offset, req.Length, int64(len(b)))
	if err != nil {
		return fail(err)
	}
	r := bytes.NewReader(b[req.Offset : req.Offset+n])
	return &storage.ReadResponse{Body: io.NopCloser(storage.ContextReader(ctx, r)), Size: n}, nil
}

// Delete implements storage.Storage.
func (s *Store) Delete(ctx context.Context, req *storage.DeleteRequest) (*storage.DeleteResponse, error) {
	if req == nil {
		req = &storage.DeleteRequest{}
	}
	for _, k := range req.Keys {
		if err := storage.ValidKey(k); err != nil {
			return nil, &storage.StorageError{Op: storage.OpDelete, Key: k, Err: err}
		}
	}
	if err := s.check(ctx); err != nil {
		return nil, &storage.StorageError{Op: storage.OpDelete, Err: err}
	}
	s.mu.Lock()
	for _, k := range req.Keys {
		delete(s.objects, k)
	}
	s.mu.Unlock()
	return &storage.DeleteResponse{}, nil
}

// List implements storage.Storage.
func (s *Store) List(ctx context.Context, req *storage.ListRequest) (*storage.ListResponse, error) {
	if req == nil {
		req = &storage.ListRequest{}
	}
	if err := storage.ValidPrefix(req.Prefix); err != nil {
		return nil, &storage.StorageError{Op: storage.OpList, Key: req.Prefix, Err: err}
	}
	if err := s.check(ctx); err != nil {
		return nil, &storage.StorageError{Op: storage.OpList, Key: req.Prefix, Err: err}
	}
	out := &storage.ListResponse{}
	s.mu.Lock()
	for k, b := range s.objects {
		if strings.HasPrefix(k, req.Prefix) {
			out.Objects = append(out.Objects, storage.ObjectInfo{Key: k, Size: int64(len(b))})
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out.Objects, func(a, b storage.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

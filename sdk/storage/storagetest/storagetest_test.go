package storagetest_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/sdk/storage"
	"github.com/goray-dev/goray/sdk/storage/internal/memstore"
	"github.com/goray-dev/goray/sdk/storage/storagetest"
)

// memOptions keeps the in-memory runs small: the large object lives in
// memory there.
func memOptions(stores map[*testing.T]*memstore.Store) storagetest.Options {
	return storagetest.Options{
		LargeSize: 40<<20 + 3,
		Break:     func(t *testing.T) { stores[t].Break() },
	}
}

func TestMemory(t *testing.T) {
	stores := map[*testing.T]*memstore.Store{}
	storagetest.Run(t, func(t *testing.T) storage.Storage {
		s := memstore.New()
		stores[t] = s
		return s
	}, memOptions(stores))
}

func TestMemoryOverGRPC(t *testing.T) {
	stores := map[*testing.T]*memstore.Store{}
	storagetest.Run(t, func(t *testing.T) storage.Storage {
		s := memstore.New()
		stores[t] = s
		return storagetest.OverGRPC(t, s)
	}, memOptions(stores))
}

// ---------------------------------------------------------------- buggy stores

// A bug is a broken variant of the memory store, the suite's subtests that
// must catch it, and a piece of the failure message they must print.
type bug struct {
	wrap func(*memstore.Store) storage.Storage
	run  string // -test.run pattern below TestBuggyChild
	want string
}

var bugs = map[string]bug{
	// Stores what it got from a failing body.
	"commits-partial": {wrap: func(s *memstore.Store) storage.Storage { return &partialWriter{s} },
		run: "BodyFails", want: "after a failed write"},
	// Trusts the body's length instead of Size.
	"no-size-check": {wrap: func(s *memstore.Store) storage.Storage { return &noSizeCheck{s} },
		run: "SizeMismatch", want: "want one matching object size mismatch"},
	// Reads every range from offset 0.
	"ignores-offset": {wrap: func(s *memstore.Store) storage.Storage { return &ignoreOffset{s} },
		run: "FusedRanges", want: "of the fused file"},
	// Shortens ranges that run past the end instead of failing.
	"clamps-ranges": {wrap: func(s *memstore.Store) storage.Storage { return &clampRanges{s} },
		run: "FusedRanges", want: "want ErrInvalidRange"},
	// Reports missing keys on Delete.
	"delete-missing-fails": {wrap: func(s *memstore.Store) storage.Storage { return &deleteStrict{s} },
		run: "Delete", want: "Delete with a missing key"},
	// Loses the error's identity.
	"untyped-not-found": {wrap: func(s *memstore.Store) storage.Storage { return &untypedErrors{s} },
		run: "NotFound", want: "want one matching object not found"},
	// Finishes writes whose context was cancelled.
	"ignores-cancel": {wrap: func(s *memstore.Store) storage.Storage { return &ignoreCtx{s} },
		run: "Cancel/mid-write", want: "want one matching context canceled"},
	// Lists every key whatever the prefix.
	"list-ignores-prefix": {wrap: func(s *memstore.Store) storage.Storage { return &listAll{s} },
		run: "List", want: "List \""},
	// Accepts any key.
	"lax-keys": {wrap: func(s *memstore.Store) storage.Storage { return &laxKeys{s} },
		run: "BadKeys", want: "want one matching bad storage key"},
	// Corrupts one byte past 32 MiB.
	"corrupts-large": {wrap: func(s *memstore.Store) storage.Storage { return &corrupt{s} },
		run: "Large", want: "is 0x"},
	// Hangs, ignoring its context, once broken.
	"hangs-when-broken": {wrap: func(s *memstore.Store) storage.Storage { return &hangWhenBroken{Store: s} },
		run: "Broken", want: "did not return within"},
	// Makes objects visible while they are being written.
	"visible-mid-write": {wrap: func(s *memstore.Store) storage.Storage { return &visibleEarly{s} },
		run: "Atomic", want: "during the write"},
}

// TestBuggyStores runs the suite against deliberately broken stores, each
// in a child process (a failing suite fails its test), and checks that each
// bug is caught with the expected message.
func TestBuggyStores(t *testing.T) {
	for name, b := range bugs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run", "^TestBuggyChild$/^"+strings.ReplaceAll(b.run, "/", "$/^")+"$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), "STORAGETEST_BUG="+name)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("the suite passed against a store with bug %q (err %v):\n%s", name, err, out)
			}
			if !bytes.Contains(out, []byte("--- FAIL: TestBuggyChild/"+strings.Split(b.run, "/")[0])) {
				t.Errorf("subtest %s did not fail:\n%s", b.run, out)
			}
			if !bytes.Contains(out, []byte(b.want)) {
				t.Errorf("the failure does not say %q:\n%s", b.want, out)
			}
		})
	}
}

// TestBuggyChild is the child of TestBuggyStores; it does nothing unless
// STORAGETEST_BUG names a bug.
func TestBuggyChild(t *testing.T) {
	name := os.Getenv("STORAGETEST_BUG")
	if name == "" {
		return
	}
	b, ok := bugs[name]
	if !ok {
		t.Fatalf("unknown bug %q", name)
	}
	stores := map[*testing.T]*memstore.Store{}
	opts := memOptions(stores)
	opts.BrokenTimeout = time.Second
	storagetest.Run(t, func(t *testing.T) storage.Storage {
		s := memstore.New()
		stores[t] = s
		return b.wrap(s)
	}, opts)
}

type partialWriter struct{ *memstore.Store }

func (p *partialWriter) Write(ctx context.Context, req *storage.WriteRequest) (*storage.WriteResponse, error) {
	b, err := io.ReadAll(req.Body)
	r, werr := p.Store.Write(ctx, &storage.WriteRequest{Key: req.Key, Size: int64(len(b)), Body: bytes.NewReader(b)})
	if err != nil {
		return nil, err
	}
	return r, werr
}

type noSizeCheck struct{ *memstore.Store }

func (p *noSizeCheck) Write(ctx context.Context, req *storage.WriteRequest) (*storage.WriteResponse, error) {
	b, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	return p.Store.Write(ctx, &storage.WriteRequest{Key: req.Key, Size: int64(len(b)), Body: bytes.NewReader(b)})
}

type ignoreOffset struct{ *memstore.Store }

func (p *ignoreOffset) Read(ctx context.Context, req *storage.ReadRequest) (*storage.ReadResponse, error) {
	return p.Store.Read(ctx, &storage.ReadRequest{Key: req.Key, Length: req.Length})
}

type clampRanges struct{ *memstore.Store }

func (p *clampRanges) Read(ctx context.Context, req *storage.ReadRequest) (*storage.ReadResponse, error) {
	r, err := p.Store.Read(ctx, req)
	if !errors.Is(err, storage.ErrInvalidRange) || req.Offset < 0 {
		return r, err
	}
	return &storage.ReadResponse{Body: io.NopCloser(strings.NewReader(""))}, nil
}

type deleteStrict struct{ *memstore.Store }

func (p *deleteStrict) Delete(ctx context.Context, req *storage.DeleteRequest) (*storage.DeleteResponse, error) {
	for _, k := range req.Keys {
		if _, err := p.Store.Read(ctx, &storage.ReadRequest{Key: k}); err != nil {
			return nil, err
		}
	}
	return p.Store.Delete(ctx, req)
}

type untypedErrors struct{ *memstore.Store }

func (p *untypedErrors) Read(ctx context.Context, req *storage.ReadRequest) (*storage.ReadResponse, error) {
	r, err := p.Store.Read(ctx, req)
	if err != nil {
		return nil, errors.New(err.Error())
	}
	return r, nil
}

type ignoreCtx struct{ *memstore.Store }

func (p *ignoreCtx) Write(_ context.Context, req *storage.WriteRequest) (*storage.WriteResponse, error) {
	return p.Store.Write(context.Background(), req)
}

type listAll struct{ *memstore.Store }

func (p *listAll) List(ctx context.Context, req *storage.ListRequest) (*storage.ListResponse, error) {
	return p.Store.List(ctx, &storage.ListRequest{})
}

type laxKeys struct{ *memstore.Store }

func (p *laxKeys) Write(ctx context.Context, req *storage.WriteRequest) (*storage.WriteResponse, error) {
	if storage.ValidKey(req.Key) != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		return &storage.WriteResponse{URL: "lax"}, nil
	}
	return p.Store.Write(ctx, req)
}

type corrupt struct{ *memstore.Store }

func (p *corrupt) Write(ctx context.Context, req *storage.WriteRequest) (*storage.WriteResponse, error) {
	b, err := io.ReadAll(io.LimitReader(req.Body, req.Size))
	if err != nil {
		return nil, err
	}
	if len(b) > 32<<20+5 {
		b[32<<20+5] ^= 0x40
	}
	return p.Store.Write(ctx, &storage.WriteRequest{Key: req.Key, Size: int64(len(b)), Body: bytes.NewReader(b)})
}

type hangWhenBroken struct{ *memstore.Store }

func (p *hangWhenBroken) Write(ctx context.Context, req *storage.WriteRequest) (*storage.WriteResponse, error) {
	r, err := p.Store.Write(ctx, req)
	if errors.Is(err, storage.ErrUnavailable) {
		select {} // hangs forever, like a client without timeouts
	}
	return r, err
}

type visibleEarly struct{ *memstore.Store }

func (p *visibleEarly) Write(ctx context.Context, req *storage.WriteRequest) (*storage.WriteResponse, error) {
	// Publishes an empty placeholder first, as a naive file store would.
	if _, err := p.Store.Write(ctx, &storage.WriteRequest{Key: req.Key}); err != nil {
		return nil, err
	}
	return p.Store.Write(ctx, req)
}

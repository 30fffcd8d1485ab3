package binaries

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// fakeRaylet serves FetchBinary from content, in two chunks.
type fakeRaylet struct {
	gorayv1.RayletClient
	content []byte
	calls   int
}

func (f *fakeRaylet) FetchBinary(ctx context.Context, in *gorayv1.FetchBinaryRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[gorayv1.BinaryChunk], error) {
	f.calls++
	half := len(f.content) / 2
	return &chunks{list: [][]byte{f.content[:half], f.content[half:]}}, nil
}

type chunks struct {
	grpc.ClientStream
	list [][]byte
}

func (c *chunks) Recv() (*gorayv1.BinaryChunk, error) {
	if len(c.list) == 0 {
		return nil, io.EOF
	}
	b := c.list[0]
	c.list = c.list[1:]
	return &gorayv1.BinaryChunk{Data: b}, nil
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// TestPathFetchesFromTheDriversNode: a binary the node does not have is
// fetched from the driver's node once, checked and cached; one whose
// content does not match is refused.
func TestPathFetchesFromTheDriversNode(t *testing.T) {
	content := []byte("#!/bin/sh\necho worker\n")
	driverNode := ids.New()
	good := &fakeRaylet{content: content}
	for _, tt := range []struct {
		name    string
		peer    *fakeRaylet
		want    string // sha256 the job names
		wantErr bool
	}{
		{"matching content is cached", good, sum(content), false},
		{"wrong content is refused", &fakeRaylet{content: []byte("other")}, sum([]byte("not other")), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			c := New(filepath.Join(dir, "cache"), ids.New(), hclog.NewNullLogger(), func(node ids.ID) (gorayv1.RayletClient, error) {
				if node != driverNode {
					return nil, errors.New("not the driver's node")
				}
				return tt.peer, nil
			})
			info := &gorayv1.JobInfo{JobId: ids.New().Bytes(), BinaryPath: filepath.Join(dir, "missing"), BinarySha256: tt.want, DriverNodeId: driverNode.Bytes()}
			for range 2 { // the second time from the cache
				path, err := c.Path(context.Background(), info)
				if tt.wantErr {
					if err == nil {
						t.Fatalf("Path = %s, want an error", path)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if b, err := os.ReadFile(path); err != nil || string(b) != string(content) {
					t.Fatalf("cached binary %s: %q, %v", path, b, err)
				}
			}
			if tt.peer.calls != 1 {
				t.Fatalf("fetched %d times, want once", tt.peer.calls)
			}
		})
	}
}

package storagetest_test

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goray-dev/goray/sdk/storage"
	"github.com/goray-dev/goray/sdk/storage/internal/memstore"
	"github.com/goray-dev/goray/sdk/storage/storagetest"
)

func TestStallingReader(t *testing.T) {
	const size, stall = 3<<20 + 5, 1<<20 + 3
	release := make(chan struct{})
	r := storagetest.StallingReader(size, stall, release)
	if n, err := io.ReadFull(r, make([]byte, stall)); err != nil || n != stall {
		t.Fatalf("the bytes before the stall: %d, %v", n, err)
	}
	rest := make(chan int64, 1)
	go func() {
		n, _ := io.Copy(io.Discard, r)
		rest <- n
	}()
	select {
	case n := <-rest:
		t.Fatalf("read %d more bytes before the release", n)
	case <-time.After(50 * time.Millisecond): // a Read past the stall must still block
	}
	close(release)
	if n := <-rest; n != size-stall {
		t.Errorf("after the release: %d bytes, want %d", n, size-stall)
	}
	if n, err := io.Copy(io.Discard, storagetest.StallingReader(100, 100, nil)); err != nil || n != 100 {
		t.Errorf("a stall at the end: %d bytes, %v; want all 100 without stalling", n, err)
	}
}

func TestRepeatReader(t *testing.T) {
	for _, n := range []int64{0, 1, storage.ChunkSize, 3*storage.ChunkSize + 7} {
		if got, err := io.Copy(io.Discard, storagetest.RepeatReader(n)); err != nil || got != n {
			t.Errorf("RepeatReader(%d) yields %d bytes, %v", n, got, err)
		}
	}
}

// dyingStore plays a storage plugin's client: its writes read the body
// until the plugin process ends, then fail as a client does.
type dyingStore struct {
	*memstore.Store
	read atomic.Int64
	died <-chan struct{}
}

func (s *dyingStore) Write(ctx context.Context, req *storage.WriteRequest) (*storage.WriteResponse, error) {
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := req.Body.Read(buf)
			s.read.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	select {
	case <-s.died:
		return nil, fmt.Errorf("%w: the plugin process exited", storage.ErrUnavailable)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestKillMidWrite runs the check against a stand-in plugin process (a
// sleep) whose death fails the write.
func TestKillMidWrite(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	died := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(died)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-died
	})
	s := &dyingStore{Store: memstore.New(), died: died}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const stallAt = 256 << 10
	storagetest.KillMidWrite(ctx, t, s, cmd.Process.Pid, "k", storagetest.KillMidWriteOptions{
		Size:       1 << 20,
		StallAt:    stallAt,
		InProgress: func(context.Context) bool { return s.read.Load() >= stallAt },
		Awaited:    "read body",
	})
	select {
	case <-died:
	default:
		t.Error("the process is still alive after KillMidWrite")
	}
	if cmd.ProcessState == nil || cmd.ProcessState.String() != "signal: killed" {
		t.Errorf("the process ended with %v, want signal: killed", cmd.ProcessState)
	}
}

package raylet

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// TensorPoolConfig hands the raylet the node's pool of freed tensor
// segments (shmem.Pool; the node makes it before its plugins start, so
// that they share it).
type TensorPoolConfig struct {
	// Pool is the node's pool; nil: none (every freed segment is unlinked).
	Pool *shmem.Pool
	// MaxMemory bounds the bytes the pool keeps.
	MaxMemory int64
	// IdleTimeout is how long a segment may stay in the pool unused.
	IdleTimeout time.Duration
}

// tensorPool keeps the node's segment pool within its bounds (the worker
// pool names it in every worker's environment, EnvShmPool): every
// tick it unlinks the segments idle longer than the timeout, then the
// oldest beyond the memory bound; the memory monitor empties it before it
// kills a worker.
type tensorPool struct {
	cfg TensorPoolConfig
	log hclog.Logger
}

func newTensorPool(cfg TensorPoolConfig, log hclog.Logger) *tensorPool {
	return &tensorPool{cfg: cfg, log: log}
}

// run trims the pool until ctx ends or closing closes.
func (t *tensorPool) run(ctx context.Context, closing <-chan struct{}) {
	if t.cfg.Pool == nil {
		return
	}
	every := min(max(t.cfg.IdleTimeout/4, 10*time.Millisecond), time.Second)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-closing:
			return
		case <-tick.C:
			t.trim(t.cfg.IdleTimeout, t.cfg.MaxMemory)
		}
	}
}

// release empties the pool (the node is short of memory) and returns the
// bytes it gave back.
func (t *tensorPool) release() int64 {
	if t.cfg.Pool == nil {
		return 0
	}
	return t.trim(0, 0)
}

func (t *tensorPool) trim(idle time.Duration, maxBytes int64) int64 {
	n, bytes, err := t.cfg.Pool.Trim(idle, maxBytes)
	if err != nil {
		t.log.Warn("trimming the tensor segment pool", "error", err)
	}
	if n > 0 {
		t.log.Debug("tensor segment pool trimmed", "segments", n, "bytes", bytes)
	}
	return bytes
}

package config

import (
	"time"

	"github.com/hashicorp/hcl/v2"
)

// Tensor pool defaults.
const (
	// DefaultTensorPoolMaxMemory bounds the memory of the freed tensor
	// segments a node keeps for reuse.
	DefaultTensorPoolMaxMemory = 4 << 30
	// DefaultTensorPoolIdleTimeout is how long a freed segment stays in
	// the pool unused before its memory goes back to the system.
	DefaultTensorPoolIdleTimeout = 30 * time.Second
)

// TensorPool configures the node's pool of shared-memory tensor segments
// (the tensor_pool block): segments that transports and tasks free are kept
// with their pages and handed to the next tensor of the same size class,
// so steady-state transfers pay no kernel page work.
//
//	tensor_pool {
//	  max_memory   = "4GiB"  # what the pool may keep; "0" turns pooling off
//	  idle_timeout = "30s"   # a segment unused this long is given back
//	}
//
// The pool is also emptied when the node's memory use passes the memory
// monitor's threshold, before any worker is killed (see docs/memory.md).
type TensorPool struct {
	// MaxMemory bounds the bytes of the segments in the pool; 0 turns the
	// pool off (every freed segment is unlinked).
	MaxMemory int64
	// IdleTimeout is how long a segment may stay in the pool unused.
	IdleTimeout time.Duration
}

const (
	keyTensorPoolMax  = "tensor_pool.max_memory"
	keyTensorPoolIdle = "tensor_pool.idle_timeout"
)

var tensorPoolSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "max_memory"}, {Name: "idle_timeout"}},
}

// tensorPool decodes the tensor_pool block (b may be nil).
func (d *decoder) tensorPool(b *hcl.Block) {
	if b == nil {
		return
	}
	c := d.content(b.Body, tensorPoolSchema)
	p := &d.n.TensorPool
	d.size(c.Attributes["max_memory"], keyTensorPoolMax, &p.MaxMemory)
	d.duration(c.Attributes["idle_timeout"], keyTensorPoolIdle, &p.IdleTimeout)
}

// tensorPool checks the tensor_pool block: nothing negative, and an idle
// timeout when the pool is on.
func (v *validator) tensorPool() {
	p := v.n.TensorPool
	if p.MaxMemory < 0 {
		v.errorf(keyTensorPoolMax, "Invalid size",
			"tensor_pool.max_memory must not be negative (0 turns the pool off), got %d.", p.MaxMemory)
	}
	if p.IdleTimeout <= 0 && p.MaxMemory > 0 {
		v.errorf(keyTensorPoolIdle, "Invalid duration",
			"tensor_pool.idle_timeout must be positive while the pool is on, got %s.", p.IdleTimeout)
	}
}

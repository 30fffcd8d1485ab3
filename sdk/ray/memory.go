package ray

import "github.com/goray-dev/goray/sdk/ray/internal/core"

// ErrOutOfMemory matches a task whose worker was killed by its node's
// memory monitor (the node's memory use was above
// memory_monitor.usage_threshold) on its last attempt; see
// *OutOfMemoryError and docs/memory.md. Earlier kills are retried like
// crashes (MaxRetries).
var ErrOutOfMemory = core.ErrOutOfMemory

// OutOfMemoryError says a node's memory monitor killed the worker running
// a task on its last attempt (Ray's OutOfMemoryError). It names the node,
// its memory use and the threshold. It also comes back from a task that
// returned it, with only Function and Reason set.
type OutOfMemoryError = core.OutOfMemoryError

package ray

import "github.com/goray-dev/goray/sdk/ray/internal/core"

// ErrOutOfMemory matches a task whose worker was killed by its node's
// memory monitor (the node's memory use was above
// memory_monitor.usage_threshold) on its last attempt; see
// *OutOfMemoryError and docs/memory.md. Earlier kills were retried within
// MaxOOMRetries.
var ErrOutOfMemory = core.ErrOutOfMemory

// DefaultMaxOOMRetries is how often a task its node's memory monitor
// killed is retried when MaxOOMRetries is not given.
const DefaultMaxOOMRetries = core.DefaultMaxOOMRetries

// MaxOOMRetries sets how often a task whose worker its node's memory
// monitor killed is retried (default DefaultMaxOOMRetries; n < 0: without
// limit, Ray's default), as Ray's task_oom_retries: a budget apart from
// MaxRetries, which the kills do not draw on. A task with MaxRetries(0) is
// not retried after a kill either. Each retry waits first, 1 s after the
// first kill, doubling with each kill up to a minute, so that the node's
// memory comes back before the task takes it again. When the budget is
// spent the task fails with an *OutOfMemoryError. Only tasks take it: an
// actor the monitor killed restarts within MaxRestarts, and its calls are
// retried within MaxTaskRetries. See docs/memory.md.
func MaxOOMRetries(n int) Option { return func(c *callOptions) { c.maxOOMRetries = &n } }

// OutOfMemoryError says a node's memory monitor killed the worker running
// a task on its last attempt (Ray's OutOfMemoryError). It names the node,
// its memory use and the threshold. It also comes back from a task that
// returned it, with only Function and Reason set.
type OutOfMemoryError = core.OutOfMemoryError

package ray

import (
	"context"
	"fmt"
	"maps"
	"reflect"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/resources"
	"github.com/goray-dev/goray/sdk/ray/internal/core"
)

// Option sets a per-call option of a task or actor: resources, retries,
// names, concurrency. Options given at registration are defaults that
// Options(...) on the registered value extends.
type Option func(*callOptions)

type callOptions struct {
	res        map[string]float64
	maxRetries *int
	name       string
	maxConc    int
	maxRestart int
	transports []string
	strategy   int
	affinity   string // hex node id
	soft       bool
	// pg places the call in a placement group's bundle pgBundle.
	pg        *PlacementGroup
	pgBundle  int
	pgCapture bool
	// noCapture keeps the call out of its caller's capturing group
	// (DefaultScheduling).
	noCapture bool
	// lifetime and getIfExists are actor options (namespace.go).
	lifetime    ActorLifetime
	getIfExists bool
	// groups are the actor's concurrency groups (concurrency.go).
	groups []groupDecl
	// maxTaskRetries is an actor option (taskretry.go).
	maxTaskRetries int
	// backpressure bounds a generator's values not taken (stream.go; 0:
	// the default).
	backpressure int
	// retryErrors is a task's RetryErrors (errretry.go); nil: off.
	retryErrors func(*core.RemoteError) bool
	// namespace is a named actor's ActorNamespace; nil: the job's.
	namespace *string
	// maxOOMRetries is a task's MaxOOMRetries (memory.go); nil: the
	// default.
	maxOOMRetries *int
	// workerEnv are WorkerEnv's variables (envvars.go).
	workerEnv map[string]string
	// workerDir is WorkerDir's (workingdir.go).
	workerDir *workingDirOption
}

func newCallOptions(opts []Option) callOptions {
	var c callOptions
	for _, o := range opts {
		o(&c)
	}
	return c
}

func (c callOptions) with(opts []Option) callOptions {
	n := c
	n.transports = append([]string(nil), c.transports...)
	n.groups = append([]groupDecl(nil), c.groups...)
	n.res = make(map[string]float64, len(c.res))
	for k, v := range c.res {
		n.res[k] = v
	}
	n.workerEnv = maps.Clone(c.workerEnv)
	for _, o := range opts {
		o(&n)
	}
	return n
}

func (c *callOptions) setRes(name string, v float64) {
	if c.res == nil {
		c.res = map[string]float64{}
	}
	c.res[name] = v
}

// CPUs sets how many CPUs a call needs (fractions allowed). Tasks default to
// 1, actors to 0. The worker runs the call with GOMAXPROCS set to that
// many CPUs, rounded up, at least 1 (unless its environment sets
// GOMAXPROCS), as Ray sets OMP_NUM_THREADS: a task that runs goroutines on
// several cores asks for them.
func CPUs(n float64) Option { return func(c *callOptions) { c.setRes(resources.CPU, n) } }

// GPUs sets how many GPUs a call needs (fractions allowed).
func GPUs(n float64) Option { return func(c *callOptions) { c.setRes(resources.GPU, n) } }

// Memory sets how many bytes of memory a call reserves.
func Memory(bytes int64) Option {
	return func(c *callOptions) { c.setRes(resources.Memory, float64(bytes)) }
}

// Resource sets a custom resource requirement.
func Resource(name string, amount float64) Option {
	return func(c *callOptions) { c.setRes(name, amount) }
}

// MaxRetries sets how often a task is retried when its worker crashes
// (default 3). Errors returned by the task itself are retried only with
// RetryErrors, within the same budget; kills by a node's memory monitor
// have a budget of their own (MaxOOMRetries), but a task with MaxRetries
// 0 is never retried.
func MaxRetries(n int) Option { return func(c *callOptions) { c.maxRetries = &n } }

// Name names a task (shown by `goray list tasks`) or an actor (found with
// GetActor).
func Name(name string) Option { return func(c *callOptions) { c.name = name } }

// MaxConcurrency lets an actor run up to n calls at once (default 1: calls
// run one at a time in submission order).
func MaxConcurrency(n int) Option { return func(c *callOptions) { c.maxConc = n } }

// MaxRestarts lets an actor be created again (its constructor run anew,
// state lost) up to n times when its worker process or node dies; -1 means
// without limit; the default 0 never. Calls made while it restarts wait for
// it; calls under way when the worker died fail with ErrActorUnavailable,
// or run again on the new instance when MaxTaskRetries allows.
// An actor killed with Kill, or whose owner died, does not restart.
func MaxRestarts(n int) Option { return func(c *callOptions) { c.maxRestart = n } }

// Transports declares the tensor transports an actor uses. Creating the
// actor on a node where one of them is not registered fails with an error
// naming the transport and the node.
func Transports(names ...string) Option {
	return func(c *callOptions) { c.transports = append(c.transports, names...) }
}

// Spread spreads the calls round-robin over the nodes that can run them,
// like Ray's "SPREAD" scheduling strategy.
func Spread() Option {
	return func(c *callOptions) { c.strategy, c.affinity, c.soft, c.pg = core.StrategySpread, "", false, nil }
}

// NodeAffinity runs the call on the node with the given id (as listed by
// Nodes or NodeID). A hard affinity (soft=false) fails with an
// *UnschedulableError when that node is dead or can never fit the call; a
// soft one runs elsewhere then.
func NodeAffinity(nodeID string, soft bool) Option {
	return func(c *callOptions) {
		c.strategy, c.affinity, c.soft, c.pg = core.StrategyNodeAffinity, nodeID, soft, nil
	}
}

// DefaultScheduling restores the default (hybrid) strategy: the local node
// (or the one holding the call's arguments) while it is not busy, else one
// of the least loaded nodes. It also takes the call out of any placement
// group: one named before it, and the group of a caller that captures its
// child tasks (CaptureChildTasks), as Ray's scheduling_strategy="DEFAULT"
// or placement_group=None does.
func DefaultScheduling() Option {
	return func(c *callOptions) {
		c.strategy, c.affinity, c.soft, c.pg, c.noCapture = core.StrategyDefault, "", false, nil, true
	}
}

// taskBase is the untyped part of every registered task and actor class.
type taskBase struct {
	name  string
	class string
	opts  callOptions
}

// Name returns the registered name.
func (b *taskBase) Name() string { return b.name }

func (b *taskBase) with(opts []Option) taskBase {
	return taskBase{name: b.name, class: b.class, opts: b.opts.with(opts)}
}

// coreOptions converts to core options; defaultCPU applies when the call
// did not set CPU.
func (b *taskBase) coreOptions(defaultCPU float64) (core.TaskOptions, error) {
	fl := map[string]float64{resources.CPU: defaultCPU}
	for k, v := range b.opts.res {
		fl[k] = v
	}
	set, err := resources.FromFloats(fl)
	if err != nil {
		return core.TaskOptions{}, fmt.Errorf("goray: %s: %w", b.name, err)
	}
	o := core.TaskOptions{Resources: set, MaxRetries: -1, Name: b.opts.name, MaxConcurrency: b.opts.maxConc, MaxRestarts: b.opts.maxRestart, Transports: b.opts.transports,
		Strategy: b.opts.strategy, AffinitySoft: b.opts.soft, NoCapture: b.opts.noCapture}
	if b.opts.strategy == core.StrategyNodeAffinity {
		if o.AffinityNode, err = ids.Parse(b.opts.affinity); err != nil {
			return core.TaskOptions{}, fmt.Errorf("goray: %s: NodeAffinity(%q): not a node id: %w", b.name, b.opts.affinity, err)
		}
	}
	if b.opts.maxRetries != nil {
		o.MaxRetries = *b.opts.maxRetries
	}
	o.RetryErrors = b.opts.retryErrors
	o.MaxOOMRetries = b.opts.maxOOMRetries
	if o.EnvVars, err = callEnvVars(b.name, inheritedEnv(), b.opts.workerEnv); err != nil {
		return core.TaskOptions{}, err
	}
	if o.WorkingDir, err = callWorkingDir(b.name, b.opts.workerDir); err != nil {
		return core.TaskOptions{}, err
	}
	if o.Placement, err = b.opts.placement(b.name, set); err != nil {
		return core.TaskOptions{}, err
	}
	return o, nil
}

type invoker func(ctx context.Context, name string, args []core.ArgValue) (any, error)

func mustName(fn any) string {
	name, err := core.FuncName(fn)
	if err != nil {
		panic(err)
	}
	return name
}

func argCountCheck(name string, n int, args []core.ArgValue) error {
	if len(args) != n {
		return &core.RemoteError{Function: name, Kind: core.KindArgType, Type: "ArgTypeError",
			Message: fmt.Sprintf("got %d arguments, want %d", len(args), n)}
	}
	return nil
}

func registerTask(fn any, n int, inv invoker) string {
	name := mustName(fn)
	core.Register(&core.Function{Name: name, NArgs: n, Task: func(ctx context.Context, args []core.ArgValue) (any, error) {
		if err := argCountCheck(name, n, args); err != nil {
			return nil, err
		}
		return inv(ctx, name, args)
	}})
	return name
}

func registerActor[T any](ctor any, n int, inv invoker) string {
	name := mustName(ctor)
	class := reflect.TypeFor[T]().String()
	core.Register(&core.Function{Name: name, NArgs: n, Class: class, Task: func(ctx context.Context, args []core.ArgValue) (any, error) {
		if err := argCountCheck(name, n, args); err != nil {
			return nil, err
		}
		inst, err := inv(ctx, name, args)
		if err != nil {
			return nil, err
		}
		if p, ok := inst.(*T); ok && p == nil {
			return nil, nil
		}
		return inst, nil
	}})
	return name
}

func registerMethod[T any](m any, n int, inv func(ctx context.Context, self *T, name string, args []core.ArgValue) (any, error)) string {
	name := mustName(m)
	class := reflect.TypeFor[T]().String()
	core.Register(&core.Function{Name: name, NArgs: n, Class: class, Method: func(ctx context.Context, self any, args []core.ArgValue) (any, error) {
		if err := argCountCheck(name, n, args); err != nil {
			return nil, err
		}
		t, ok := self.(*T)
		if !ok {
			return nil, &core.RemoteError{Function: name, Kind: core.KindArgType, Type: "ArgTypeError",
				Message: fmt.Sprintf("method of %s called on an actor of type %T", class, self)}
		}
		return inv(ctx, t, name, args)
	}})
	return name
}

// failedRef returns a reference whose Get fails with err.
func failedRef[R any](cw *core.CoreWorker, err error) Ref[R] {
	return Ref[R]{cw.FailedHandle(err)}
}

func submitTask[R any](ctx context.Context, b *taskBase, args ...core.ArgInput) Ref[R] {
	cw, err := current()
	if err != nil {
		panic(err)
	}
	opts, err := b.taskOptions()
	if err != nil {
		return failedRef[R](cw, err)
	}
	return Ref[R]{cw.SubmitTask(ctx, b.name, args, opts)}
}

// taskOptions are the core options of a task call: coreOptions, refusing
// the options only actors have.
func (b *taskBase) taskOptions() (core.TaskOptions, error) {
	if b.opts.namespace != nil {
		return core.TaskOptions{}, fmt.Errorf("goray: %s: ActorNamespace(%q) applies to named actors, not tasks", b.name, *b.opts.namespace)
	}
	return b.coreOptions(1)
}

// methodBase is the untyped part of every registered actor method.
type methodBase struct {
	name      string
	transport string
	group     string // concurrency group ("" the default)
	retries   *int   // MaxCallRetries (taskretry.go); nil: the handle's
	// retryErrors is the method's RetryMethodErrors (errretry.go); nil:
	// off.
	retryErrors func(*core.RemoteError) bool
	// backpressure bounds a generator method's values not taken
	// (stream.go; 0: the default).
	backpressure int
}

// Name returns the registered name.
func (m methodBase) Name() string { return m.name }

func callMethod[R any](ctx context.Context, actor core.ActorRef, m methodBase, args ...core.ArgInput) Ref[R] {
	cw, err := current()
	if err != nil {
		panic(err)
	}
	if actor, err = m.withRetries(actor); err != nil {
		return failedRef[R](cw, err)
	}
	return Ref[R]{cw.SubmitActorTask(ctx, actor, m.name, args, core.TaskOptions{TensorTransport: m.transport, ConcurrencyGroup: m.group, RetryErrors: m.retryErrors})}
}

// createActor registers an actor and starts creating it. The error is what
// kept it from being registered, which the handle's Ready and calls report
// too. Without Init it panics when mustInit (Remote), else returns
// ErrNotInitialized.
func createActor[T any](ctx context.Context, mustInit bool, b *taskBase, args ...core.ArgInput) (ActorHandle[T], error) {
	cw, err := current()
	if err != nil {
		if mustInit {
			panic(err)
		}
		return ActorHandle[T]{}, err
	}
	class := reflect.TypeFor[T]().String()
	opts, err := b.coreOptions(0)
	if err == nil && b.opts.retryErrors != nil {
		err = fmt.Errorf("goray: %s: RetryErrors applies to tasks; give an actor's methods RetryMethodErrors", b.name)
	}
	if err == nil && b.opts.maxOOMRetries != nil {
		err = fmt.Errorf("goray: %s: MaxOOMRetries applies to tasks; an actor the memory monitor killed restarts within MaxRestarts, and its calls are retried within MaxTaskRetries", b.name)
	}
	if err == nil {
		err = b.opts.actorLifetime(b.name, &opts)
	}
	if err == nil {
		err = b.opts.actorTaskRetries(b.name, &opts)
	}
	if err == nil {
		err = b.opts.actorGroups(b.name, &opts)
	}
	if err != nil {
		ref, err := cw.DeadActor(class, err)
		return ActorHandle[T]{ref: ref}, err
	}
	ref, err := cw.CreateActor(ctx, class, b.name, args, opts)
	return ActorHandle[T]{ref: ref}, err
}

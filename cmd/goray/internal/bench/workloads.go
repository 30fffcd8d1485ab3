package bench

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/goray-dev/goray/sdk/ray"
)

// Metric names (Ray's).
const (
	MetricGetCalls           = "single_client_get_calls_Plasma_Store"
	MetricPutCalls           = "single_client_put_calls_Plasma_Store"
	MetricMultiPutCalls      = "multi_client_put_calls_Plasma_Store"
	MetricPutGigabytes       = "single_client_put_gigabytes"
	MetricTasksAndGetBatch   = "single_client_tasks_and_get_batch"
	MetricMultiPutGigabytes  = "multi_client_put_gigabytes"
	MetricGet10kRefs         = "single_client_get_object_containing_10k_refs"
	MetricWait1kRefs         = "single_client_wait_1k_refs"
	MetricTasksSync          = "single_client_tasks_sync"
	MetricTasksAsync         = "single_client_tasks_async"
	MetricMultiTasksAsync    = "multi_client_tasks_async"
	MetricActorSync          = "1_1_actor_calls_sync"
	MetricActorAsync         = "1_1_actor_calls_async"
	MetricActorConcurrent    = "1_1_actor_calls_concurrent"
	MetricActor1N            = "1_n_actor_calls_async"
	MetricActorNN            = "n_n_actor_calls_async"
	MetricActorNNWithArg     = "n_n_actor_calls_with_arg_async"
	MetricAsyncActorSync     = "1_1_async_actor_calls_sync"
	MetricAsyncActorAsync    = "1_1_async_actor_calls_async"
	MetricAsyncActorWithArgs = "1_1_async_actor_calls_with_args_async"
	MetricAsyncActor1N       = "1_n_async_actor_calls_async"
	MetricAsyncActorNN       = "n_n_async_actor_calls_async"
	MetricPlacementGroup     = "placement_group_create/removal"

	// goray's own: Ray's small put and get, through the store.
	MetricGetCallsStore = "single_client_get_calls_store"
	MetricPutCallsStore = "single_client_put_calls_store"
	// goray's own: the items of a streaming generator taken by its caller.
	MetricGeneratorItems = "single_client_generator_items"
)

// generatorItems is how many items one call of the generator metric
// streams.
const generatorItems = 1000

// storeValueSize is the value of the store-backed put and get metrics:
// above goray's default inline limit (100 KiB), so each call goes through
// the node's shared-memory store, as every put does in Ray.
const storeValueSize = 128 << 10

const (
	concurrentActorCalls  = 16   // Ray's max_concurrency for 1_1_actor_calls_concurrent
	asyncActorConcurrency = 1000 // Ray's default max_concurrency of async actors
	asyncActorNote        = "goray has no separate async actors: the actor runs with MaxConcurrency(1000), Ray's default for async actors"
	inlineNote            = "goray keeps values ≤ 100 KiB inline in the owner's memory, so no store round trip is involved"
	putGigabytesRatioNote = "ratio = put bandwidth (exact bytes) ÷ memcpy bandwidth; target ≥ 0.5"
	roundTripRatioNote    = "ratio = goray round trip (1/rate) ÷ a bare gRPC stream message round trip to another process (a call is one message each way from the driver to a worker process); grpc_unary_round_trip is a unary call inside one process"
	placementGroupNote    = "Ray's workload: 100 groups of one {CPU: 0.001} bundle created, each waited ready, then removed; the figure counts groups; the group scheduler is one GCS goroutine placing groups one at a time"
)

// ------------------------------------------------------------ remote code
//
// Everything a workload runs remotely is registered at package level so the
// re-executed worker binary knows it.

// smallValue is Ray's small_value: 1 CPU, returns the 2 bytes "ok".
func smallValue(context.Context) ([]byte, error) { return []byte("ok"), nil }

// doPutSmall is Ray's do_put_small: 100 puts of a small value.
func doPutSmall(ctx context.Context) (int, error) {
	for i := 0; i < 100; i++ {
		r, err := ray.Put(ctx, 0)
		if err != nil {
			return i, err
		}
		r.Release()
	}
	return 100, nil
}

// doPutLarge is Ray's do_put: count puts of a size-byte array (one buffer
// per process, reused).
func doPutLarge(ctx context.Context, size, count int) (int, error) {
	b := payload(size)
	for i := 0; i < count; i++ {
		r, err := ray.Put(ctx, b)
		if err != nil {
			return i, err
		}
		r.Release()
	}
	return count, nil
}

// createObjectContainingRefs is Ray's create_object_containing_ref: n puts
// of 1, returned as a list of references.
func createObjectContainingRefs(ctx context.Context, n int) ([]ray.Ref[int], error) {
	refs := make([]ray.Ref[int], n)
	for i := range refs {
		r, err := ray.Put(ctx, 1)
		if err != nil {
			return nil, err
		}
		refs[i] = r
	}
	return refs, nil
}

// nnWork is Ray's work/async_actor_work: n calls spread round-robin over
// actors, then get them all.
func nnWork(ctx context.Context, actors []ray.ActorHandle[benchActor], n int) (int, error) {
	if len(actors) == 0 {
		return 0, fmt.Errorf("nnWork: no actors")
	}
	refs := make([]ray.Ref[[]byte], n)
	for i := range refs {
		refs[i] = actorSmallValue.On(actors[i%len(actors)]).Remote(ctx)
	}
	return n, getAll(ctx, refs)
}

// benchActor is Ray's Actor (0 CPUs).
type benchActor struct{}

func newBenchActor(context.Context) (*benchActor, error) { return &benchActor{}, nil }

func (*benchActor) smallValue(context.Context) ([]byte, error) { return []byte("ok"), nil }

func (*benchActor) smallValueArg(_ context.Context, _ int) ([]byte, error) {
	return []byte("ok"), nil
}

// smallValueBatch submits n small_value tasks from inside the actor and
// gets them (multi_client_tasks_async).
func (*benchActor) smallValueBatch(ctx context.Context, n int) (int, error) {
	refs := make([]ray.Ref[[]byte], n)
	for i := range refs {
		refs[i] = smallValueTask.Remote(ctx)
	}
	return n, getAll(ctx, refs)
}

// benchClient is Ray's Client actor: it calls a set of server actors.
type benchClient struct{ servers []ray.ActorHandle[benchActor] }

func newBenchClient(_ context.Context, servers []ray.ActorHandle[benchActor]) (*benchClient, error) {
	return &benchClient{servers: servers}, nil
}

// smallValueBatch makes n small_value calls on each server and gets them.
func (c *benchClient) smallValueBatch(ctx context.Context, n int) (int, error) {
	refs := make([]ray.Ref[[]byte], 0, n*len(c.servers))
	for _, s := range c.servers {
		for i := 0; i < n; i++ {
			refs = append(refs, actorSmallValue.On(s).Remote(ctx))
		}
	}
	return len(refs), getAll(ctx, refs)
}

// smallValueBatchArg puts 0 once and makes n small_value_arg calls on each
// server with the reference as argument.
func (c *benchClient) smallValueBatchArg(ctx context.Context, n int) (int, error) {
	x, err := ray.Put(ctx, 0)
	if err != nil {
		return 0, err
	}
	refs := make([]ray.Ref[[]byte], 0, n*len(c.servers))
	for _, s := range c.servers {
		for i := 0; i < n; i++ {
			refs = append(refs, actorSmallValueArg.On(s).Remote(ctx, x))
		}
	}
	err = getAll(ctx, refs)
	x.Release()
	return len(refs), err
}

// yieldSmall is a streaming generator of n small values (Ray's
// small_value, b"ok", as each item).
func yieldSmall(ctx context.Context, n int, yield func([]byte) error) error {
	for range n {
		if err := yield([]byte("ok")); err != nil {
			return err
		}
	}
	return nil
}

var (
	yieldSmallGen        = ray.Generator1(yieldSmall)
	smallValueTask       = ray.Task0(smallValue)
	doPutSmallTask       = ray.Task0(doPutSmall)
	doPutLargeTask       = ray.Task2(doPutLarge)
	containingRefsTask   = ray.Task1(createObjectContainingRefs)
	nnWorkTask           = ray.Task2(nnWork)
	actorClass           = ray.Actor0(newBenchActor)
	actorSmallValue      = ray.Method0((*benchActor).smallValue)
	actorSmallValueArg   = ray.Method1((*benchActor).smallValueArg)
	actorSmallValueBatch = ray.Method1((*benchActor).smallValueBatch)
	clientClass          = ray.Actor1(newBenchClient)
	clientBatch          = ray.Method1((*benchClient).smallValueBatch)
	clientBatchArg       = ray.Method1((*benchClient).smallValueBatchArg)
)

// getAll gets every reference (stopping at the first error) and releases
// them all, as Python drops the list after ray.get.
func getAll[T any](ctx context.Context, refs []ray.Ref[T]) error {
	var first error
	for _, r := range refs {
		if first == nil {
			_, first = r.Get(ctx)
		}
		r.Release()
	}
	return first
}

// payloadBuf is this process's reusable large put source.
var payloadBuf struct {
	sync.Mutex
	b []byte
}

// payload returns a filled buffer of size bytes, reused across calls.
func payload(size int) []byte {
	payloadBuf.Lock()
	defer payloadBuf.Unlock()
	if len(payloadBuf.b) != size {
		payloadBuf.b = nil
		payloadBuf.b = make([]byte, size)
		fill(payloadBuf.b)
	}
	return payloadBuf.b
}

func dropPayload() {
	payloadBuf.Lock()
	payloadBuf.b = nil
	payloadBuf.Unlock()
}

// ------------------------------------------------------------ workloads

// putPayload is a workload that puts this process's filled buffer of size
// bytes and releases the reference at once.
func putPayload(size int) setupFunc {
	return func(context.Context) (func(context.Context) error, func(context.Context), error) {
		b := payload(size)
		fn := func(ctx context.Context) error {
			r, err := ray.Put(ctx, b)
			if err != nil {
				return err
			}
			r.Release()
			return nil
		}
		return fn, func(context.Context) { dropPayload() }, nil
	}
}

type setupFunc = func(ctx context.Context) (func(context.Context) error, func(context.Context), error)

// simple wraps a workload that needs no set-up.
func simple(fn func(context.Context) error) setupFunc {
	return func(context.Context) (func(context.Context) error, func(context.Context), error) {
		return fn, noTeardown, nil
	}
}

func newActors(ctx context.Context, n, conc int) ([]ray.ActorHandle[benchActor], error) {
	cls := actorClass
	if conc > 1 {
		cls = cls.Options(ray.MaxConcurrency(conc))
	}
	out := make([]ray.ActorHandle[benchActor], n)
	for i := range out {
		out[i] = cls.Remote(ctx)
	}
	for _, a := range out {
		if err := a.Ready(ctx); err != nil {
			killAll(ctx, out)
			return nil, err
		}
	}
	return out, nil
}

func killAll[T any](ctx context.Context, hs []ray.ActorHandle[T]) {
	for _, h := range hs {
		_ = h.Kill(ctx)
	}
}

// actorSetup creates n actors and builds fn on them.
func actorSetup(n, conc int, build func(actors []ray.ActorHandle[benchActor]) func(context.Context) error) setupFunc {
	return func(ctx context.Context) (func(context.Context) error, func(context.Context), error) {
		as, err := newActors(ctx, n, conc)
		if err != nil {
			return nil, nil, err
		}
		return build(as), func(ctx context.Context) { killAll(ctx, as) }, nil
	}
}

// clientsSetup creates server actors, then client actors built by mk, and
// builds fn on the clients.
func clientsSetup(nServers, conc int, mk func(servers []ray.ActorHandle[benchActor]) [][]ray.ActorHandle[benchActor],
	build func(clients []ray.ActorHandle[benchClient]) func(context.Context) error) setupFunc {
	return func(ctx context.Context) (func(context.Context) error, func(context.Context), error) {
		servers, err := newActors(ctx, nServers, conc)
		if err != nil {
			return nil, nil, err
		}
		var clients []ray.ActorHandle[benchClient]
		teardown := func(ctx context.Context) {
			killAll(ctx, clients)
			killAll(ctx, servers)
		}
		for _, group := range mk(servers) {
			clients = append(clients, clientClass.Remote(ctx, ray.V(group)))
		}
		for _, c := range clients {
			if err := c.Ready(ctx); err != nil {
				teardown(ctx)
				return nil, nil, err
			}
		}
		return build(clients), teardown, nil
	}
}

func oneClient(servers []ray.ActorHandle[benchActor]) [][]ray.ActorHandle[benchActor] {
	return [][]ray.ActorHandle[benchActor]{servers}
}

func clientPerServer(servers []ray.ActorHandle[benchActor]) [][]ray.ActorHandle[benchActor] {
	out := make([][]ray.ActorHandle[benchActor], len(servers))
	for i, s := range servers {
		out[i] = []ray.ActorHandle[benchActor]{s}
	}
	return out
}

// expect gets every count reference and checks each returned want.
func expect(ctx context.Context, refs []ray.Ref[int], want int) error {
	for i, r := range refs {
		got, err := r.Get(ctx)
		if err == nil && got != want {
			err = fmt.Errorf("call %d did %d units of work, want %d", i, got, want)
		}
		if err != nil {
			for _, r := range refs[i:] {
				r.Release()
			}
			return err
		}
		r.Release()
	}
	return nil
}

// callsBatch submits n calls made by call and gets them all.
func callsBatch(n int, call func(ctx context.Context, i int) ray.Ref[[]byte]) func(context.Context) error {
	return func(ctx context.Context) error {
		refs := make([]ray.Ref[[]byte], n)
		for i := range refs {
			refs[i] = call(ctx, i)
		}
		return getAll(ctx, refs)
	}
}

// syncCall submits one call and gets it.
func syncCall(call func(ctx context.Context) ray.Ref[[]byte]) func(context.Context) error {
	return func(ctx context.Context) error {
		r := call(ctx)
		_, err := r.Get(ctx)
		r.Release()
		return err
	}
}

// metrics returns Ray's microbenchmark metrics, in Ray's order, then
// goray's own.
func (e *env) metrics() []workload {
	const (
		bigPut       = 800 << 20 // Ray: np.zeros(100 Mi, int64)
		multiPut     = 80 << 20  // Ray: np.zeros(10 Mi, int64)
		quickBigPut  = 80 << 20
		quickMulti   = 8 << 20
		multiClients = 10
		multiPuts    = 10
	)
	bigSize, multiSize := bigPut, multiPut
	sizeNote := ""
	if e.quick {
		bigSize, multiSize = quickBigPut, quickMulti
		sizeNote = "; quick mode: smaller objects"
	}
	// Ray's multiplier counts 800 MiB as 0.8 "GB"; keep that convention so
	// figures compare with Ray's.
	bigMult := 0.8 * float64(bigSize) / float64(bigPut)
	multiMult := 8 * float64(multiSize) / float64(multiPut)
	exact := float64(bigPut) / 0.8e9 // bytes per Ray "GB"
	half := e.half
	smallTaskRemote := func(ctx context.Context, _ int) ray.Ref[[]byte] { return smallValueTask.Remote(ctx) }

	return append([]workload{
		{
			name: MetricGetCalls, unit: UnitPerSecond, mult: 1, note: inlineNote,
			setup: func(ctx context.Context) (func(context.Context) error, func(context.Context), error) {
				v, err := ray.Put(ctx, 0)
				if err != nil {
					return nil, nil, err
				}
				fn := func(ctx context.Context) error {
					_, err := v.Get(ctx)
					return err
				}
				return fn, func(context.Context) { v.Release() }, nil
			},
		},
		{
			name: MetricPutCalls, unit: UnitPerSecond, mult: 1, note: inlineNote + "; each reference is released at once",
			setup: simple(func(ctx context.Context) error {
				r, err := ray.Put(ctx, 0)
				if err != nil {
					return err
				}
				r.Release()
				return nil
			}),
		},
		{
			name: MetricMultiPutCalls, unit: UnitPerSecond, mult: multiClients * 100,
			setup: simple(func(ctx context.Context) error {
				refs := make([]ray.Ref[int], multiClients)
				for i := range refs {
					refs[i] = doPutSmallTask.Remote(ctx)
				}
				return expect(ctx, refs, 100)
			}),
		},
		{
			name: MetricPutGigabytes, unit: UnitGBps, mult: bigMult,
			note:  fmt.Sprintf("put of a filled %s []byte, reference released each call; Ray's multiplier counts 800 MiB as 0.8 GB; %s%s", humanize.IBytes(uint64(bigSize)), putGigabytesRatioNote, sizeNote),
			limit: LimitMemcpy, ratio: func(mean, limit float64) float64 { return mean * exact / limit },
			setup: putPayload(bigSize),
		},
		{
			name: MetricTasksAndGetBatch, unit: UnitPerSecond, mult: 1,
			setup: simple(callsBatch(1000, smallTaskRemote)),
		},
		{
			name: MetricMultiPutGigabytes, unit: UnitGBps, mult: multiMult,
			note: fmt.Sprintf("%d tasks each putting a filled %s []byte %d times (one buffer per worker, reused)%s",
				multiClients, humanize.IBytes(uint64(multiSize)), multiPuts, sizeNote),
			setup: simple(func(ctx context.Context) error {
				refs := make([]ray.Ref[int], multiClients)
				for i := range refs {
					refs[i] = doPutLargeTask.Remote(ctx, ray.V(multiSize), ray.V(multiPuts))
				}
				return expect(ctx, refs, multiPuts)
			}),
		},
		{
			name: MetricGet10kRefs, unit: UnitPerSecond, mult: 1,
			note: "as Ray: a task puts 10,000 small objects and returns their references once, before timing; each call gets that list (decoding and counting the 10,000 references, released after)",
			setup: func(ctx context.Context) (func(context.Context) error, func(context.Context), error) {
				const n = 10000
				ref := containingRefsTask.Remote(ctx, ray.V(n))
				if _, err := ref.Get(ctx); err != nil {
					ref.Release()
					return nil, nil, err
				}
				fn := func(ctx context.Context) error {
					refs, err := ref.Get(ctx)
					for _, r := range refs {
						r.Release()
					}
					if err == nil && len(refs) != n {
						err = fmt.Errorf("got %d references, want %d", len(refs), n)
					}
					return err
				}
				return fn, func(context.Context) { ref.Release() }, nil
			},
		},
		{
			name: MetricWait1kRefs, unit: UnitPerSecond, mult: 1,
			note: "as Ray: 1,000 small tasks, then Wait(notReady, 1) until none is left: 1,000 waits, each returning one ref (before Wait returned at most num, one wait could take every ready ref)",
			setup: simple(func(ctx context.Context) error {
				const n = 1000
				all := make([]ray.Ref[[]byte], n)
				for i := range all {
					all[i] = smallValueTask.Remote(ctx)
				}
				notReady := all
				for range n {
					var err error
					if _, notReady, err = ray.Wait(ctx, notReady, 1, ray.NoTimeout); err != nil {
						break
					}
				}
				for _, r := range all {
					r.Release()
				}
				if len(notReady) != 0 {
					return fmt.Errorf("%d of %d references still not ready after %d waits", len(notReady), n, n)
				}
				return ctx.Err()
			}),
		},
		{
			name: MetricTasksSync, unit: UnitPerSecond, mult: 1, note: roundTripRatioNote,
			limit: LimitGRPCStream, ratio: roundTripRatio,
			setup: simple(syncCall(func(ctx context.Context) ray.Ref[[]byte] { return smallValueTask.Remote(ctx) })),
		},
		{
			name: MetricTasksAsync, unit: UnitPerSecond, mult: 1000,
			setup: simple(callsBatch(1000, smallTaskRemote)),
		},
		{
			name: MetricMultiTasksAsync, unit: UnitPerSecond, mult: 4 * 10000,
			setup: func(ctx context.Context) (func(context.Context) error, func(context.Context), error) {
				as, err := newActors(ctx, 4, 1)
				if err != nil {
					return nil, nil, err
				}
				fn := func(ctx context.Context) error {
					refs := make([]ray.Ref[int], len(as))
					for i, a := range as {
						refs[i] = actorSmallValueBatch.On(a).Remote(ctx, ray.V(10000))
					}
					return expect(ctx, refs, 10000)
				}
				return fn, func(ctx context.Context) { killAll(ctx, as) }, nil
			},
		},
		{
			name: MetricActorSync, unit: UnitPerSecond, mult: 1, note: roundTripRatioNote,
			limit: LimitGRPCStream, ratio: roundTripRatio,
			setup: actorSetup(1, 1, func(as []ray.ActorHandle[benchActor]) func(context.Context) error {
				return syncCall(func(ctx context.Context) ray.Ref[[]byte] { return actorSmallValue.On(as[0]).Remote(ctx) })
			}),
		},
		{
			name: MetricActorAsync, unit: UnitPerSecond, mult: 1000,
			setup: actorSetup(1, 1, func(as []ray.ActorHandle[benchActor]) func(context.Context) error {
				return callsBatch(1000, func(ctx context.Context, _ int) ray.Ref[[]byte] { return actorSmallValue.On(as[0]).Remote(ctx) })
			}),
		},
		{
			name: MetricActorConcurrent, unit: UnitPerSecond, mult: 1000, note: "actor with MaxConcurrency(16)",
			setup: actorSetup(1, concurrentActorCalls, func(as []ray.ActorHandle[benchActor]) func(context.Context) error {
				return callsBatch(1000, func(ctx context.Context, _ int) ray.Ref[[]byte] { return actorSmallValue.On(as[0]).Remote(ctx) })
			}),
		},
		e.oneToN(MetricActor1N, 1, ""),
		e.nToN(MetricActorNN, 1, ""),
		{
			name: MetricActorNNWithArg, unit: UnitPerSecond, mult: float64(1000 * half),
			note:  fmt.Sprintf("N_CPU/2 = %d client actors, each with its own server actor", half),
			setup: clientsSetup(half, 1, clientPerServer, batchOnClients(clientBatchArg, 1000)),
		},
		{
			name: MetricAsyncActorSync, unit: UnitPerSecond, mult: 1, note: asyncActorNote,
			setup: actorSetup(1, asyncActorConcurrency, func(as []ray.ActorHandle[benchActor]) func(context.Context) error {
				return syncCall(func(ctx context.Context) ray.Ref[[]byte] { return actorSmallValue.On(as[0]).Remote(ctx) })
			}),
		},
		{
			name: MetricAsyncActorAsync, unit: UnitPerSecond, mult: 1000, note: asyncActorNote,
			setup: actorSetup(1, asyncActorConcurrency, func(as []ray.ActorHandle[benchActor]) func(context.Context) error {
				return callsBatch(1000, func(ctx context.Context, _ int) ray.Ref[[]byte] { return actorSmallValue.On(as[0]).Remote(ctx) })
			}),
		},
		{
			name: MetricAsyncActorWithArgs, unit: UnitPerSecond, mult: 1000, note: asyncActorNote,
			setup: actorSetup(1, asyncActorConcurrency, func(as []ray.ActorHandle[benchActor]) func(context.Context) error {
				return callsBatch(1000, func(ctx context.Context, i int) ray.Ref[[]byte] {
					return actorSmallValueArg.On(as[0]).Remote(ctx, ray.V(i))
				})
			}),
		},
		e.oneToN(MetricAsyncActor1N, asyncActorConcurrency, asyncActorNote),
		e.nToN(MetricAsyncActorNN, asyncActorConcurrency, asyncActorNote),
		{
			name: MetricPlacementGroup, unit: UnitPerSecond, mult: numPlacementGroups, note: placementGroupNote,
			setup: simple(placementGroupCreateRemoval),
		},
		// Beyond Ray's list.
		{
			name: MetricGetCallsStore, unit: UnitPerSecond, mult: 1,
			note: fmt.Sprintf("goray's own; nearest Ray workload: %s, whose value Ray keeps in its shared-memory store. Here a %s []byte, above goray's inline limit, so each Get reads the node's store", MetricGetCalls, humanize.IBytes(storeValueSize)),
			setup: func(ctx context.Context) (func(context.Context) error, func(context.Context), error) {
				v, err := ray.Put(ctx, payload(storeValueSize))
				if err != nil {
					return nil, nil, err
				}
				fn := func(ctx context.Context) error {
					_, err := v.Get(ctx)
					return err
				}
				return fn, func(context.Context) { v.Release(); dropPayload() }, nil
			},
		},
		{
			name: MetricGeneratorItems, unit: UnitPerSecond, mult: generatorItems,
			note: fmt.Sprintf("goray's own; nearest Ray workload: none in ray microbenchmark (Ray's streaming generators, ObjectRefGenerator); per call a task streams %d items of b\"ok\" with the default Backpressure (64) and the driver takes and gets each (Stream.Values); figure = items per second", generatorItems),
			setup: simple(func(ctx context.Context) error {
				s := yieldSmallGen.Remote(ctx, ray.V(generatorItems))
				defer s.Close()
				n := 0
				for _, err := range s.Values(ctx) {
					if err != nil {
						return err
					}
					n++
				}
				if n != generatorItems {
					return fmt.Errorf("the stream gave %d items, want %d", n, generatorItems)
				}
				return nil
			}),
		},
		{
			name: MetricPutCallsStore, unit: UnitPerSecond, mult: 1,
			note:  fmt.Sprintf("goray's own; nearest Ray workload: %s. Here a %s []byte, above goray's inline limit, so each Put creates, fills and seals an object in the node's store; each reference is released at once", MetricPutCalls, humanize.IBytes(storeValueSize)),
			setup: putPayload(storeValueSize),
		},
		e.tensorTransferMetric(),
		e.nodeTransferMetric(),
		e.nodePullMetric(),
	}, append(e.transportPluginMetrics(), e.spillMetrics()...)...)
}

// oneToN is Ray's 1:n test: one client actor makes 5000 calls on each of
// N_CPU/2 actors.
func (e *env) oneToN(name string, conc int, note string) workload {
	const n = 5000
	return workload{
		name: name, unit: UnitPerSecond, mult: float64(n * e.half), note: joinNotes(note, fmt.Sprintf("N_CPU/2 = %d", e.half)),
		setup: clientsSetup(e.half, conc, oneClient, batchOnClients(clientBatch, n)),
	}
}

// nToN is Ray's n:n test: 4 tasks each make 5000 calls spread over N_CPU/2
// actors.
func (e *env) nToN(name string, conc int, note string) workload {
	const m, n = 4, 5000
	return workload{
		name: name, unit: UnitPerSecond, mult: m * n, note: joinNotes(note, fmt.Sprintf("N_CPU/2 = %d", e.half)),
		setup: actorSetup(e.half, conc, func(as []ray.ActorHandle[benchActor]) func(context.Context) error {
			return func(ctx context.Context) error {
				refs := make([]ray.Ref[int], m)
				for i := range refs {
					refs[i] = nnWorkTask.Remote(ctx, ray.V(as), ray.V(n))
				}
				return expect(ctx, refs, n)
			}
		}),
	}
}

// batchOnClients calls method(n) on every client and checks each made n
// calls per server.
func batchOnClients(method *ray.MethodFunc1[benchClient, int, int], n int) func([]ray.ActorHandle[benchClient]) func(context.Context) error {
	return func(clients []ray.ActorHandle[benchClient]) func(context.Context) error {
		return func(ctx context.Context) error {
			refs := make([]ray.Ref[int], len(clients))
			for i, c := range clients {
				refs[i] = method.On(c).Remote(ctx, ray.V(n))
			}
			// Each client has the same number of servers.
			return expectMultiple(ctx, refs, n)
		}
	}
}

// expectMultiple gets every count reference and checks each is a positive
// multiple of n.
func expectMultiple(ctx context.Context, refs []ray.Ref[int], n int) error {
	for i, r := range refs {
		got, err := r.Get(ctx)
		if err == nil && (got <= 0 || got%n != 0) {
			err = fmt.Errorf("client %d made %d calls, want a positive multiple of %d", i, got, n)
		}
		if err != nil {
			for _, r := range refs[i:] {
				r.Release()
			}
			return err
		}
		r.Release()
	}
	return nil
}

func roundTripRatio(rate, rttMicros float64) float64 { return (1e6 / rate) / rttMicros }

func joinNotes(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// numPlacementGroups is Ray's NUM_PGS.
const numPlacementGroups = 100

// placementGroupCreateRemoval is Ray's placement_group_create_removal:
// create 100 groups of one {CPU: 0.001} bundle, wait until each is ready,
// then remove them all.
func placementGroupCreateRemoval(ctx context.Context) error {
	pgs := make([]*ray.PlacementGroup, 0, numPlacementGroups)
	defer func() {
		for _, pg := range pgs {
			_ = ray.RemovePlacementGroup(context.WithoutCancel(ctx), pg)
		}
	}()
	for range numPlacementGroups {
		pg, err := ray.CreatePlacementGroup(ctx, []ray.Bundle{{"CPU": 0.001}}, ray.Pack)
		if err != nil {
			return err
		}
		pgs = append(pgs, pg)
	}
	for _, pg := range pgs {
		if ok, err := pg.WaitTimeout(ctx, 30*time.Second); err != nil || !ok {
			return cmp.Or(err, fmt.Errorf("placement group %s not ready after 30s", pg.ID()))
		}
	}
	for _, pg := range pgs {
		if err := ray.RemovePlacementGroup(ctx, pg); err != nil {
			return err
		}
	}
	pgs = nil
	return nil
}

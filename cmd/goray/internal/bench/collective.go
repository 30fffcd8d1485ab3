package bench

// Metrics of the collective and one-sided transport plugins (not Ray's):
// all-reduce bus bandwidth, one-sided read bandwidth within a node and
// across nodes, and the cost of registering memory. Each metric starts its
// own node(s) in this process, joining the cluster, whose plugins are this
// binary re-executed as goray-transport-collective and
// goray-transport-onesided (see MaybeServeTransportPlugins); the actors run
// there and call the plugins through their raylet, as applications do.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"unsafe"

	"github.com/dustin/go-humanize"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/host/node"
	collectiveplugin "github.com/goray-dev/goray/plugins/collective/collective"
	"github.com/goray-dev/goray/plugins/onesided/onesided"
	"github.com/goray-dev/goray/sdk/ray"
	"github.com/goray-dev/goray/sdk/ray/collective"
	"github.com/goray-dev/goray/sdk/transport"
)

// Metric names of the transport plugins.
const (
	// MetricAllReducePrefix starts the all-reduce metrics:
	// allreduce_bus_bandwidth_<ranks>_ranks_<size>.
	MetricAllReducePrefix = "allreduce_bus_bandwidth_"
	// MetricOneSidedReadNode is a one-sided read within a node (shared
	// memory), compared with memcpy.
	MetricOneSidedReadNode = "onesided_read_within_node_64MiB"
	// MetricOneSidedReadNodes is a one-sided read across nodes (TCP),
	// compared with TCP loopback.
	MetricOneSidedReadNodes = "onesided_read_across_nodes_64MiB"
	// MetricOneSidedRegister is the registration of a fresh 64 MiB segment.
	MetricOneSidedRegister = "onesided_register_64MiB"
	// MetricOneSidedRegisterReused is the same with the segment already
	// registered (the registration is reused).
	MetricOneSidedRegisterReused = "onesided_register_64MiB_reused"
)

// Plugin binary names the node host looks for in its plugin_dir.
const (
	CollectivePluginBinary = "goray-transport-" + collectiveplugin.Name
	OneSidedPluginBinary   = "goray-transport-" + onesided.Name
)

// transportPluginsHook records that the binary calls
// MaybeServeTransportPlugins.
var transportPluginsHook atomic.Bool

// MaybeServeTransportPlugins serves goray's collective or one-sided
// transport plugin and never returns when this process was started under
// the name CollectivePluginBinary or OneSidedPluginBinary (the transport
// metrics link the running binary under those names into a temporary
// plugin_dir, busybox style); otherwise it returns at once. Call it first
// thing in main, next to MaybeServeTransport.
func MaybeServeTransportPlugins() {
	transportPluginsHook.Store(true)
	switch filepath.Base(os.Args[0]) {
	case CollectivePluginBinary:
		transport.Serve(collectiveplugin.New())
	case OneSidedPluginBinary:
		transport.Serve(onesided.New())
	}
}

// allReduceMetricName is the metric of n ranks all-reducing size bytes.
func allReduceMetricName(ranks int, size int64) string {
	return fmt.Sprintf("%s%d_ranks_%s", MetricAllReducePrefix, ranks, sizeLabel(size))
}

func sizeLabel(size int64) string {
	if size >= 1<<20 && size%(1<<20) == 0 {
		return fmt.Sprintf("%dMiB", size>>20)
	}
	return fmt.Sprintf("%dB", size)
}

// ------------------------------------------------------------ nodes

// pluginNode is a node started in this process whose plugins are this
// binary.
type pluginNode struct {
	id   string
	node *node.Node
	stop func(context.Context)
}

// pluginBlock is one plugin of a plugin node, with its config block's body
// in HCL ("" for none). Kind "" is "transport".
type pluginBlock struct{ kind, name, body string }

// nodeSpec describes a node startPluginNode starts.
type nodeSpec struct {
	cpus       float64
	storeBytes int64
	// spilling configures spilling (nil: the default, local disk).
	spilling *config.Spilling
	plugins  []pluginBlock
}

// startTransportNode starts a node in this process that joins the cluster
// and runs the given transport plugins from this binary.
func startTransportNode(ctx context.Context, plugins ...pluginBlock) (*pluginNode, error) {
	return startPluginNode(ctx, nodeSpec{cpus: 2, storeBytes: 64 << 20, plugins: plugins}) // tensors live in their own segments
}

// startPluginNode starts a node in this process that joins the cluster and
// runs the given plugins from this binary (linked under the plugin names
// into a temporary plugin_dir, busybox style).
func startPluginNode(ctx context.Context, spec nodeSpec) (*pluginNode, error) {
	for _, p := range spec.plugins {
		switch p.kind {
		case "", "transport":
			if !transportPluginsHook.Load() {
				return nil, &notAvailableError{reason: "this binary does not call bench.MaybeServeTransportPlugins, so it cannot serve as the collective and onesided transport plugins"}
			}
		case "storage":
			if !storagePluginHook.Load() {
				return nil, &notAvailableError{reason: "this binary does not call bench.MaybeServeStoragePlugin, so it cannot serve as the s3 storage plugin"}
			}
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, &notAvailableError{reason: "cannot find this program's executable: " + err.Error()}
	}
	dir, err := os.MkdirTemp("", "goray-bench-pnode-")
	if err != nil {
		return nil, err
	}
	pluginDir := filepath.Join(dir, "plugins")
	cfg := config.Default()
	cpus := spec.cpus
	cfg.Resources.CPU = &cpus
	cfg.ObjectStore.Memory = spec.storeBytes
	if spec.spilling != nil {
		cfg.Spilling = *spec.spilling
	}
	cfg.TempDir = filepath.Join(dir, "tmp")
	cfg.PluginDir = pluginDir
	for _, d := range []string{pluginDir, cfg.TempDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	for _, p := range spec.plugins {
		kind := p.kind
		if kind == "" {
			kind = "transport"
		}
		bin := "goray-" + kind + "-" + p.name
		if err := os.Symlink(exe, filepath.Join(pluginDir, bin)); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("linking %s as %s: %w", exe, bin, err)
		}
		block := config.Plugin{Kind: kind, Name: p.name}
		if p.body != "" {
			f, diags := hclsyntax.ParseConfig([]byte(p.body), "bench-"+p.name+".hcl", hcl.InitialPos)
			if diags.HasErrors() {
				os.RemoveAll(dir)
				return nil, fmt.Errorf("config of %s: %s", p.name, diags.Error())
			}
			block.Config = f.Body
		}
		cfg.Plugins = append(cfg.Plugins, block)
	}
	nd, err := ray.StartNode(ctx, cfg)
	if err != nil {
		os.RemoveAll(dir)
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, &notAvailableError{reason: "a node running this binary as its plugins could not start: " + err.Error()}
	}
	return &pluginNode{id: nd.ID().String(), node: nd, stop: func(ctx context.Context) {
		_ = nd.Stop(ctx)
		os.RemoveAll(dir)
	}}, nil
}

// ------------------------------------------------------------ remote code

// collRank is a rank of the all-reduce metrics.
type collRank struct {
	t   transport.Tensor
	has bool
}

func newCollRank(context.Context) (*collRank, error) { return &collRank{}, nil }

// collPrepare says what a rank all-reduces.
type collPrepare struct {
	Group string
	Bytes int
}

// prepare allocates the rank's float32 tensor (zeros, every page touched,
// so sums stay finite and no page faults are timed), checks one sum and
// joins the group.
func (r *collRank) prepare(ctx context.Context, p collPrepare) (int, error) {
	t, err := transport.NewTensor(transport.Float32, int64(p.Bytes/4))
	if err != nil {
		return 0, err
	}
	b, err := t.Bytes(ctx)
	if err != nil {
		_ = t.Free()
		return 0, err
	}
	for i := 0; i < len(b); i += tensorPage {
		b[i] = 0
	}
	rank, err := collective.Rank(ctx, p.Group)
	if err == nil {
		f := float32Words(b)
		f[0] = float32(rank + 1)
		err = collective.AllReduce(ctx, p.Group, t, collective.Sum)
		if world, werr := collective.WorldSize(ctx, p.Group); err == nil && werr == nil && f[0] != float32(world*(world+1)/2) {
			err = fmt.Errorf("rank %d: the check all-reduce gave %v, want %d", rank, f[0], world*(world+1)/2)
		}
		f[0] = 0
	}
	t.Release()
	if err != nil {
		_ = t.Free()
		return 0, err
	}
	r.t, r.has = t, true
	return rank, nil
}

// step all-reduces the rank's tensor once.
func (r *collRank) step(ctx context.Context, group string) (int, error) {
	if !r.has {
		return 0, errors.New("rank not prepared")
	}
	return 1, collective.AllReduce(ctx, group, r.t, collective.Sum)
}

// release frees the rank's tensor and leaves the group.
func (r *collRank) release(ctx context.Context, group string) (int, error) {
	if r.has {
		_ = r.t.Free()
		r.has = false
	}
	return 0, collective.DestroyGroup(ctx, group)
}

// osObject is an object extracted by the one-sided transport.
type osObject struct {
	ID            string
	Tensors       []transport.TensorMeta
	TransportData []byte
}

// osPeer is a source, reader or registrar of the one-sided metrics; it
// calls the node's onesided plugin through its raylet.
type osPeer struct {
	t      transport.Tensor
	has    bool
	object string // extracted here and not collected yet
}

func newOSPeer(context.Context) (*osPeer, error) { return &osPeer{}, nil }

func (p *osPeer) plugin() transport.Transport {
	t, err := ray.Transport(onesided.Name)
	if err != nil {
		panic(err) // actor methods run after Init, so this cannot happen
	}
	return t
}

// alloc allocates the peer's uint8 tensor of size bytes with every page
// written.
func (p *osPeer) alloc(ctx context.Context, size int, v byte) error {
	t, err := transport.NewTensor(transport.Uint8, int64(size))
	if err != nil {
		return err
	}
	b, err := t.Bytes(ctx)
	if err != nil {
		_ = t.Free()
		return err
	}
	for i := 0; i < len(b); i += tensorPage {
		b[i] = v
	}
	t.Release()
	p.t, p.has = t, true
	return nil
}

// source allocates a tensor and extracts it (without giving up
// ownership), returning what readers need.
func (p *osPeer) source(ctx context.Context, size int) (osObject, error) {
	if err := p.alloc(ctx, size, 7); err != nil {
		return osObject{}, err
	}
	id := randomObjectID()
	rep, err := p.plugin().ExtractMetadata(ctx, &transport.ExtractMetadataRequest{ObjectID: id, Source: "bench", Tensors: []transport.Tensor{p.t}})
	if err != nil {
		return osObject{}, err
	}
	p.object = id
	return osObject{ID: id, Tensors: rep.Tensors, TransportData: rep.TransportData}, nil
}

// target allocates the reader's destination tensor.
func (p *osPeer) target(ctx context.Context, size int) (int, error) {
	return size, p.alloc(ctx, size, 1)
}

// read reads o into the peer's tensor (a copy: within the node from the
// source's registration, across nodes over TCP) and checks one byte.
func (p *osPeer) read(ctx context.Context, o osObject) (int, error) {
	if !p.has {
		return 0, errors.New("no target")
	}
	if _, err := p.plugin().Receive(ctx, &transport.ReceiveRequest{ObjectID: o.ID, Source: "bench", Destination: "bench",
		Tensors: o.Tensors, TransportData: o.TransportData, Targets: []transport.Tensor{p.t}}); err != nil {
		return 0, err
	}
	b, err := p.t.Bytes(ctx)
	if err != nil {
		return 0, err
	}
	last := b[len(b)-tensorPage]
	p.t.Release()
	if last != 7 {
		return 0, fmt.Errorf("read byte %d, want 7: the bytes did not arrive", last)
	}
	return len(b), nil
}

// prepareRegister allocates the tensor registrations are made on; with
// reuse, an object keeps it registered so later extractions reuse the
// registration.
func (p *osPeer) prepareRegister(ctx context.Context, r registerArgs) (int, error) {
	if err := p.alloc(ctx, r.Size, 3); err != nil {
		return 0, err
	}
	if r.Reuse {
		id := randomObjectID()
		if _, err := p.plugin().ExtractMetadata(ctx, &transport.ExtractMetadataRequest{ObjectID: id, Source: "bench", Tensors: []transport.Tensor{p.t}}); err != nil {
			return 0, err
		}
		p.object = id
	}
	return r.Size, nil
}

// registerArgs configures prepareRegister.
type registerArgs struct {
	Size  int
	Reuse bool
}

// register extracts one object on the peer's tensor and collects it.
func (p *osPeer) register(ctx context.Context) (int, error) {
	id := randomObjectID()
	if _, err := p.plugin().ExtractMetadata(ctx, &transport.ExtractMetadataRequest{ObjectID: id, Source: "bench", Tensors: []transport.Tensor{p.t}}); err != nil {
		return 0, err
	}
	_, err := p.plugin().GarbageCollect(ctx, &transport.GarbageCollectRequest{ObjectID: id})
	return 1, err
}

// release collects the peer's object and frees its tensor.
func (p *osPeer) release(ctx context.Context) (int, error) {
	var err error
	if p.object != "" {
		_, err = p.plugin().GarbageCollect(ctx, &transport.GarbageCollectRequest{ObjectID: p.object})
		p.object = ""
	}
	if p.has {
		_ = p.t.Free()
		p.has = false
	}
	return 0, err
}

func randomObjectID() string {
	b := make([]byte, 20)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

var (
	collRankClass    = ray.Actor0(newCollRank)
	collRankPrepare  = ray.Method1((*collRank).prepare)
	collRankStep     = ray.Method1((*collRank).step)
	collRankRelease  = ray.Method1((*collRank).release)
	osPeerClass      = ray.Actor0(newOSPeer)
	osPeerSource     = ray.Method1((*osPeer).source)
	osPeerTarget     = ray.Method1((*osPeer).target)
	osPeerRead       = ray.Method1((*osPeer).read)
	osPeerPrepareReg = ray.Method1((*osPeer).prepareRegister)
	osPeerRegister   = ray.Method0((*osPeer).register)
	osPeerRelease    = ray.Method0((*osPeer).release)
)

// ------------------------------------------------------------ workloads

// allReduceSetup starts a node running the collective plugin, n rank
// actors there, declares their group and prepares size-byte tensors; one
// call is one all-reduce on every rank.
func (e *env) allReduceSetup(n int, size int64) setupFunc {
	return func(ctx context.Context) (func(context.Context) error, func(context.Context), error) {
		nd, err := startTransportNode(ctx, pluginBlock{name: collectiveplugin.Name})
		if err != nil {
			return nil, nil, err
		}
		ranks := make([]ray.ActorHandle[collRank], n)
		for i := range ranks {
			ranks[i] = collRankClass.Options(ray.NodeAffinity(nd.id, false)).Remote(ctx)
		}
		group := "bench-allreduce-" + randomObjectID()[:12]
		teardown := func(ctx context.Context) {
			refs := make([]ray.Ref[int], n)
			for i, r := range ranks {
				refs[i] = collRankRelease.On(r).Remote(ctx, ray.V(group))
			}
			_, _ = ray.GetAll(ctx, refs)
			for _, r := range ranks {
				_ = r.Kill(ctx)
			}
			_ = collective.DestroyGroup(ctx, group)
			nd.stop(ctx)
		}
		if _, err := collective.CreateGroup(ctx, group, collectiveplugin.Name, collective.Members(ranks...)); err != nil {
			teardown(ctx)
			return nil, nil, err
		}
		refs := make([]ray.Ref[int], n)
		for i, r := range ranks {
			refs[i] = collRankPrepare.On(r).Remote(ctx, ray.V(collPrepare{Group: group, Bytes: int(size)}))
		}
		if _, err := ray.GetAll(ctx, refs); err != nil {
			teardown(ctx)
			return nil, nil, fmt.Errorf("preparing the ranks: %w", err)
		}
		fn := func(ctx context.Context) error {
			for i, r := range ranks {
				refs[i] = collRankStep.On(r).Remote(ctx, ray.V(group))
			}
			return expect(ctx, refs, 1)
		}
		return fn, teardown, nil
	}
}

// allReduceMetrics are the all-reduce bus bandwidth metrics.
func (e *env) allReduceMetrics() []workload {
	var out []workload
	for _, n := range []int{2, 4} {
		for _, size := range []int64{1 << 20, 64 << 20, 256 << 20} {
			bus := float64(size) * 2 * float64(n-1) / float64(n)
			out = append(out, workload{
				name: allReduceMetricName(n, size), unit: UnitGBps, mult: bus / 1e9,
				note: fmt.Sprintf("goray's own; nearest Ray workload: ray.util.collective allreduce (NCCL or Gloo), which ray microbenchmark does not measure; bus bandwidth as nccl-tests defines it; %d rank actors on a node started in this process (running the collective plugin: one plugin process hosts every rank, so with algorithm = auto the all-reduce meets in memory: each rank reduces its part from every rank's tensor, then copies the other parts; no TCP loopback) "+
					"each all-reduce (sum, in place) a %s float32 tensor through sdk/ray/collective, the driver calling every rank per call; "+
					"figure = bus bandwidth = bytes × 2(n−1)/n ÷ time (nccl-tests' busbw; GB = 10^9 bytes); "+
					"ratio = ÷ TCP loopback bandwidth, what a ring link between nodes could reach (the ring over TCP loopback on this machine stays below it: n links share the 2 cores); in memory the ranks are bound by the reduction and the copies, all ranks sharing this machine's cores",
					n, humanize.IBytes(uint64(size))),
				limit: LimitTCP, ratio: func(mean, limit float64) float64 { return mean / limit },
				setup: e.allReduceSetup(n, size),
			})
		}
	}
	return out
}

// oneSidedReadSetup starts the nodes of a one-sided read: the source's
// (same_node_shm on) and, across nodes, the reader's (same_node_shm off,
// so reads go over TCP although both run on this machine). One call is
// one read of the source's size-byte tensor into the reader's.
func (e *env) oneSidedReadSetup(size int, across bool) setupFunc {
	return func(ctx context.Context) (func(context.Context) error, func(context.Context), error) {
		src, err := startTransportNode(ctx, pluginBlock{name: onesided.Name})
		if err != nil {
			return nil, nil, err
		}
		dst := src
		if across {
			if dst, err = startTransportNode(ctx, pluginBlock{name: onesided.Name, body: "same_node_shm = false\n"}); err != nil {
				src.stop(ctx)
				return nil, nil, err
			}
		}
		source := osPeerClass.Options(ray.NodeAffinity(src.id, false)).Remote(ctx)
		reader := osPeerClass.Options(ray.NodeAffinity(dst.id, false)).Remote(ctx)
		teardown := func(ctx context.Context) {
			_, _ = osPeerRelease.On(reader).Remote(ctx).Get(ctx)
			_, _ = osPeerRelease.On(source).Remote(ctx).Get(ctx)
			_ = reader.Kill(ctx)
			_ = source.Kill(ctx)
			if across {
				dst.stop(ctx)
			}
			src.stop(ctx)
		}
		obj, err := osPeerSource.On(source).Remote(ctx, ray.V(size)).Get(ctx)
		if err == nil {
			_, err = osPeerTarget.On(reader).Remote(ctx, ray.V(size)).Get(ctx)
		}
		if err != nil {
			teardown(ctx)
			return nil, nil, err
		}
		fn := func(ctx context.Context) error {
			_, err := osPeerRead.On(reader).Remote(ctx, ray.V(obj)).Get(ctx)
			return err
		}
		// The first read connects and fetches the source's metadata.
		if err := fn(ctx); err != nil {
			teardown(ctx)
			return nil, nil, err
		}
		return fn, teardown, nil
	}
}

// registerSetup starts a node running the onesided plugin and an actor
// that extracts (registers) and collects objects on one size-byte tensor.
func (e *env) registerSetup(size int, reuse bool) setupFunc {
	return func(ctx context.Context) (func(context.Context) error, func(context.Context), error) {
		nd, err := startTransportNode(ctx, pluginBlock{name: onesided.Name})
		if err != nil {
			return nil, nil, err
		}
		p := osPeerClass.Options(ray.NodeAffinity(nd.id, false)).Remote(ctx)
		teardown := func(ctx context.Context) {
			_, _ = osPeerRelease.On(p).Remote(ctx).Get(ctx)
			_ = p.Kill(ctx)
			nd.stop(ctx)
		}
		if _, err := osPeerPrepareReg.On(p).Remote(ctx, ray.V(registerArgs{Size: size, Reuse: reuse})).Get(ctx); err != nil {
			teardown(ctx)
			return nil, nil, err
		}
		fn := func(ctx context.Context) error {
			_, err := osPeerRegister.On(p).Remote(ctx).Get(ctx)
			return err
		}
		return fn, teardown, nil
	}
}

// oneSidedMetrics are the one-sided read and registration metrics.
func (e *env) oneSidedMetrics() []workload {
	const size = 64 << 20
	hs := humanize.IBytes(size)
	memcpyMicros := func(bw float64) float64 { return float64(size) / (bw * 1e9) * 1e6 }
	return []workload{
		{
			name: MetricOneSidedReadNode, unit: UnitGBps, mult: float64(size) / 1e9,
			note: fmt.Sprintf("goray's own; nearest Ray workload: none measured (Ray's NIXL tensor transport has no microbenchmark); an actor reads a %s tensor registered by another actor of its node through the onesided plugin (Receive into a pre-faulted target: "+
				"one kernel copy from the source's registration), the call going driver → actor → its node's plugin; figure = bytes ÷ time (GB = 10^9 bytes); ratio = ÷ memcpy bandwidth", hs),
			limit: LimitMemcpy, ratio: func(mean, limit float64) float64 { return mean / limit },
			setup: e.oneSidedReadSetup(size, false),
		},
		{
			name: MetricOneSidedReadNodes, unit: UnitGBps, mult: float64(size) / 1e9,
			note: fmt.Sprintf("goray's own; nearest Ray workload: none measured (Ray's NIXL tensor transport across nodes); an actor on a second node (both started in this process; the reader's plugin has same_node_shm = false, so the read goes over TCP loopback: "+
				"4 MiB chunks pipelined on 4 streams) reads a %s tensor registered on the first into a pre-faulted target; figure = bytes ÷ time; ratio = ÷ TCP loopback bandwidth (one stream)", hs),
			limit: LimitTCP, ratio: func(mean, limit float64) float64 { return mean / limit },
			setup: e.oneSidedReadSetup(size, true),
		},
		{
			name: MetricOneSidedRegister, unit: UnitMicros, latency: true,
			note: fmt.Sprintf("goray's own; nearest Ray workload: NIXL memory registration under Ray's NIXL transport, not measured by Ray; per call an actor extracts an object on a %s tensor whose segment is not registered (the registration) "+
				"and collects it (deregistered): two calls to the node's plugin, made directly by the actor's worker; the agent keeps a registration's mapping by file once it ends, so after the first call the segment registers again without a new mapping or page population, as a segment back from the node's pool does; figure = µs per call; ratio = ÷ the time memcpy takes for %s", hs, hs),
			limit: LimitMemcpy, ratio: func(mean, limit float64) float64 { return mean / memcpyMicros(limit) },
			setup: e.registerSetup(size, false),
		},
		{
			name: MetricOneSidedRegisterReused, unit: UnitMicros, latency: true,
			note: fmt.Sprintf("goray's own; as %s, but another live object keeps the segment registered, so the extraction reuses the registration: the difference is the registration's cost; "+
				"ratio = ÷ go-plugin round trip (the call makes two plugin calls, each straight to the plugin)", MetricOneSidedRegister),
			limit: LimitPlugin, ratio: func(mean, limit float64) float64 { return mean / limit },
			setup: e.registerSetup(size, true),
		},
	}
}

// transportPluginMetrics are every metric of this file, in report order.
func (e *env) transportPluginMetrics() []workload {
	return append(e.allReduceMetrics(), e.oneSidedMetrics()...)
}

// float32Words views b (a tensor's bytes, page aligned) as float32s.
func float32Words(b []byte) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

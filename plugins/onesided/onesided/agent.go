package onesided

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// RendezvousPrefix starts the names of the rendezvous files: one per
// extracted object, in /dev/shm, holding its TransportData, so that a
// Receive without TransportData on the same node finds the object.
const RendezvousPrefix = shmem.Prefix + "os-o-"

// RendezvousName returns the name of an object's rendezvous file.
func RendezvousName(objectID string) string { return RendezvousPrefix + objectID }

// testServeDelayEnv, when set to a Go duration in the plugin's environment,
// delays every response of the read server (a test hook: it lets tests
// kill a source process in the middle of a read).
const testServeDelayEnv = "GORAY_ONESIDED_TEST_SERVE_DELAY"

// kvTimeout bounds KV calls made without a caller's context (Close, GC
// publishing).
const kvTimeout = 5 * time.Second

// AgentOptions are the collaborators of an Agent.
type AgentOptions struct {
	// KV is where agents publish metadata. Nil: the cluster KV named by
	// GORAY_GCS_ADDRESS (plugin.ClusterKV), or, without one, a KV private to
	// this process (transfers then only work between agents of this
	// process).
	KV plugin.KV
	// Logger receives the agent's logs; nil discards them.
	Logger hclog.Logger
}

// Agent is a one-sided transfer agent: it registers memory, publishes its
// metadata, serves reads of its registered memory and posts reads of other
// agents' memory. Its methods may be called concurrently. Create it with
// NewAgent and end it with Close.
type Agent struct {
	cfg     Config
	name    string
	inc     uint64
	incHex  string
	domain  string
	pidns   string
	kv      plugin.KV
	kvClose func() error
	log     hclog.Logger
	ln      net.Listener
	addr    string

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine of the agent
	live   atomic.Int64   // goroutines running

	serveDelay time.Duration
	serveHook  atomic.Pointer[func(context.Context, request) error]

	mappings atomic.Int64 // live per-transfer mappings (see mapFile)

	regMu sync.Mutex // serializes registration changes (extract, collect)
	pubMu sync.Mutex // serializes metadata publishing
	// published is the metadata version last written to the KV (written
	// under pubMu).
	published atomic.Uint64

	mu        sync.Mutex
	closed    bool
	acceptErr error
	version   uint64
	nextReg   uint64
	regs      map[uint64]*registration
	regByName map[string]*registration
	// maps holds registrations' mappings, by file (see register).
	maps     *shmem.Cache
	objects  map[string]*object
	byKey    map[uint64]*object
	peers    map[string]*AgentMetadata // cached metadata of other agents
	pools    map[string]*connPool
	conns    map[net.Conn]struct{}
	regStats regStats

	readsServed, bytesServed         atomic.Int64
	publishes, refreshes             atomic.Int64
	posted, xDone, xFailed, xAborted atomic.Int64
	bytesRead                        atomic.Int64
}

// registration is a registered segment: mapped read-only for the read
// server until the last object using it is collected.
type registration struct {
	id      uint64
	segment string
	size    int64
	ino     uint64
	data    []byte
	maps    *shmem.Cache // holds the mapping (and the segment's shared lock) until unmapped
	refs    int          // objects using it; under Agent.mu
	owned   bool         // unlink when deregistered; under Agent.mu

	mu       sync.Mutex
	inflight int
	dead     bool
}

// acquire takes an in-flight reference; false once deregistered.
func (r *registration) acquire() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dead {
		return false
	}
	r.inflight++
	return true
}

func (r *registration) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inflight--
	if r.dead && r.inflight == 0 {
		r.unmapLocked()
	}
}

// retire deregisters: new acquires fail, the mapping goes when the last
// in-flight read ends.
func (r *registration) retire() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dead = true
	if r.inflight == 0 {
		r.unmapLocked()
	}
}

func (r *registration) unmapLocked() {
	if r.data != nil {
		r.maps.Release(r.segment)
		r.data = nil
	}
}

// object is an extraction: its access key and the registrations it uses.
type object struct {
	id         string
	key        uint64
	regs       map[*registration]struct{}
	rendezvous bool // published its rendezvous file
}

func (o *object) uses(r *registration) bool {
	_, ok := o.regs[r]
	return ok
}

type regStats struct {
	count, reused, deregistered uint64
	total, last                 time.Duration
	bytes                       int64
}

// connPool holds idle connections to one incarnation of one agent.
type connPool struct {
	name, addr string
	inc        uint64
	idle       []*conn
}

// NewAgent starts an agent: it binds the read server, cleans up after dead
// agents of the same shared-memory domain and publishes its metadata. ctx
// bounds the start.
func NewAgent(ctx context.Context, cfg Config, opts AgentOptions) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := validName(cfg.Name); err != nil {
		return nil, fmt.Errorf("name: %v", err)
	}
	domain, err := ShmDomain()
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	a := &Agent{
		cfg:       cfg,
		name:      cfg.Name,
		inc:       randomKey(),
		domain:    domain,
		pidns:     pidNamespace(),
		kv:        opts.KV,
		log:       log.With("agent", cfg.Name),
		version:   1,
		regs:      map[uint64]*registration{},
		regByName: map[string]*registration{},
		maps:      shmem.NewCache(shmem.DefaultIdle),
		objects:   map[string]*object{},
		byKey:     map[uint64]*object{},
		peers:     map[string]*AgentMetadata{},
		pools:     map[string]*connPool{},
		conns:     map[net.Conn]struct{}{},
	}
	a.incHex = formatKey(a.inc)
	if v := os.Getenv(testServeDelayEnv); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			a.serveDelay = d
			a.log.Warn("test hook: read server responses are delayed", "delay", d)
		}
	}
	if a.kv == nil {
		if os.Getenv(plugin.EnvGCSAddress) != "" {
			kv, closeKV, err := plugin.ClusterKV(cfg.KVNamespace)
			if err != nil {
				return nil, err
			}
			a.kv, a.kvClose = kv, closeKV
		} else {
			a.kv = plugin.NewMemoryKV()
			a.log.Warn("no cluster KV (" + plugin.EnvGCSAddress + " is not set): agent metadata stays in this process, only its own agents can read each other")
		}
	}
	fail := func(err error) (*Agent, error) {
		if a.ln != nil {
			_ = a.ln.Close()
		}
		if a.kvClose != nil {
			_ = a.kvClose()
		}
		return nil, err
	}
	ln, err := plugin.Listen(ctx, "tcp", cfg.Listen, a.log)
	if err != nil {
		return fail(fmt.Errorf("listen %q: %w", cfg.Listen, err))
	}
	a.ln, a.addr = ln, ln.Addr().String()
	if err := a.pruneDead(ctx); err != nil {
		return fail(err)
	}
	if err := a.publish(ctx, 1); err != nil {
		return fail(err)
	}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.wg.Add(1)
	a.live.Add(1)
	go func() {
		defer a.live.Add(-1)
		a.acceptLoop(ln)
	}()
	a.spawn(a.keepPublished)
	a.log.Info("agent started", "endpoint", a.addr, "shm_domain", a.domain, "incarnation", a.incHex,
		"chunk_size", cfg.ChunkSize, "streams", cfg.Streams, "same_node_shm", cfg.SameNodeSHM)
	return a, nil
}

// Name returns the agent's name.
func (a *Agent) Name() string { return a.name }

// Endpoint returns the read server's address.
func (a *Agent) Endpoint() string { return a.addr }

// Incarnation returns the agent's incarnation (16 hex digits).
func (a *Agent) Incarnation() string { return a.incHex }

// Domain returns the agent's shared-memory domain.
func (a *Agent) Domain() string { return a.domain }

// Config returns the agent's configuration (with its name and listen
// address filled in).
func (a *Agent) Config() Config { return a.cfg }

// Version returns the agent's current metadata version.
func (a *Agent) Version() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.version
}

// Health reports an agent that is closed or whose read server stopped.
func (a *Agent) Health(context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.closed:
		return ErrClosed
	case a.acceptErr != nil:
		return fmt.Errorf("read server %s stopped accepting: %w", a.addr, a.acceptErr)
	}
	return nil
}

// Stats are an agent's counters and what it holds.
type Stats struct {
	// Objects extracted here and not yet collected.
	Objects int
	// Registrations currently held and the bytes they cover.
	Registrations   int
	RegisteredBytes int64
	// Registered counts registrations made; RegisterTotal and RegisterLast
	// are their total and latest duration, RegisterBytes the bytes they
	// covered. Reused counts segments of extractions that reused an
	// existing registration; Deregistered counts ended registrations.
	Registered    uint64
	Reused        uint64
	Deregistered  uint64
	RegisterTotal time.Duration
	RegisterLast  time.Duration
	RegisterBytes int64
	// MetadataVersion is the current metadata version; MetadataPublishes
	// and MetadataRefreshes count KV writes of it and KV reads of other
	// agents' metadata.
	MetadataVersion   uint64
	MetadataPublishes int64
	MetadataRefreshes int64
	// ReadsServed and BytesServed count the read server's work.
	ReadsServed int64
	BytesServed int64
	// Xfers posted and how they ended; BytesRead counts bytes read by them.
	XfersPosted, XfersDone, XfersFailed, XfersAborted int64
	BytesRead                                         int64
	// OpenConns are open TCP connections (both directions), IdleConns the
	// pooled ones among them.
	OpenConns, IdleConns int
	// Goroutines are the agent's running goroutines.
	Goroutines int
	// Mappings are the agent's live per-transfer mappings (of other
	// agents' segments, targets and allocated segments).
	Mappings int
}

// Stats reports the agent's counters.
func (a *Agent) Stats() Stats {
	a.mu.Lock()
	s := Stats{
		Objects:         len(a.objects),
		Registrations:   len(a.regs),
		Registered:      a.regStats.count,
		Reused:          a.regStats.reused,
		Deregistered:    a.regStats.deregistered,
		RegisterTotal:   a.regStats.total,
		RegisterLast:    a.regStats.last,
		RegisterBytes:   a.regStats.bytes,
		MetadataVersion: a.version,
		OpenConns:       len(a.conns),
	}
	for _, r := range a.regs {
		s.RegisteredBytes += r.size
	}
	for _, p := range a.pools {
		s.IdleConns += len(p.idle)
	}
	a.mu.Unlock()
	s.MetadataPublishes = a.publishes.Load()
	s.MetadataRefreshes = a.refreshes.Load()
	s.ReadsServed = a.readsServed.Load()
	s.BytesServed = a.bytesServed.Load()
	s.XfersPosted = a.posted.Load()
	s.XfersDone = a.xDone.Load()
	s.XfersFailed = a.xFailed.Load()
	s.XfersAborted = a.xAborted.Load()
	s.BytesRead = a.bytesRead.Load()
	s.Goroutines = int(a.live.Load())
	s.Mappings = int(a.mappings.Load())
	return s
}

// Close stops the read server, fails pending transfers, closes every
// connection, collects the objects still extracted (unlinking owned
// segments and rendezvous files), removes the agent's metadata from the KV
// and waits for its goroutines. The plugin binary never calls it (the
// process exits; the next agent of the node cleans up, see NewAgent).
func (a *Agent) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	conns := a.conns
	a.conns = map[net.Conn]struct{}{}
	a.pools = map[string]*connPool{}
	ids := make([]string, 0, len(a.objects))
	for id := range a.objects {
		ids = append(ids, id)
	}
	a.mu.Unlock()
	a.cancel()
	_ = a.ln.Close()
	for nc := range conns {
		_ = nc.Close()
	}
	a.wg.Wait()
	var errs []error
	for _, id := range ids {
		if _, _, err := a.collect(id); err != nil && !errors.Is(err, errNotHere) {
			errs = append(errs, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), kvTimeout)
	defer cancel()
	if err := a.kv.Delete(ctx, AgentKey(a.name)); err != nil {
		a.log.Warn("removing agent metadata from the KV", "error", err)
	}
	if a.kvClose != nil {
		_ = a.kvClose()
	}
	a.maps.Purge() // the idle mappings of registrations that ended
	s := a.Stats()
	a.log.Info("agent closed", "registrations", s.Registered, "reused", s.Reused,
		"register_total", s.RegisterTotal, "register_bytes", s.RegisterBytes,
		"xfers", s.XfersPosted, "bytes_read", s.BytesRead, "bytes_served", s.BytesServed)
	return errors.Join(errs...)
}

// spawn runs f in a goroutine the agent waits for at Close; false (and f
// not run) once the agent is closed.
func (a *Agent) spawn(f func()) bool {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return false
	}
	a.wg.Add(1)
	a.live.Add(1)
	a.mu.Unlock()
	go func() {
		defer a.wg.Done()
		defer a.live.Add(-1)
		f()
	}()
	return true
}

// trackConn records an open connection; false after Close.
func (a *Agent) trackConn(nc net.Conn) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return false
	}
	a.conns[nc] = struct{}{}
	return true
}

// dropConn closes a connection and forgets it.
func (a *Agent) dropConn(nc net.Conn) {
	a.mu.Lock()
	delete(a.conns, nc)
	a.mu.Unlock()
	_ = nc.Close()
}

// ---------------------------------------------------------------- registration

// segInfo is what a tensor's segment looked like when it was checked.
type segInfo struct {
	size int64
	ino  uint64
}

func statSegment(name string) (segInfo, error) {
	if err := shmem.ValidName(name); err != nil {
		return segInfo{}, err
	}
	var st unix.Stat_t
	if err := unix.Stat(shmem.Path(name), &st); err != nil {
		return segInfo{}, &shmem.Error{Op: "stat", Segment: name, Err: err}
	}
	return segInfo{size: st.Size, ino: st.Ino}, nil
}

// checkTensor validates a tensor and returns its segment's state.
func checkTensor(i int, t transport.Tensor) (segInfo, error) {
	if err := t.Validate(); err != nil {
		return segInfo{}, fmt.Errorf("tensor %d: %w", i, err)
	}
	if !t.Meta().IsCPU() {
		return segInfo{}, fmt.Errorf("tensor %d is on device %q: %w (onesided moves cpu tensors only)", i, t.Device, transport.ErrNotSupported)
	}
	if t.Buffer.Length == 0 {
		return segInfo{}, nil
	}
	si, err := statSegment(t.Buffer.Segment)
	if err != nil {
		return segInfo{}, badMeta(nil, "tensor %d: %v", i, err)
	}
	if t.Buffer.Offset > si.size || t.Buffer.Length > si.size-t.Buffer.Offset {
		return segInfo{}, badMeta(ErrOutOfBounds, "tensor %d: bytes [%d, %d) outside segment %s of %d bytes",
			i, t.Buffer.Offset, t.Buffer.Offset+t.Buffer.Length, t.Buffer.Segment, si.size)
	}
	return si, nil
}

// register maps a segment with its pages populated (the analogue of
// pinning memory for RDMA) and records the cost. The mapping comes from
// the agent's cache, which keeps it by file: a segment that comes back
// from the node's pool under a new name (a new tensor in the same memory)
// registers again without a new mapping. While registered, the segment
// holds the cache's shared lock, so the pool does not hand it to another
// tensor while a read may still be served from it.
func (a *Agent) register(name string, want segInfo) (*registration, error) {
	start := time.Now()
	if want.size <= 0 || int64(int(want.size)) != want.size {
		return nil, badMeta(nil, "register segment %s: size %d", name, want.size)
	}
	data, fresh, err := a.maps.AcquireMapping(name, 0, want.size)
	if err != nil {
		return nil, badMeta(nil, "register segment %s: %v", name, err)
	}
	if si, err := statSegment(name); err != nil || si.ino != want.ino || si.size != want.size {
		a.maps.Release(name)
		return nil, badMeta(nil, "register segment %s: it changed while being registered", name)
	}
	// Populate a new mapping's page tables now rather than on the first
	// read (a mapping the cache kept has them: walking them again would
	// cost about 3 ms per 64 MiB).
	if fresh {
		_ = unix.Madvise(data, unix.MADV_POPULATE_READ)
	}
	d := time.Since(start)
	r := &registration{segment: name, size: want.size, ino: want.ino, data: data, maps: a.maps}
	a.mu.Lock()
	a.nextReg++
	r.id = a.nextReg
	a.regStats.count++
	a.regStats.total += d
	a.regStats.last = d
	a.regStats.bytes += want.size
	n, total := a.regStats.count, a.regStats.total
	a.mu.Unlock()
	a.log.Debug("registered segment", "segment", name, "registration", r.id, "bytes", want.size, "duration", d)
	if n%64 == 0 {
		a.log.Info("registration cost", "registrations", n, "total", total, "mean", total/time.Duration(n), "last", d)
	}
	return r, nil
}

// errNotHere: the object is not extracted on this agent.
var errNotHere = errors.New("object not extracted on this agent")

// Extract registers an object's tensors (reusing registrations of segments
// registered already), publishes the agent's metadata if registrations
// changed and the object's rendezvous file, and returns the object's
// TransportData. With own the agent owns the segments: it unlinks each
// when its registration ends.
func (a *Agent) Extract(ctx context.Context, objectID, source string, tensors []transport.Tensor, own bool) ([]byte, error) {
	if err := transport.ValidObjectID(objectID); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, transport.ContextError(ctx)
	}
	infos := make([]segInfo, len(tensors))
	for i, t := range tensors {
		si, err := checkTensor(i, t)
		if err != nil {
			return nil, err
		}
		infos[i] = si
	}
	td, v, err := a.extractLocked(objectID, source, tensors, infos, own)
	if err != nil {
		return nil, err
	}
	if v > a.published.Load() {
		if err := a.publish(ctx, v); err != nil {
			_, _, _ = a.collect(objectID)
			return nil, err
		}
	}
	if err := shmem.Publish(RendezvousName(objectID), td); err != nil {
		_, _, _ = a.collect(objectID)
		if errors.Is(err, shmem.ErrExists) {
			return nil, badMeta(nil, "object already extracted by another agent of this node")
		}
		return nil, err
	}
	a.mu.Lock()
	if obj := a.objects[objectID]; obj != nil {
		obj.rendezvous = true
		a.mu.Unlock()
	} else {
		// Collected concurrently: take the file back.
		a.mu.Unlock()
		_ = shmem.Unlink(RendezvousName(objectID))
	}
	return td, nil
}

// extractLocked does Extract's registration under regMu. It returns the
// transport data and the metadata version it needs.
func (a *Agent) extractLocked(objectID, source string, tensors []transport.Tensor, infos []segInfo, own bool) ([]byte, uint64, error) {
	a.regMu.Lock()
	defer a.regMu.Unlock()
	a.mu.Lock()
	closed, exists := a.closed, a.objects[objectID] != nil
	a.mu.Unlock()
	switch {
	case closed:
		return nil, 0, ErrClosed
	case exists:
		return nil, 0, badMeta(nil, "object already extracted")
	}
	bySeg := map[string]*registration{}
	var fresh []*registration
	var reused uint64
	rollback := func() {
		for _, r := range fresh {
			r.retire()
		}
	}
	for i, t := range tensors {
		if t.Buffer.Length == 0 || bySeg[t.Buffer.Segment] != nil {
			continue
		}
		a.mu.Lock()
		r := a.regByName[t.Buffer.Segment]
		a.mu.Unlock()
		if r != nil && r.ino == infos[i].ino && r.size == infos[i].size {
			reused++
		} else {
			var err error
			if r, err = a.register(t.Buffer.Segment, infos[i]); err != nil {
				rollback()
				return nil, 0, err
			}
			fresh = append(fresh, r)
		}
		bySeg[t.Buffer.Segment] = r
	}
	d := transportData{V: tdVersion, Object: objectID, Source: source, Agent: a.name, Inc: a.incHex,
		Tensors: make([]tdTensor, len(tensors))}
	for i, t := range tensors {
		d.Tensors[i] = tdTensor{DType: string(t.DType), Shape: slices.Clone(t.Shape), Device: t.Device, Len: t.Buffer.Length}
		if d.Tensors[i].Shape == nil {
			d.Tensors[i].Shape = []int64{}
		}
		if t.Buffer.Length > 0 {
			d.Tensors[i].Reg = bySeg[t.Buffer.Segment].id
			d.Tensors[i].Off = t.Buffer.Offset
		}
	}
	obj := &object{id: objectID, regs: make(map[*registration]struct{}, len(bySeg))}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		rollback()
		return nil, 0, ErrClosed
	}
	for _, r := range fresh {
		a.regs[r.id] = r
		a.regByName[r.segment] = r
	}
	if len(fresh) > 0 {
		a.version++
	}
	for _, r := range bySeg {
		r.refs++
		r.owned = r.owned || own
		obj.regs[r] = struct{}{}
	}
	a.regStats.reused += reused
	for {
		obj.key = randomKey()
		if a.byKey[obj.key] == nil {
			break
		}
	}
	a.objects[objectID] = obj
	a.byKey[obj.key] = obj
	d.Version = a.version
	d.Key = formatKey(obj.key)
	td, err := json.Marshal(d)
	if err != nil { // cannot happen: plain data
		panic(err)
	}
	return td, d.Version, nil
}

// Collect ends an extraction: reads of the object fail from now on, its
// rendezvous file goes and registrations no other object uses are
// deregistered (owned segments unlinked), and the new metadata is
// published. An object this agent does not know is not an error; if its
// TransportData names a dead agent of this node, that agent's leftovers
// are cleaned up.
func (a *Agent) Collect(ctx context.Context, objectID string, td []byte) error {
	if err := transport.ValidObjectID(objectID); err != nil {
		return err
	}
	v, changed, err := a.collect(objectID)
	if errors.Is(err, errNotHere) {
		a.collectOrphan(ctx, objectID, td)
		return nil
	}
	if changed {
		if perr := a.publish(ctx, v); perr != nil {
			// Readers still get a clear error from the read server.
			a.log.Warn("publishing metadata after a collection", "object", objectID, "error", perr)
		}
	}
	return err
}

// collect removes an extraction. It returns the metadata version and
// whether registrations changed.
func (a *Agent) collect(objectID string) (uint64, bool, error) {
	a.regMu.Lock()
	defer a.regMu.Unlock()
	a.mu.Lock()
	obj := a.objects[objectID]
	if obj == nil {
		a.mu.Unlock()
		return 0, false, errNotHere
	}
	delete(a.objects, objectID)
	delete(a.byKey, obj.key)
	var dead []*registration
	var owned []bool
	for r := range obj.regs {
		r.refs--
		if r.refs > 0 {
			continue
		}
		delete(a.regs, r.id)
		if a.regByName[r.segment] == r {
			delete(a.regByName, r.segment)
		}
		dead = append(dead, r)
		owned = append(owned, r.owned)
		a.regStats.deregistered++
	}
	if len(dead) > 0 {
		a.version++
	}
	v := a.version
	a.mu.Unlock()
	var errs []error
	if obj.rendezvous {
		if err := shmem.Unlink(RendezvousName(objectID)); err != nil && !errors.Is(err, shmem.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	for i, r := range dead {
		if owned[i] {
			// Back to the node's pool (unlinked without one); handed out
			// again only once this registration's reads are over.
			if err := shmem.Recycle(r.segment); err != nil && !errors.Is(err, shmem.ErrNotFound) {
				errs = append(errs, err)
			}
		}
		r.retire()
		a.log.Debug("deregistered segment", "segment", r.segment, "registration", r.id, "unlinked", owned[i])
	}
	return v, len(dead) > 0, errors.Join(errs...)
}

// ---------------------------------------------------------------- metadata

// selfMetaLocked returns the agent's metadata. a.mu must be held.
func (a *Agent) selfMetaLocked() *AgentMetadata {
	m := &AgentMetadata{V: metaVersion, Name: a.name, Incarnation: a.incHex, Version: a.version,
		Endpoint: a.addr, ShmDomain: a.domain, Pid: os.Getpid(), PidNS: a.pidns,
		Regions: make([]RegionDesc, 0, len(a.regs))}
	for _, r := range a.regs {
		m.Regions = append(m.Regions, RegionDesc{ID: r.id, Segment: r.segment, Size: r.size, Ino: r.ino, Owned: r.owned})
	}
	sort.Slice(m.Regions, func(i, j int) bool { return m.Regions[i].ID < m.Regions[j].ID })
	return m
}

// publish makes sure metadata of at least version want is in the KV.
// Concurrent callers coalesce: one write covers every version up to the
// snapshot it wrote.
func (a *Agent) publish(ctx context.Context, want uint64) error {
	a.pubMu.Lock()
	defer a.pubMu.Unlock()
	if a.published.Load() >= want {
		return nil
	}
	a.mu.Lock()
	m := a.selfMetaLocked()
	a.mu.Unlock()
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	if err := a.kv.Put(ctx, AgentKey(a.name), b); err != nil {
		if ctx.Err() != nil {
			return transport.ContextError(ctx)
		}
		return fmt.Errorf("publishing the metadata of agent %s: %w", a.name, err)
	}
	a.published.Store(m.Version)
	a.publishes.Add(1)
	return nil
}

// republishInterval is how often an agent checks that its metadata is
// still in the KV (a restarted GCS starts empty).
const republishInterval = 10 * time.Second

// keepPublished rewrites the agent's metadata when the KV lost it, until
// the agent closes.
func (a *Agent) keepPublished() {
	t := time.NewTicker(republishInterval)
	defer t.Stop()
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(a.ctx, kvTimeout)
		raw, err := a.kv.Get(ctx, AgentKey(a.name))
		var m *AgentMetadata
		if err == nil {
			m, err = parseAgentMetadata(a.name, raw)
		}
		if err != nil || m.Incarnation != a.incHex || m.Version < a.published.Load() {
			a.log.Warn("agent metadata missing or stale in the KV; publishing it again", "error", err)
			a.pubMu.Lock()
			a.published.Store(0)
			a.pubMu.Unlock()
			if err := a.publish(ctx, 1); err != nil {
				a.log.Warn("republishing agent metadata", "error", err)
			}
		}
		cancel()
	}
}

// cachedPeer returns the cached metadata of an agent (nil if none). For
// the agent itself it returns its current metadata.
func (a *Agent) cachedPeer(name string) *AgentMetadata {
	a.mu.Lock()
	defer a.mu.Unlock()
	if name == a.name {
		return a.selfMetaLocked()
	}
	return a.peers[name]
}

// refreshPeer reads an agent's metadata from the KV and caches it (unless
// the cache meanwhile holds a newer version of the same incarnation). It
// returns what it read: concurrent refreshes are not merged, so a caller
// always sees metadata read after it asked.
func (a *Agent) refreshPeer(ctx context.Context, name string) (*AgentMetadata, error) {
	if name == a.name {
		return a.cachedPeer(name), nil
	}
	a.refreshes.Add(1)
	raw, err := a.kv.Get(ctx, AgentKey(name))
	if err != nil {
		if ctx.Err() != nil {
			return nil, transport.ContextError(ctx)
		}
		if errors.Is(err, plugin.ErrKeyNotFound) {
			a.mu.Lock()
			delete(a.peers, name)
			a.mu.Unlock()
			return nil, badMeta(ErrUnknownAgent, "no metadata for agent %s in the KV (namespace %s): it never ran or was shut down", name, a.cfg.KVNamespace)
		}
		return nil, fmt.Errorf("reading the metadata of agent %s: %w", name, err)
	}
	m, err := parseAgentMetadata(name, raw)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	if cur := a.peers[name]; cur == nil || cur.Incarnation != m.Incarnation || cur.Version < m.Version {
		a.peers[name] = m
	}
	a.mu.Unlock()
	a.log.Debug("refreshed agent metadata", "peer", name, "version", m.Version, "regions", len(m.Regions))
	return m, nil
}

// ---------------------------------------------------------------- cleanup after dead agents

// pruneDead removes what dead agents of this shared-memory domain left
// behind (owned segments, rendezvous files, KV entries). It fails if a live
// agent already uses this agent's name.
func (a *Agent) pruneDead(ctx context.Context) error {
	keys, err := a.kv.Keys(ctx, agentKeyPrefix)
	if err != nil {
		return fmt.Errorf("listing agents in the KV: %w", err)
	}
	for _, k := range keys {
		name := k[len(agentKeyPrefix):]
		raw, err := a.kv.Get(ctx, k)
		if err != nil {
			continue
		}
		m, err := parseAgentMetadata(name, raw)
		if err != nil {
			continue
		}
		local := m.ShmDomain == a.domain && m.PidNS == a.pidns
		if !local || !processGone(m.Pid) {
			if name == a.name && local {
				return fmt.Errorf("name: agent %s is in use by process %d", name, m.Pid)
			}
			continue
		}
		a.pruneAgent(ctx, m)
	}
	return nil
}

// pruneAgent cleans up after a dead agent of this domain.
func (a *Agent) pruneAgent(ctx context.Context, m *AgentMetadata) {
	var unlinked, files int
	for _, r := range m.Regions {
		if !r.Owned {
			continue
		}
		if si, err := statSegment(r.Segment); err == nil && si.ino == r.Ino {
			if shmem.Unlink(r.Segment) == nil {
				unlinked++
			}
		}
	}
	if names, err := shmem.List(RendezvousPrefix); err == nil {
		for _, n := range names {
			raw, err := shmem.ReadAll(n, maxTransportData)
			if err != nil {
				continue
			}
			var d struct {
				Agent string `json:"agent"`
				Inc   string `json:"inc"`
			}
			if json.Unmarshal(raw, &d) == nil && d.Agent == m.Name && d.Inc == m.Incarnation {
				if shmem.Unlink(n) == nil {
					files++
				}
			}
		}
	}
	if m.Name != a.name {
		// Only if nobody replaced it meanwhile.
		if raw, err := a.kv.Get(ctx, AgentKey(m.Name)); err == nil {
			if cur, err := parseAgentMetadata(m.Name, raw); err == nil && cur.Incarnation == m.Incarnation {
				_ = a.kv.Delete(ctx, AgentKey(m.Name))
			}
		}
	}
	a.log.Info("cleaned up after a dead agent of this node", "dead_agent", m.Name, "pid", m.Pid,
		"segments_unlinked", unlinked, "rendezvous_files", files)
}

// collectOrphan handles the collection of an object this agent does not
// know: if its transport data names a dead agent of this domain, that
// agent's leftovers are cleaned up.
func (a *Agent) collectOrphan(ctx context.Context, objectID string, td []byte) {
	if len(td) == 0 {
		return
	}
	d, err := parseTransportData(objectID, td)
	if err != nil || (d.Agent == a.name && d.Inc == a.incHex) {
		return
	}
	if d.Agent == a.name {
		return // an earlier incarnation under our name: pruned at start
	}
	raw, err := a.kv.Get(ctx, AgentKey(d.Agent))
	if err != nil {
		return
	}
	m, err := parseAgentMetadata(d.Agent, raw)
	if err != nil || m.Incarnation != d.Inc || m.ShmDomain != a.domain || m.PidNS != a.pidns || !processGone(m.Pid) {
		return
	}
	a.pruneAgent(ctx, m)
}

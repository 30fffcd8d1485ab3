// Package collective is goray's "collective" tensor transport: collective
// communication among the ranks of named groups (all-reduce, broadcast,
// all-gather, reduce-scatter, barrier) in the style of NCCL and Gloo, on CPU
// tensors in shared memory, over the transport's own TCP connections. It is
// also a two-sided Transport that moves an object's tensors between two
// actors (members of a common group, or any two processes).
//
// # Groups
//
// Every rank calls CreateGroup through its node's plugin instance; one
// instance may host several ranks of several groups. Ranks meet through
// the cluster's key-value store (plugin.ClusterKV, or the KV given with
// WithKV): each rank publishes a record (its nonce and the instance's data
// address) under the group's key; ranks 1..n-1 read rank 0's record and
// connect to it (the control connections, a star around rank 0), rank 0
// checks that everybody agrees on the world size and the members, draws the
// group's epoch and sends everyone the roster (addresses and nonces of this
// incarnation, taken from the live ranks, never from possibly stale
// records); then every rank connects to the next one (the ring), and
// CreateGroup returns on every rank once rank 0 has seen all of them
// connected. Connections name the group, the epoch and the nonces, so
// records or connections of an earlier incarnation of a group name are
// never used.
//
// # Collectives
//
// Collectives run on the ring. AllReduce is the bandwidth-optimal ring: a
// reduce-scatter then an all-gather, 2(n-1) steps, each moving one of n
// contiguous parts of the tensor (their sizes differ by at most one
// element, see transport.ReduceScatterCount); every step is split into
// chunks and pipelined: a sender goroutine forwards chunk j of step t as
// soon as the receiver has reduced chunk j of step t-1, while the receiver
// reads the next chunk. A chunk is a quarter of a step, at least 64 KiB
// and at most chunk_size, so every link is busy early whatever the
// message size. Bytes are written from and read into the caller's shared
// memory directly; over TCP only the reduce-scatter phase reads into a
// chunk-sized scratch buffer. Broadcast is a pipelined chain along the
// ring from the root, AllGather and ReduceScatter are the two halves of
// the ring all-reduce, and Barrier is an all-gather of nothing. Every
// collective starts with a header (sequence number, operation, dtype,
// count, shape, reduction, root, algorithm) on each ring connection, so
// ranks whose arguments differ fail with transport.ErrBadMetadata.
//
// Small all-reduces (up to recursive_doubling_max, 64 KiB by default; the
// algorithm setting forces either) run by recursive doubling instead:
// log2(p) steps in which partners (rank r and r XOR 2^k) exchange their
// whole tensors and reduce, p being the largest power of two ≤ n; the
// other ranks first fold their tensor into a partner and get the result
// back. That is 2+log2(p) hops against the ring's 2(n-1), over links made
// when the group forms (see partners). A group uses rank 0's chunk_size,
// algorithm and recursive_doubling_max (sent in the roster), so every rank
// cuts the same chunks and picks the same algorithm.
//
// Members hosted by the same instance (ranks of one node) are linked
// through memory (in_process, on by default) instead of TCP loopback: a
// Write hands the writer's bytes to the reader, which copies them (or, in
// the reduce-scatter, reduces them straight from the previous rank's
// tensor into its own), with no kernel copy and no system call. When the
// instance hosts every rank of a group (all on one node), all-reduces that
// algorithm = auto does not give to recursive doubling skip the ring: the
// ranks' calls meet in memory, rank r reduces part r from every rank's
// tensor at once (one pass, in the ring's order, so the bits are the
// ring's) and then copies the other parts from their owners (execLocal).
//
// # Failures
//
// A rank whose collective fails (its deadline or context, invalid
// arguments, a broken connection) breaks the group: it tells rank 0 over
// its control connection, rank 0 tells everyone, and every rank closes its
// ring connections, so pending collectives fail at once with
// transport.ErrRankFailed naming the group and the failed rank. A rank
// whose process dies is noticed by rank 0 (its control connection closes)
// and by its ring neighbours; the death of rank 0 by everybody. A broken
// group stays broken until it is destroyed and created again.
//
// # Point to point
//
// As a Transport, ExtractMetadata pins the source tensors and returns
// transport data naming this instance's data address; Receive, on the
// destination, connects to the source and Send pushes the bytes over that
// connection straight from shared memory into the destination's
// segments. CommunicatorMetadata names the group and the two ranks when the
// source and the destination actors are members of a common group (found
// through the KV); Send and Receive then check that their instance hosts
// those ranks and fail with ErrRankFailed as soon as the peer rank fails.
// Without a common group (or without a KV) the two ends pair through a
// token only.
package collective

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// Name is the backend name; the binary is installed as
// <plugin_dir>/goray-transport-collective.
const Name = "collective"

// Version is the release reported to the host.
const Version = "0.1.0"

// Defaults of Config.
const (
	DefaultTimeout       = 30 * time.Second
	DefaultChunkSize     = 1 << 20
	DefaultKVNamespace   = "transport/collective"
	DefaultSegmentPrefix = shmem.Prefix + "coll-"
	// MinChunkSize and MaxChunkSize bound chunk_size.
	MinChunkSize = 4 << 10
	MaxChunkSize = 64 << 20
	// DefaultRecursiveDoublingMax is the default of
	// Config.RecursiveDoublingMax.
	DefaultRecursiveDoublingMax = 64 << 10
)

// All-reduce algorithms (Config.Algorithm).
const (
	// AlgorithmAuto picks recursive doubling for all-reduces of at most
	// Config.RecursiveDoublingMax bytes and the ring above (in memory when
	// the instance hosts every rank of the group).
	AlgorithmAuto = "auto"
	// AlgorithmRing always uses the ring (reduce-scatter, all-gather).
	AlgorithmRing = "ring"
	// AlgorithmRecursiveDoubling uses recursive doubling for every
	// all-reduce of at most MaxChunkSize bytes (each exchange needs a
	// scratch copy of the tensor) and the ring above.
	AlgorithmRecursiveDoubling = "recursive_doubling"
)

// ErrClosed is returned by calls made after Close.
var ErrClosed = errors.New("collective transport is closed")

// Config is the transport's configuration, the Go form of its
// `config { ... }` block.
type Config struct {
	// Timeout bounds every collective call (and, unless the request says
	// otherwise, CreateGroup's rendezvous); the caller's context may bound
	// it further.
	Timeout time.Duration `hcl:"timeout" default:"30s" doc:"Bound on every collective call and on a group's rendezvous; a rank that does not take part in time breaks the group."`
	// ChunkSize is the largest pipeline chunk of the ring algorithms, in
	// bytes; smaller messages use smaller chunks (see the package
	// documentation).
	ChunkSize int64 `hcl:"chunk_size,size" default:"1MiB" doc:"Largest pipeline chunk of the ring algorithms (4KiB to 64MiB); smaller messages are cut into smaller chunks."`
	// Algorithm is the all-reduce algorithm: AlgorithmAuto,
	// AlgorithmRing or AlgorithmRecursiveDoubling. A group uses rank 0's
	// setting (and ChunkSize and RecursiveDoublingMax), so every rank
	// agrees. Under AlgorithmAuto, larger all-reduces among ranks that
	// this instance hosts entirely (with InProcess) meet in memory instead
	// of running on the ring.
	Algorithm string `hcl:"algorithm" default:"auto" doc:"All-reduce algorithm: auto (recursive doubling up to recursive_doubling_max bytes; above, the ring, or a reduction in memory when this instance hosts every rank), ring or recursive_doubling. A group uses rank 0's setting."`
	// RecursiveDoublingMax is the largest all-reduce, in bytes, that
	// AlgorithmAuto runs with recursive doubling.
	RecursiveDoublingMax int64 `hcl:"recursive_doubling_max,size" default:"64KiB" doc:"Largest all-reduce (bytes, up to 64MiB) that algorithm = auto runs with recursive doubling instead of the ring."`
	// InProcess connects members hosted by this same instance (ranks of
	// one node, a transfer between two actors of the node) through memory
	// instead of TCP loopback.
	InProcess bool `hcl:"in_process" default:"true" doc:"Connect ranks and transfers hosted by this same plugin instance through memory instead of TCP loopback; false forces TCP."`
	// Listen is the data listener's host:port; empty means
	// plugin.NodeIP() on a free port. Peers on other nodes connect to it,
	// so it must be reachable from them; a listener on every interface
	// ("0.0.0.0:7070") is advertised as plugin.NodeIP() with its port.
	Listen string `hcl:"listen" doc:"host:port of the data listener peers connect to; default the node's IP (GORAY_NODE_IP) on a free port."`
	// KVNamespace is the cluster KV namespace of the rendezvous records.
	KVNamespace string `hcl:"kv_namespace" default:"transport/collective" doc:"Namespace of the rendezvous records in the cluster KV store."`
	// SegmentPrefix starts the names of the segments a Receive allocates
	// for its caller; it must start with shmem.Prefix.
	SegmentPrefix string `hcl:"segment_prefix" default:"goray-t-coll-" doc:"Name prefix of the shared-memory segments receives allocate; must start with goray-t-."`
}

// DefaultConfig returns the configuration used when nothing is set.
func DefaultConfig() Config {
	return Config{Timeout: DefaultTimeout, ChunkSize: DefaultChunkSize, KVNamespace: DefaultKVNamespace, SegmentPrefix: DefaultSegmentPrefix,
		Algorithm: AlgorithmAuto, RecursiveDoublingMax: DefaultRecursiveDoublingMax, InProcess: true}
}

// Validate checks the configuration; its error names the setting.
func (c Config) Validate() error {
	if c.Timeout <= 0 {
		return fmt.Errorf("timeout must be positive, got %v", c.Timeout)
	}
	if c.ChunkSize < MinChunkSize || c.ChunkSize > MaxChunkSize {
		return fmt.Errorf("chunk_size %d outside [%d, %d]", c.ChunkSize, MinChunkSize, MaxChunkSize)
	}
	switch c.Algorithm {
	case AlgorithmAuto, AlgorithmRing, AlgorithmRecursiveDoubling:
	default:
		return fmt.Errorf("algorithm %q: want %q, %q or %q", c.Algorithm, AlgorithmAuto, AlgorithmRing, AlgorithmRecursiveDoubling)
	}
	if c.RecursiveDoublingMax < 0 || c.RecursiveDoublingMax > MaxChunkSize {
		return fmt.Errorf("recursive_doubling_max %d outside [0, %d]", c.RecursiveDoublingMax, MaxChunkSize)
	}
	if c.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Listen); err != nil {
			return fmt.Errorf("listen %q: want host:port: %v", c.Listen, err)
		}
	}
	if c.KVNamespace == "" {
		return errors.New("kv_namespace must not be empty")
	}
	if !strings.HasPrefix(c.SegmentPrefix, shmem.Prefix) {
		return fmt.Errorf("segment_prefix %q must start with %q", c.SegmentPrefix, shmem.Prefix)
	}
	if err := shmem.ValidName(shmem.NewName(c.SegmentPrefix)); err != nil {
		return fmt.Errorf("segment_prefix %q cannot start a segment name: %v", c.SegmentPrefix, err)
	}
	return nil
}

// listenAddr is the address to bind.
func (c Config) listenAddr() string {
	if c.Listen != "" {
		return c.Listen
	}
	return net.JoinHostPort(plugin.NodeIP(), "0")
}

// Option configures New.
type Option func(*Transport)

// WithConfig sets the configuration (default DefaultConfig()).
func WithConfig(c Config) Option { return func(t *Transport) { t.cfg = c } }

// WithKV sets the key-value store groups meet through, instead of the
// cluster's (plugin.ClusterKV on first use). Tests share one
// plugin.NewMemoryKV between instances.
func WithKV(kv plugin.KV) Option { return func(t *Transport) { t.kv = kv } }

// WithLogger sets the logger (nil: no logging).
func WithLogger(l hclog.Logger) Option { return func(t *Transport) { t.SetLogger(l) } }

// Transport is one instance: in a node, the plugin process serving every
// actor of the node, hosting their ranks. Methods may be called
// concurrently. Create it with New.
type Transport struct {
	aborts transport.Aborts
	wg     sync.WaitGroup // accept loop, connection handlers

	mu        sync.Mutex
	log       hclog.Logger
	cfg       Config
	kv        plugin.KV
	kvClose   func() error
	ln        net.Listener
	addr      string
	acceptErr error
	closed    bool
	conns     map[net.Conn]string
	objects   map[string]*object
	segs      map[string]*segRef
	members   map[memberKey]*member
	locals    map[localKey]*localGroup
}

// New returns a transport; nothing listens before Configure or first use.
func New(opts ...Option) *Transport {
	t := &Transport{
		log:     hclog.NewNullLogger(),
		cfg:     DefaultConfig(),
		conns:   map[net.Conn]string{},
		objects: map[string]*object{},
		segs:    map[string]*segRef{},
		members: map[memberKey]*member{},
		locals:  map[localKey]*localGroup{},
	}
	for _, o := range opts {
		o(t)
	}
	return t
}

var (
	_ transport.Transport  = (*Transport)(nil)
	_ transport.Collective = (*Transport)(nil)
	_ plugin.Configurable  = (*Transport)(nil)
	_ plugin.HealthChecker = (*Transport)(nil)
	_ plugin.Versioned     = (*Transport)(nil)
	_ plugin.LoggerSetter  = (*Transport)(nil)
)

// ---------------------------------------------------------------- plugin plumbing

// ConfigSpec implements plugin.Configurable: Config, whose tags give the
// config block's attributes and defaults (those of DefaultConfig).
func (t *Transport) ConfigSpec() plugin.ConfigSpec { return plugin.TypedConfig(t.Configure) }

// Configure validates c and applies it; it binds the listener so a bad or
// busy address is reported at start.
func (t *Transport) Configure(_ context.Context, c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	t.mu.Lock()
	if t.ln != nil && c.Listen != t.cfg.Listen {
		t.mu.Unlock()
		return fmt.Errorf("listen cannot change from %q while serving on %s; restart the plugin", t.cfg.Listen, t.addr)
	}
	if t.kvClose != nil && c.KVNamespace != t.cfg.KVNamespace {
		t.mu.Unlock()
		return fmt.Errorf("kv_namespace cannot change from %q while groups use it; restart the plugin", t.cfg.KVNamespace)
	}
	t.cfg = c
	t.mu.Unlock()
	_, err := t.listen()
	return err
}

// Health implements plugin.HealthChecker: healthy while the data
// listener accepts connections.
func (t *Transport) Health(context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.closed:
		return ErrClosed
	case t.acceptErr != nil:
		return fmt.Errorf("data listener %s stopped accepting: %w", t.addr, t.acceptErr)
	}
	return nil
}

// Version implements plugin.Versioned.
func (t *Transport) Version() string { return Version }

// SetLogger implements plugin.LoggerSetter.
func (t *Transport) SetLogger(l hclog.Logger) {
	if l == nil {
		l = hclog.NewNullLogger()
	}
	t.mu.Lock()
	t.log = l
	t.mu.Unlock()
}

func (t *Transport) logger() hclog.Logger {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.log
}

func (t *Transport) config() Config {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cfg
}

// Addr returns the data listener's address ("" before it starts).
func (t *Transport) Addr() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.addr
}

// store returns the KV groups meet through, connecting to the cluster's on
// first use. Its error matches ErrNotSupported when there is none.
func (t *Transport) store() (plugin.KV, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrClosed
	}
	if t.kv != nil {
		return t.kv, nil
	}
	kv, closeFn, err := plugin.ClusterKV(t.cfg.KVNamespace)
	if err != nil {
		return nil, fmt.Errorf("%w: collective groups need the cluster KV store: %v", transport.ErrNotSupported, err)
	}
	t.kv, t.kvClose = kv, closeFn
	return kv, nil
}

// Stats counts what the instance holds, for tests and debugging.
type Stats struct {
	// Groups is the number of (group, rank) members hosted here.
	Groups int
	// Objects extracted here and not yet collected, and the buffers they pin.
	Objects, PinnedBuffers int
	// WaitingDestinations are destinations connected here waiting for a Send.
	WaitingDestinations int
	// OpenConns are open TCP connections of every kind.
	OpenConns int
}

// Stats reports what the instance holds.
func (t *Transport) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := Stats{Groups: len(t.members), Objects: len(t.objects), OpenConns: len(t.conns)}
	for _, o := range t.objects {
		s.WaitingDestinations += len(o.peers)
		for _, tn := range o.tensors {
			if tn.Buffer.Length > 0 {
				s.PinnedBuffers++
			}
		}
	}
	return s
}

// Close destroys every group member hosted here (their peers see them
// leave), stops the listener, closes every connection and unpins every
// object. It does not unlink owned segments. The plugin binary never calls
// it; in-process users and tests do.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	members := make([]*member, 0, len(t.members))
	for _, m := range t.members {
		members = append(members, m)
	}
	t.mu.Unlock()
	for _, m := range members {
		_ = m.stopJoining(context.Background())
		t.removeMember(m, failure{rank: m.rank, kind: kindDestroyed, msg: "the transport was closed"})
	}
	t.mu.Lock()
	ln, conns, objs, kvClose := t.ln, t.conns, t.objects, t.kvClose
	t.conns, t.objects, t.segs = map[net.Conn]string{}, map[string]*object{}, map[string]*segRef{}
	t.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	for c := range conns {
		_ = c.Close()
	}
	for _, o := range objs {
		close(o.arrived)
		unpin(o.tensors)
	}
	t.wg.Wait()
	if kvClose != nil {
		_ = kvClose()
	}
	return nil
}

// ---------------------------------------------------------------- identity

// Info implements transport.Transport.
func (t *Transport) Info(context.Context, *transport.InfoRequest) (*transport.InfoResponse, error) {
	return &transport.InfoResponse{Name: Name, OneSided: false, CanAbort: true, SameNode: false}, nil
}

// ActorHasTransport implements transport.Transport: every actor whose node
// runs the plugin can use it.
func (t *Transport) ActorHasTransport(context.Context, *transport.ActorHasTransportRequest) (*transport.ActorHasTransportResponse, error) {
	return &transport.ActorHasTransportResponse{HasTransport: true}, nil
}

// ---------------------------------------------------------------- connections

// listen starts the data listener if needed and returns its address.
func (t *Transport) listen() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return "", ErrClosed
	}
	if t.ln != nil {
		return t.addr, nil
	}
	ln, err := plugin.Listen(context.Background(), "tcp", t.cfg.listenAddr(), t.log)
	if err != nil {
		return "", fmt.Errorf("data listener on %q: %w", t.cfg.listenAddr(), err)
	}
	t.ln, t.addr = ln, advertised(ln.Addr().String())
	t.log.Info("data listener started", "addr", t.addr)
	t.wg.Add(1)
	go t.serve(ln)
	return t.addr, nil
}

// serve accepts connections until the listener closes.
func (t *Transport) serve(ln net.Listener) {
	defer t.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			t.mu.Lock()
			if !t.closed {
				t.acceptErr = err
				t.log.Error("data listener failed", "addr", t.addr, "error", err)
			}
			t.mu.Unlock()
			return
		}
		if t.track(c, "accepted from "+c.RemoteAddr().String()) != nil {
			continue
		}
		t.wg.Add(1)
		go t.handle(c)
	}
}

// handle reads a connection's hello and hands it to whoever it is for.
func (t *Transport) handle(c net.Conn) {
	defer t.wg.Done()
	// Only the cluster's processes reach the data path.
	ac, err := plugin.AuthenticateServer(c)
	if err != nil { // logged there, once per peer per minute
		t.closeConn(c)
		return
	}
	if c = t.retrack(c, ac); c == nil {
		return
	}
	t.dispatch(c)
}

// dispatch reads an authenticated (or in-process) connection's hello and
// hands the connection to whoever it is for.
func (t *Transport) dispatch(c net.Conn) {
	var h hello
	_ = c.SetReadDeadline(time.Now().Add(helloTimeout))
	if err := readFrame(c, &h); err != nil {
		t.logger().Debug("bad connection", "from", c.RemoteAddr().String(), "error", err)
		t.closeConn(c)
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	if h.V != wireVersion {
		t.refuse(c, reply{Kind: replyBad, Error: fmt.Sprintf("protocol version %d, want %d", h.V, wireVersion)})
		return
	}
	switch h.Type {
	case helloFetch:
		t.handleFetch(c, &h)
	case helloJoin, helloRing, helloPeer:
		t.routeGroup(c, &h)
	default:
		t.refuse(c, reply{Kind: replyBad, Error: fmt.Sprintf("unknown connection type %q", h.Type)})
	}
}

// dial connects to a peer's data listener and tracks the connection. A
// connection to this instance itself is in-process (memConn) when
// Config.InProcess is set: the other end is dispatched here as if
// accepted (no authentication: nothing outside the process can reach it).
func (t *Transport) dial(ctx context.Context, addr, what string) (net.Conn, error) {
	if t.inProcess(addr) {
		a, b := memPipe()
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return nil, ErrClosed
		}
		t.conns[a], t.conns[b] = what, "in-process for "+what
		t.wg.Add(1) // under mu, so never concurrently with Close's Wait
		t.mu.Unlock()
		go func() {
			defer t.wg.Done()
			t.dispatch(b)
		}()
		return a, nil
	}
	d := net.Dialer{Timeout: dialTimeout}
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c, err := plugin.AuthenticateClient(ctx, raw)
	if err != nil {
		_ = raw.Close()
		return nil, fmt.Errorf("data connection to %s: %w", addr, err)
	}
	if err := t.track(c, what); err != nil {
		return nil, err
	}
	return c, nil
}

// inProcess reports whether a connection to addr goes through memory: it
// is this instance's own listener and Config.InProcess is set.
func (t *Transport) inProcess(addr string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cfg.InProcess && t.addr != "" && addr == t.addr
}

// track registers an open connection so Close can end it.
func (t *Transport) track(c net.Conn, what string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		_ = c.Close()
		return ErrClosed
	}
	t.conns[c] = what
	return nil
}

// retrack replaces a tracked connection by the authenticated one wrapping
// it (the same one without TLS); nil when the transport closed meanwhile.
func (t *Transport) retrack(raw, c net.Conn) net.Conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	what, ok := t.conns[raw]
	delete(t.conns, raw)
	if !ok || t.closed {
		_ = c.Close()
		return nil
	}
	t.conns[c] = what
	return c
}

// closeConn closes a tracked connection.
func (t *Transport) closeConn(c net.Conn) {
	if c == nil {
		return
	}
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
	_ = c.Close()
}

// refuse answers a hello with a refusal and hangs up.
func (t *Transport) refuse(c net.Conn, r reply) {
	_ = c.SetWriteDeadline(time.Now().Add(refuseTimeout))
	_ = writeFrame(c, r)
	t.closeConn(c)
}

// advertised is the address peers are told: a listener bound to every
// interface (0.0.0.0, ::) is reached at the node's IP.
func advertised(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return net.JoinHostPort(plugin.NodeIP(), port)
	}
	return addr
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return transport.ContextError(ctx)
	}
}

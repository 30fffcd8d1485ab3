// Package tcptemplate is a complete, two-sided goray tensor transport meant
// to be copied: the "tcp-template" transport. It imports only goray's public
// SDK (sdk/transport, sdk/transport/shmem, sdk/plugin) and the standard
// library.
//
// How a transfer goes (see docs/writing-a-transport.md for the picture):
//
//   - ExtractMetadata, on the source, checks the tensors, pins their bytes
//     (keeps a mapping of each segment for the object's lifetime, the
//     stand-in for registering memory with a NIC) and returns the transport
//     data: the object id, a nonce naming this extraction, the layout, and
//     the address of the source's TCP data listener.
//   - CommunicatorMetadata, on the owner, returns a fresh pairing token. The
//     owner passes it to both Send and Receive; it tells the source which
//     waiting destination a Send is for, so one object can go to several
//     destinations at once.
//   - Receive, on the destination, allocates the destination tensors (or
//     uses the caller's targets), dials the source's data listener, asks
//     for the object (id, nonce, token) and waits.
//   - Send, on the source, waits until the matching destination has dialed
//     in, then pushes the tensors' bytes over that connection straight from
//     the pinned shared memory into the destination's shared memory, and
//     returns when the destination acknowledges.
//   - GarbageCollect, on the source, unpins the buffers and unlinks the
//     segments it was given ownership of.
//   - Abort fails pending Send/Receive calls of the object with
//     transport.ErrAborted, and tells destinations waiting at this source.
//
// Only handles cross gRPC (segment names, offsets, the small transport and
// communicator data). Tensor bytes go through shared memory and the
// transport's own TCP connection, never through the plugin protocol.
//
// The data listener binds a loopback address by default, so the transport
// reports SameNode. To go across nodes, listen on a routable interface,
// advertise that address in the transport data and report SameNode false.
package tcptemplate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// Name is the backend name users select the transport by. The plugin
// binary is installed as <plugin_dir>/goray-transport-tcp-template.
const Name = "tcp-template"

// Version is the release reported to the host (plugin.Versioned).
const Version = "0.1.0"

// Defaults of Config, also the defaults of the config block.
const (
	DefaultListenAddress = "127.0.0.1:0"
	DefaultSegmentPrefix = shmem.Prefix + "tcp-"
	DefaultDialTimeout   = 5 * time.Second
)

// ErrClosed is returned by calls made after Close.
var ErrClosed = errors.New("tcp-template transport is closed")

// Config is the transport's configuration: the Go form of its HCL
// `config { ... }` block (see Schema).
type Config struct {
	// ListenAddress is the TCP address of the data listener; port 0 picks
	// a free port.
	ListenAddress string `hcl:"listen_address" default:"127.0.0.1:0" doc:"TCP address of the data listener (host:port; port 0 picks a free port)."`
	// SegmentPrefix starts the names of the shared-memory segments a
	// Receive allocates for its caller. It must start with shmem.Prefix so
	// that a node's start-up cleanup finds what crashed processes left.
	SegmentPrefix string `hcl:"segment_prefix" default:"goray-t-tcp-" doc:"Name prefix of the shared-memory segments receives allocate; must start with goray-t-."`
	// DialTimeout bounds connecting to a source's data listener.
	DialTimeout time.Duration `hcl:"dial_timeout" default:"5s" doc:"How long a receive may take to connect to the source."`
}

// DefaultConfig returns the configuration used when nothing is set.
func DefaultConfig() Config {
	return Config{ListenAddress: DefaultListenAddress, SegmentPrefix: DefaultSegmentPrefix, DialTimeout: DefaultDialTimeout}
}

// Validate checks the configuration; its error names the offending setting.
func (c Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.ListenAddress); err != nil {
		return fmt.Errorf("listen_address %q: want host:port, e.g. %q: %v", c.ListenAddress, DefaultListenAddress, err)
	}
	if !strings.HasPrefix(c.SegmentPrefix, shmem.Prefix) {
		return fmt.Errorf("segment_prefix %q must start with %q", c.SegmentPrefix, shmem.Prefix)
	}
	if err := shmem.ValidName(shmem.NewName(c.SegmentPrefix)); err != nil {
		return fmt.Errorf("segment_prefix %q cannot start a segment name: %v", c.SegmentPrefix, err)
	}
	if c.DialTimeout <= 0 {
		return fmt.Errorf("dial_timeout must be positive, got %v", c.DialTimeout)
	}
	return nil
}

// Option configures New.
type Option func(*Transport)

// WithConfig sets the configuration (default DefaultConfig()). The plugin
// binary gets its configuration from the node's HCL through Configure.
func WithConfig(c Config) Option { return func(t *Transport) { t.cfg = c } }

// WithLogger sets the logger (nil: no logging).
func WithLogger(l hclog.Logger) Option { return func(t *Transport) { t.SetLogger(l) } }

// Transport is one tcp-template instance: in a node, one plugin process
// serving every actor of the node, acting as source, destination or owner
// depending on the call. Its methods may be called concurrently. Create it
// with New.
type Transport struct {
	aborts transport.Aborts // pending calls per object, for Abort
	wg     sync.WaitGroup   // accept loop and connection handlers

	mu        sync.Mutex
	log       hclog.Logger
	cfg       Config
	ln        net.Listener // data listener, started on first need
	addr      string       // ln's address, as put in transport data
	acceptErr error        // why the accept loop died, for Health
	closed    bool
	objects   map[string]*object  // extracted on this instance (source side)
	segs      map[string]*segRef  // segments referenced by those objects
	conns     map[net.Conn]string // open data connections -> what they are for
}

// object is what the source keeps for an extracted object.
type object struct {
	nonce   string             // names this extraction; in the transport data
	tensors []transport.Tensor // the source tensors, pinned
	metas   []transport.TensorMeta
	segs    []string // distinct segments of tensors
	// peers are destinations that dialed in and wait for a Send;
	// arrived is closed (and replaced) whenever one joins.
	peers   []*peer
	arrived chan struct{}
}

// segRef counts the objects referencing a segment and whether the
// transport owns it (ExtractMetadataRequest.TransferOwnership).
type segRef struct {
	refs  int
	owned bool
}

// New returns a transport. Nothing listens until Configure or the first
// ExtractMetadata.
func New(opts ...Option) *Transport {
	t := &Transport{
		log:     hclog.NewNullLogger(),
		cfg:     DefaultConfig(),
		objects: make(map[string]*object),
		segs:    make(map[string]*segRef),
		conns:   make(map[net.Conn]string),
	}
	for _, o := range opts {
		o(t)
	}
	return t
}

var _ transport.Transport = (*Transport)(nil)

// Optional interfaces transport.Serve looks for.
var (
	_ plugin.Configurable  = (*Transport)(nil)
	_ plugin.HealthChecker = (*Transport)(nil)
	_ plugin.Versioned     = (*Transport)(nil)
	_ plugin.LoggerSetter  = (*Transport)(nil)
)

// fail wraps err so that it names the object and the duty. The plugin
// bridge keeps both, and errors.Is still finds the sentinel inside.
func fail(objectID, op string, err error) error {
	return &transport.TransferError{ObjectID: objectID, Op: op, Err: err}
}

// ---------------------------------------------------------------- plugin plumbing

// ConfigSpec implements plugin.Configurable: Config, whose tags name the
// attributes of the plugin's `config { ... }` block, their defaults and
// docs, is the block. The host decodes the block against the schema derived
// from it and reports mistakes (unknown names, wrong types, bad durations)
// at their file:line before the plugin sees anything; Configure then gets
// the block as a Config (defaults filled in).
func (t *Transport) ConfigSpec() plugin.ConfigSpec { return plugin.TypedConfig(t.Configure) }

// Configure applies c. The host calls it (through ConfigSpec) after every
// start of the plugin, before any other call. An error rejects the config;
// the host reports it at the plugin block. It starts the data listener so
// that a bad or busy address is reported here rather than at the first
// transfer.
func (t *Transport) Configure(_ context.Context, c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	t.mu.Lock()
	if t.ln != nil && c.ListenAddress != t.cfg.ListenAddress {
		t.mu.Unlock()
		return fmt.Errorf("listen_address cannot change from %q while the transport is serving on %s; restart the plugin", t.cfg.ListenAddress, t.addr)
	}
	t.cfg = c
	t.mu.Unlock()
	_, err := t.listen()
	return err
}

// Health implements plugin.HealthChecker: the transport is healthy while
// its data listener accepts connections. The host restarts a plugin whose
// checks keep failing.
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

// SetLogger implements plugin.LoggerSetter; transport.Serve passes the
// plugin's logger, whose entries show up in the node's log.
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

// Addr returns the data listener's address ("" before it starts).
func (t *Transport) Addr() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.addr
}

// Stats counts what the instance holds, for tests and debugging.
type Stats struct {
	// Objects extracted here and not yet garbage-collected.
	Objects int
	// PinnedBuffers is the number of tensor buffers those objects pin.
	PinnedBuffers int
	// WaitingDestinations are destinations connected here, waiting for a Send.
	WaitingDestinations int
	// OpenConns are open data connections, both directions.
	OpenConns int
}

// Stats reports what the instance holds.
func (t *Transport) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := Stats{Objects: len(t.objects), OpenConns: len(t.conns)}
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

// Close stops the data listener, closes every data connection (pending
// Send and Receive calls fail) and unpins every object's buffers. It does
// not unlink owned segments: the runtime garbage-collects objects first.
// The plugin binary never calls it (the process just exits); in-process
// users and tests do.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	ln, conns, objs := t.ln, t.conns, t.objects
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
	return nil
}

// ---------------------------------------------------------------- the duties

// Info implements transport.Transport. It must be constant: the host asks
// before configuring the plugin, and the runtime caches the answer.
func (t *Transport) Info(context.Context, *transport.InfoRequest) (*transport.InfoResponse, error) {
	return &transport.InfoResponse{Name: Name, OneSided: false, CanAbort: true, SameNode: true}, nil
}

// ActorHasTransport implements transport.Transport. Every process that can
// reach the loopback interface and /dev/shm can use this transport; a real
// transport would check for its device, library or network here.
func (t *Transport) ActorHasTransport(context.Context, *transport.ActorHasTransportRequest) (*transport.ActorHasTransportResponse, error) {
	return &transport.ActorHasTransportResponse{HasTransport: true}, nil
}

// ExtractMetadata implements transport.Transport (source, right after the
// tensors were produced): it validates and pins the tensors and returns
// the transport data a destination needs to fetch them.
func (t *Transport) ExtractMetadata(ctx context.Context, req *transport.ExtractMetadataRequest) (*transport.ExtractMetadataResponse, error) {
	if req == nil {
		req = &transport.ExtractMetadataRequest{}
	}
	id := req.ObjectID
	if err := transport.ValidObjectID(id); err != nil {
		return nil, fail(id, transport.OpExtractMetadata, err)
	}
	if ctx.Err() != nil {
		return nil, fail(id, transport.OpExtractMetadata, transport.ContextError(ctx))
	}
	addr, err := t.listen()
	if err != nil {
		return nil, fail(id, transport.OpExtractMetadata, err)
	}
	metas := make([]transport.TensorMeta, len(req.Tensors))
	for i, tn := range req.Tensors {
		if err := tn.Validate(); err != nil { // layout, length, segment name
			return nil, fail(id, transport.OpExtractMetadata, fmt.Errorf("tensor %d: %w", i, err))
		}
		if !tn.Meta().IsCPU() {
			return nil, fail(id, transport.OpExtractMetadata,
				fmt.Errorf("tensor %d is on device %q: %w (tcp-template moves cpu tensors only)", i, tn.Device, transport.ErrNotSupported))
		}
		metas[i] = tn.Meta()
	}
	tensors := slices.Clone(req.Tensors)
	if err := pin(ctx, tensors); err != nil {
		return nil, fail(id, transport.OpExtractMetadata, err)
	}
	td := transportData{V: wireVersion, Object: id, Addr: addr, Nonce: randomHex(16), Tensors: metas}
	data, err := td.marshal()
	if err != nil {
		unpin(tensors)
		return nil, fail(id, transport.OpExtractMetadata, err)
	}

	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		unpin(tensors)
		return nil, fail(id, transport.OpExtractMetadata, ErrClosed)
	}
	if t.objects[id] != nil {
		t.mu.Unlock()
		unpin(tensors)
		return nil, fail(id, transport.OpExtractMetadata, fmt.Errorf("%w: object already extracted", transport.ErrBadMetadata))
	}
	obj := &object{nonce: td.Nonce, tensors: tensors, metas: metas, arrived: make(chan struct{})}
	for _, tn := range tensors {
		if s := tn.Buffer.Segment; tn.Buffer.Length > 0 && !slices.Contains(obj.segs, s) {
			obj.segs = append(obj.segs, s)
		}
	}
	for _, s := range obj.segs {
		r := t.segs[s]
		if r == nil {
			r = &segRef{}
			t.segs[s] = r
		}
		r.refs++
		r.owned = r.owned || req.TransferOwnership
	}
	t.objects[id] = obj
	log := t.log
	t.mu.Unlock()
	log.Debug("extracted", "object", id, "tensors", len(tensors), "owned", req.TransferOwnership)
	return &transport.ExtractMetadataResponse{Tensors: metas, TransportData: data}, nil
}

// pin maps every non-empty tensor's bytes and keeps the mapping until
// unpin. This is where a transport registers memory with its device; here
// it checks that the bytes exist and makes Send's later mapping free.
func pin(ctx context.Context, tensors []transport.Tensor) error {
	for i, tn := range tensors {
		if tn.Buffer.Length == 0 {
			continue
		}
		if _, err := tn.Bytes(ctx); err != nil {
			unpin(tensors[:i])
			if errors.Is(err, shmem.ErrNotFound) || errors.Is(err, shmem.ErrOutOfRange) || errors.Is(err, shmem.ErrBadName) {
				err = fmt.Errorf("%w: tensor %d: %v", transport.ErrBadMetadata, i, err)
			}
			return err
		}
	}
	return nil
}

// unpin drops the mappings pin took.
func unpin(tensors []transport.Tensor) {
	for _, tn := range tensors {
		tn.Release() // a no-op for zero-length tensors
	}
}

// CommunicatorMetadata implements transport.Transport (owner, before it
// starts a transfer): a fresh pairing token for this transfer, handed to
// both Send and Receive. A transport built on a collective library would
// return the group name and the two ranks here.
func (t *Transport) CommunicatorMetadata(_ context.Context, req *transport.CommunicatorMetadataRequest) (*transport.CommunicatorMetadataResponse, error) {
	if req == nil {
		req = &transport.CommunicatorMetadataRequest{}
	}
	if err := transport.ValidObjectID(req.ObjectID); err != nil {
		return nil, fail(req.ObjectID, transport.OpCommunicatorMetadata, err)
	}
	l := link{V: wireVersion, Object: req.ObjectID, Source: req.Source, Destination: req.Destination, Token: randomHex(16)}
	data, err := l.marshal()
	if err != nil {
		return nil, fail(req.ObjectID, transport.OpCommunicatorMetadata, err)
	}
	return &transport.CommunicatorMetadataResponse{Data: data}, nil
}

// Send implements transport.Transport (source): it waits for the
// destination with the same pairing token to connect, pushes the bytes and
// returns once the destination has acknowledged them.
func (t *Transport) Send(ctx context.Context, req *transport.SendRequest) (*transport.SendResponse, error) {
	if req == nil {
		req = &transport.SendRequest{}
	}
	id := req.ObjectID
	if err := transport.ValidObjectID(id); err != nil {
		return nil, fail(id, transport.OpSend, err)
	}
	td, err := parseTransportData(id, req.TransportData)
	if err != nil {
		return nil, fail(id, transport.OpSend, err)
	}
	token, err := parseLink(id, req.CommunicatorData)
	if err != nil {
		return nil, fail(id, transport.OpSend, err)
	}
	t.mu.Lock()
	obj := t.objects[id]
	t.mu.Unlock()
	if obj == nil || obj.nonce != td.Nonce {
		return nil, fail(id, transport.OpSend, fmt.Errorf("%w: object unknown here or already garbage-collected", transport.ErrBadMetadata))
	}
	if err := sameMetas(req.Tensors, obj.metas); err != nil {
		return nil, fail(id, transport.OpSend, err)
	}
	// Register the call so that Abort can cancel it; ctx is cancelled with
	// the abort error and transport.ContextError explains why ctx ended.
	ctx, done, err := t.aborts.Begin(ctx, id)
	if err != nil {
		return nil, fail(id, transport.OpSend, err)
	}
	defer done()
	p, err := t.awaitPeer(ctx, id, obj, token)
	if err != nil {
		return nil, fail(id, transport.OpSend, err)
	}
	if err := t.push(ctx, obj, p); err != nil {
		return nil, fail(id, transport.OpSend, err)
	}
	t.logger().Debug("sent", "object", id, "to", p.conn.RemoteAddr().String())
	return &transport.SendResponse{}, nil
}

// Receive implements transport.Transport (destination): it fetches the
// object from the source named in the transport data, into req.Targets or
// into segments it allocates for the caller (listed in Allocated).
func (t *Transport) Receive(ctx context.Context, req *transport.ReceiveRequest) (*transport.ReceiveResponse, error) {
	if req == nil {
		req = &transport.ReceiveRequest{}
	}
	id := req.ObjectID
	if err := transport.ValidObjectID(id); err != nil {
		return nil, fail(id, transport.OpReceive, err)
	}
	// Everything that can be checked locally is checked before waiting, so
	// bad metadata fails at once instead of at the deadline.
	td, err := parseTransportData(id, req.TransportData)
	if err != nil {
		return nil, fail(id, transport.OpReceive, err)
	}
	token, err := parseLink(id, req.CommunicatorData)
	if err != nil {
		return nil, fail(id, transport.OpReceive, err)
	}
	if err := sameMetas(req.Tensors, td.Tensors); err != nil {
		return nil, fail(id, transport.OpReceive, err)
	}
	if req.Targets != nil {
		if err := checkTargets(td.Tensors, req.Targets); err != nil {
			return nil, fail(id, transport.OpReceive, err)
		}
	}
	ctx, done, err := t.aborts.Begin(ctx, id)
	if err != nil {
		return nil, fail(id, transport.OpReceive, err)
	}
	defer done()

	out, allocated, err := t.destinations(td.Tensors, req.Targets)
	if err != nil {
		return nil, fail(id, transport.OpReceive, err)
	}
	err = t.fetch(ctx, td, token, out)
	if err == nil && ctx.Err() != nil {
		// The caller gave up just as the bytes arrived (over gRPC it would
		// never learn of the segments): report the context instead.
		err = transport.ContextError(ctx)
	}
	if err != nil {
		for _, s := range allocated { // the caller never saw them
			shmem.Default.Forget(s)
			_ = shmem.Unlink(s)
		}
		return nil, fail(id, transport.OpReceive, err)
	}
	t.logger().Debug("received", "object", id, "from", td.Addr, "tensors", len(out))
	return &transport.ReceiveResponse{Tensors: out, Allocated: allocated}, nil
}

// destinations returns the tensors a receive writes into: the targets, or
// fresh segments (named with the configured prefix) that become the
// caller's. Zero-length tensors need no segment.
func (t *Transport) destinations(metas []transport.TensorMeta, targets []transport.Tensor) ([]transport.Tensor, []string, error) {
	out := make([]transport.Tensor, len(metas))
	if targets != nil {
		for i := range targets {
			out[i] = targets[i]
			out[i].Shape = slices.Clone(metas[i].Shape)
		}
		return out, nil, nil
	}
	t.mu.Lock()
	prefix := t.cfg.SegmentPrefix
	t.mu.Unlock()
	var allocated []string
	for i, m := range metas {
		if m.ByteSize() == 0 {
			out[i] = transport.Tensor{DType: m.DType, Shape: slices.Clone(m.Shape), Device: transport.CPU}
			continue
		}
		tn, err := transport.NewTensorIn(prefix, m.DType, m.Shape...)
		if err != nil {
			for _, s := range allocated {
				_ = shmem.Unlink(s)
			}
			return nil, nil, err
		}
		out[i] = tn
		allocated = append(allocated, tn.Buffer.Segment)
	}
	return out, allocated, nil
}

// GarbageCollect implements transport.Transport (source, once the object's
// last reference is gone): it unpins the object's buffers, unlinks the
// segments it owns that no other object references, and turns away
// destinations still waiting for it. Collecting an unknown object is not an
// error.
func (t *Transport) GarbageCollect(_ context.Context, req *transport.GarbageCollectRequest) (*transport.GarbageCollectResponse, error) {
	if req == nil {
		req = &transport.GarbageCollectRequest{}
	}
	id := req.ObjectID
	if err := transport.ValidObjectID(id); err != nil {
		return nil, fail(id, transport.OpGarbageCollect, err)
	}
	t.aborts.Forget(id)
	t.mu.Lock()
	obj := t.objects[id]
	if obj == nil {
		t.mu.Unlock()
		return &transport.GarbageCollectResponse{}, nil
	}
	delete(t.objects, id)
	close(obj.arrived) // a Send waiting for a destination sees the object is gone
	peers := obj.takePeers()
	var unlink []string
	for _, s := range obj.segs {
		r := t.segs[s]
		if r.refs--; r.refs > 0 {
			continue
		}
		delete(t.segs, s)
		if r.owned {
			unlink = append(unlink, s)
		}
	}
	log := t.log
	t.mu.Unlock()

	for _, p := range peers {
		t.refuse(p.conn, reply{Kind: kindBadMetadata, Error: "the object was garbage-collected at the source"})
	}
	unpin(obj.tensors)
	var errs []error
	for _, s := range unlink {
		shmem.Default.Forget(s)
		if err := shmem.Unlink(s); err != nil && !errors.Is(err, shmem.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	log.Debug("collected", "object", id, "unlinked", len(unlink))
	if err := errors.Join(errs...); err != nil {
		return nil, fail(id, transport.OpGarbageCollect, err)
	}
	return &transport.GarbageCollectResponse{}, nil
}

// Abort implements transport.Transport (both sides): pending and later
// Send/Receive calls of the object on this instance fail with
// transport.ErrAborted until it is garbage-collected, and destinations
// waiting at this source are told, so they fail at once too.
func (t *Transport) Abort(_ context.Context, req *transport.AbortRequest) (*transport.AbortResponse, error) {
	if req == nil {
		req = &transport.AbortRequest{}
	}
	id := req.ObjectID
	if err := transport.ValidObjectID(id); err != nil {
		return nil, fail(id, transport.OpAbort, err)
	}
	reason := req.Reason
	if reason == "" {
		reason = "no reason given"
	}
	t.aborts.Abort(id, reason) // cancels this instance's pending calls
	t.mu.Lock()
	var peers []*peer
	if obj := t.objects[id]; obj != nil {
		peers = obj.takePeers()
	}
	log := t.log
	t.mu.Unlock()
	for _, p := range peers {
		t.refuse(p.conn, reply{Kind: kindAborted, Error: reason})
	}
	log.Debug("aborted", "object", id, "reason", reason, "waiting_destinations", len(peers))
	return &transport.AbortResponse{}, nil
}

// ---------------------------------------------------------------- checks

// sameMetas checks a request's layout (if given) against the object's.
func sameMetas(req, have []transport.TensorMeta) error {
	if req == nil {
		return nil
	}
	if len(req) != len(have) {
		return fmt.Errorf("%w: request lists %d tensors, object has %d", transport.ErrBadMetadata, len(req), len(have))
	}
	for i := range req {
		if !req[i].Equal(have[i]) {
			return fmt.Errorf("%w: tensor %d is %s, request says %s", transport.ErrBadMetadata, i, have[i], req[i])
		}
	}
	return nil
}

// checkTargets verifies caller-supplied targets against the layout and that
// their bytes exist.
func checkTargets(metas []transport.TensorMeta, targets []transport.Tensor) error {
	if len(targets) != len(metas) {
		return fmt.Errorf("%w: %d targets for %d tensors", transport.ErrBadMetadata, len(targets), len(metas))
	}
	for i, tg := range targets {
		if err := tg.Validate(); err != nil {
			return fmt.Errorf("target %d: %w", i, err)
		}
		if !tg.Meta().Equal(metas[i]) {
			return fmt.Errorf("%w: target %d is %s, tensor is %s", transport.ErrBadMetadata, i, tg.Meta(), metas[i])
		}
		if tg.Buffer.Length == 0 {
			continue
		}
		size, err := shmem.Stat(tg.Buffer.Segment)
		if err != nil {
			return fmt.Errorf("%w: target %d: %v", transport.ErrBadMetadata, i, err)
		}
		if tg.Buffer.Offset > size || tg.Buffer.Length > size-tg.Buffer.Offset {
			return fmt.Errorf("%w: target %d: bytes [%d, %d) outside segment %s of %d bytes", transport.ErrBadMetadata,
				i, tg.Buffer.Offset, tg.Buffer.Offset+tg.Buffer.Length, tg.Buffer.Segment, size)
		}
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

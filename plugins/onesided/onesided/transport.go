package onesided

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// Name is the transport's backend name. The plugin binary is installed as
// <plugin_dir>/goray-transport-onesided.
const Name = "onesided"

// Version is the release reported to the host (plugin.Versioned).
const Version = "0.1.0"

// Option configures New.
type Option func(*Transport)

// WithConfig sets the configuration (default DefaultConfig()). The plugin
// binary gets its configuration from the node's HCL through Configure.
func WithConfig(c Config) Option { return func(t *Transport) { t.cfg = c } }

// WithKV sets the KV where agents publish their metadata (default: see
// AgentOptions.KV). Tests share one plugin.NewMemoryKV between instances.
func WithKV(kv plugin.KV) Option { return func(t *Transport) { t.kv = kv } }

// WithLogger sets the logger (nil: no logging).
func WithLogger(l hclog.Logger) Option { return func(t *Transport) { t.SetLogger(l) } }

// Transport is the one-sided transport: a transport.Transport around one
// Agent, started by Configure or by the first call that needs it. Its
// methods may be called concurrently. Create it with New.
type Transport struct {
	aborts transport.Aborts

	mu     sync.Mutex
	cfg    Config
	kv     plugin.KV
	log    hclog.Logger
	agent  *Agent
	closed bool
}

// New returns a transport. Its agent starts at Configure or at first use.
func New(opts ...Option) *Transport {
	t := &Transport{cfg: DefaultConfig(), log: hclog.NewNullLogger()}
	for _, o := range opts {
		o(t)
	}
	return t
}

var (
	_ transport.Transport  = (*Transport)(nil)
	_ plugin.Configurable  = (*Transport)(nil)
	_ plugin.HealthChecker = (*Transport)(nil)
	_ plugin.Versioned     = (*Transport)(nil)
	_ plugin.LoggerSetter  = (*Transport)(nil)
)

func fail(objectID, op string, err error) error {
	return &transport.TransferError{ObjectID: objectID, Op: op, Err: err}
}

// ConfigSpec implements plugin.Configurable: Config is the config block.
func (t *Transport) ConfigSpec() plugin.ConfigSpec { return plugin.TypedConfig(t.Configure) }

// Configure validates cfg and starts the agent (binding the read server, so
// a busy address is reported here). A later Configure with another
// configuration replaces the agent.
func (t *Transport) Configure(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	if t.agent != nil {
		if cfg == t.cfg {
			return nil
		}
		_ = t.agent.Close()
		t.agent = nil
	}
	t.cfg = cfg
	_, err := t.startLocked(ctx)
	return err
}

func (t *Transport) startLocked(ctx context.Context) (*Agent, error) {
	if t.agent != nil {
		return t.agent, nil
	}
	a, err := NewAgent(ctx, t.cfg, AgentOptions{KV: t.kv, Logger: t.log})
	if err != nil {
		return nil, err
	}
	t.agent = a
	return a, nil
}

// Agent returns the transport's agent, starting it if needed.
func (t *Transport) Agent(ctx context.Context) (*Agent, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrClosed
	}
	return t.startLocked(ctx)
}

// Health implements plugin.HealthChecker: healthy while the agent's
// read server accepts connections (and before the agent starts).
func (t *Transport) Health(ctx context.Context) error {
	t.mu.Lock()
	a, closed := t.agent, t.closed
	t.mu.Unlock()
	switch {
	case closed:
		return ErrClosed
	case a == nil:
		return nil
	}
	return a.Health(ctx)
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

// Close closes the agent (see Agent.Close). Calls after Close fail with
// ErrClosed.
func (t *Transport) Close() error {
	t.mu.Lock()
	a := t.agent
	t.agent, t.closed = nil, true
	t.mu.Unlock()
	if a == nil {
		return nil
	}
	return a.Close()
}

// Info implements transport.Transport: one-sided, abortable, across nodes.
func (t *Transport) Info(context.Context, *transport.InfoRequest) (*transport.InfoResponse, error) {
	return &transport.InfoResponse{Name: Name, OneSided: true, CanAbort: true, SameNode: false}, nil
}

// ActorHasTransport implements transport.Transport: every actor of a node
// running the plugin can use it.
func (t *Transport) ActorHasTransport(context.Context, *transport.ActorHasTransportRequest) (*transport.ActorHasTransportResponse, error) {
	return &transport.ActorHasTransportResponse{HasTransport: true}, nil
}

// ExtractMetadata implements transport.Transport: it registers the tensors'
// segments with the agent and returns the object's TransportData.
func (t *Transport) ExtractMetadata(ctx context.Context, req *transport.ExtractMetadataRequest) (*transport.ExtractMetadataResponse, error) {
	if req == nil {
		req = &transport.ExtractMetadataRequest{}
	}
	id := req.ObjectID
	if err := transport.ValidObjectID(id); err != nil {
		return nil, fail(id, transport.OpExtractMetadata, err)
	}
	a, err := t.Agent(ctx)
	if err != nil {
		return nil, fail(id, transport.OpExtractMetadata, err)
	}
	td, err := a.Extract(ctx, id, req.Source, req.Tensors, req.TransferOwnership)
	if err != nil {
		return nil, fail(id, transport.OpExtractMetadata, err)
	}
	metas := make([]transport.TensorMeta, len(req.Tensors))
	for i, tn := range req.Tensors {
		metas[i] = tn.Meta()
	}
	return &transport.ExtractMetadataResponse{Tensors: metas, TransportData: td}, nil
}

// communicatorData is what CommunicatorMetadata returns: the reading
// agent's name (informational; Receive does not need it).
type communicatorData struct {
	V     int    `json:"v"`
	Agent string `json:"agent"`
}

// CommunicatorMetadata implements transport.Transport: it names the agent
// that will read.
func (t *Transport) CommunicatorMetadata(ctx context.Context, req *transport.CommunicatorMetadataRequest) (*transport.CommunicatorMetadataResponse, error) {
	if req == nil {
		req = &transport.CommunicatorMetadataRequest{}
	}
	if err := transport.ValidObjectID(req.ObjectID); err != nil {
		return nil, fail(req.ObjectID, transport.OpCommunicatorMetadata, err)
	}
	a, err := t.Agent(ctx)
	if err != nil {
		return nil, fail(req.ObjectID, transport.OpCommunicatorMetadata, err)
	}
	b, _ := json.Marshal(communicatorData{V: 1, Agent: a.Name()})
	return &transport.CommunicatorMetadataResponse{Data: b}, nil
}

// Send implements transport.Transport: the transport is one-sided.
func (t *Transport) Send(_ context.Context, req *transport.SendRequest) (*transport.SendResponse, error) {
	var id string
	if req != nil {
		id = req.ObjectID
	}
	return nil, fail(id, transport.OpSend, fmt.Errorf("%w: onesided is one-sided; the destination reads", transport.ErrNotSupported))
}

// Receive implements transport.Transport. Without targets, a source of
// this shared-memory domain hands out its own buffers (zero copy);
// otherwise the bytes are read (one memcpy within the domain, TCP across)
// into the targets or into segments allocated for the caller (listed in
// Allocated). The read is a posted Xfer waited for with the request's
// context: a deadline gives transport.ErrTimeout, Abort
// transport.ErrAborted.
func (t *Transport) Receive(ctx context.Context, req *transport.ReceiveRequest) (*transport.ReceiveResponse, error) {
	if req == nil {
		req = &transport.ReceiveRequest{}
	}
	id := req.ObjectID
	if err := transport.ValidObjectID(id); err != nil {
		return nil, fail(id, transport.OpReceive, err)
	}
	a, err := t.Agent(ctx)
	if err != nil {
		return nil, fail(id, transport.OpReceive, err)
	}
	actx, done, err := t.aborts.Begin(ctx, id)
	if err != nil {
		return nil, fail(id, transport.OpReceive, err)
	}
	defer done()
	r, err := t.receive(actx, a, req)
	if err != nil {
		if actx.Err() != nil {
			err = transport.ContextError(actx)
		}
		return nil, fail(id, transport.OpReceive, err)
	}
	return r, nil
}

func (t *Transport) receive(ctx context.Context, a *Agent, req *transport.ReceiveRequest) (*transport.ReceiveResponse, error) {
	if req.Tensors != nil && req.Targets != nil {
		if err := checkTargets(req.Tensors, req.Targets); err != nil {
			return nil, err
		}
	}
	td := req.TransportData
	if len(td) == 0 {
		var err error
		if td, err = a.WaitExtracted(ctx, req.ObjectID); err != nil {
			return nil, err
		}
	}
	d, err := parseTransportData(req.ObjectID, td)
	if err != nil {
		return nil, err
	}
	metas := d.metas()
	if req.Tensors != nil {
		if err := sameMetas(req.Tensors, metas); err != nil {
			return nil, err
		}
	}
	if req.Targets != nil {
		if err := checkTargets(metas, req.Targets); err != nil {
			return nil, err
		}
	}
	desc, idx := d.desc()
	out := make([]transport.Tensor, len(metas))
	for i, m := range metas {
		out[i] = transport.Tensor{DType: m.DType, Shape: m.Shape, Device: m.Device}
	}
	if req.Targets == nil {
		bufs, err := a.Locate(ctx, desc)
		switch {
		case err == nil:
			for i, j := range idx {
				if j >= 0 {
					out[i].Buffer = bufs[j]
				}
			}
			return &transport.ReceiveResponse{Tensors: out}, nil
		case !errors.Is(err, ErrNotLocal):
			return nil, err
		}
	}
	// Destinations: the targets, or segments allocated for the caller,
	// passed as files (see Read).
	var allocated []string
	var files []*os.File
	release := func(ok bool) {
		for _, f := range files {
			_ = f.Close()
		}
		if !ok {
			for _, s := range allocated {
				_ = shmem.Unlink(s)
			}
		}
	}
	for i, j := range idx {
		if req.Targets != nil {
			tg := req.Targets[i]
			out[i] = tg
			out[i].Shape = slices.Clone(metas[i].Shape)
			if j < 0 {
				continue
			}
			f, err := openSegment(tg.Buffer.Segment, tg.Buffer.Offset, tg.Buffer.Length)
			if err != nil {
				release(false)
				return nil, badMeta(nil, "target %d: %v", i, err)
			}
			files = append(files, f)
			desc.Reads[j].DstFile, desc.Reads[j].DstOffset = f, tg.Buffer.Offset
			continue
		}
		if j < 0 {
			continue
		}
		n := desc.Reads[j].Region.Length
		seg, err := shmem.Create(shmem.NewName(a.cfg.SegmentPrefix), n)
		var f *os.File
		if err == nil {
			allocated = append(allocated, seg.Name())
			_ = seg.Close()
			f, err = openSegment(seg.Name(), 0, n)
		}
		if err != nil {
			release(false)
			return nil, fmt.Errorf("allocating %d bytes for tensor %d: %w", n, i, err)
		}
		files = append(files, f)
		out[i].Buffer = transport.Buffer{Segment: seg.Name(), Length: n}
		desc.Reads[j].DstFile = f
	}
	x, err := a.PostRead(ctx, desc)
	if err != nil {
		release(false)
		return nil, err
	}
	if err = x.Wait(ctx); err != nil {
		// The request's deadline passed or the object was aborted: stop
		// the read before the buffers go (a no-op if it already ended).
		x.Abort(err.Error())
		<-x.Done()
		release(false)
		return nil, err
	}
	if err != nil {
		release(false)
		return nil, err
	}
	release(true)
	r := &transport.ReceiveResponse{Tensors: out}
	r.Allocated = allocated
	return r, nil
}

// sameMetas checks the request's layouts against the object's.
func sameMetas(req, have []transport.TensorMeta) error {
	if len(req) != len(have) {
		return badMeta(nil, "request lists %d tensors, object has %d", len(req), len(have))
	}
	for i := range have {
		if !req[i].Equal(have[i]) {
			return badMeta(nil, "tensor %d is %s, request says %s", i, have[i], req[i])
		}
	}
	return nil
}

// checkTargets verifies caller-supplied targets against the layouts.
func checkTargets(metas []transport.TensorMeta, targets []transport.Tensor) error {
	if len(targets) != len(metas) {
		return badMeta(nil, "%d targets for %d tensors", len(targets), len(metas))
	}
	for i, tg := range targets {
		if _, err := checkTensor(i, tg); err != nil {
			return fmt.Errorf("target: %w", err)
		}
		if !tg.Meta().Equal(metas[i]) {
			return badMeta(nil, "target %d is %s, tensor is %s", i, tg.Meta(), metas[i])
		}
	}
	return nil
}

// GarbageCollect implements transport.Transport: it ends the object's
// extraction (see Agent.Collect) and clears its aborted mark.
func (t *Transport) GarbageCollect(ctx context.Context, req *transport.GarbageCollectRequest) (*transport.GarbageCollectResponse, error) {
	if req == nil {
		req = &transport.GarbageCollectRequest{}
	}
	id := req.ObjectID
	if err := transport.ValidObjectID(id); err != nil {
		return nil, fail(id, transport.OpGarbageCollect, err)
	}
	t.aborts.Forget(id)
	a, err := t.Agent(ctx)
	if err != nil {
		return nil, fail(id, transport.OpGarbageCollect, err)
	}
	if err := a.Collect(ctx, id, req.TransportData); err != nil {
		return nil, fail(id, transport.OpGarbageCollect, err)
	}
	return &transport.GarbageCollectResponse{}, nil
}

// Abort implements transport.Transport: pending and later receives of the
// object on this instance fail with transport.ErrAborted until it is
// collected; their reads stop at once.
func (t *Transport) Abort(_ context.Context, req *transport.AbortRequest) (*transport.AbortResponse, error) {
	if req == nil {
		req = &transport.AbortRequest{}
	}
	if err := transport.ValidObjectID(req.ObjectID); err != nil {
		return nil, fail(req.ObjectID, transport.OpAbort, err)
	}
	t.aborts.Abort(req.ObjectID, req.Reason)
	return &transport.AbortResponse{}, nil
}

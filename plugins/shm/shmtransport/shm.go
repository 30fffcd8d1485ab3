// Package shmtransport implements goray's shared-memory tensor transport: one-sided,
// same node, zero copy.
//
// A source's tensors already live in shared-memory segments (see
// transport.Tensor). ExtractMetadata pins them (a reference count per
// segment) and publishes a small manifest segment, "goray-t-m-<object id>",
// holding the buffer handles and layout; the transport data is the
// manifest's contents. Receive on the destination checks the manifest and
// returns tensors whose buffers are the source's own: the destination maps
// the same pages, nothing is copied and no byte crosses a socket. With
// target tensors it copies once into them. GarbageCollect removes the
// manifest and unlinks the segments it owns once no object references them.
//
// A Receive without transport data waits for the manifest to appear, so a
// destination may start receiving before the source has produced the
// object; Abort (or the context) ends the wait.
package shmtransport

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// Name is the transport's backend name.
const Name = "shm"

// ManifestPrefix starts the name of every manifest segment.
const ManifestPrefix = shmem.Prefix + "m-"

// maxManifest bounds the size of transport data accepted.
const maxManifest = 4 << 20

// copyChunk is how many bytes a receive into targets copies between checks
// of its context.
const copyChunk = 8 << 20

// ManifestName returns the name of the manifest segment of an object.
func ManifestName(objectID string) string { return ManifestPrefix + objectID }

// Option configures the transport.
type Option func(*Transport)

// WithLogger sets the logger (nil: no logging).
func WithLogger(l hclog.Logger) Option {
	return func(t *Transport) {
		if l != nil {
			t.log = l
		}
	}
}

// WithMaxPoll sets the longest interval between two looks for the manifest
// of an object a Receive waits for (default 20 ms).
func WithMaxPoll(d time.Duration) Option {
	return func(t *Transport) {
		if d > 0 {
			t.maxPoll.Store(int64(d))
		}
	}
}

// Transport is the shared-memory transport. Create it with New.
type Transport struct {
	log     hclog.Logger
	maxPoll atomic.Int64 // time.Duration
	aborts  transport.Aborts
	// maps maps segments for receives into targets; it keeps no idle
	// mappings so the plugin never holds collected memory.
	maps *shmem.Cache

	mu      sync.Mutex
	objects map[string]*object // extracted on this instance
	segs    map[string]*segRef // pinned segments
}

type object struct {
	manifest []byte
	segments []string // unique
}

type segRef struct {
	refs  int
	owned bool
}

// New returns a shared-memory transport.
func New(opts ...Option) transport.Transport {
	t := &Transport{
		log:     hclog.NewNullLogger(),
		maps:    shmem.NewCache(0),
		objects: make(map[string]*object),
		segs:    make(map[string]*segRef),
	}
	t.maxPoll.Store(int64(DefaultMaxPoll))
	for _, o := range opts {
		o(t)
	}
	return t
}

// DefaultMaxPoll is the default of WithMaxPoll and of the max_poll setting.
const DefaultMaxPoll = 20 * time.Millisecond

// Config is the plugin's `config { ... }` block.
type Config struct {
	// MaxPoll is the longest interval between two looks for an object a
	// receive waits for (positive).
	MaxPoll time.Duration `hcl:"max_poll" default:"20ms" doc:"Longest interval between two looks for an object a receive waits for."`
}

// ConfigSpec implements plugin.Configurable: Config is the plugin's config
// block.
func (t *Transport) ConfigSpec() plugin.ConfigSpec { return plugin.TypedConfig(t.Configure) }

// Configure applies c.
func (t *Transport) Configure(_ context.Context, c Config) error {
	if c.MaxPoll <= 0 {
		return fmt.Errorf("max_poll: want a positive duration, got %v", c.MaxPoll)
	}
	t.maxPoll.Store(int64(c.MaxPoll))
	return nil
}

// MaxPoll returns the configured max_poll.
func (t *Transport) MaxPoll() time.Duration { return time.Duration(t.maxPoll.Load()) }

// SetLogger implements plugin.LoggerSetter.
func (t *Transport) SetLogger(l hclog.Logger) {
	if l != nil {
		t.log = l
	}
}

// manifest is the transport data: what a destination needs to find the
// source's bytes.
type manifest struct {
	V      int    `json:"v"`
	Object string `json:"object"`
	Source string `json:"source,omitempty"`
	Nonce  string `json:"nonce"`
	// Owned is set when the source handed the segments to the transport.
	Owned   bool      `json:"owned,omitempty"`
	Tensors []mtensor `json:"tensors"`
}

type mtensor struct {
	DType   string  `json:"dtype"`
	Shape   []int64 `json:"shape"`
	Device  string  `json:"device,omitempty"`
	Segment string  `json:"segment,omitempty"`
	Offset  int64   `json:"offset,omitempty"`
	Length  int64   `json:"length"`
}

func (m mtensor) tensor() transport.Tensor {
	return transport.Tensor{
		DType:  transport.DType(m.DType),
		Shape:  slices.Clone(m.Shape),
		Device: m.Device,
		Buffer: transport.Buffer{Segment: m.Segment, Offset: m.Offset, Length: m.Length},
	}
}

// checkTensor verifies a tensor's layout, device and that its bytes exist.
func checkTensor(i int, t transport.Tensor) error {
	if err := t.Validate(); err != nil {
		return fmt.Errorf("tensor %d: %w", i, err)
	}
	if !t.Meta().IsCPU() {
		return fmt.Errorf("tensor %d is on device %q: %w (shm moves cpu tensors only)", i, t.Device, transport.ErrNotSupported)
	}
	if t.Buffer.Length == 0 {
		return nil
	}
	size, err := shmem.Stat(t.Buffer.Segment)
	if err != nil {
		return fmt.Errorf("%w: tensor %d: %v", transport.ErrBadMetadata, i, err)
	}
	if t.Buffer.Offset > size || t.Buffer.Length > size-t.Buffer.Offset {
		return fmt.Errorf("%w: tensor %d: bytes [%d, %d) outside segment %s of %d bytes",
			transport.ErrBadMetadata, i, t.Buffer.Offset, t.Buffer.Offset+t.Buffer.Length, t.Buffer.Segment, size)
	}
	return nil
}

func parseManifest(objectID string, data []byte) (*manifest, error) {
	if len(data) > maxManifest {
		return nil, fmt.Errorf("%w: transport data of %d bytes is too large", transport.ErrBadMetadata, len(data))
	}
	var m manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: transport data does not parse: %v", transport.ErrBadMetadata, err)
	}
	if m.V != 1 {
		return nil, fmt.Errorf("%w: transport data version %d, want 1", transport.ErrBadMetadata, m.V)
	}
	if m.Object != objectID {
		return nil, fmt.Errorf("%w: transport data is for object %.40q", transport.ErrBadMetadata, m.Object)
	}
	return &m, nil
}

// Info implements transport.Transport.
func (t *Transport) Info(context.Context, *transport.InfoRequest) (*transport.InfoResponse, error) {
	return &transport.InfoResponse{Name: Name, OneSided: true, CanAbort: true, SameNode: true}, nil
}

// ActorHasTransport implements transport.Transport: every process of the
// node can map /dev/shm.
func (t *Transport) ActorHasTransport(context.Context, *transport.ActorHasTransportRequest) (*transport.ActorHasTransportResponse, error) {
	return &transport.ActorHasTransportResponse{HasTransport: true}, nil
}

// CommunicatorMetadata implements transport.Transport; shm needs none.
func (t *Transport) CommunicatorMetadata(_ context.Context, req *transport.CommunicatorMetadataRequest) (*transport.CommunicatorMetadataResponse, error) {
	if req == nil {
		req = &transport.CommunicatorMetadataRequest{}
	}
	if err := transport.ValidObjectID(req.ObjectID); err != nil {
		return nil, &transport.TransferError{ObjectID: req.ObjectID, Op: transport.OpCommunicatorMetadata, Err: err}
	}
	return &transport.CommunicatorMetadataResponse{}, nil
}

// Send implements transport.Transport: shm is one-sided.
func (t *Transport) Send(_ context.Context, req *transport.SendRequest) (*transport.SendResponse, error) {
	var id string
	if req != nil {
		id = req.ObjectID
	}
	return nil, transport.Errorf(id, transport.OpSend, "%w: shm is one-sided; the destination reads", transport.ErrNotSupported)
}

// ExtractMetadata implements transport.Transport: it checks the tensors,
// pins their segments and publishes the object's manifest.
func (t *Transport) ExtractMetadata(ctx context.Context, req *transport.ExtractMetadataRequest) (*transport.ExtractMetadataResponse, error) {
	if req == nil {
		req = &transport.ExtractMetadataRequest{}
	}
	id := req.ObjectID
	fail := func(err error) (*transport.ExtractMetadataResponse, error) {
		return nil, &transport.TransferError{ObjectID: id, Op: transport.OpExtractMetadata, Err: err}
	}
	if err := transport.ValidObjectID(id); err != nil {
		return fail(err)
	}
	if err := ctx.Err(); err != nil {
		return fail(transport.ContextError(ctx))
	}
	m := manifest{V: 1, Object: id, Source: req.Source, Nonce: nonce(), Owned: req.TransferOwnership, Tensors: make([]mtensor, len(req.Tensors))}
	metas := make([]transport.TensorMeta, len(req.Tensors))
	var segs []string
	for i, tn := range req.Tensors {
		if err := checkTensor(i, tn); err != nil {
			return fail(err)
		}
		metas[i] = tn.Meta()
		m.Tensors[i] = mtensor{DType: string(tn.DType), Shape: tn.Shape, Device: tn.Device, Length: tn.Buffer.Length}
		if tn.Buffer.Length > 0 {
			m.Tensors[i].Segment = tn.Buffer.Segment
			m.Tensors[i].Offset = tn.Buffer.Offset
			if !slices.Contains(segs, tn.Buffer.Segment) {
				segs = append(segs, tn.Buffer.Segment)
			}
		}
	}
	data, err := json.Marshal(m)
	if err != nil {
		return fail(err)
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.objects[id]; ok {
		return fail(fmt.Errorf("%w: object already extracted", transport.ErrBadMetadata))
	}
	if err := shmem.Publish(ManifestName(id), data); err != nil {
		if errors.Is(err, shmem.ErrExists) {
			return fail(fmt.Errorf("%w: object already published by another source", transport.ErrBadMetadata))
		}
		return fail(err)
	}
	t.objects[id] = &object{manifest: data, segments: segs}
	for _, s := range segs {
		r := t.segs[s]
		if r == nil {
			r = &segRef{}
			t.segs[s] = r
		}
		r.refs++
		r.owned = r.owned || req.TransferOwnership
	}
	t.log.Debug("extracted", "object", id, "tensors", len(req.Tensors), "segments", len(segs), "owned", req.TransferOwnership)
	return &transport.ExtractMetadataResponse{Tensors: metas, TransportData: data}, nil
}

func nonce() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Receive implements transport.Transport.
func (t *Transport) Receive(ctx context.Context, req *transport.ReceiveRequest) (*transport.ReceiveResponse, error) {
	if req == nil {
		req = &transport.ReceiveRequest{}
	}
	id := req.ObjectID
	fail := func(err error) (*transport.ReceiveResponse, error) {
		return nil, &transport.TransferError{ObjectID: id, Op: transport.OpReceive, Err: err}
	}
	if err := transport.ValidObjectID(id); err != nil {
		return fail(err)
	}
	ctx, done, err := t.aborts.Begin(ctx, id)
	if err != nil {
		return fail(err)
	}
	defer done()
	// Check what can be checked before waiting.
	if req.Tensors != nil && req.Targets != nil {
		if err := checkTargets(req.Tensors, req.Targets); err != nil {
			return fail(err)
		}
	}
	var m *manifest
	if len(req.TransportData) == 0 {
		data, err := t.waitManifest(ctx, id)
		if err != nil {
			return fail(err)
		}
		if m, err = parseManifest(id, data); err != nil {
			return fail(err)
		}
	} else {
		if m, err = parseManifest(id, req.TransportData); err != nil {
			return fail(err)
		}
		cur, err := shmem.ReadAll(ManifestName(id), maxManifest)
		switch {
		case errors.Is(err, shmem.ErrNotFound):
			return fail(fmt.Errorf("%w: object unknown or already collected", transport.ErrBadMetadata))
		case err != nil:
			return fail(err)
		case !bytes.Equal(cur, req.TransportData):
			return fail(fmt.Errorf("%w: transport data is stale (the object was extracted again)", transport.ErrBadMetadata))
		}
	}
	tensors := make([]transport.Tensor, len(m.Tensors))
	metas := make([]transport.TensorMeta, len(m.Tensors))
	for i, mt := range m.Tensors {
		tensors[i] = mt.tensor()
		metas[i] = tensors[i].Meta()
		if err := checkTensor(i, tensors[i]); err != nil {
			return fail(err)
		}
	}
	if req.Tensors != nil {
		if len(req.Tensors) != len(metas) {
			return fail(fmt.Errorf("%w: request lists %d tensors, object has %d", transport.ErrBadMetadata, len(req.Tensors), len(metas)))
		}
		for i := range metas {
			if !req.Tensors[i].Equal(metas[i]) {
				return fail(fmt.Errorf("%w: tensor %d is %s, request says %s", transport.ErrBadMetadata, i, metas[i], req.Tensors[i]))
			}
		}
	}
	if req.Targets == nil {
		return &transport.ReceiveResponse{Tensors: tensors}, nil
	}
	if err := checkTargets(metas, req.Targets); err != nil {
		return fail(err)
	}
	out := make([]transport.Tensor, len(tensors))
	for i := range tensors {
		if err := t.copyInto(ctx, req.Targets[i], tensors[i]); err != nil {
			return fail(fmt.Errorf("tensor %d: %w", i, err))
		}
		out[i] = req.Targets[i]
		out[i].Shape = slices.Clone(metas[i].Shape)
	}
	return &transport.ReceiveResponse{Tensors: out}, nil
}

// checkTargets verifies caller-supplied targets against the object's layout.
func checkTargets(metas []transport.TensorMeta, targets []transport.Tensor) error {
	if len(targets) != len(metas) {
		return fmt.Errorf("%w: %d targets for %d tensors", transport.ErrBadMetadata, len(targets), len(metas))
	}
	for i, tg := range targets {
		if err := checkTensor(i, tg); err != nil {
			return fmt.Errorf("target: %w", err)
		}
		if !tg.Meta().Equal(metas[i]) {
			return fmt.Errorf("%w: target %d is %s, tensor is %s", transport.ErrBadMetadata, i, tg.Meta(), metas[i])
		}
	}
	return nil
}

// waitManifest waits for the object's manifest to be published.
func (t *Transport) waitManifest(ctx context.Context, id string) ([]byte, error) {
	delay := 500 * time.Microsecond
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		data, err := shmem.ReadAll(ManifestName(id), maxManifest)
		if err == nil {
			return data, nil
		}
		if !errors.Is(err, shmem.ErrNotFound) {
			return nil, err
		}
		if timer == nil {
			timer = time.NewTimer(delay)
		} else {
			timer.Reset(delay)
		}
		select {
		case <-ctx.Done():
			return nil, transport.ContextError(ctx)
		case <-timer.C:
		}
		delay = min(2*delay, t.MaxPoll())
	}
}

// copyInto copies src's bytes into dst (one memcpy, in chunks so a cancel
// or abort stops a big copy).
func (t *Transport) copyInto(ctx context.Context, dst, src transport.Tensor) error {
	if src.Buffer.Length == 0 {
		return nil
	}
	from, err := t.maps.Acquire(src.Buffer.Segment, src.Buffer.Offset, src.Buffer.Length)
	if err != nil {
		return fmt.Errorf("%w: %v", transport.ErrBadMetadata, err)
	}
	defer t.maps.Release(src.Buffer.Segment)
	to, err := t.maps.Acquire(dst.Buffer.Segment, dst.Buffer.Offset, dst.Buffer.Length)
	if err != nil {
		return fmt.Errorf("%w: target: %v", transport.ErrBadMetadata, err)
	}
	defer t.maps.Release(dst.Buffer.Segment)
	for off := 0; off < len(from); off += copyChunk {
		if ctx.Err() != nil {
			return transport.ContextError(ctx)
		}
		end := min(off+copyChunk, len(from))
		copy(to[off:end], from[off:end])
	}
	return nil
}

// GarbageCollect implements transport.Transport: it removes the manifest
// and gives owned segments no other object references back to the node's
// segment pool (shmem.Recycle; unlinked when there is none).
func (t *Transport) GarbageCollect(_ context.Context, req *transport.GarbageCollectRequest) (*transport.GarbageCollectResponse, error) {
	if req == nil {
		req = &transport.GarbageCollectRequest{}
	}
	id := req.ObjectID
	if err := transport.ValidObjectID(id); err != nil {
		return nil, &transport.TransferError{ObjectID: id, Op: transport.OpGarbageCollect, Err: err}
	}
	t.aborts.Forget(id)
	t.mu.Lock()
	defer t.mu.Unlock()
	obj := t.objects[id]
	if obj == nil {
		if err := t.collectOrphan(id, req.TransportData); err != nil {
			return nil, &transport.TransferError{ObjectID: id, Op: transport.OpGarbageCollect, Err: err}
		}
		return &transport.GarbageCollectResponse{}, nil
	}
	delete(t.objects, id)
	var errs []error
	if err := shmem.Unlink(ManifestName(id)); err != nil && !errors.Is(err, shmem.ErrNotFound) {
		errs = append(errs, err)
	}
	freed := 0
	for _, s := range obj.segments {
		r := t.segs[s]
		if r == nil {
			continue
		}
		r.refs--
		if r.refs > 0 {
			continue
		}
		delete(t.segs, s)
		if !r.owned {
			continue
		}
		if err := shmem.Recycle(s); err != nil && !errors.Is(err, shmem.ErrNotFound) {
			errs = append(errs, err)
			continue
		}
		freed++
	}
	t.log.Debug("collected", "object", id, "freed", freed)
	if err := errors.Join(errs...); err != nil {
		t.log.Warn("garbage collect", "object", id, "error", err)
		return nil, &transport.TransferError{ObjectID: id, Op: transport.OpGarbageCollect, Err: err}
	}
	return &transport.GarbageCollectResponse{}, nil
}

// collectOrphan collects an object this instance does not know, e.g. one
// extracted before the plugin restarted: if the transport data matches the
// published manifest, the manifest is removed and, when the segments were
// owned, each segment no other manifest references is freed (pooled or unlinked).
func (t *Transport) collectOrphan(id string, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	cur, err := shmem.ReadAll(ManifestName(id), maxManifest)
	if err != nil || !bytes.Equal(cur, data) {
		return nil // gone already, or not ours to remove
	}
	m, err := parseManifest(id, cur)
	if err != nil {
		return err
	}
	if err := shmem.Unlink(ManifestName(id)); err != nil && !errors.Is(err, shmem.ErrNotFound) {
		return err
	}
	if !m.Owned {
		return nil
	}
	inUse := map[string]bool{}
	for s := range t.segs {
		inUse[s] = true
	}
	others, err := shmem.List(ManifestPrefix)
	if err != nil {
		return err
	}
	for _, name := range others {
		raw, err := shmem.ReadAll(name, maxManifest)
		if err != nil {
			continue
		}
		var om manifest
		if json.Unmarshal(raw, &om) != nil {
			continue
		}
		for _, mt := range om.Tensors {
			inUse[mt.Segment] = true
		}
	}
	var errs []error
	for _, mt := range m.Tensors {
		if mt.Segment == "" || inUse[mt.Segment] {
			continue
		}
		inUse[mt.Segment] = true // once
		if err := shmem.Recycle(mt.Segment); err != nil && !errors.Is(err, shmem.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	t.log.Info("collected an object extracted by an earlier instance", "object", id)
	return errors.Join(errs...)
}

// Abort implements transport.Transport: pending and later receives of the
// object on this instance fail with transport.ErrAborted until it is
// collected.
func (t *Transport) Abort(_ context.Context, req *transport.AbortRequest) (*transport.AbortResponse, error) {
	if req == nil {
		req = &transport.AbortRequest{}
	}
	if err := transport.ValidObjectID(req.ObjectID); err != nil {
		return nil, &transport.TransferError{ObjectID: req.ObjectID, Op: transport.OpAbort, Err: err}
	}
	t.aborts.Abort(req.ObjectID, req.Reason)
	t.log.Debug("aborted", "object", req.ObjectID, "reason", req.Reason)
	return &transport.AbortResponse{}, nil
}

var (
	_ transport.Transport = (*Transport)(nil)
	_ plugin.Configurable = (*Transport)(nil)
	_ plugin.LoggerSetter = (*Transport)(nil)
)

// Objects returns how many objects this instance holds (extracted and not
// yet collected) and how many segments it pins.
func (t *Transport) Objects() (objects, segments int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.objects), len(t.segs)
}

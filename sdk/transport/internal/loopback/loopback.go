// Package loopback is a two-sided in-process transport used to test the SDK
// (the conformance suite's two-sided branch and the gRPC bridge). Send hands
// the source tensors to a matching Receive, which copies them into targets or
// into fresh segments it allocates for the caller, like a collective
// send/recv pair would.
package loopback

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// Hub connects loopback instances; a Send on one meets a Receive on another
// of the same hub.
type Hub struct {
	mu    sync.Mutex
	slots map[string]chan *payload
}

type payload struct {
	tensors []transport.Tensor
	ack     chan error
}

// NewHub returns an empty hub.
func NewHub() *Hub { return &Hub{slots: make(map[string]chan *payload)} }

func (h *Hub) slot(id string) chan *payload {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.slots[id]
	if ch == nil {
		ch = make(chan *payload)
		h.slots[id] = ch
	}
	return ch
}

func (h *Hub) drop(id string) {
	h.mu.Lock()
	delete(h.slots, id)
	h.mu.Unlock()
}

// Pair returns a source and a destination instance on a fresh hub.
func Pair() (src, dst transport.Transport) {
	h := NewHub()
	return New(h), New(h)
}

// Transport is one loopback instance.
type Transport struct {
	hub    *Hub
	aborts transport.Aborts
	mu     sync.Mutex
	objs   map[string]*object
	refs   map[string]int
	owned  map[string]bool
}

type object struct {
	tensors []transport.Tensor
	data    []byte
}

// New returns an instance attached to hub.
func New(h *Hub) *Transport {
	return &Transport{hub: h, objs: map[string]*object{}, refs: map[string]int{}, owned: map[string]bool{}}
}

type tdata struct {
	Object  string                 `json:"object"`
	Nonce   int64                  `json:"nonce"`
	Tensors []transport.TensorMeta `json:"tensors"`
}

var nonce struct {
	sync.Mutex
	n int64
}

func parse(id string, data []byte) (*tdata, error) {
	var d tdata
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("%w: transport data does not parse: %v", transport.ErrBadMetadata, err)
	}
	if d.Object != id {
		return nil, fmt.Errorf("%w: transport data is for object %q", transport.ErrBadMetadata, d.Object)
	}
	for i, m := range d.Tensors {
		if err := m.Validate(); err != nil {
			return nil, fmt.Errorf("tensor %d: %w", i, err)
		}
	}
	return &d, nil
}

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

func checkBytes(i int, t transport.Tensor) error {
	if err := t.Validate(); err != nil {
		return fmt.Errorf("tensor %d: %w", i, err)
	}
	if t.Buffer.Length == 0 {
		return nil
	}
	size, err := shmem.Stat(t.Buffer.Segment)
	if err != nil {
		return fmt.Errorf("%w: tensor %d: %v", transport.ErrBadMetadata, i, err)
	}
	if t.Buffer.Offset+t.Buffer.Length > size {
		return fmt.Errorf("%w: tensor %d outside its segment", transport.ErrBadMetadata, i)
	}
	return nil
}

// Info implements transport.Transport.
func (t *Transport) Info(context.Context, *transport.InfoRequest) (*transport.InfoResponse, error) {
	return &transport.InfoResponse{Name: "loopback", CanAbort: true, SameNode: true}, nil
}

// ActorHasTransport implements transport.Transport.
func (t *Transport) ActorHasTransport(context.Context, *transport.ActorHasTransportRequest) (*transport.ActorHasTransportResponse, error) {
	return &transport.ActorHasTransportResponse{HasTransport: true}, nil
}

// CommunicatorMetadata implements transport.Transport.
func (t *Transport) CommunicatorMetadata(_ context.Context, req *transport.CommunicatorMetadataRequest) (*transport.CommunicatorMetadataResponse, error) {
	return &transport.CommunicatorMetadataResponse{Data: []byte("loopback")}, nil
}

// ExtractMetadata implements transport.Transport.
func (t *Transport) ExtractMetadata(_ context.Context, req *transport.ExtractMetadataRequest) (*transport.ExtractMetadataResponse, error) {
	if req == nil {
		req = &transport.ExtractMetadataRequest{}
	}
	if err := transport.ValidObjectID(req.ObjectID); err != nil {
		return nil, err
	}
	metas := make([]transport.TensorMeta, len(req.Tensors))
	for i, tn := range req.Tensors {
		if err := checkBytes(i, tn); err != nil {
			return nil, err
		}
		metas[i] = tn.Meta()
	}
	nonce.Lock()
	nonce.n++
	n := nonce.n
	nonce.Unlock()
	data, _ := json.Marshal(tdata{Object: req.ObjectID, Nonce: n, Tensors: metas})
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.objs[req.ObjectID] != nil {
		return nil, fmt.Errorf("%w: object %s already extracted", transport.ErrBadMetadata, req.ObjectID)
	}
	t.objs[req.ObjectID] = &object{tensors: slices.Clone(req.Tensors), data: data}
	seen := map[string]bool{}
	for _, tn := range req.Tensors {
		if s := tn.Buffer.Segment; tn.Buffer.Length > 0 && !seen[s] {
			seen[s] = true
			t.refs[s]++
			t.owned[s] = t.owned[s] || req.TransferOwnership
		}
	}
	return &transport.ExtractMetadataResponse{Tensors: metas, TransportData: data}, nil
}

// Send implements transport.Transport.
func (t *Transport) Send(ctx context.Context, req *transport.SendRequest) (*transport.SendResponse, error) {
	if req == nil {
		req = &transport.SendRequest{}
	}
	id := req.ObjectID
	if err := transport.ValidObjectID(id); err != nil {
		return nil, err
	}
	d, err := parse(id, req.TransportData)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	obj := t.objs[id]
	t.mu.Unlock()
	if obj == nil || !bytes.Equal(obj.data, req.TransportData) {
		return nil, fmt.Errorf("%w: object %s unknown or collected", transport.ErrBadMetadata, id)
	}
	if err := sameMetas(req.Tensors, d.Tensors); err != nil {
		return nil, err
	}
	ctx, done, err := t.aborts.Begin(ctx, id)
	if err != nil {
		return nil, err
	}
	defer done()
	p := &payload{tensors: obj.tensors, ack: make(chan error, 1)}
	select {
	case t.hub.slot(id) <- p:
	case <-ctx.Done():
		return nil, transport.ContextError(ctx)
	}
	select {
	case err := <-p.ack:
		return &transport.SendResponse{}, err
	case <-ctx.Done():
		return nil, transport.ContextError(ctx)
	}
}

// Receive implements transport.Transport.
func (t *Transport) Receive(ctx context.Context, req *transport.ReceiveRequest) (*transport.ReceiveResponse, error) {
	if req == nil {
		req = &transport.ReceiveRequest{}
	}
	id := req.ObjectID
	if err := transport.ValidObjectID(id); err != nil {
		return nil, err
	}
	d, err := parse(id, req.TransportData)
	if err != nil {
		return nil, err
	}
	if err := sameMetas(req.Tensors, d.Tensors); err != nil {
		return nil, err
	}
	if req.Targets != nil {
		if len(req.Targets) != len(d.Tensors) {
			return nil, fmt.Errorf("%w: %d targets for %d tensors", transport.ErrBadMetadata, len(req.Targets), len(d.Tensors))
		}
		for i, tg := range req.Targets {
			if err := checkBytes(i, tg); err != nil {
				return nil, err
			}
			if !tg.Meta().Equal(d.Tensors[i]) {
				return nil, fmt.Errorf("%w: target %d is %s, tensor is %s", transport.ErrBadMetadata, i, tg.Meta(), d.Tensors[i])
			}
		}
	}
	ctx, done, err := t.aborts.Begin(ctx, id)
	if err != nil {
		return nil, err
	}
	defer done()
	var p *payload
	select {
	case p = <-t.hub.slot(id):
	case <-ctx.Done():
		return nil, transport.ContextError(ctx)
	}
	resp, err := receiveInto(ctx, p.tensors, req.Targets)
	p.ack <- err
	return resp, err
}

func receiveInto(ctx context.Context, src, targets []transport.Tensor) (*transport.ReceiveResponse, error) {
	resp := &transport.ReceiveResponse{}
	for i, s := range src {
		var dst transport.Tensor
		if targets != nil {
			dst = targets[i]
		} else {
			var err error
			if dst, err = transport.NewTensor(s.DType, s.Shape...); err != nil {
				return nil, err
			}
			resp.Allocated = append(resp.Allocated, dst.Buffer.Segment)
		}
		from, err := s.Bytes(ctx)
		if err != nil {
			return nil, err
		}
		to, err := dst.Bytes(ctx)
		if err != nil {
			s.Release()
			return nil, err
		}
		copy(to, from)
		s.Release()
		dst.Release()
		resp.Tensors = append(resp.Tensors, dst)
	}
	return resp, nil
}

// GarbageCollect implements transport.Transport.
func (t *Transport) GarbageCollect(_ context.Context, req *transport.GarbageCollectRequest) (*transport.GarbageCollectResponse, error) {
	if req == nil {
		req = &transport.GarbageCollectRequest{}
	}
	if err := transport.ValidObjectID(req.ObjectID); err != nil {
		return nil, err
	}
	t.aborts.Forget(req.ObjectID)
	t.hub.drop(req.ObjectID)
	t.mu.Lock()
	defer t.mu.Unlock()
	obj := t.objs[req.ObjectID]
	if obj == nil {
		return &transport.GarbageCollectResponse{}, nil
	}
	delete(t.objs, req.ObjectID)
	seen := map[string]bool{}
	for _, tn := range obj.tensors {
		s := tn.Buffer.Segment
		if tn.Buffer.Length == 0 || seen[s] {
			continue
		}
		seen[s] = true
		if t.refs[s]--; t.refs[s] > 0 {
			continue
		}
		delete(t.refs, s)
		if t.owned[s] {
			shmem.Default.Forget(s)
			_ = shmem.Unlink(s)
		}
		delete(t.owned, s)
	}
	return &transport.GarbageCollectResponse{}, nil
}

// Abort implements transport.Transport.
func (t *Transport) Abort(_ context.Context, req *transport.AbortRequest) (*transport.AbortResponse, error) {
	if req == nil {
		req = &transport.AbortRequest{}
	}
	if err := transport.ValidObjectID(req.ObjectID); err != nil {
		return nil, err
	}
	t.aborts.Abort(req.ObjectID, req.Reason)
	return &transport.AbortResponse{}, nil
}

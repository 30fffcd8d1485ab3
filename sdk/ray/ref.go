package ray

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"time"

	"github.com/goray-dev/goray/internal/codec"
	"github.com/goray-dev/goray/sdk/ray/internal/core"
	"github.com/goray-dev/goray/sdk/transport"
	"github.com/vmihailenco/msgpack/v5"
)

// Arg is a task or method argument of type T: a value wrapped with V, or a
// Ref[T] whose value is resolved before the call runs.
type Arg[T any] interface {
	argInput() core.ArgInput
	argType(T)
}

// V wraps a plain value as an argument.
func V[T any](v T) Arg[T] { return value[T]{v} }

type value[T any] struct{ v T }

func (v value[T]) argInput() core.ArgInput { return core.ArgInput{Value: v.v} }
func (value[T]) argType(T)                 {}

// ObjectRef is any reference regardless of its value type.
type ObjectRef interface {
	handle() *core.Handle
	// ID returns the object id in hex.
	ID() string
}

// Ref is a reference to an object of type T in the cluster: the future
// result of a task or a value stored with Put. Copies of a Ref share one
// reference; the object is freed once every Ref to it in every process is
// gone (garbage collected or released) and no running task needs it.
//
// A Ref may be passed as an argument, returned from tasks, and stored
// inside other values (struct fields, slices, maps).
//
// Go's collector frees by reachability, not by scope: a Ref held only by a
// variable the code no longer reads may be collected, and its object freed,
// before the variable goes out of scope (in Python, Ray's variable in scope
// keeps its object). Code that needs the object to outlive the Ref's last
// use, for example while its ID travels by another path, calls
// runtime.KeepAlive(ref) where it may go, or keeps the Ref in a value that
// stays reachable; Release frees it at once.
type Ref[T any] struct{ h *core.Handle }

func (r Ref[T]) handle() *core.Handle { return r.h }
func (r Ref[T]) argInput() core.ArgInput {
	return core.ArgInput{Handle: r.h}
}
func (Ref[T]) argType(T) {}

// ID returns the object id in hex ("" for the zero Ref).
func (r Ref[T]) ID() string {
	if r.h == nil {
		return ""
	}
	return r.h.ID.String()
}

// IsZero reports whether r is the zero Ref.
func (r Ref[T]) IsZero() bool { return r.h == nil }

// String returns "Ref[T](id)".
func (r Ref[T]) String() string {
	var zero T
	return fmt.Sprintf("Ref[%T](%s)", zero, r.ID())
}

// Get waits for the value and returns it; see the package function Get.
func (r Ref[T]) Get(ctx context.Context) (T, error) { return Get(ctx, r) }

// Release drops this process's reference now instead of at garbage
// collection. Every copy of r becomes unusable.
func (r Ref[T]) Release() { r.h.Release() }

// EncodeMsgpack implements msgpack.CustomEncoder so Refs can travel inside
// values.
func (r Ref[T]) EncodeMsgpack(enc *msgpack.Encoder) error {
	if r.h == nil {
		return enc.EncodeNil()
	}
	return codec.EncodeRef(enc, r.h.Info())
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (r *Ref[T]) DecodeMsgpack(dec *msgpack.Decoder) error {
	code, err := dec.PeekCode()
	if err != nil {
		return err
	}
	if code == 0xc0 { // nil
		r.h = nil
		return dec.DecodeNil()
	}
	info, err := codec.DecodeRef(dec)
	if err != nil {
		return err
	}
	cw, err := current()
	if err != nil {
		return err
	}
	r.h = cw.NewHandle(info.ID, info.Owner)
	return nil
}

// Put stores v in the cluster's object store and returns a reference. Small
// values stay in this process's memory; large ones go to the node's shared
// memory.
func Put[T any](ctx context.Context, v T) (Ref[T], error) {
	cw, err := current()
	if err != nil {
		return Ref[T]{}, err
	}
	h, err := cw.Put(ctx, v)
	if err != nil {
		return Ref[T]{}, err
	}
	return Ref[T]{h}, nil
}

// Get waits until the object is ready and returns its value. It honours
// ctx: a deadline yields an error matching ErrGetTimeout (and
// context.DeadlineExceeded). A task's error comes back as the error: a
// *TaskError for failures in user code, or the typed system errors.
func Get[T any](ctx context.Context, r Ref[T]) (T, error) {
	var out T
	cw, err := current()
	if err != nil {
		return out, err
	}
	if r.h == nil {
		return out, fmt.Errorf("goray: Get of a zero Ref[%T]", out)
	}
	v, err := cw.Get(ctx, r.h)
	if err != nil {
		return out, err
	}
	if v.Format == codec.FormatTransport {
		err = core.AssignTensors(&out, v.Tensors)
	} else {
		err = codec.DecodeInto(v.Format, v.Data, &out, false)
	}
	v.Release()
	if err != nil {
		return out, fmt.Errorf("goray: object %s: %w", r.h.ID, err)
	}
	cw.FlushBorrows(ctx)
	return out, nil
}

// GetAll gets every reference in order; it stops at the first error.
func GetAll[T any](ctx context.Context, refs []Ref[T]) ([]T, error) {
	out := make([]T, len(refs))
	for i, r := range refs {
		v, err := Get(ctx, r)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// NoTimeout is a Wait timeout without limit (Ray's timeout=None): Wait
// returns once num refs are ready, or when ctx ends.
const NoTimeout time.Duration = -1

// Waitable is what Wait waits for, as Ray's ray.wait takes object refs,
// generators and a placement group's ready(): a Ref[T] is ready once its
// value or its error is known (an object whose task failed counts as
// ready); a *Stream[T] once its Next would not wait (an item arrived that
// was not taken yet, or the stream ended or was closed); a
// *PlacementGroup once it is created, or removed (its Wait then says
// why). Mix them in a []Waitable.
type Waitable interface {
	// ID names it: an object's id, a generator call's task id, a
	// placement group's id.
	ID() string
	// readyChan returns a channel closed once it is ready and the key
	// that tells two of them apart; with fetch, an object in another
	// node's store is ready once a copy is in this node's (FetchLocal).
	readyChan(cw *core.CoreWorker, fetch bool) (ch <-chan struct{}, key string, err error)
}

func (r Ref[T]) readyChan(cw *core.CoreWorker, fetch bool) (<-chan struct{}, string, error) {
	if r.h == nil {
		return nil, "", errors.New("a zero Ref")
	}
	var ch <-chan struct{}
	var err error
	if fetch {
		ch, err = cw.LocalChan(r.h)
	} else {
		ch, err = cw.ReadyChan(r.h)
	}
	return ch, "object " + r.h.ID.String(), err
}

// WaitOption configures Wait.
type WaitOption func(*waitOptions)

type waitOptions struct{ noFetch bool }

// FetchLocal says whether Wait counts an object held in another node's
// store as ready only once a copy is in this node's (true, the default,
// as Ray's fetch_local=True): Wait starts the pulls, so that the Gets
// after it read at once and a loop over Wait's results overlaps the
// transfers with its work. FetchLocal(false) counts an object ready as
// soon as its value exists anywhere, and leaves the pull to Get. Objects
// inline in their owner, or in this node's store, are ready as soon as
// they are known either way. A pull Wait started goes on after it
// returns (a loop polling with timeout 0 sees the object ready once it is
// here), one per object at a time.
func FetchLocal(fetch bool) WaitOption { return func(o *waitOptions) { o.noFetch = !fetch } }

// Wait waits until num of refs are ready or timeout passes and splits refs
// into ready and not ready, keeping their order. As in Ray's ray.wait, a
// timeout of 0 does not wait: it looks once and returns what is ready
// (so a loop polling with timeout 0 never blocks), and NoTimeout (any
// negative timeout) waits without limit, bounded by ctx. When ctx ends
// first, Wait returns what is ready then, without an error. Ready holds at
// most num refs (of those ready at once, the first num in refs), so a loop
// of Wait(refs, 1, NoTimeout) takes them one at a time; num must be
// 1..len(refs) (0 for no refs) and refs must not name one object (or
// stream, or group) twice. Refs are Ref[T] values of one type, or any
// Waitable mixed in a []Waitable: object refs, streams and placement
// groups (see Waitable for when each is ready). An object in another
// node's store is ready once it is copied to this node (FetchLocal, as
// Ray's default fetch_local=True).
func Wait[R Waitable](ctx context.Context, refs []R, num int, timeout time.Duration, opts ...WaitOption) (ready, notReady []R, err error) {
	var o waitOptions
	for _, opt := range opts {
		opt(&o)
	}
	cw, err := current()
	if err != nil {
		return nil, nil, err
	}
	if least := min(1, len(refs)); num < least || num > len(refs) {
		return nil, nil, fmt.Errorf("goray: Wait: num is %d, want %d..%d (the number of refs)", num, least, len(refs))
	}
	if timeout >= 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout) // 0: already done, so Wait looks once
		defer cancel()
	}
	chans := make([]<-chan struct{}, len(refs))
	seen := make(map[string]int, len(refs))
	for i, r := range refs {
		if any(r) == nil {
			return nil, nil, fmt.Errorf("goray: Wait: ref %d is nil", i)
		}
		ch, key, err := r.readyChan(cw, !o.noFetch)
		if err != nil {
			return nil, nil, fmt.Errorf("goray: Wait: ref %d: %w", i, err)
		}
		if j, dup := seen[key]; dup {
			return nil, nil, fmt.Errorf("goray: Wait: refs %d and %d are the same %s (Wait takes each once)", j, i, key)
		}
		seen[key] = i
		chans[i] = ch
	}
	defer runtime.KeepAlive(refs)
	idx, err := cw.WaitChans(ctx, chans, num)
	if err != nil {
		return nil, nil, err
	}
	isReady := make([]bool, len(refs))
	for _, i := range idx {
		isReady[i] = true
	}
	for i, r := range refs {
		if isReady[i] {
			ready = append(ready, r)
		} else {
			notReady = append(notReady, r)
		}
	}
	return ready, notReady, nil
}

// PutTensors stores tensors by a tensor transport (for example "shm")
// instead of the object store: the object's value is the transport's
// metadata and readers pull the tensors through the transport. The
// transport takes over the tensors' memory and frees it when the last
// reference is gone. Unlike Ray, this works in the driver too.
func PutTensors(ctx context.Context, transportName string, tensors []transport.Tensor) (Ref[[]transport.Tensor], error) {
	cw, err := current()
	if err != nil {
		return Ref[[]transport.Tensor]{}, err
	}
	h, err := cw.PutTensors(ctx, transportName, tensors)
	if err != nil {
		return Ref[[]transport.Tensor]{}, err
	}
	return Ref[[]transport.Tensor]{h}, nil
}

// Buffer is a zero-copy view of a []byte object. Bytes points into the
// node's shared memory for large objects; it stays valid until Release.
// Do not modify it.
//
// A task or method parameter of type *Buffer takes a []byte argument
// without a copy (BufferRef, BufferValue): its Bytes point into the node's
// store, pinned until the call returns, where a []byte parameter gets a
// fresh copy. The view is valid only during the call: copy what you keep,
// and do not modify it (other readers share the memory). Release does
// nothing on such a view.
type Buffer struct {
	v    *core.Value
	data []byte // an argument's bytes, borrowed for the call (v is nil)
}

// BufferRef passes the []byte object r to a *Buffer parameter: the callee
// reads it without a copy (on a node that does not hold it, after its
// raylet pulls it). Ray's equivalent is a zero-copy, read-only numpy array
// argument.
func BufferRef(r Ref[[]byte]) Arg[*Buffer] { return bufferArg{core.ArgInput{Handle: r.h}} }

// BufferValue passes b by value to a *Buffer parameter (a large b goes
// through the object store like any value argument).
func BufferValue(b []byte) Arg[*Buffer] { return bufferArg{core.ArgInput{Value: b}} }

type bufferArg struct{ in core.ArgInput }

func (a bufferArg) argInput() core.ArgInput { return a.in }
func (bufferArg) argType(*Buffer)           {}

func init() {
	core.RegisterArgDecoder(reflect.TypeFor[**Buffer](), func(ptr any, f codec.Format, data []byte) error {
		b := &Buffer{data: data}
		if f != codec.FormatRaw {
			// Encoded some other way (a nil slice through msgpack): decode.
			var v []byte
			if err := codec.DecodeInto(f, data, &v, false); err != nil {
				return err
			}
			b.data = v
		}
		*ptr.(**Buffer) = b
		return nil
	})
}

// GetBuffer waits for a []byte object and returns a zero-copy view of it.
func GetBuffer(ctx context.Context, r Ref[[]byte]) (*Buffer, error) {
	cw, err := current()
	if err != nil {
		return nil, err
	}
	if r.h == nil {
		return nil, fmt.Errorf("goray: GetBuffer of a zero Ref")
	}
	v, err := cw.Get(ctx, r.h)
	if err != nil {
		return nil, err
	}
	if v.Format != codec.FormatRaw {
		// Encoded some other way (e.g. nil slice through msgpack): decode.
		var b []byte
		err := codec.DecodeInto(v.Format, v.Data, &b, false)
		v.Release()
		if err != nil {
			return nil, err
		}
		return &Buffer{v: &core.Value{Format: codec.FormatRaw, Data: b}}, nil
	}
	return &Buffer{v: v}, nil
}

// Bytes returns the object's bytes.
func (b *Buffer) Bytes() []byte {
	switch {
	case b == nil:
		return nil
	case b.v != nil:
		return b.v.Data
	}
	return b.data
}

// Release unpins the shared memory behind Bytes. Idempotent.
func (b *Buffer) Release() {
	if b == nil {
		return
	}
	if b.v != nil {
		b.v.Release()
		b.v = nil
	}
	b.data = nil
}

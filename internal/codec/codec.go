// Package codec turns Go values into the bytes goray stores and sends.
//
// Every encoded value is a format byte (the object's metadata) plus data:
//   - FormatRaw: the value is a []byte, stored as is. Large byte payloads are
//     therefore read straight out of shared memory without decoding.
//   - FormatMsgpack: any other value, in MessagePack (vmihailenco/msgpack).
//   - FormatError: an encoded *RemoteError; Get returns it as an error.
//
// Object references inside values are encoded by the reference type itself
// (see EncodeRef/DecodeRef); the encoder records each one it writes so the
// runtime can keep the referenced objects alive while the outer value exists.
package codec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/vmihailenco/msgpack/v5"
)

// Format says how an object's data is encoded.
type Format byte

// Formats. The values are part of the wire format; never renumber.
const (
	FormatMsgpack Format = 'M'
	FormatRaw     Format = 'R'
	FormatError   Format = 'E'
	// FormatTransport: the value is a set of tensors held by a tensor
	// transport; the data is the transfer's metadata (see sdk/ray/internal/core).
	FormatTransport Format = 'X'
)

// Meta returns the one-byte metadata of a format.
func (f Format) Meta() []byte { return metas[f] }

var metas = map[Format][]byte{
	FormatMsgpack:   {byte(FormatMsgpack)},
	FormatRaw:       {byte(FormatRaw)},
	FormatError:     {byte(FormatError)},
	FormatTransport: {byte(FormatTransport)},
}

// FormatOf reads the format from metadata; empty metadata means msgpack.
func FormatOf(meta []byte) Format {
	if len(meta) == 0 {
		return FormatMsgpack
	}
	return Format(meta[0])
}

// RefInfo is an object reference found inside an encoded value.
type RefInfo struct {
	ID    ids.ObjectID
	Owner *pb.Address
}

// writer is the io.Writer behind every pooled encoder; EncodeRef finds it via
// Encoder.Writer to record references.
type writer struct {
	bytes.Buffer
	refs   []RefInfo
	actors []ids.ID // NoteActor
}

type encState struct {
	w   writer
	enc *msgpack.Encoder
}

var encPool = sync.Pool{New: func() any {
	s := &encState{}
	s.enc = msgpack.NewEncoder(&s.w)
	s.enc.UseCompactInts(true)
	return s
}}

func init() {
	msgpack.RegisterExtEncoder(timestampExt, time.Time{}, timestampEncoder)
}

// timestampExt is MessagePack's timestamp extension type.
const timestampExt = -1

// timestampEncoder writes every time.Time in the 12-byte form of the
// timestamp extension (nanoseconds u32, seconds i64). The library's
// default picks a 4- or 8-byte form whose first byte can look like a map
// header, and CheckMsgpack must refuse such extensions (see checker.ext);
// the first byte of the 12-byte form is at most 0x3b (nanoseconds <
// 10^9). Every MessagePack decoder reads all three forms.
func timestampEncoder(_ *msgpack.Encoder, v reflect.Value) ([]byte, error) {
	t := v.Interface().(time.Time)
	b := make([]byte, 12)
	binary.BigEndian.PutUint32(b, uint32(t.Nanosecond()))
	binary.BigEndian.PutUint64(b[4:], uint64(t.Unix()))
	return b, nil
}

// Encode encodes v. A []byte is returned as is (FormatRaw, no copy); other
// values are encoded with msgpack. refs lists the object references found
// inside v.
func Encode(v any) (f Format, data []byte, refs []RefInfo, err error) {
	f, data, refs, _, err = EncodeNoting(v)
	return f, data, refs, err
}

// EncodeNoting is Encode that also returns the actors whose handles v
// holds (NoteActor).
func EncodeNoting(v any) (f Format, data []byte, refs []RefInfo, actors []ids.ID, err error) {
	if b, ok := v.([]byte); ok {
		return FormatRaw, b, nil, nil, nil
	}
	s := encPool.Get().(*encState)
	s.w.Reset()
	s.w.refs, s.w.actors = nil, nil
	if t, ok := v.(time.Time); ok {
		// Encoder.Encode writes a time.Time with EncodeTime, not with
		// the registered timestampEncoder.
		err = s.enc.EncodeValue(reflect.ValueOf(t))
	} else {
		err = s.enc.Encode(v)
	}
	if err != nil {
		s.w.refs, s.w.actors = nil, nil
		encPool.Put(s)
		return 0, nil, nil, nil, &EncodeError{Type: fmt.Sprintf("%T", v), Err: err}
	}
	data = bytes.Clone(s.w.Bytes())
	refs, actors = s.w.refs, s.w.actors
	s.w.refs, s.w.actors = nil, nil
	if s.w.Cap() <= 1<<20 {
		encPool.Put(s)
	}
	return FormatMsgpack, data, refs, actors, nil
}

// NoteActor records that the value being encoded by enc holds a handle of
// actor id, when enc belongs to Encode (EncodeNoting returns them). Actor
// handle types call it from their EncodeMsgpack method: a handle of an
// actor whose registration is still under way must not reach another
// process before it is done.
func NoteActor(enc *msgpack.Encoder, id ids.ID) {
	if w, ok := enc.Writer().(*writer); ok {
		w.actors = append(w.actors, id)
	}
}

// DecodeInto decodes data of format f into ptr, which must be a non-nil
// pointer. A FormatRaw payload decodes into *[]byte without a copy when
// noCopy is set, otherwise it is copied. MessagePack data passes
// CheckMsgpack first, so hostile input fails with a *MalformedError
// (wrapped in a *TypeError) instead of making the decoder allocate far
// more than len(data).
func DecodeInto(f Format, data []byte, ptr any, noCopy bool) error {
	switch f {
	case FormatRaw:
		if bp, ok := ptr.(*[]byte); ok {
			if noCopy {
				*bp = data
			} else {
				*bp = bytes.Clone(data)
				if *bp == nil {
					*bp = []byte{}
				}
			}
			return nil
		}
		if ap, ok := ptr.(*any); ok {
			*ap = bytes.Clone(data)
			return nil
		}
		return &TypeError{Want: typeName(ptr), Got: "[]byte"}
	case FormatMsgpack:
		if err := CheckMsgpack(data); err != nil {
			return &TypeError{Want: typeName(ptr), Err: err}
		}
		dec := msgpack.GetDecoder()
		dec.Reset(bytes.NewReader(data))
		err := dec.Decode(ptr)
		msgpack.PutDecoder(dec)
		if err != nil {
			return &TypeError{Want: typeName(ptr), Err: err}
		}
		return nil
	case FormatError:
		return errors.New("codec: value is an encoded error")
	default:
		return fmt.Errorf("codec: unknown format %q", byte(f))
	}
}

// Unmarshal decodes MessagePack data into ptr after CheckMsgpack, for
// decode paths that do not go through DecodeInto (msgpack.Unmarshal does
// no such check).
func Unmarshal(data []byte, ptr any) error {
	if err := CheckMsgpack(data); err != nil {
		return err
	}
	return msgpack.Unmarshal(data, ptr)
}

func typeName(ptr any) string {
	t := reflect.TypeOf(ptr)
	if t != nil && t.Kind() == reflect.Pointer {
		return t.Elem().String()
	}
	return fmt.Sprintf("%T", ptr)
}

// EncodeError reports a value that cannot be encoded.
type EncodeError struct {
	Type string
	Err  error
}

func (e *EncodeError) Error() string {
	return fmt.Sprintf("cannot encode value of type %s: %v", e.Type, e.Err)
}

func (e *EncodeError) Unwrap() error { return e.Err }

// TypeError reports data that does not decode into the wanted type.
type TypeError struct {
	Want string
	Got  string
	Err  error
}

func (e *TypeError) Error() string {
	switch {
	case e.Got != "":
		return fmt.Sprintf("cannot decode %s into %s", e.Got, e.Want)
	default:
		return fmt.Sprintf("cannot decode into %s: %v", e.Want, e.Err)
	}
}

func (e *TypeError) Unwrap() error { return e.Err }

// EncodeRef writes a reference to enc and records it when enc belongs to
// Encode. Reference types call it from their EncodeMsgpack method.
func EncodeRef(enc *msgpack.Encoder, r RefInfo) error {
	if w, ok := enc.Writer().(*writer); ok {
		w.refs = append(w.refs, r)
	}
	o := r.Owner
	if o == nil {
		o = &pb.Address{}
	}
	if err := enc.EncodeArrayLen(5); err != nil {
		return err
	}
	for _, b := range [][]byte{r.ID[:], o.NodeId, o.WorkerId} {
		if err := enc.EncodeBytes(b); err != nil {
			return err
		}
	}
	if err := enc.EncodeString(o.UnixPath); err != nil {
		return err
	}
	return enc.EncodeString(o.TcpAddr)
}

// MaxRefFieldLen bounds each byte and string field of an object reference
// (the owner's ids, unix socket path and TCP address are far shorter).
const MaxRefFieldLen = 4096

// ErrMalformedRef is the error (wrapped, with what is wrong) of a
// reference DecodeRef refuses.
var ErrMalformedRef = errors.New("codec: malformed object reference")

// DecodeRef reads a reference written by EncodeRef. Every field's length
// is checked before anything is allocated (the object id must be
// ids.ObjectIDSize bytes, the other fields at most MaxRefFieldLen), so a
// decoder reading unchecked input (one DecodeInto did not pre-scan with
// CheckMsgpack) cannot be made to allocate what a few bytes claim: 7 bytes
// once claimed a 4 GiB owner id.
func DecodeRef(dec *msgpack.Decoder) (RefInfo, error) {
	var r RefInfo
	n, err := dec.DecodeArrayLen()
	if err != nil {
		return r, err
	}
	if n != 5 {
		return r, fmt.Errorf("%w: %d fields, want 5", ErrMalformedRef, n)
	}
	id, err := refField(dec, "object id", ids.ObjectIDSize)
	if err != nil {
		return r, err
	}
	if r.ID, err = ids.ObjectIDFromBytes(id); err != nil {
		return r, fmt.Errorf("%w: %v", ErrMalformedRef, err)
	}
	o := &pb.Address{}
	if o.NodeId, err = refField(dec, "owner node id", MaxRefFieldLen); err != nil {
		return r, err
	}
	if o.WorkerId, err = refField(dec, "owner worker id", MaxRefFieldLen); err != nil {
		return r, err
	}
	b, err := refField(dec, "owner unix path", MaxRefFieldLen)
	if err != nil {
		return r, err
	}
	o.UnixPath = string(b)
	if b, err = refField(dec, "owner TCP address", MaxRefFieldLen); err != nil {
		return r, err
	}
	o.TcpAddr = string(b)
	r.Owner = o
	return r, nil
}

// refField reads one byte or string field of a reference (nil for a
// MessagePack nil), refusing a length above limit before allocating.
func refField(dec *msgpack.Decoder, what string, limit int) ([]byte, error) {
	n, err := dec.DecodeBytesLen()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrMalformedRef, what, err)
	}
	if n < 0 {
		return nil, nil
	}
	if n > limit {
		return nil, fmt.Errorf("%w: %s of %d bytes, at most %d", ErrMalformedRef, what, n, limit)
	}
	b := make([]byte, n)
	if err := dec.ReadFull(b); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrMalformedRef, what, err)
	}
	return b, nil
}

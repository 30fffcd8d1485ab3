// Package ids defines goray's identifiers. IDs are random or counter-derived
// fixed-size byte strings; they travel as raw bytes in protobuf and print as
// hex.
package ids

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sync/atomic"
)

// Size of every id in bytes except ObjectID.
const Size = 16

// ObjectIDSize is TaskID plus a 4-byte return or put index.
const ObjectIDSize = Size + 4

// ID is a generic 16-byte identifier (node, worker, job, task, actor, lease).
type ID [Size]byte

// Nil is the zero ID.
var Nil ID

// New returns a random ID.
func New() ID {
	var id ID
	if _, err := rand.Read(id[:]); err != nil {
		panic(fmt.Sprintf("goray: reading random bytes: %v", err))
	}
	return id
}

// FromBytes converts raw bytes to an ID; it returns an error when the length
// is wrong.
func FromBytes(b []byte) (ID, error) {
	var id ID
	if len(b) != Size {
		return id, fmt.Errorf("id: want %d bytes, got %d", Size, len(b))
	}
	copy(id[:], b)
	return id, nil
}

// MustFromBytes is FromBytes for ids produced by goray itself; a wrong length
// yields Nil.
func MustFromBytes(b []byte) ID {
	id, _ := FromBytes(b)
	return id
}

// Parse parses the hex form printed by String (a unique prefix is not
// accepted here).
func Parse(s string) (ID, error) {
	b, err := hex.DecodeString(s)
	if err != nil {
		return Nil, fmt.Errorf("id %q: %w", s, err)
	}
	return FromBytes(b)
}

// Bytes returns the id as a slice (a copy).
func (id ID) Bytes() []byte { b := id; return b[:] }

// String returns the hex form.
func (id ID) String() string { return hex.EncodeToString(id[:]) }

// Short returns the first 8 hex digits, for logs and tables.
func (id ID) Short() string { return hex.EncodeToString(id[:4]) }

// IsNil reports whether id is the zero ID.
func (id ID) IsNil() bool { return id == Nil }

// Generator makes unique task ids cheaply: a random 8-byte prefix per process
// followed by a counter.
type Generator struct {
	prefix [8]byte
	n      atomic.Uint64
}

// NewGenerator returns a generator with a random prefix.
func NewGenerator() *Generator {
	g := &Generator{}
	r := New()
	copy(g.prefix[:], r[:8])
	return g
}

// Next returns a new unique ID.
func (g *Generator) Next() ID {
	var id ID
	copy(id[:8], g.prefix[:])
	binary.BigEndian.PutUint64(id[8:], g.n.Add(1))
	return id
}

// ObjectID names an object: the id of the task (or put) that created it and
// an index.
type ObjectID [ObjectIDSize]byte

// NilObject is the zero ObjectID.
var NilObject ObjectID

// ObjectIDFor returns the object id of return or put index i of task t.
func ObjectIDFor(t ID, i uint32) ObjectID {
	var o ObjectID
	copy(o[:Size], t[:])
	binary.BigEndian.PutUint32(o[Size:], i)
	return o
}

// ObjectIDFromBytes converts raw bytes to an ObjectID.
func ObjectIDFromBytes(b []byte) (ObjectID, error) {
	var o ObjectID
	if len(b) != ObjectIDSize {
		return o, fmt.Errorf("object id: want %d bytes, got %d", ObjectIDSize, len(b))
	}
	copy(o[:], b)
	return o, nil
}

// ParseObjectID parses the hex form printed by String.
func ParseObjectID(s string) (ObjectID, error) {
	b, err := hex.DecodeString(s)
	if err != nil {
		return NilObject, fmt.Errorf("object id %q: %w", s, err)
	}
	return ObjectIDFromBytes(b)
}

// TaskID returns the id of the task that created the object.
func (o ObjectID) TaskID() ID { var t ID; copy(t[:], o[:Size]); return t }

// Bytes returns the id as a slice (a copy).
func (o ObjectID) Bytes() []byte { b := o; return b[:] }

// String returns the hex form.
func (o ObjectID) String() string { return hex.EncodeToString(o[:]) }

// IsNil reports whether o is the zero ObjectID.
func (o ObjectID) IsNil() bool { return o == NilObject }

// Owns reports whether id was made by g.
func (g *Generator) Owns(id ID) bool { return [8]byte(id[:8]) == g.prefix }

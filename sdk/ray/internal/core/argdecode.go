package core

import (
	"reflect"

	"github.com/goray-dev/goray/internal/codec"
)

// ArgDecoder decodes an argument into ptr without copying data: what it
// makes may point into data, which is valid only while the call runs (an
// argument in the node's store stays pinned until then).
type ArgDecoder func(ptr any, f codec.Format, data []byte) error

// argDecoders holds the decoders RegisterArgDecoder adds, by the type of
// the pointer decoded into. Written only at package initialisation.
var argDecoders = map[reflect.Type]ArgDecoder{}

// RegisterArgDecoder makes arguments decoded into a pointer of type ptrType
// go through dec instead of the codec (sdk/ray registers *Buffer, the
// zero-copy []byte argument). Call it from an init function only.
func RegisterArgDecoder(ptrType reflect.Type, dec ArgDecoder) {
	argDecoders[ptrType] = dec
}

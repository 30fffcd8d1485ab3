// Package limits holds size limits that more than one part of goray
// enforces, so that what config.Validate accepts is what the runtime
// accepts: the RPC message limit, and the bounds on node labels that the
// GCS checks when a node registers. Resource amounts and names are bounded
// in internal/resources.
package limits

import "unicode/utf8"

// MaxMessageSize is the gRPC message limit, in bytes, on both sides of
// every goray connection (internal/rpc.MaxMessageSize is this value).
const MaxMessageSize = 256 << 20

// InlineHeadroom is the room an RPC keeps for everything but an inline
// value: the other fields, references and the protobuf framing.
const InlineHeadroom = 1 << 20

// MaxInlineLimit is the largest object_store.inline_limit: a value up to
// the inline limit travels inside one RPC message, so it must fit in
// MaxMessageSize with InlineHeadroom to spare.
const MaxInlineLimit = MaxMessageSize - InlineHeadroom

// Bounds on a node's labels.
const (
	// MaxLabels is how many labels a node may have.
	MaxLabels = 256
	// MaxLabelKeyLen is the longest label key, in bytes.
	MaxLabelKeyLen = 256
	// MaxLabelValueLen is the longest label value, in bytes.
	MaxLabelValueLen = 1024
)

// Bounds on the strings of a task event (the GCS cuts longer ones; core
// workers cut them before sending, so one long error message cannot make
// a report too large to send): a full task event store holds at most
// about 200 MB of them.
const (
	// MaxTaskNameLen bounds a task's function, name and actor class.
	MaxTaskNameLen = 256
	// MaxTaskErrorTypeLen bounds a failed task's error type.
	MaxTaskErrorTypeLen = 128
	// MaxTaskErrorMessageLen bounds a failed task's error message.
	MaxTaskErrorMessageLen = 1024
)

// Truncate cuts s to at most n bytes, plus a mark ("…") when it cut, at a
// rune boundary, so the result stays valid UTF-8 (protobuf refuses to send
// anything else).
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

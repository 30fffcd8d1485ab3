package onesided

import (
	"errors"
	"fmt"

	"github.com/goray-dev/goray/sdk/transport"
)

// Errors of the agent; match them with errors.Is. Errors about descriptors
// that name unknown, collected or out-of-range memory also match
// transport.ErrBadMetadata.
var (
	// ErrClosed is returned by calls made after Close.
	ErrClosed = errors.New("onesided agent is closed")
	// ErrUnknownRegistration means a descriptor names a registration the
	// source agent does not have (never registered, or deregistered when its
	// last object was collected).
	ErrUnknownRegistration = errors.New("unknown registration")
	// ErrUnknownObject means the access key of a read names no live
	// extraction on the source agent (the object was collected, or the
	// transport data is forged or stale).
	ErrUnknownObject = errors.New("unknown object key")
	// ErrOutOfBounds means a read falls outside its registered region.
	ErrOutOfBounds = errors.New("read outside registered memory")
	// ErrUnknownAgent means the KV holds no metadata for the named agent.
	ErrUnknownAgent = errors.New("unknown agent")
	// ErrSourceUnreachable means the source agent's read server could not be
	// reached or the connection broke (the source process died, the network
	// failed). It does not match transport.ErrBadMetadata.
	ErrSourceUnreachable = errors.New("source agent unreachable")
)

// badMeta returns an error matching transport.ErrBadMetadata and, when
// kind is not nil, kind.
func badMeta(kind error, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if kind == nil {
		return fmt.Errorf("%w: %s", transport.ErrBadMetadata, msg)
	}
	return fmt.Errorf("%w: %w: %s", transport.ErrBadMetadata, kind, msg)
}

// PeerError reports that a source agent could not be reached or that a
// connection to it failed mid-transfer. It matches ErrSourceUnreachable.
type PeerError struct {
	// Agent and Addr name the source agent and its read server.
	Agent, Addr string
	// Err is the network error.
	Err error
}

// Error implements error.
func (e *PeerError) Error() string {
	return fmt.Sprintf("source agent %s at %s unreachable: %v", e.Agent, e.Addr, e.Err)
}

// Unwrap returns ErrSourceUnreachable and the cause.
func (e *PeerError) Unwrap() []error { return []error{ErrSourceUnreachable, e.Err} }

// RemoteError is an error the source agent's read server answered a request
// with. It matches the sentinel of its Status (ErrUnknownRegistration,
// ErrUnknownObject, ErrOutOfBounds) and transport.ErrBadMetadata.
type RemoteError struct {
	// Agent is the source agent.
	Agent string
	// Status is the server's status code.
	Status Status
	// Msg is the server's explanation.
	Msg string
}

// Error implements error.
func (e *RemoteError) Error() string {
	return fmt.Sprintf("source agent %s: %s: %s", e.Agent, e.Status, e.Msg)
}

// Unwrap returns the sentinels the status stands for.
func (e *RemoteError) Unwrap() []error {
	switch e.Status {
	case StatusUnknownObject:
		return []error{ErrUnknownObject, transport.ErrBadMetadata}
	case StatusUnknownRegistration:
		return []error{ErrUnknownRegistration, transport.ErrBadMetadata}
	case StatusOutOfBounds:
		return []error{ErrOutOfBounds, transport.ErrBadMetadata}
	case StatusBadRequest:
		return []error{transport.ErrBadMetadata}
	case StatusClosing:
		return []error{ErrSourceUnreachable}
	}
	return nil
}

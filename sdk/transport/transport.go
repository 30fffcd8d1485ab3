// Package transport is the SDK for goray tensor transports: plugins that move
// the tensors an actor method returns (or puts) straight to the actor that
// consumes them, instead of through the object store. It covers the duties
// of Ray's tensor transport manager.
//
// A transport implements Transport and calls Serve from its main function:
//
//	func main() { transport.Serve(mytransport.New()) }
//
// What every plugin kind shares lives in package plugin: the optional
// interfaces a plugin may implement (plugin.Configurable for a config block,
// declared as a tagged Go struct with plugin.TypedConfig;
// plugin.HealthChecker; plugin.Versioned; plugin.LoggerSetter), the serve
// path (Serve is a thin wrapper of plugin.ServeKind) and the error table
// that keeps errors' identity across the boundary:
//
//	type Config struct {
//		DialTimeout time.Duration `hcl:"dial_timeout" default:"5s" doc:"Connect timeout."`
//	}
//
//	func (t *T) ConfigSpec() plugin.ConfigSpec { return plugin.TypedConfig(t.Configure) }
//	func (t *T) Configure(ctx context.Context, c Config) error { ... }
//
// The runtime (the plugin host) talks to it over gRPC through NewClient;
// only handles cross that boundary. A tensor's bytes live in a named
// shared-memory segment (package shmem) and a Tensor carries a Buffer
// handle to them.
//
// Every method takes a request struct and returns a response struct, so
// both can grow without breaking transports. A nil request is treated as an
// empty one. Errors are typed: ErrNotSupported, ErrAborted, ErrBadMetadata
// and ErrTimeout keep their identity across the plugin boundary, and
// *TransferError names the object and the duty.
//
// Package transporttest holds the conformance suite every transport should
// pass from its own tests.
package transport

import (
	"context"
	"fmt"
)

// Transport is a tensor transport. Methods may be called concurrently.
//
// A transfer of an object goes: ExtractMetadata on the source right after
// the tensors exist; CommunicatorMetadata on the owner; for a two-sided
// transport Send on the source and Receive on the destination at the same
// time; for a one-sided transport only Receive on the destination; finally
// GarbageCollect on the source once the object's last reference is gone.
// Abort runs on both sides when a transfer fails.
type Transport interface {
	// Info reports the backend name and capabilities. It must be cheap and
	// constant.
	Info(ctx context.Context, req *InfoRequest) (*InfoResponse, error)
	// ActorHasTransport reports whether an actor can use this transport.
	// Runs on the owner.
	ActorHasTransport(ctx context.Context, req *ActorHasTransportRequest) (*ActorHasTransportResponse, error)
	// ExtractMetadata describes an object's freshly produced tensors and
	// prepares them for transfer (memory registration, pinning). Runs on the
	// source. The tensors must stay valid until GarbageCollect; with
	// TransferOwnership the transport owns their segments from now on and
	// unlinks them at GarbageCollect.
	ExtractMetadata(ctx context.Context, req *ExtractMetadataRequest) (*ExtractMetadataResponse, error)
	// CommunicatorMetadata says who talks to whom for a transfer. Runs on the
	// owner before it orchestrates the transfer (for one-sided transports: on
	// the receiver).
	CommunicatorMetadata(ctx context.Context, req *CommunicatorMetadataRequest) (*CommunicatorMetadataResponse, error)
	// Send pushes an object's tensors to the destination; it returns when the
	// destination has them, the context is done, or the object is aborted.
	// Runs on the source of two-sided transports; one-sided transports
	// return an error matching ErrNotSupported.
	Send(ctx context.Context, req *SendRequest) (*SendResponse, error)
	// Receive delivers an object's tensors on the destination, into
	// req.Targets when given. It blocks until the data is there, the context
	// is done (ErrTimeout on a deadline) or the object is aborted
	// (ErrAborted). Metadata that does not parse, does not match, or names an
	// unknown or collected object fails at once with ErrBadMetadata.
	Receive(ctx context.Context, req *ReceiveRequest) (*ReceiveResponse, error)
	// GarbageCollect releases what ExtractMetadata set up for the object.
	// Runs on the source once the last reference is gone. Collecting an
	// unknown object is not an error.
	GarbageCollect(ctx context.Context, req *GarbageCollectRequest) (*GarbageCollectResponse, error)
	// Abort fails the pending and later Send/Receive calls of the object on
	// this instance with ErrAborted (until it is garbage-collected) and
	// cleans up what they held. Transports that cannot abort return
	// ErrNotSupported.
	Abort(ctx context.Context, req *AbortRequest) (*AbortResponse, error)
}

// InfoRequest asks for Info.
type InfoRequest struct{}

// InfoResponse describes a transport.
type InfoResponse struct {
	// Name is the backend name users select the transport by ("shm").
	Name string
	// OneSided is true when the receiver alone drives a transfer (remote
	// read); Send is then never called.
	OneSided bool
	// CanAbort is true when pending transfers can be interrupted cleanly;
	// goray then calls Abort for a receive that timed out. If false, goray
	// only reports the failure to the reader, so the transport must unblock
	// every call when its context ends. (Killing the actors of a failed
	// transfer, as Ray does for such transports, is not implemented.)
	CanAbort bool
	// SameNode is true when transfers only work between processes of one
	// node.
	SameNode bool
}

// TwoSided reports whether the source must call Send.
func (r *InfoResponse) TwoSided() bool { return !r.OneSided }

// ActorHasTransportRequest asks whether an actor can use the transport.
type ActorHasTransportRequest struct {
	ActorID string
	// NodeID is the node the actor runs on (hex), if known.
	NodeID string
}

// ActorHasTransportResponse answers ActorHasTransportRequest.
type ActorHasTransportResponse struct {
	HasTransport bool
}

// ExtractMetadataRequest hands an object's tensors to the transport on the
// source.
type ExtractMetadataRequest struct {
	// ObjectID is the object's id in lowercase hex (see ValidObjectID).
	ObjectID string
	// Source is the producing actor or process id.
	Source  string
	Tensors []Tensor
	// TransferOwnership gives the tensors' segments to the transport, which
	// unlinks each when the last object referencing it is collected.
	TransferOwnership bool
}

// ExtractMetadataResponse is what the owner records for the object and
// passes to Send and Receive.
type ExtractMetadataResponse struct {
	// Tensors has one entry per tensor, in order.
	Tensors []TensorMeta
	// TransportData is opaque to everybody but the transport (segment names,
	// registered-memory descriptors, ...).
	TransportData []byte
}

// CommunicatorMetadataRequest asks how the source and the destination of a
// transfer reach each other.
type CommunicatorMetadataRequest struct {
	ObjectID    string
	Source      string
	Destination string
}

// CommunicatorMetadataResponse carries opaque communicator data (group
// name and ranks, agent names) passed on to Send and Receive.
type CommunicatorMetadataResponse struct {
	Data []byte
}

// SendRequest pushes an object to a destination.
type SendRequest struct {
	ObjectID         string
	Source           string
	Destination      string
	Tensors          []TensorMeta
	TransportData    []byte
	CommunicatorData []byte
}

// SendResponse answers Send.
type SendResponse struct{}

// ReceiveRequest receives an object on its destination.
type ReceiveRequest struct {
	ObjectID    string
	Source      string
	Destination string
	// Tensors is the layout from ExtractMetadataResponse. When given, the
	// transport checks it against TransportData.
	Tensors []TensorMeta
	// TransportData is from ExtractMetadataResponse. A one-sided transport
	// also accepts it empty: the receive then waits until the source has
	// extracted the object, the context is done or the object is aborted,
	// so a destination can start receiving before the producer is done (the
	// conformance suite checks this).
	TransportData    []byte
	CommunicatorData []byte
	// Targets are optional caller-owned tensors to receive into, one per
	// tensor, each with the object's layout; the data is copied into them.
	Targets []Tensor
}

// ReceiveResponse holds the received tensors.
type ReceiveResponse struct {
	// Tensors are the received tensors: the targets when given; else either
	// tensors in segments the transport allocated for the caller (listed in
	// Allocated), or, for zero-copy transports, tensors sharing the source's
	// buffers, valid until the source garbage-collects the object.
	Tensors []Tensor
	// Allocated names the segments the transport created for this receive;
	// they belong to the caller, who unlinks them (Tensor.Free).
	Allocated []string
}

// GarbageCollectRequest releases an object on the source.
type GarbageCollectRequest struct {
	ObjectID      string
	TransportData []byte
}

// GarbageCollectResponse answers GarbageCollect.
type GarbageCollectResponse struct{}

// AbortRequest aborts an object's transfers.
type AbortRequest struct {
	ObjectID string
	// Reason explains the abort; it appears in the aborted calls' errors.
	Reason string
}

// AbortResponse answers Abort.
type AbortResponse struct{}

// MaxObjectIDLen is the longest object id accepted (in hex digits).
const MaxObjectIDLen = 128

// ValidObjectID checks that id is a non-empty, even-length string of
// lowercase hex digits of at most MaxObjectIDLen characters. Its error
// matches ErrBadMetadata.
func ValidObjectID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty object id", ErrBadMetadata)
	}
	if len(id) > MaxObjectIDLen || len(id)%2 != 0 {
		return fmt.Errorf("%w: object id %.40q has length %d (want an even length up to %d)", ErrBadMetadata, id, len(id), MaxObjectIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return fmt.Errorf("%w: object id %.40q is not lowercase hex", ErrBadMetadata, id)
		}
	}
	return nil
}

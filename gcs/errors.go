package gcs

import (
	"context"
	"errors"
	"fmt"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/rpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Every error returned by the server is one of the types below. Each
// implements GRPCStatus, so gRPC clients see the matching status code and the
// same message, and in-process callers can use errors.As.

// InvalidArgumentError reports a malformed request field (codes.InvalidArgument).
type InvalidArgumentError struct {
	// Field is the request field, for example "node.node_id".
	Field string
	// Problem says what is wrong with it.
	Problem string
}

// Error describes the problem and the object it concerns.
func (e *InvalidArgumentError) Error() string {
	return fmt.Sprintf("invalid %s: %s", e.Field, e.Problem)
}

// GRPCStatus maps the error to codes.InvalidArgument.
func (e *InvalidArgumentError) GRPCStatus() *status.Status {
	return status.New(codes.InvalidArgument, e.Error())
}

// NotFoundError reports that an object is not in the GCS tables
// (codes.NotFound).
type NotFoundError struct {
	// Kind is "node", "job", "actor" or "placement group".
	Kind string
	// ID is the id looked up, or ids.Nil for a lookup by Name.
	ID ids.ID
	// Name is the name looked up (actors and placement groups), or "".
	Name string
	// Namespace is the namespace a name was looked up in.
	Namespace string
}

// Error describes the problem and the object it concerns.
func (e *NotFoundError) Error() string {
	if e.ID.IsNil() && e.Namespace != "" {
		return fmt.Sprintf("no %s named %q in namespace %q", e.Kind, e.Name, e.Namespace)
	}
	if e.ID.IsNil() {
		return fmt.Sprintf("no %s named %q", e.Kind, e.Name)
	}
	return fmt.Sprintf("no %s with id %s", e.Kind, e.ID)
}

// GRPCStatus maps the error to codes.NotFound.
func (e *NotFoundError) GRPCStatus() *status.Status {
	return status.New(codes.NotFound, e.Error())
}

// NameTakenError reports that a live actor, or a placement group that is
// not removed, already holds a name (codes.AlreadyExists).
type NameTakenError struct {
	// Kind is "placement group"; empty means "actor".
	Kind string
	// Name is the requested name.
	Name string
	// Holder is the live actor or group that holds it.
	Holder ids.ID
	// Class is the holder's class name (actors).
	Class string
	// Namespace is the namespace of the name.
	Namespace string
	// WantClass is set when a get-if-exists creation of class WantClass
	// found the name held by an actor of another class.
	WantClass string
}

// Error describes the problem and the object it concerns.
func (e *NameTakenError) Error() string {
	kind := e.Kind
	if kind == "" {
		kind = "actor"
	}
	where := ""
	if e.Namespace != "" {
		where = fmt.Sprintf(" in namespace %q", e.Namespace)
	}
	if e.WantClass != "" {
		return fmt.Sprintf("%s name %q%s is already taken by %s %s of class %s, not %s", kind, e.Name, where, kind, e.Holder, e.Class, e.WantClass)
	}
	return fmt.Sprintf("%s name %q%s is already taken by %s %s", kind, e.Name, where, kind, e.Holder)
}

// GRPCStatus maps the error to codes.AlreadyExists, with the holder as an
// ActorInfo detail (actor_id, name, class_name) so that clients need not
// parse the message.
func (e *NameTakenError) GRPCStatus() *status.Status {
	st := status.New(codes.AlreadyExists, e.Error())
	if e.Kind != "" {
		return st
	}
	if d, err := st.WithDetails(&gorayv1.ActorInfo{ActorId: e.Holder.Bytes(), Name: e.Name, ClassName: e.Class, Namespace: e.Namespace}); err == nil {
		return d
	}
	return st
}

// AlreadyExistsError reports a second registration of the same id
// (codes.AlreadyExists).
type AlreadyExistsError struct {
	// Kind is "actor".
	Kind string
	// ID is the duplicated id.
	ID ids.ID
}

// Error describes the problem and the object it concerns.
func (e *AlreadyExistsError) Error() string {
	return fmt.Sprintf("%s %s is already registered", e.Kind, e.ID)
}

// GRPCStatus maps the error to codes.AlreadyExists.
func (e *AlreadyExistsError) GRPCStatus() *status.Status {
	return status.New(codes.AlreadyExists, e.Error())
}

// NodeDeadError reports an attempt to register a node id that the GCS has
// already declared dead (codes.FailedPrecondition). The node must rejoin with
// a new id.
type NodeDeadError struct {
	// ID is the dead node.
	ID ids.ID
	// Reason is its recorded death reason.
	Reason string
}

// Error describes the problem and the object it concerns.
func (e *NodeDeadError) Error() string {
	return fmt.Sprintf("node %s is dead (%s); rejoin with a new node id", e.ID, e.Reason)
}

// GRPCStatus maps the error to codes.FailedPrecondition.
func (e *NodeDeadError) GRPCStatus() *status.Status {
	return status.New(codes.FailedPrecondition, e.Error())
}

// OtherClusterError reports a node that belongs to another cluster than
// this GCS's (codes.FailedPrecondition): a raylet of an old cluster meeting
// a GCS started fresh, or pointed at the wrong head.
type OtherClusterError struct {
	// Node is the refused node; Cluster the cluster it belongs to; Want
	// this GCS's cluster.
	Node          ids.ID
	Cluster, Want string
}

// Error describes the problem and the object it concerns.
func (e *OtherClusterError) Error() string {
	return fmt.Sprintf("node %s belongs to cluster %s, not to this GCS's cluster %s", e.Node, e.Cluster, e.Want)
}

// GRPCStatus maps the error to codes.FailedPrecondition, with the reason
// rpc.ReasonOtherCluster attached so that a node can tell it from other
// refusals.
func (e *OtherClusterError) GRPCStatus() *status.Status {
	return rpc.WithReason(status.New(codes.FailedPrecondition, e.Error()), rpc.ReasonOtherCluster)
}

// JobFinishedError reports an operation that needs a running job on a job
// that has finished (codes.FailedPrecondition).
type JobFinishedError struct {
	// ID is the finished job.
	ID ids.ID
	// Op names the rejected operation, for example "register actor".
	Op string
}

// Error describes the problem and the object it concerns.
func (e *JobFinishedError) Error() string {
	return fmt.Sprintf("%s: job %s has finished", e.Op, e.ID)
}

// GRPCStatus maps the error to codes.FailedPrecondition.
func (e *JobFinishedError) GRPCStatus() *status.Status {
	return status.New(codes.FailedPrecondition, e.Error())
}

// QuotaExceededError reports a KV put that would take a namespace, or the
// whole store, past its quota (codes.ResourceExhausted).
type QuotaExceededError struct {
	// Namespace and Key are the refused put's.
	Namespace string
	Key       string
	// Store is set when the quota of all namespaces together is the one
	// exceeded.
	Store bool
	// Unit is "bytes" or "keys".
	Unit string
	// Held is what the namespace (or store) holds, Want what it would
	// hold after the put, Limit its quota.
	Held, Want, Limit int64
}

// Error describes the problem and the object it concerns.
func (e *QuotaExceededError) Error() string {
	where := "the namespace"
	if e.Store {
		where = "the key-value store (all namespaces)"
	}
	return fmt.Sprintf("kv put of key %q in namespace %q refused: %s would hold %d %s, more than its quota of %d (it holds %d)",
		clip(e.Key), clip(e.Namespace), where, e.Want, e.Unit, e.Limit, e.Held)
}

// GRPCStatus maps the error to codes.ResourceExhausted.
func (e *QuotaExceededError) GRPCStatus() *status.Status {
	return status.New(codes.ResourceExhausted, e.Error())
}

// NodeGoneError reports a call about a node the GCS has declared dead
// (codes.NotFound): it has no raylet to reach any more.
type NodeGoneError struct {
	// ID is the dead node; Reason its recorded death reason.
	ID     ids.ID
	Reason string
	// Op names the refused operation, for example "drain".
	Op string
}

// Error describes the problem and the node it concerns.
func (e *NodeGoneError) Error() string {
	return fmt.Sprintf("cannot %s node %s: it is dead (%s)", e.Op, e.ID, e.Reason)
}

// GRPCStatus maps the error to codes.NotFound.
func (e *NodeGoneError) GRPCStatus() *status.Status {
	return status.New(codes.NotFound, e.Error())
}

// ErrNoRaylets says the GCS was started without connections to the
// raylets (Options.Reserver and Options.Drainer are nil).
var ErrNoRaylets = errors.New("this GCS has no connections to the raylets")

// RayletCallError reports a call the GCS made to a node's raylet on a
// caller's behalf (DrainNode) that failed. Its gRPC code is the raylet's
// own when the raylet answered, FailedPrecondition for ErrNoRaylets, and
// Unavailable (or the context's) when the raylet could not be reached.
type RayletCallError struct {
	// Node is the node whose raylet was called; Op the operation.
	Node ids.ID
	Op   string
	// Err is the call's error.
	Err error
}

// Error describes the problem and the node it concerns.
func (e *RayletCallError) Error() string {
	msg := e.Err.Error()
	if st, ok := status.FromError(e.Err); ok {
		msg = st.Message()
	}
	return fmt.Sprintf("%s node %s: its raylet: %s", e.Op, e.Node, msg)
}

// Unwrap returns the call's error.
func (e *RayletCallError) Unwrap() error { return e.Err }

// GRPCStatus maps the error to the raylet's code, FailedPrecondition
// (ErrNoRaylets), the context's code or Unavailable.
func (e *RayletCallError) GRPCStatus() *status.Status {
	code := codes.Unavailable
	if st, ok := status.FromError(e.Err); ok {
		code = st.Code()
	} else if errors.Is(e.Err, ErrNoRaylets) {
		code = codes.FailedPrecondition
	} else if errors.Is(e.Err, context.Canceled) || errors.Is(e.Err, context.DeadlineExceeded) {
		code = status.FromContextError(e.Err).Code()
	}
	return status.New(code, e.Error())
}

// parseID validates a required 16-byte id field.
func parseID(field string, b []byte) (ids.ID, error) {
	if len(b) == 0 {
		return ids.Nil, &InvalidArgumentError{Field: field, Problem: "required"}
	}
	return parseOptionalID(field, b)
}

// parseOptionalID validates an id field that may be empty (yielding ids.Nil).
func parseOptionalID(field string, b []byte) (ids.ID, error) {
	if len(b) == 0 {
		return ids.Nil, nil
	}
	if len(b) != ids.Size {
		return ids.Nil, &InvalidArgumentError{Field: field, Problem: fmt.Sprintf("want %d bytes, got %d", ids.Size, len(b))}
	}
	return ids.MustFromBytes(b), nil
}

package provider

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Errors every provider reports; match them with errors.Is. They keep
// their identity across the plugin boundary.
var (
	// ErrInvalidRequest means the request breaks the rules: no request id
	// or cluster name, a count below 1, a node_config that is not a JSON
	// object or does not fit NodeConfigSchema, a node type the provider
	// cannot launch. Retrying it cannot help.
	ErrInvalidRequest = errors.New("invalid provider request")
	// ErrUnavailable means the provider cannot reach what it drives (the
	// cloud API is down or throttling, the plugin is restarting) or is not
	// configured yet. Retry later, with the same request id.
	ErrUnavailable = errors.New("provider unavailable")
	// ErrQuotaExceeded means the provider refused for lack of quota or
	// capacity (an account limit, no free addresses). Retry later or launch
	// another node type.
	ErrQuotaExceeded = errors.New("provider quota exceeded")
	// ErrNotFound means something the request names does not exist (an
	// image, a network, a zone). Unknown instance ids are not an error:
	// Terminate ignores them.
	ErrNotFound = errors.New("not found by the provider")
)

// Operation names used in ProviderError.Op.
const (
	OpNodeConfigSchema = "node_config_schema"
	OpLaunch           = "launch"
	OpTerminate        = "terminate"
	OpList             = "list"
	OpPollErrors       = "poll_errors"
)

// ProviderError names the operation, the cluster and the request of a
// failed provider call. Implementations may return plain errors; the plugin
// bridge wraps them.
type ProviderError struct {
	// Op is the operation: OpLaunch, OpTerminate, OpList, OpPollErrors or
	// OpNodeConfigSchema.
	Op string
	// Cluster is the request's cluster name, empty when none applies.
	Cluster string
	// RequestID is the request's id, empty when none applies.
	RequestID string
	// Err is the cause.
	Err error
}

// Error implements error: `provider launch (cluster "demo", request "r1"):
// cause`.
func (e *ProviderError) Error() string {
	var where []string
	if e.Cluster != "" {
		where = append(where, "cluster "+strconv.Quote(e.Cluster))
	}
	if e.RequestID != "" {
		where = append(where, "request "+strconv.Quote(e.RequestID))
	}
	if len(where) == 0 {
		return fmt.Sprintf("provider %s: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("provider %s (%s): %v", e.Op, strings.Join(where, ", "), e.Err)
}

// Unwrap returns the cause.
func (e *ProviderError) Unwrap() error { return e.Err }

// Errorf returns a *ProviderError for the operation, cluster and request
// whose cause is fmt.Errorf(format, args...); use %w with a sentinel error:
//
//	return nil, provider.Errorf(provider.OpLaunch, req.ClusterName, req.RequestID,
//		"%w: zone %q has no machine type %q", provider.ErrNotFound, zone, machine)
func Errorf(op, cluster, requestID, format string, args ...any) error {
	return &ProviderError{Op: op, Cluster: cluster, RequestID: requestID, Err: fmt.Errorf(format, args...)}
}

// invalid returns an error matching ErrInvalidRequest that says why.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidRequest, fmt.Sprintf(format, args...))
}

package rpc

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
)

// Domain is the domain of the reasons goray servers attach to refusals
// (an errdetails.ErrorInfo detail), so that a client can tell refusals
// that share a status code apart without reading the message.
const Domain = "goray.dev"

// Reasons attached to refusals.
const (
	// ReasonOtherCluster: the GCS refused a node of another cluster.
	ReasonOtherCluster = "OTHER_CLUSTER"
)

// WithReason returns st with an ErrorInfo detail naming reason (st itself
// if the detail cannot be attached).
func WithReason(st *status.Status, reason string) *status.Status {
	d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: Domain})
	if err != nil {
		return st
	}
	return d
}

// HasReason reports whether st carries an ErrorInfo detail of goray's
// domain naming reason.
func HasReason(st *status.Status, reason string) bool {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == Domain && info.GetReason() == reason {
			return true
		}
	}
	return false
}

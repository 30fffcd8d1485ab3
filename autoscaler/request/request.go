// Package request is what a program writes for the autoscaler: explicit
// resource requests (ray.RequestResources), kept in the GCS KV. It is a
// leaf, so that a program that asks for resources does not link the
// autoscaler.
package request

// Where the requests live in the GCS KV.
const (
	// Namespace is the GCS KV namespace of the autoscaler.
	Namespace = "autoscaler"
	// Key holds the explicit resource requests as a JSON array of
	// Request.
	Key = "resource_requests"
)

// Request is one shape of an explicit resource request: the cluster should
// have room for Count bundles of Resources at once, whether or not work
// asks for them (Ray's request_resources).
type Request struct {
	Resources map[string]float64 `json:"resources"`
	Count     int                `json:"count"`
}

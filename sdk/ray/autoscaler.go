package ray

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/goray-dev/goray/autoscaler/request"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
)

// RequestResources asks the cluster's autoscaler to make room for the
// given bundles at once, whether or not work asks for them (Ray's
// ray.autoscaler.sdk.request_resources): to scale up ahead of a burst of
// tasks, or to keep capacity while a job prepares its work. Each bundle
// must fit on one node; WithCPUs(n) asks for n bundles of {CPU: 1}.
//
// The request stands until the next call: each call replaces the previous
// request (of any driver or task in the cluster; there is one request per
// cluster), and RequestResources(ctx) with nothing clears it. The
// autoscaler packs the bundles every round onto the total resources of
// the running and pending nodes (the room is asked for whether or not
// work uses it), launches nodes for what does not fit (within the cluster
// file's max_workers), keeps the idle nodes the request needs, and
// reports a bundle no node type can hold as infeasible. `goray status` lists the request among the
// autoscaler's demands. The call only records the request in the GCS and
// returns: it does not wait for nodes.
//
// A cluster without an autoscaler (an embedded node, or a cluster started
// with `goray start` rather than `goray up`) stores the request and
// nothing acts on it: the call succeeds and is harmless, and `goray
// status` shows the request, saying no autoscaler acts on it.
//
// Bad arguments (a nil option, a negative, NaN, infinite or fractional
// WithCPUs, a bundle that is empty or has a negative, NaN or infinite
// amount, as CreatePlacementGroup checks them) return a
// *RequestResourcesError and request nothing. Identical bundles are
// merged into one shape with a count.
//
//	// Room for 16 one-CPU tasks and two {CPU: 8, GPU: 4} workers before
//	// submitting them:
//	err := ray.RequestResources(ctx, ray.WithCPUs(16),
//		ray.WithBundles(ray.Bundle{"CPU": 8, "GPU": 4}, ray.Bundle{"CPU": 8, "GPU": 4}))
//	...
//	err = ray.RequestResources(ctx) // done: the autoscaler may scale down again
func RequestResources(ctx context.Context, opts ...RequestOption) error {
	r := resourceRequest{shapes: []request.Request{}, index: map[string]int{}}
	for i, opt := range opts {
		if opt == nil {
			return &RequestResourcesError{Option: i, Err: errors.New("the option is nil; pass WithCPUs or WithBundles")}
		}
		if err := opt(&r); err != nil {
			e := &RequestResourcesError{Option: i, Err: err}
			var oe optionError
			if errors.As(err, &oe) {
				e.Name, e.Err = oe.name, oe.err
			}
			return e
		}
	}
	cw, err := current()
	if err != nil {
		return err
	}
	if cw.GCS() == nil {
		return ErrNotInitialized
	}
	b, err := json.Marshal(r.shapes)
	if err != nil {
		return fmt.Errorf("goray: RequestResources: encoding the request: %w", err)
	}
	if _, err := cw.GCS().KVPut(ctx, &pb.KVPutRequest{Ns: request.Namespace, Key: request.Key, Value: b, Overwrite: true}); err != nil {
		return fmt.Errorf("goray: RequestResources: storing the request in the GCS (KV %s/%s): %w", request.Namespace, request.Key, err)
	}
	return nil
}

// RequestOption is an argument of RequestResources: WithCPUs or
// WithBundles.
type RequestOption func(*resourceRequest) error

// resourceRequest is what the options of one RequestResources call add
// up to.
type resourceRequest struct {
	// shapes are the bundles merged by shape, in the order first asked
	// for; index finds a shape's entry by its key.
	shapes []request.Request
	index  map[string]int
}

// add asks for count more bundles of set.
func (r *resourceRequest) add(set resources.Set, count int) {
	k := set.Key()
	if i, ok := r.index[k]; ok {
		r.shapes[i].Count += count
		return
	}
	r.index[k] = len(r.shapes)
	r.shapes = append(r.shapes, request.Request{Resources: set.Floats(), Count: count})
}

// maxRequestCPUs bounds WithCPUs: a count the autoscaler's request format
// holds everywhere.
const maxRequestCPUs = math.MaxInt32

// WithCPUs asks for n bundles of {CPU: 1}: room for n one-CPU tasks at
// once, on any nodes (Ray's request_resources(num_cpus=n)). n is a whole
// number >= 0; 0 asks for nothing. It adds to the other options of the
// call.
func WithCPUs(n float64) RequestOption {
	return func(r *resourceRequest) error {
		if math.IsNaN(n) || math.IsInf(n, 0) || n < 0 || n != math.Trunc(n) || n > maxRequestCPUs {
			return optionError{name: "WithCPUs", err: fmt.Errorf("%v CPUs: want a whole number from 0 to %d (n bundles of {CPU: 1})", n, maxRequestCPUs)}
		}
		if n > 0 {
			r.add(resources.Set{resources.CPU: resources.Unit}, int(n))
		}
		return nil
	}
}

// WithBundles asks for room for every bundle at once, each on one node
// (Ray's request_resources(bundles=...)); identical bundles add up. A
// bundle must ask for some resource, with finite amounts >= 0 (zeros are
// left out), as CreatePlacementGroup's bundles. It adds to the other
// options of the call.
func WithBundles(bundles ...Bundle) RequestOption {
	return func(r *resourceRequest) error {
		sets := make([]resources.Set, len(bundles))
		for i, b := range bundles {
			set, err := bundleSet(i, b)
			if err != nil {
				return optionError{name: "WithBundles", err: err}
			}
			sets[i] = set
		}
		for _, set := range sets {
			r.add(set, 1)
		}
		return nil
	}
}

// optionError is a RequestOption's error with the option's name.
type optionError struct {
	name string
	err  error
}

func (e optionError) Error() string { return e.name + ": " + e.err.Error() }

// RequestResourcesError says an argument of RequestResources is bad;
// nothing was requested (the previous request stands).
type RequestResourcesError struct {
	// Option is the bad option's position among the options, from 0.
	Option int
	// Name is the option ("WithCPUs", "WithBundles"; "" for a nil
	// option).
	Name string
	// Err says what is wrong.
	Err error
}

func (e *RequestResourcesError) Error() string {
	name := ""
	if e.Name != "" {
		name = " (" + e.Name + ")"
	}
	return fmt.Sprintf("goray: RequestResources: option %d%s: %v", e.Option, name, e.Err)
}

// Unwrap returns the problem.
func (e *RequestResourcesError) Unwrap() error { return e.Err }

package bench

import (
	"context"
	"errors"
	"fmt"

	"github.com/dustin/go-humanize"

	"github.com/goray-dev/goray/sdk/ray"
)

// MetricObjectTransferNodes is the object transfer metric between two
// nodes (not one of Ray's metrics).
const MetricObjectTransferNodes = "object_transfer_node_to_node"

// remoteLen returns the length of the object it received as a *ray.Buffer
// argument: read without a copy in the store of the node it was pulled to
// (a []byte parameter would copy it into the worker's heap first).
func remoteLen(ctx context.Context, b *ray.Buffer) (int, error) { return len(b.Bytes()), nil }

var remoteLenTask = ray.Task1(remoteLen)

// startSecondNode starts a node of one CPU and a store of storeBytes in
// this process, joined to the cluster (startPluginNode with no plugins);
// failing to start is an error of the metric, not "not available".
func startSecondNode(ctx context.Context, storeBytes int64) (*pluginNode, error) {
	nd, err := startPluginNode(ctx, nodeSpec{cpus: 1, storeBytes: storeBytes})
	if err != nil {
		return nil, fmt.Errorf("starting a second node: %v", err)
	}
	return nd, nil
}

// nodeTransferSetup finds another node (or starts one in this process,
// joining the cluster) and returns a call that puts a fresh size-byte
// object on this node and runs a task pinned to the other node that takes
// it as an argument, so its raylet pulls it.
func (e *env) nodeTransferSetup(size int) setupFunc {
	return func(ctx context.Context) (func(context.Context) error, func(context.Context), error) {
		nodes, err := ray.Nodes(ctx)
		if err != nil {
			return nil, nil, err
		}
		other, teardown := "", func(context.Context) {}
		for _, n := range nodes {
			if n.Alive && n.ID != ray.NodeID() {
				other = n.ID
			}
		}
		if other == "" {
			if e.gcsAddress == "" {
				return nil, nil, &notAvailableError{reason: "no second node and no GCS address to start one"}
			}
			nd, err := startSecondNode(ctx, int64(4*size+64<<20))
			if err != nil {
				return nil, nil, err
			}
			other, teardown = nd.id, nd.stop
		}
		blob := make([]byte, size)
		for i := 0; i < size; i += 4096 {
			blob[i] = byte(i >> 12)
		}
		fn := func(ctx context.Context) error {
			ref, err := ray.Put(ctx, blob)
			if err != nil {
				return err
			}
			defer ref.Release()
			n, err := remoteLenTask.Options(ray.NodeAffinity(other, false), ray.CPUs(0)).Remote(ctx, ray.BufferRef(ref)).Get(ctx)
			if err == nil && n != size {
				err = fmt.Errorf("the other node read %d bytes, want %d", n, size)
			}
			return err
		}
		// One warm-up call here: the first pull also starts a worker there.
		if err := fn(ctx); err != nil {
			teardown(ctx)
			if errors.Is(err, ray.ErrUnschedulable) {
				return nil, nil, &notAvailableError{reason: err.Error()}
			}
			return nil, nil, err
		}
		return fn, teardown, nil
	}
}

// nodeTransferMetric is object_transfer_node_to_node.
func (e *env) nodeTransferMetric() workload {
	size, sizeNote := 256<<20, ""
	if e.quick {
		size, sizeNote = 32<<20, "; quick mode: smaller object"
	}
	return workload{
		name: MetricObjectTransferNodes, unit: UnitGBps, mult: float64(size) / 1e9,
		note: fmt.Sprintf("goray's own; nearest Ray workload: the object transfer of Ray's release tests (object_store: a large object read on other nodes), not in ray microbenchmark; per call the driver puts a fresh %s object on its node and a task pinned to a second node (another node of the cluster, "+
			"or one started in this process on loopback) takes it as a *ray.Buffer argument (read in that node's store without a copy), so that node's raylet pulls it over the object data plane; "+
			"the time includes the put (a copy into the store with every core: objstore.Copy) and the task; figure = object bytes ÷ time (GB = 10^9 bytes); ratio = ÷ TCP loopback bandwidth%s",
			humanize.IBytes(uint64(size)), sizeNote),
		limit: LimitTCP, ratio: func(mean, limit float64) float64 { return mean / limit },
		setup: e.nodeTransferSetup(size),
	}
}

// MetricObjectPullNodes is the pull alone between two nodes: the objects
// are put before timing (object_transfer_node_to_node times the put too).
const MetricObjectPullNodes = "object_pull_node_to_node"

// pullObjects is how many objects the pull metric cycles through; the
// second node's store holds pullResident of them, so every read pulls.
const (
	pullObjects  = 4
	pullResident = 2
)

// nodePullSetup starts a second node in this process whose store holds
// pullResident objects of size bytes, puts pullObjects objects on this
// node, and returns a call that has a task pinned to the second node read
// the next object in turn: its raylet pulls it, evicting an older copy.
func (e *env) nodePullSetup(size int) setupFunc {
	return func(ctx context.Context) (func(context.Context) error, func(context.Context), error) {
		if e.gcsAddress == "" {
			return nil, nil, &notAvailableError{reason: "no GCS address to start a second node with a small store"}
		}
		// Room for pullResident objects and half of another, whatever the
		// size (quick mode's objects are small): a third must evict one.
		nd, err := startSecondNode(ctx, int64(pullResident*size+size/2))
		if err != nil {
			return nil, nil, err
		}
		other := nd.id
		var refs []ray.Ref[[]byte]
		teardown := func(ctx context.Context) {
			for _, r := range refs {
				r.Release()
			}
			nd.stop(ctx)
		}
		blob := make([]byte, size)
		for i := range pullObjects {
			for j := 0; j < size; j += 4096 {
				blob[j] = byte(i + j>>12)
			}
			r, err := ray.Put(ctx, blob)
			if err != nil {
				teardown(ctx)
				return nil, nil, err
			}
			refs = append(refs, r)
		}
		next := 0
		fn := func(ctx context.Context) error {
			ref := refs[next%pullObjects]
			next++
			n, err := remoteLenTask.Options(ray.NodeAffinity(other, false), ray.CPUs(0)).Remote(ctx, ray.BufferRef(ref)).Get(ctx)
			if err == nil && n != size {
				err = fmt.Errorf("the other node read %d bytes, want %d", n, size)
			}
			return err
		}
		// Warm up through every object (this also starts a worker there),
		// then check the node did not keep them all: a read must pull.
		for range pullObjects {
			if err := fn(ctx); err != nil {
				teardown(ctx)
				return nil, nil, err
			}
		}
		st, err := nd.node.Stats(ctx)
		if err != nil {
			teardown(ctx)
			return nil, nil, err
		}
		if st.GetStoreObjects() >= pullObjects {
			teardown(ctx)
			return nil, nil, fmt.Errorf("the second node keeps %d objects of %d: its reads would not pull", st.GetStoreObjects(), pullObjects)
		}
		return fn, teardown, nil
	}
}

// nodePullMetric is object_pull_node_to_node.
func (e *env) nodePullMetric() workload {
	size, sizeNote := 256<<20, ""
	if e.quick {
		size, sizeNote = 32<<20, "; quick mode: smaller objects"
	}
	return workload{
		name: MetricObjectPullNodes, unit: UnitGBps, mult: float64(size) / 1e9,
		note: fmt.Sprintf("goray's own; nearest Ray workload: as %s; the pull alone: the driver puts %d objects of %s on its node before timing, and per call a task pinned to a second node started in this process (whose store holds %d of them, so it evicts an older copy) reads the next in turn without a copy (a *ray.Buffer argument), so that node's raylet pulls it over the object data plane; "+
			"figure = object bytes ÷ time (GB = 10^9 bytes); ratio = ÷ TCP loopback bandwidth%s",
			MetricObjectTransferNodes, pullObjects, humanize.IBytes(uint64(size)), pullResident, sizeNote),
		limit: LimitTCP, ratio: func(mean, limit float64) float64 { return mean / limit },
		setup: e.nodePullSetup(size),
	}
}

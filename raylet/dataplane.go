package raylet

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/raylet/internal/spill"
)

// The object data plane (package internal/dataplane) serves this node's
// objects to other nodes and reads theirs; the object manager is its
// source here.

// ServeData serves the object data plane on lis until it is closed.
func (r *Raylet) ServeData(lis net.Listener) { r.objects.data.Serve(lis) }

// Open implements dataplane.Source: it pins the sealed object oid
// (restoring it first when it is spilled) for one data-plane request.
func (om *objectManager) Open(oid ids.ObjectID) (data, meta []byte, release func(), err error) {
	client := ids.New()
	ctx, cancel := context.WithTimeout(context.Background(), pullTimeout)
	es, err := om.spill.Pin(ctx, []ids.ObjectID{oid}, client)
	cancel()
	var rerr *spill.RestoreError
	if errors.As(err, &rerr) {
		return nil, nil, nil, fmt.Errorf("object %s is spilled on node %s and could not be restored: %v", oid, om.nodeID.Short(), rerr.Err)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	if len(es) != 1 || !es[0].Found || !es[0].Sealed {
		return nil, nil, nil, fmt.Errorf("object %s is not in the store of node %s", oid, om.nodeID.Short())
	}
	release = func() { om.store.Release([]ids.ObjectID{oid}, client) }
	ok := false
	defer func() {
		if !ok {
			release() // Data panicked
		}
	}()
	e := es[0]
	data = om.store.Data(e.Offset, e.DataSize)
	ok = true
	return data, e.Metadata, release, nil
}

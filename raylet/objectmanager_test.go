package raylet

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// fakePeers is a cluster view in which every other node is dead.
type fakePeers struct{ asked []ids.ID }

func (f *fakePeers) peerInfo(node ids.ID) (*gorayv1.NodeInfo, error) {
	f.asked = append(f.asked, node)
	return nil, &NodeDeadError{Node: node, Reason: "test"}
}

func (f *fakePeers) nodeDied(node ids.ID, err error) bool {
	var nd *NodeDeadError
	return errors.As(err, &nd)
}

// TestObjectManagerOwnership: objects are freed when their owner dies
// (its unsealed ones aborted), or when the node their owner ran on dies;
// others stay.
func TestObjectManagerOwnership(t *testing.T) {
	ctx := context.Background()
	store := newFakeStore()
	om := newObjectManager(Config{NodeID: ids.New(), Store: store}, hclog.NewNullLogger(), nil, &fakePeers{})
	local, remote, otherOwner := ids.New(), ids.New(), ids.New()
	remoteNode := ids.New()
	create := func(owner, node ids.ID, seal bool) ids.ObjectID {
		t.Helper()
		oid := ids.ObjectIDFor(ids.New(), 1)
		if _, err := om.create(ctx, oid, 8, nil, owner, node, owner); err != nil {
			t.Fatal(err)
		}
		if seal {
			if err := om.seal(oid, true); err != nil {
				t.Fatal(err)
			}
		}
		return oid
	}
	sealed, unsealed := create(local, om.nodeID, true), create(local, om.nodeID, false)
	fromRemote := create(remote, remoteNode, true)
	kept := create(otherOwner, om.nodeID, true)

	om.processDied(local)
	om.freeOwnedOn([]ids.ID{remoteNode})
	store.mu.Lock()
	freed, aborted, released := store.freed, store.aborted, store.released
	store.mu.Unlock()
	for _, tt := range []struct {
		name        string
		oid         ids.ObjectID
		list        []ids.ObjectID
		want        bool
		description string
	}{
		{"dead owner's sealed object", sealed, freed, true, "freed"},
		{"dead owner's unsealed object", unsealed, aborted, true, "aborted"},
		{"object owned on a dead node", fromRemote, freed, true, "freed"},
		{"live owner's object", kept, freed, false, "freed"},
	} {
		if got := slices.Contains(tt.list, tt.oid); got != tt.want {
			t.Errorf("%s: %s = %v, want %v", tt.name, tt.description, got, tt.want)
		}
	}
	if !slices.Contains(released, local) {
		t.Error("the dead process's pins were not released")
	}
	if alive := om.alive([]ids.ObjectID{sealed, kept}); !slices.Equal(alive, []bool{false, true}) {
		t.Errorf("alive = %v, want [false true]", alive)
	}
}

// TestObjectManagerPullFromDeadNode: a pull from a dead node fails with
// NodeDeadError (no spilled copy to restore, spilling being off).
func TestObjectManagerPullFromDeadNode(t *testing.T) {
	peers := &fakePeers{}
	om := newObjectManager(Config{NodeID: ids.New(), Store: newFakeStore()}, hclog.NewNullLogger(), nil, peers)
	node := ids.New()
	err := om.pull(context.Background(), ids.ObjectIDFor(ids.New(), 1), node, &gorayv1.Address{})
	var nd *NodeDeadError
	if !errors.As(err, &nd) || nd.Node != node {
		t.Fatalf("pull: %v, want NodeDeadError for %s", err, node.Short())
	}
	if len(peers.asked) != 1 {
		t.Fatalf("asked the cluster view %d times, want once", len(peers.asked))
	}
}

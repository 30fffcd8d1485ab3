package raylet

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/raylet/internal/policy"
)

// maxReportPeriod bounds how stale the GCS's (and so every raylet's) view
// of this node's resources gets.
const maxReportPeriod = 500 * time.Millisecond

// NodeDeadError says a node of the cluster is dead.
type NodeDeadError struct {
	Node   ids.ID
	Reason string
}

func (e *NodeDeadError) Error() string {
	return fmt.Sprintf("node %s is dead (%s)", e.Node.Short(), e.Reason)
}

// dialOptions are the options of connections to other raylets: keepalives
// notice a node that vanished without closing its connections.
func dialOptions(addr string, creds *auth.Credentials) []grpc.DialOption {
	return append(creds.DialOptions(addr),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}),
		grpc.WithInitialWindowSize(4<<20),
		grpc.WithInitialConnWindowSize(16<<20),
		grpc.WithReadBufferSize(1<<20),
		grpc.WithWriteBufferSize(1<<20),
	)
}

// clusterSnapshot is one published view of the other nodes; it is never
// changed once published.
type clusterSnapshot struct {
	list []*policy.Node // ordered by id
	byID map[ids.ID]*policy.Node
	// epoch and version are the GCS's for this view: the next refresh
	// asks for the changes since (an empty epoch: the whole table).
	epoch   string
	version uint64
}

var emptySnapshot = &clusterSnapshot{byID: map[ids.ID]*policy.Node{}}

// clusterView is this raylet's view of the other nodes, refreshed from the
// GCS, and its connections to their raylets.
//
// The view is an immutable snapshot published atomically: readers take no
// lock. syncMu serialises publishing refreshed views, newest-asked last
// (it is never held across the GCS call); connMu guards conns.
type clusterView struct {
	nodeID ids.ID
	gcs    gorayv1.GcsClient
	auth   *auth.Credentials
	log    hclog.Logger

	view atomic.Pointer[clusterSnapshot]
	// asked numbers refreshes as they call the GCS; syncMu serialises
	// publishing their replies and guards published, the number of the
	// last one published.
	asked     atomic.Uint64
	syncMu    sync.Mutex
	published uint64

	connMu sync.Mutex
	conns  map[string]*grpc.ClientConn // to other raylets, by address

	wg sync.WaitGroup // calls to other raylets in the background

	deaths *deathNotifier // local deaths, batched per peer (deaths.go)
}

func newClusterView(nodeID ids.ID, gcs gorayv1.GcsClient, creds *auth.Credentials, log hclog.Logger) *clusterView {
	cv := &clusterView{nodeID: nodeID, gcs: gcs, auth: creds, log: log, conns: map[string]*grpc.ClientConn{}}
	cv.view.Store(emptySnapshot)
	cv.deaths = newDeathNotifier(cv)
	return cv
}

// snapshot returns the current view.
func (cv *clusterView) snapshot() *clusterSnapshot { return cv.view.Load() }

// refresh reads the nodes changed since the view's version from the GCS
// (the whole table when the GCS cannot tell: see gcs.NodesSince) and
// publishes a new view; it returns the nodes that died since the last
// view (ok is false when the GCS could not be read).
func (cv *clusterView) refresh(ctx context.Context) (died []*policy.Node, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, gcsTimeout)
	defer cancel()
	// Refreshes run concurrently (the report tick, lease requests, peer
	// lookups): number them as they ask, and publish a reply only if no
	// later-asked one was published, so an older answer never undoes a
	// newer one (a dead node coming back alive).
	gen := cv.asked.Add(1)
	base := cv.view.Load()
	rep, err := cv.gcs.GetAllNodes(ctx, &gorayv1.GetAllNodesRequest{SinceEpoch: base.epoch, SinceVersion: base.version})
	if err != nil {
		cv.log.Debug("refreshing the cluster view failed", "error", err)
		return nil, false
	}
	cv.syncMu.Lock()
	defer cv.syncMu.Unlock()
	old := cv.view.Load()
	if !publishable(old, rep, gen < cv.published) {
		return nil, true
	}
	cv.published = max(cv.published, gen)
	next := &clusterSnapshot{byID: make(map[ids.ID]*policy.Node, len(old.byID)), epoch: rep.GetEpoch(), version: rep.GetVersion()}
	for id, p := range old.byID {
		next.byID[id] = p // nodes the GCS no longer lists (or did not change) stay as they were
	}
	for _, v := range rep.GetNodes() {
		id, err := ids.FromBytes(v.GetInfo().GetNodeId())
		if err != nil || id == cv.nodeID {
			continue
		}
		total, _ := resourcesFromProto(v.GetInfo().GetTotal())
		avail, _ := resourcesFromProto(v.GetAvailable())
		p := &policy.Node{ID: id, Info: v.GetInfo(), Total: total, Available: avail, Alive: v.GetInfo().GetState() == "ALIVE", Draining: v.GetDraining()}
		switch prev := old.byID[id]; {
		case prev == nil && p.Alive:
			cv.log.Info("node joined the cluster", "node_id", id, "name", v.GetInfo().GetNodeName(), "resources", total.String())
		case prev != nil && prev.Alive && !p.Alive:
			died = append(died, p)
		}
		next.byID[id] = p
	}
	next.list = make([]*policy.Node, 0, len(next.byID))
	for _, p := range next.byID {
		next.list = append(next.list, p)
	}
	policy.SortByID(next.list)
	cv.view.Store(next)
	return died, true
}

// publishable reports whether reply rep changes view old. Within one
// GCS incarnation (epoch) versions order the replies: an older one is
// dropped, and a delta applies to any view at or past the version it was
// asked from (views only move forward, and a delta holds every node
// changed since). A whole table of another epoch (the GCS restarted) or
// of a GCS without versions is published unless a later-asked refresh
// already was (askedLater).
func publishable(old *clusterSnapshot, rep *gorayv1.GetAllNodesReply, askedLater bool) bool {
	switch {
	case rep.GetEpoch() != "" && rep.GetEpoch() == old.epoch:
		return rep.GetVersion() > old.version || (rep.GetVersion() == old.version && !rep.GetDelta())
	case rep.GetDelta():
		return false // from a view this one is not
	default:
		return !askedLater
	}
}

// peer returns the view of node id (nil when unknown).
func (cv *clusterView) peer(id ids.ID) *policy.Node { return cv.view.Load().byID[id] }

// conn returns a cached connection to another node's raylet.
func (cv *clusterView) conn(addr string) (gorayv1.RayletClient, error) {
	c, err := cv.clientConn(addr)
	if err != nil {
		return nil, err
	}
	return gorayv1.NewRayletClient(c), nil
}

// clientConn returns the cached connection to the raylet at addr, for the
// services it serves besides Raylet.
func (cv *clusterView) clientConn(addr string) (*grpc.ClientConn, error) {
	cv.connMu.Lock()
	defer cv.connMu.Unlock()
	if c, ok := cv.conns[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr, dialOptions(addr, cv.auth)...)
	if err != nil {
		return nil, err
	}
	cv.conns[addr] = c
	return c, nil
}

// client returns a client for the raylet of p, when p is alive.
func (cv *clusterView) client(p *policy.Node) (gorayv1.RayletClient, error) {
	if !p.Alive {
		return nil, &NodeDeadError{Node: p.ID, Reason: p.Info.GetDeathReason()}
	}
	if p.Info.GetRayletTcp() == "" {
		return nil, fmt.Errorf("node %s has no raylet address", p.ID.Short())
	}
	return cv.conn(p.Info.GetRayletTcp())
}

// tell runs call against every alive other node's raylet, in the
// background, bounded by gcsTimeout each.
func (cv *clusterView) tell(what string, call func(context.Context, gorayv1.RayletClient) error) {
	for _, p := range cv.view.Load().list {
		a := p.Info.GetRayletTcp()
		if !p.Alive || a == "" {
			continue
		}
		cli, err := cv.conn(a)
		if err != nil {
			continue
		}
		cv.wg.Add(1)
		go func() {
			defer cv.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), gcsTimeout)
			defer cancel()
			if err := call(ctx, cli); err != nil {
				cv.log.Debug("telling another node failed", "what", what, "raylet", a, "error", err)
			}
		}()
	}
}

// close waits for the calls in flight and closes the connections.
func (cv *clusterView) close() {
	cv.deaths.close()
	cv.wg.Wait()
	cv.connMu.Lock()
	defer cv.connMu.Unlock()
	for k, c := range cv.conns {
		_ = c.Close()
		delete(cv.conns, k)
	}
}

package raylet

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/gcs"
	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/objstore"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
	"github.com/goray-dev/goray/internal/rpc"
	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/plugins/fs/fsstore"
	"github.com/goray-dev/goray/sdk/storage"
)

// drain asks the harness's raylet to drain (or, with cancel, to stop).
func (h *harness) drain(cancel bool) *gorayv1.DrainRayletReply {
	h.t.Helper()
	ctx, stop := context.WithTimeout(context.Background(), waitfor.Generous)
	defer stop()
	rep, err := h.cl.DrainRaylet(ctx, &gorayv1.DrainRayletRequest{Reason: "test", Cancel: cancel})
	if err != nil {
		h.t.Fatalf("DrainRaylet(cancel=%v): %v", cancel, err)
	}
	return rep
}

// putObject creates and seals an object of size bytes on the harness's
// raylet, owned by a process of ownerNode, through the raylet's API.
func (h *harness) putObject(size int64, ownerNode ids.ID) ids.ObjectID {
	h.t.Helper()
	oid, _ := h.createObject(size, ownerNode)
	h.sealObject(oid)
	return oid
}

// createObject creates an object (unsealed) and returns it with its
// offset in the store.
func (h *harness) createObject(size int64, ownerNode ids.ID) (ids.ObjectID, int64) {
	h.t.Helper()
	oid := ids.ObjectIDFor(ids.New(), 1)
	owner := &gorayv1.Address{WorkerId: ids.New().Bytes(), NodeId: ownerNode.Bytes()}
	rep, err := h.cl.CreateObject(context.Background(), &gorayv1.CreateObjectRequest{ObjectId: oid[:], DataSize: size, Owner: owner})
	if err != nil {
		h.t.Fatalf("CreateObject: %v", err)
	}
	return oid, rep.GetOffset()
}

func (h *harness) sealObject(oid ids.ObjectID) {
	h.t.Helper()
	if _, err := h.cl.SealObject(context.Background(), &gorayv1.SealObjectRequest{ObjectId: oid[:], Release: true}); err != nil {
		h.t.Fatalf("SealObject: %v", err)
	}
}

// drainStateUnchanged fails unless the raylet is not draining, as before
// a refused drain.
func drainStateUnchanged(t *testing.T, h *harness) {
	t.Helper()
	if h.r.sched.isDraining() || h.r.drainer.isActive() || h.r.objects.spill.Draining() {
		t.Fatalf("the node is left draining: scheduler %v, drainer %v, spiller %v",
			h.r.sched.isDraining(), h.r.drainer.isActive(), h.r.objects.spill.Draining())
	}
}

// TestDrainRefused: a drain is refused, saying why, while a lease is
// granted or queued, a placement group bundle is held, on the head, and
// when the node holds primary copies without shared spill storage (none,
// or local disk); a refused drain changes nothing: the node grants the
// next lease.
func TestDrainRefused(t *testing.T) {
	localDisk := func(t *testing.T) func(*Config) {
		st, err := fsstore.Open(context.Background(), t.TempDir(), false)
		if err != nil {
			t.Fatal(err)
		}
		return func(c *Config) {
			c.Spill = SpillConfig{Storage: func() (storage.Storage, error) { return st, nil }, Location: "local disk"}
		}
	}
	tests := []struct {
		name  string
		mod   func(t *testing.T) func(*Config)
		setup func(t *testing.T, h *harness, d *testDriver) (undo func())
		want  []string
	}{
		{
			name: "lease granted",
			setup: func(t *testing.T, h *harness, d *testDriver) func() {
				l := h.mustLease(d.job, cpus(1))
				return func() { h.returnLease(l, false) }
			},
			want: []string{"1 lease granted"},
		},
		{
			name: "lease request queued",
			setup: func(t *testing.T, h *harness, d *testDriver) func() {
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { _, err := h.lease(ctx, d.job, cpus(8), ids.Nil); done <- err }()
				waitFor(t, "the request to queue", func() bool { return h.pendingCount() == 1 })
				return func() {
					cancel()
					if err := <-done; status.Code(err) != codes.Canceled {
						t.Errorf("the queued request ended with %v, want Canceled", err)
					}
				}
			},
			want: []string{"1 lease request queued"},
		},
		{
			name: "placement group bundle held",
			setup: func(t *testing.T, h *harness, d *testDriver) func() {
				g := ids.New()
				rep, err := h.cl.PrepareBundleResources(context.Background(), &gorayv1.PrepareBundlesRequest{
					PlacementGroupId: g.Bytes(), Bundles: []*gorayv1.Bundle{{Index: 0, Resources: resourcesProto(cpus(1))}},
				})
				if err != nil || !rep.GetSuccess() {
					t.Fatalf("prepare: %v, %v", rep, err)
				}
				return func() {
					if _, err := h.cl.CancelResourceReserve(context.Background(), &gorayv1.CancelReserveRequest{PlacementGroupId: g.Bytes()}); err != nil {
						t.Fatal(err)
					}
				}
			},
			want: []string{"1 placement group bundle held"},
		},
		{
			name: "head node",
			mod:  func(*testing.T) func(*Config) { return func(c *Config) { c.IsHead = true } },
			want: []string{"node is the head node"},
		},
		{
			name: "primary copies without spill storage",
			setup: func(t *testing.T, h *harness, d *testDriver) func() {
				h.putObject(3<<20, ids.New())
				h.putObject(1<<20, ids.New())
				return nil
			},
			want: []string{"node holds 2 primary copies (4.0 MiB) and has no shared spill storage to move them to"},
		},
		{
			name: "a primary copy spilling to local disk",
			mod:  localDisk,
			setup: func(t *testing.T, h *harness, d *testDriver) func() {
				h.putObject(1024, ids.New())
				return nil
			},
			want: []string{"node holds 1 primary copy (1.0 KiB) and has no shared spill storage to move it to"},
		},
		{
			name: "everything at once",
			mod:  func(*testing.T) func(*Config) { return func(c *Config) { c.IsHead = true } },
			setup: func(t *testing.T, h *harness, d *testDriver) func() {
				l1, l2 := h.mustLease(d.job, cpus(1)), h.mustLease(d.job, cpus(1))
				h.putObject(2048, ids.New())
				return func() { h.returnLease(l1, false); h.returnLease(l2, false) }
			},
			want: []string{"2 leases granted", "node is the head node", "node holds 1 primary copy (2.0 KiB)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mod func(*Config)
			if tt.mod != nil {
				mod = tt.mod(t)
			}
			h := newHarness(t, mod)
			d := h.driver()
			var undo func()
			if tt.setup != nil {
				undo = tt.setup(t, h, d)
			}
			rep := h.drain(false)
			if rep.GetAccepted() || rep.GetDrained() {
				t.Fatalf("drain accepted: %v", rep)
			}
			for _, w := range tt.want {
				if !strings.Contains(rep.GetRejectionReason(), w) {
					t.Errorf("rejection reason %q does not say %q", rep.GetRejectionReason(), w)
				}
			}
			drainStateUnchanged(t, h)
			if undo != nil {
				undo()
			}
			// Nothing changed: the node still grants leases.
			h.returnLease(h.mustLease(d.job, cpus(1)), false)
		})
	}
}

// TestDrainIdleNode: an idle node without objects is drained at once; it
// says so in its heartbeat; further calls are idempotent; a lease request
// with no other node to go to waits (until its context ends) and a bundle
// is refused; cancelling grants the waiting request and the node schedules
// again; cancelling a node that is not draining is no error.
func TestDrainIdleNode(t *testing.T) {
	h := newHarness(t, nil)
	d := h.driver()
	if rep := h.drain(true); !rep.GetAccepted() || !strings.Contains(rep.GetProgress(), "not draining") {
		t.Fatalf("cancel of a node that does not drain: %v", rep)
	}
	for i := range 2 { // the second call is idempotent
		rep := h.drain(false)
		if !rep.GetAccepted() || !rep.GetDrained() || rep.GetPrimariesLeft() != 0 || rep.GetProgress() != "drained: no primary copy held" {
			t.Fatalf("call %d: %v; want accepted and drained", i+1, rep)
		}
	}
	if err := h.r.heartbeat(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.gcs.locked(func() {
		if hb := h.gcs.heartbeats[len(h.gcs.heartbeats)-1]; !hb.GetDraining() {
			t.Error("the heartbeat does not say the node drains")
		}
	})

	// No lease is granted: the request waits, until its context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := h.lease(ctx, d.job, cpus(1), ids.Nil)
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("lease on a draining node: %v, want DeadlineExceeded", err)
	}
	waitFor(t, "the request to leave the queue once its caller gave up", func() bool { return h.pendingCount() == 0 })
	rep, err := h.cl.PrepareBundleResources(context.Background(), &gorayv1.PrepareBundlesRequest{
		PlacementGroupId: ids.New().Bytes(), Bundles: []*gorayv1.Bundle{{Index: 0, Resources: resourcesProto(cpus(1))}},
	})
	if err != nil || rep.GetSuccess() || !strings.Contains(rep.GetReason(), "is draining") {
		t.Fatalf("prepare on a draining node: %v, %v; want refused because it drains", rep, err)
	}

	type result struct {
		l   *gorayv1.LeaseReply
		err error
	}
	waiting := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
		defer cancel()
		l, err := h.lease(ctx, d.job, cpus(1), ids.Nil)
		waiting <- result{l, err}
	}()
	waitFor(t, "the request to queue", func() bool { return h.pendingCount() == 1 })
	if rep := h.drain(true); !rep.GetAccepted() || !strings.Contains(rep.GetProgress(), "drain cancelled") {
		t.Fatalf("cancel: %v", rep)
	}
	r := <-waiting
	if r.err != nil || len(r.l.GetLeaseId()) == 0 {
		t.Fatalf("the request that waited: %v, %v; want a lease once the drain is cancelled", r.l, r.err)
	}
	h.returnLease(r.l, false)
	if err := h.r.heartbeat(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.gcs.locked(func() {
		if hb := h.gcs.heartbeats[len(h.gcs.heartbeats)-1]; hb.GetDraining() {
			t.Error("the heartbeat still says the node drains after the cancel")
		}
	})
	drainStateUnchanged(t, h)
}

// ---------------------------------------------------------------- nodes

// realStore presents a real objstore.Store as the raylet's ObjectStore, as
// the node host does.
type realStore struct{ *objstore.Store }

func fromObjstore(e objstore.Entry) StoreEntry {
	return StoreEntry{ID: e.ID, Found: e.Found, Offset: e.Offset, DataSize: e.DataSize, Metadata: e.Metadata, Pins: e.Pins, Sealed: e.Sealed, Freed: e.Freed, Seq: e.Seq}
}

func (s realStore) GetEntries(objs []ids.ObjectID, client ids.ID) []StoreEntry {
	var out []StoreEntry
	for _, e := range s.Store.Get(objs, client) {
		out = append(out, fromObjstore(e))
	}
	return out
}

func (s realStore) ListEntries() []StoreEntry {
	var out []StoreEntry
	for _, e := range s.Store.List() {
		out = append(out, fromObjstore(e))
	}
	return out
}

func (s realStore) Usage() StoreUsage {
	u := s.Store.Usage()
	return StoreUsage{Used: u.Used, Capacity: u.Capacity, Objects: u.Objects}
}

// testNode is a raylet of a multi-node test: a real object store, the
// raylet served on a TCP address of its own loopback IP as well as its
// unix socket, its object data plane, registered with and reporting to a
// real GCS.
type testNode struct {
	*gcsHarness
	id    ids.ID
	store *objstore.Store
	srv   *grpc.Server
	data  net.Listener
}

// sharedSpill is the spill configuration of a node spilling to dir as the
// shared storage plugin "shared-fs" (every node of the test reads dir).
func sharedSpill(t *testing.T, dir string, node ids.ID) SpillConfig {
	st, err := fsstore.Open(context.Background(), dir, false)
	if err != nil {
		t.Fatal(err)
	}
	return SpillConfig{
		Storage:  func() (storage.Storage, error) { return st, nil },
		Location: "file://" + dir, Shared: "shared-fs", MinFileSize: 1 << 20,
		Prefix: "session/" + node.Short() + "/",
	}
}

// newTestNode starts a node at ip with res, reporting to the GCS at
// gcsAddr; spill (when its Storage is set) configures spilling; srvOpts
// are added to its TCP server's options.
func newTestNode(t *testing.T, gcsAddr, ip string, res resources.Set, spill func(node ids.ID) SpillConfig, srvOpts ...grpc.ServerOption) *testNode {
	t.Helper()
	n := &testNode{id: ids.New()}
	dir, err := os.MkdirTemp("", "st")
	if err != nil {
		t.Fatal(err)
	}
	n.store, err = objstore.New(objstore.Config{Capacity: 32 << 20, SocketPath: filepath.Join(dir, "store.sock")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // after the raylet's Shutdown
		n.store.Close()
		os.RemoveAll(dir)
	})
	tcp, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	n.data, err = net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	n.gcsHarness = newGCSHarness(t, gcsAddr, time.Minute, func(c *Config) {
		c.NodeID, c.NodeName, c.NodeIP = n.id, "node-"+ip, ip
		c.Resources, c.Store = res, realStore{n.store}
		c.TCPAddress, c.ObjectAddress = tcp.Addr().String(), n.data.Addr().String()
		if spill != nil {
			c.Spill = spill(n.id)
		}
	})
	n.srv = grpc.NewServer(append(rpc.ServerOptions(nil), srvOpts...)...)
	n.r.Register(n.srv)
	go n.srv.Serve(tcp)
	go n.r.ServeData(n.data)
	t.Cleanup(n.stopServing) // before the raylet's Shutdown
	return n
}

// stopServing closes the node's TCP endpoints: other nodes cannot reach
// it any more.
func (n *testNode) stopServing() {
	n.srv.Stop()
	n.data.Close()
}

// stop stops the node for good: Shutdown (which unregisters it from the
// GCS) and its endpoints closed.
func (n *testNode) stop() {
	n.t.Helper()
	n.shutdown()
	n.stopServing()
}

// seesPeer waits until n's view of the cluster has peer as cond wants.
func (n *testNode) seesPeer(what string, peer ids.ID, cond func(p *peerView) bool) {
	n.t.Helper()
	waitFor(n.t, what, func() bool {
		p := n.r.cluster.peer(peer)
		return p != nil && cond(&peerView{alive: p.Alive, draining: p.Draining, available: p.Available})
	})
}

// peerView is what a test looks at of a node's view of another.
type peerView struct {
	alive, draining bool
	available       resources.Set
}

// drainGCS is a GCS on loopback that forwards DrainNode to the raylets
// (the node host's, a gcs.RayletReserver), with a client.
func drainGCS(t *testing.T) (*gcs.Server, string, gorayv1.GcsClient) {
	t.Helper()
	res := gcs.NewRayletReserver(func(target string) (*grpc.ClientConn, error) { return rpc.Dial(target, nil) })
	t.Cleanup(func() { res.Close() })
	g, addr := serveGCS(t, gcs.New(gcs.Options{HeartbeatPeriod: testGCSPeriod, FailureThreshold: 100, Reserver: res}), "127.0.0.1:0")
	conn, err := rpc.Dial(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return g.g, addr, gorayv1.NewGcsClient(conn)
}

// drainNode calls the GCS's DrainNode for node.
func drainNode(t *testing.T, c gorayv1.GcsClient, node ids.ID, cancel bool) *gorayv1.DrainNodeReply {
	t.Helper()
	ctx, stop := context.WithTimeout(context.Background(), waitfor.Generous)
	defer stop()
	rep, err := c.DrainNode(ctx, &gorayv1.DrainNodeRequest{NodeId: node.Bytes(), Reason: "idle for 1m", Cancel: cancel})
	if err != nil {
		t.Fatalf("DrainNode(%s, cancel=%v): %v", node.Short(), cancel, err)
	}
	return rep
}

// viewDraining reports whether the GCS's view of node says it drains.
func viewDraining(g *gcs.Server, node ids.ID) bool {
	for _, v := range g.Nodes() {
		if string(v.GetInfo().GetNodeId()) == string(node.Bytes()) {
			return v.GetDraining()
		}
	}
	return false
}

// TestDrainMovesPrimariesToSharedStorage: a node spilling to shared
// storage holds primary copies of objects owned elsewhere; DrainNode
// through the GCS is accepted, the GCS shows the node draining, every copy
// is spilled and recorded in the GCS and the drain reports drained; a copy
// made on the draining node keeps it from being drained until it is
// spilled too. The drained node stops (keeping its files), and another
// node restores every object from the shared storage: its bytes are
// intact.
func TestDrainMovesPrimariesToSharedStorage(t *testing.T) {
	g, addr, gc := drainGCS(t)
	shared := t.TempDir()
	spillTo := func(node ids.ID) SpillConfig { return sharedSpill(t, shared, node) }
	victim := newTestNode(t, addr, "127.0.0.2", cpus(2), spillTo)
	reader := newTestNode(t, addr, "127.0.0.3", cpus(2), spillTo)
	victim.waitAlive(g, time.Time{})
	reader.waitAlive(g, time.Time{})

	// Primary copies on the victim, owned by a process of the reader's
	// node, each with its own bytes.
	want := map[ids.ObjectID][]byte{}
	put := func(size int) ids.ObjectID {
		oid, off := victim.createObject(int64(size), reader.id)
		b := victim.store.Data(off, int64(size))
		for i := range b {
			b[i] = byte(len(want) + i*7)
		}
		want[oid] = bytes.Clone(b)
		return oid
	}
	for _, size := range []int{700 << 10, 300 << 10, 2 << 20} {
		victim.sealObject(put(size))
	}

	rep := drainNode(t, gc, victim.id, false)
	if !rep.GetAccepted() {
		t.Fatalf("drain refused: %s", rep.GetRejectionReason())
	}
	if !viewDraining(g, victim.id) {
		t.Error("the GCS's view of the node does not say it drains")
	}
	waitFor(t, "the node to be drained", func() bool {
		rep = drainNode(t, gc, victim.id, false)
		return rep.GetDrained()
	})
	if rep.GetPrimariesLeft() != 0 || !strings.Contains(rep.GetProgress(), "spilled 3 of 3 primary copies") {
		t.Fatalf("drained: %v", rep)
	}

	// A copy made on the draining node (a worker finishing a task).
	late := put(1 << 20)
	rep = drainNode(t, gc, victim.id, false)
	if rep.GetDrained() || rep.GetPrimariesLeft() != 1 || !strings.Contains(rep.GetProgress(), "not sealed yet") {
		t.Fatalf("with an unsealed copy: %v; want 1 primary copy left, not drained", rep)
	}
	victim.sealObject(late)
	waitFor(t, "the node to be drained again", func() bool {
		rep = drainNode(t, gc, victim.id, false)
		return rep.GetDrained()
	})
	if !strings.Contains(rep.GetProgress(), "spilled 4 of 4") {
		t.Fatalf("drained: %v", rep)
	}
	// (A copy leaves memory just after it is recorded.)
	waitFor(t, "the drained node's memory to be empty", func() bool { return victim.store.Usage().Objects == 0 })
	// Each object is recorded in the GCS under the node.
	for oid := range want {
		r, err := gc.KVGet(context.Background(), &gorayv1.KVGetRequest{Ns: "spill", Key: victim.id.String() + "/" + oid.String()})
		if err != nil || !r.GetFound() {
			t.Fatalf("no spill record of object %s in the GCS: %v", oid, err)
		}
	}

	victim.stop()
	if files, _ := filepath.Glob(filepath.Join(shared, "session", victim.id.Short(), "*.spill")); len(files) == 0 {
		t.Fatal("the drained node deleted its spilled files when it stopped")
	}
	reader.seesPeer("the victim to be dead in the reader's view", victim.id, func(p *peerView) bool { return !p.alive })

	owner := &gorayv1.Address{WorkerId: ids.New().Bytes(), NodeId: reader.id.Bytes()}
	client := ids.New()
	for oid, b := range want {
		ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
		_, err := reader.cl.PullObject(ctx, &gorayv1.PullObjectRequest{ObjectId: oid[:], NodeId: victim.id.Bytes(), Owner: owner})
		cancel()
		if err != nil {
			t.Fatalf("reading object %s of the stopped node: %v", oid, err)
		}
		got, err := reader.cl.GetObjects(context.Background(), &gorayv1.GetObjectsRequest{ObjectIds: [][]byte{oid[:]}, ClientId: client.Bytes()})
		if err != nil || !got.GetObjects()[0].GetFound() {
			t.Fatalf("object %s restored but not in the reader's store: %v, %v", oid, got, err)
		}
		o := got.GetObjects()[0]
		if !bytes.Equal(reader.store.Data(o.GetOffset(), o.GetDataSize()), b) {
			t.Fatalf("object %s restored with other bytes", oid)
		}
	}
	reader.store.ReleaseClient(client)
}

// TestDrainingNodeTakesNoWork: a draining node grants no new lease (a
// request goes back to a node that has room), and no other node sends it
// work, even when only it could run a request; cancelling the drain makes
// it schedule again, and the request that waited elsewhere is passed on to
// it.
func TestDrainingNodeTakesNoWork(t *testing.T) {
	g, addr, gc := drainGCS(t)
	big := newTestNode(t, addr, "127.0.0.2", cpus(2), nil)
	small := newTestNode(t, addr, "127.0.0.3", cpus(1), nil)
	big.waitAlive(g, time.Time{})
	small.waitAlive(g, time.Time{})
	db, ds := big.driver(), small.driver()

	if rep := drainNode(t, gc, big.id, false); !rep.GetAccepted() || !rep.GetDrained() {
		t.Fatalf("drain of an idle node: %v", rep)
	}
	if !viewDraining(g, big.id) {
		t.Error("the GCS's view of the node does not say it drains")
	}
	big.seesPeer("the small node in the view of the big one", small.id, func(p *peerView) bool {
		return p.alive && p.available.Fits(cpus(1))
	})
	small.seesPeer("the big node draining in the view of the small one", big.id, func(p *peerView) bool { return p.draining })

	// A request on the draining node goes to the node with room.
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	rep, err := big.lease(ctx, db.job, cpus(1), ids.Nil)
	if err != nil || string(rep.GetSpillbackNodeId()) != string(small.id.Bytes()) {
		t.Fatalf("lease on the draining node: %v, %v; want a spillback to %s", rep, err, small.id.Short())
	}

	// Only the draining node could run this one: it waits on the small
	// node, which does not pass it on while the big one drains.
	type result struct {
		l   *gorayv1.LeaseReply
		err error
	}
	waiting := make(chan result, 1)
	go func() {
		l, err := small.lease(ctx, ds.job, cpus(2), ids.Nil)
		waiting <- result{l, err}
	}()
	waitFor(t, "the request to wait on the small node", func() bool { return small.pendingCount() == 1 })
	small.r.sched.respill(small.r.cluster.snapshot(), time.Now().Add(time.Minute))
	select {
	case r := <-waiting:
		t.Fatalf("the request was answered while the only node that fits drains: %v, %v", r.l, r.err)
	default:
	}
	if small.pendingCount() != 1 {
		t.Fatal("the request left the small node while the big one drains")
	}

	if rep := drainNode(t, gc, big.id, true); !rep.GetAccepted() {
		t.Fatalf("cancel: %v", rep)
	}
	if viewDraining(g, big.id) {
		t.Error("the GCS's view of the node says it drains after the cancel")
	}
	r := <-waiting
	if r.err != nil || string(r.l.GetSpillbackNodeId()) != string(big.id.Bytes()) {
		t.Fatalf("the request that waited: %v, %v; want it passed on to the big node", r.l, r.err)
	}
	l := big.mustLease(db.job, cpus(1))
	if len(l.GetLeaseId()) == 0 {
		t.Fatalf("the node does not grant leases after the cancel: %v", l)
	}
	big.returnLease(l, false)
}

// TestDrainNodeUnknownOrDead: the GCS's DrainNode answers NotFound, naming
// the node, for a node it does not know and for a dead one.
func TestDrainNodeUnknownOrDead(t *testing.T) {
	g, addr, gc := drainGCS(t)
	n := newTestNode(t, addr, "127.0.0.2", cpus(1), nil)
	n.waitAlive(g, time.Time{})
	n.stop()
	unknown := ids.New()
	for _, tt := range []struct {
		name string
		node ids.ID
		want string
	}{
		{"unknown", unknown, "no node with id " + unknown.String()},
		{"dead", n.id, "cannot drain node " + n.id.String() + ": it is dead"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := gc.DrainNode(context.Background(), &gorayv1.DrainNodeRequest{NodeId: tt.node.Bytes()})
			if status.Code(err) != codes.NotFound || !strings.Contains(status.Convert(err).Message(), tt.want) {
				t.Fatalf("DrainNode: %v; want NotFound saying %q", err, tt.want)
			}
		})
	}
}

// TestDrainAfterShutdown: a drain asked of a node that stopped fails with
// ErrShuttingDown.
func TestDrainAfterShutdown(t *testing.T) {
	h := newHarness(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	if err := h.r.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := h.r.drain("late")
	if !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("drain after Shutdown: %v, want ErrShuttingDown", err)
	}
}

// heldRegistration is a GCS client whose RegisterNode reaches the GCS but
// whose answer never reaches the caller before its context ends: a
// registration cancelled by Shutdown after the GCS took it.
type heldRegistration struct {
	gorayv1.GcsClient
}

func (h heldRegistration) RegisterNode(ctx context.Context, req *gorayv1.RegisterNodeRequest, opts ...grpc.CallOption) (*gorayv1.RegisterNodeReply, error) {
	if _, err := h.GcsClient.RegisterNode(ctx, req, opts...); err != nil {
		return nil, err
	}
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

// TestShutdownUndoesUnansweredRegistration: a node shut down while its
// registration's answer is on the way unregisters all the same, so the
// GCS does not keep a stopped node ALIVE (a race-stage flake of
// TestDrainNodeUnknownOrDead: Shutdown cancelled the answered call and
// skipped the unregistration).
func TestShutdownUndoesUnansweredRegistration(t *testing.T) {
	g, addr, _ := drainGCS(t)
	h := newGCSHarness(t, addr, time.Minute, func(c *Config) {
		c.GCS = heldRegistration{c.GCS}
	})
	waitFor(t, "the node to be ALIVE in the GCS", func() bool {
		n := h.nodeIn(g)
		return n != nil && n.GetInfo().GetState() == gcs.StateAlive
	})
	h.shutdown()
	if n := h.nodeIn(g); n.GetInfo().GetState() != gcs.StateDead {
		t.Fatalf("after Shutdown the GCS has the node %s; want DEAD", n.GetInfo().GetState())
	}
}

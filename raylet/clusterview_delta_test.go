package raylet

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/goray-dev/goray/gcs"
	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/rpc"
	"github.com/goray-dev/goray/internal/waitfor"
)

// recordingGCS counts the GetAllNodes replies that were deltas.
type recordingGCS struct {
	gorayv1.GcsClient
	mu            sync.Mutex
	deltas, fulls int
}

func (g *recordingGCS) GetAllNodes(ctx context.Context, in *gorayv1.GetAllNodesRequest, opts ...grpc.CallOption) (*gorayv1.GetAllNodesReply, error) {
	rep, err := g.GcsClient.GetAllNodes(ctx, in, opts...)
	if err == nil {
		g.mu.Lock()
		if rep.GetDelta() {
			g.deltas++
		} else {
			g.fulls++
		}
		g.mu.Unlock()
	}
	return rep, err
}

// TestClusterViewFromDeltas: a view kept up to date from the real GCS's
// deltas equals a view read from its whole table, after every step of a
// sequence of changes (joins, load, draining, deaths), and only the first
// refresh reads the whole table.
func TestClusterViewFromDeltas(t *testing.T) {
	served, addr := serveGCS(t, gcs.New(gcs.Options{HeartbeatPeriod: testGCSPeriod, FailureThreshold: 1000}), "127.0.0.1:0")
	_ = served
	conn, err := rpc.Dial(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := gorayv1.NewGcsClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	node := func(name string, n float64) *gorayv1.NodeInfo {
		return &gorayv1.NodeInfo{NodeId: ids.New().Bytes(), NodeName: name, RayletTcp: "127.0.0.1:1", Total: resourcesProto(cpus(n))}
	}
	register := func(info *gorayv1.NodeInfo) {
		if _, err := client.RegisterNode(ctx, &gorayv1.RegisterNodeRequest{Node: info}); err != nil {
			t.Fatal(err)
		}
	}
	heartbeat := func(info *gorayv1.NodeInfo, avail float64, draining bool) {
		if _, err := client.ReportHeartbeat(ctx, &gorayv1.HeartbeatRequest{NodeId: info.GetNodeId(), Available: resourcesProto(cpus(avail)), Draining: draining}); err != nil {
			t.Fatal(err)
		}
	}
	self, a, b, c := node("self", 2), node("a", 8), node("b", 8), node("c", 4)
	for _, n := range []*gorayv1.NodeInfo{self, a, b, c} {
		register(n)
	}
	rec := &recordingGCS{GcsClient: client}
	cv := newClusterView(ids.MustFromBytes(self.GetNodeId()), rec, nil, hclog.NewNullLogger())
	defer cv.close()

	steps := []struct {
		name   string
		change func()
	}{
		{"first view", func() {}},
		{"nothing changed", func() {}},
		{"load", func() { heartbeat(a, 2, false); heartbeat(b, 8, false) }},
		{"a node joins", func() { register(node("d", 16)) }},
		{"draining", func() { heartbeat(c, 4, true) }},
		{"a node dies", func() {
			if _, err := client.UnregisterNode(ctx, &gorayv1.UnregisterNodeRequest{NodeId: b.GetNodeId(), Reason: "test"}); err != nil {
				t.Fatal(err)
			}
		}},
		{"load again, draining ends", func() { heartbeat(a, 0, false); heartbeat(c, 1, false) }},
	}
	for _, st := range steps {
		st.change()
		if _, ok := cv.refresh(ctx); !ok {
			t.Fatalf("%s: refresh failed", st.name)
		}
		whole := newClusterView(cv.nodeID, client, nil, hclog.NewNullLogger())
		if _, ok := whole.refresh(ctx); !ok {
			t.Fatalf("%s: reading the whole table failed", st.name)
		}
		sameView(t, st.name, cv.snapshot(), whole.snapshot())
		whole.close()
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.fulls != 1 || rec.deltas != len(steps)-1 {
		t.Fatalf("%d whole tables and %d deltas, want 1 and %d", rec.fulls, rec.deltas, len(steps)-1)
	}
}

// sameView fails unless got and want list the same nodes alike.
func sameView(t *testing.T, step string, got, want *clusterSnapshot) {
	t.Helper()
	if len(got.list) != len(want.list) {
		t.Fatalf("%s: %d nodes in the view from deltas, %d in the whole table", step, len(got.list), len(want.list))
	}
	for i, w := range want.list {
		g := got.list[i]
		if g.ID != w.ID || g.Alive != w.Alive || g.Draining != w.Draining ||
			!maps.Equal(g.Total, w.Total) || !maps.Equal(g.Available, w.Available) || !proto.Equal(g.Info, w.Info) {
			t.Fatalf("%s: node %s from deltas %+v, in the whole table %+v", step, w.ID.Short(), g, w)
		}
	}
}

// TestClusterViewPublishOrder: replies of one GCS incarnation are ordered
// by version (an older one never undoes a newer); a whole table of
// another incarnation replaces the view unless a later-asked refresh was
// already published.
func TestClusterViewPublishOrder(t *testing.T) {
	view := &clusterSnapshot{epoch: "e1", version: 10}
	tests := []struct {
		name       string
		rep        *gorayv1.GetAllNodesReply
		askedLater bool
		want       bool
	}{
		{"a newer delta", &gorayv1.GetAllNodesReply{Epoch: "e1", Version: 12, Delta: true}, false, true},
		{"a newer delta asked before one published", &gorayv1.GetAllNodesReply{Epoch: "e1", Version: 12, Delta: true}, true, true},
		{"an empty delta", &gorayv1.GetAllNodesReply{Epoch: "e1", Version: 10, Delta: true}, false, false},
		{"an older delta", &gorayv1.GetAllNodesReply{Epoch: "e1", Version: 9, Delta: true}, false, false},
		{"an older whole table", &gorayv1.GetAllNodesReply{Epoch: "e1", Version: 9}, false, false},
		{"the whole table at the same version", &gorayv1.GetAllNodesReply{Epoch: "e1", Version: 10}, false, true},
		{"a restarted GCS's table", &gorayv1.GetAllNodesReply{Epoch: "e2", Version: 1}, false, true},
		{"a restarted GCS's table asked before one published", &gorayv1.GetAllNodesReply{Epoch: "e2", Version: 1}, true, false},
		{"a delta of another epoch", &gorayv1.GetAllNodesReply{Epoch: "e2", Version: 11, Delta: true}, false, false},
		{"a GCS without versions", &gorayv1.GetAllNodesReply{}, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := publishable(view, tc.rep, tc.askedLater); got != tc.want {
				t.Fatalf("publishable = %v, want %v", got, tc.want)
			}
		})
	}
}

// blockingGCS is a fakeGCS whose GetAllNodes blocks until release is
// closed.
type blockingGCS struct {
	*fakeGCS
	entered chan struct{}
	once    sync.Once
	release chan struct{}
}

func (g *blockingGCS) GetAllNodes(ctx context.Context, in *gorayv1.GetAllNodesRequest, opts ...grpc.CallOption) (*gorayv1.GetAllNodesReply, error) {
	g.once.Do(func() { close(g.entered) })
	<-g.release // deaf to ctx on purpose: a GCS that does not answer
	return g.fakeGCS.GetAllNodes(ctx, in, opts...)
}

// TestHeartbeatsNotBehindRefresh: while the cluster view's refresh hangs
// in the GCS, the node's heartbeats go on.
func TestHeartbeatsNotBehindRefresh(t *testing.T) {
	g := &blockingGCS{fakeGCS: &fakeGCS{}, entered: make(chan struct{}), release: make(chan struct{})}
	h := newHarness(t, func(c *Config) {
		c.GCS = g
		c.HeartbeatPeriod = 10 * time.Millisecond
	})
	h.gcs = g.fakeGCS
	released := false
	release := func() {
		if !released {
			released = true
			close(g.release)
		}
	}
	t.Cleanup(release) // before the harness's Shutdown
	runCtx, stopRun := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- h.r.Run(runCtx) }()
	defer func() { stopRun(); release(); <-runDone }()

	select {
	case <-g.entered:
	case <-time.After(waitfor.Generous):
		t.Fatal("the raylet never refreshed its view")
	}
	count := func() int {
		n := 0
		g.locked(func() { n = len(g.heartbeats) })
		return n
	}
	before := count()
	waitFor(t, "heartbeats while the refresh hangs", func() bool { return count() >= before+5 })
	select {
	case <-g.release:
		t.Fatal("the refresh was released")
	default:
	}
}

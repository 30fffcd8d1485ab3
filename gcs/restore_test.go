package gcs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/goray-dev/goray/gcs/internal/store"
	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/leaktest"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
)

// keepOpen is a store that outlives the servers opened on it (Close does
// nothing), so that a test can open a GCS on it again.
type keepOpen struct{ store.Store }

func (keepOpen) Close() error { return nil }

// restoreCluster is what a first GCS wrote: one good record of each
// table.
type restoreCluster struct {
	st                      store.Store
	node, job, actor, group ids.ID
	nodeInfo                *gorayv1.NodeInfo
	cluster                 string
}

// writeGoodCluster runs a first GCS on a memory store and leaves one
// node, job, actor, placement group and KV entry in it.
func writeGoodCluster(t *testing.T, opts Options) *restoreCluster {
	t.Helper()
	rc := &restoreCluster{st: keepOpen{store.NewMemory()}, node: newID(), job: newID(), actor: newID(), group: newID()}
	s1, err := openOn(ctxT(t), opts, rc.st)
	mustOK(t, err)
	c1, stop1 := serveOpened(t, s1)
	rc.nodeInfo = nodeInfo(rc.node, "good")
	_, err = c1.RegisterNode(ctxT(t), &gorayv1.RegisterNodeRequest{Node: rc.nodeInfo})
	mustOK(t, err)
	_, err = c1.AddJob(ctxT(t), &gorayv1.AddJobRequest{Job: &gorayv1.JobInfo{JobId: rc.job.Bytes(), BinaryPath: "/bin/x", BinarySha256: fmt.Sprintf("%064x", 7), Env: []string{"SECRET=hunter2"}}})
	mustOK(t, err)
	registerActor(t, c1, actorOn(rc.actor, rc.job, rc.node, newID(), "counter"))
	_, err = c1.CreatePlacementGroup(ctxT(t), &gorayv1.CreatePlacementGroupRequest{Group: &gorayv1.PlacementGroupInfo{
		PlacementGroupId: rc.group.Bytes(), Name: "gang", JobId: rc.job.Bytes(), Bundles: bundlesOf(1)}})
	mustOK(t, err)
	_, err = c1.KVPut(ctxT(t), &gorayv1.KVPutRequest{Ns: "app", Key: "good", Value: []byte("v"), Overwrite: true})
	mustOK(t, err)
	rc.cluster = s1.ClusterID()
	stop1()
	return rc
}

// marshalled is m's bytes as the storage keeps them.
func marshalled(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// quarantined returns the quarantine record of table/key, or nil.
func quarantined(t *testing.T, st store.Store, table, key string) *quarantineRecord {
	t.Helper()
	b, err := st.Get(ctxT(t), tableQuarantine, table+"/"+key)
	if err != nil {
		return nil
	}
	var q quarantineRecord
	if err := json.Unmarshal(b, &q); err != nil {
		t.Fatalf("quarantine record %s/%s: %v\n%s", table, key, err, b)
	}
	return &q
}

// TestRestoreSetsAsideBadRecords: each record a GCS reads back passes the
// checks of the live call that would have made it; one that does not (or
// cannot be decoded) is moved to the quarantine table, counted, and the
// GCS starts with every good record. Before the checks a corrupt node
// record failed Open (the GCS never started again) and a bad address
// was restored as it was.
func TestRestoreSetsAsideBadRecords(t *testing.T) {
	badNode := newID()
	withAddr := func(addr string) []byte {
		info := nodeInfo(badNode, "evil")
		info.State, info.RayletTcp = StateAlive, addr
		return marshalled(info)
	}
	badActor, dupActor, badGroup := newID(), newID(), newID()
	job := func(mut func(j *gorayv1.JobInfo)) func(rc *restoreCluster) []byte {
		return func(rc *restoreCluster) []byte {
			j := &gorayv1.JobInfo{JobId: rc.job.Bytes(), BinaryPath: "/bin/x", BinarySha256: fmt.Sprintf("%064x", 7), State: StateRunning}
			mut(j)
			return marshalled(j)
		}
	}
	for _, tc := range []struct {
		name, table, key string
		value            func(rc *restoreCluster) []byte
		want             string
	}{
		{"corrupt node", tableNodes, badNode.String(), func(*restoreCluster) []byte { return []byte{0xff, 0x13, 0x07, 0x00, 0x9a, 0x42} }, "cannot be decoded"},
		{"node with a bad address", tableNodes, badNode.String(), func(*restoreCluster) []byte { return withAddr("not-an-address") }, "node.raylet_tcp"},
		{"node keyed as another", tableNodes, newID().String(), func(*restoreCluster) []byte { return withAddr("127.0.0.9:1") }, "keyed"},
		{"node in no state", tableNodes, badNode.String(), func(*restoreCluster) []byte {
			info := nodeInfo(badNode, "evil")
			info.State = "ZOMBIE"
			return marshalled(info)
		}, "node.state"},
		{"job without a hash", tableJobs, "", job(func(j *gorayv1.JobInfo) { j.BinarySha256 = "abc" }), "job.binary_sha256"},
		{"job in no state", tableJobs, "", job(func(j *gorayv1.JobInfo) { j.State = "MAYBE" }), "job.state"},
		{"actor with a short job id", tableActors, badActor.String(), func(*restoreCluster) []byte {
			return marshalled(&gorayv1.ActorInfo{ActorId: badActor.Bytes(), JobId: []byte{1, 2, 3}})
		}, "actor.job_id"},
		{"actor taking a live name", tableActors, dupActor.String(), func(rc *restoreCluster) []byte {
			a := actorOn(dupActor, rc.job, rc.node, newID(), "counter")
			a.StartTimeMs = 1 << 50 // read after the holder
			return marshalled(a)
		}, "counter"},
		{"group of an unknown strategy", tableGroups, badGroup.String(), func(*restoreCluster) []byte {
			return marshalled(&gorayv1.PlacementGroupInfo{PlacementGroupId: badGroup.Bytes(), Strategy: 99, Bundles: bundlesOf(1)})
		}, "group.strategy"},
		{"group whose bundle index lies", tableGroups, badGroup.String(), func(*restoreCluster) []byte {
			b := bundlesOf(1, 1)
			b[1].Index = 7
			return marshalled(&gorayv1.PlacementGroupInfo{PlacementGroupId: badGroup.Bytes(), Bundles: b})
		}, "index"},
		{"group on a malformed node", tableGroups, badGroup.String(), func(*restoreCluster) []byte {
			b := bundlesOf(1)
			b[0].NodeId = []byte("xyz")
			return marshalled(&gorayv1.PlacementGroupInfo{PlacementGroupId: badGroup.Bytes(), Bundles: b, State: stCreated})
		}, "node_id"},
		{"kv value over the limit", tableKV, kvRecordKey("app", "big"), func(*restoreCluster) []byte { return bytes.Repeat([]byte("x"), 65) }, "the limit is 64 bytes"},
		{"kv namespace too long", tableKV, kvRecordKey(strings.Repeat("n", 300), "k"), func(*restoreCluster) []byte { return []byte("v") }, "namespace"},
		{"kv key without a namespace", tableKV, "no-separator", func(*restoreCluster) []byte { return []byte("v") }, "separator"},
		{"kv past the namespace's keys", tableKV, kvRecordKey("app", "zzz"), func(*restoreCluster) []byte { return []byte("v") }, "keys"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leaktest.Goroutines(t)
			opts := Options{Token: "tok", KV: KVLimits{MaxValueSize: 64, NamespaceKeys: 1}}
			rc := writeGoodCluster(t, opts)
			key := tc.key
			if key == "" {
				key = rc.job.String()
			}
			bad := tc.value(rc)
			mustOK(t, rc.st.Put(ctxT(t), tc.table, map[string][]byte{key: bad}))

			s2, err := openOn(ctxT(t), opts, rc.st)
			if err != nil {
				t.Fatalf("Open with one bad %s record: %v; want it set aside", tc.table, err)
			}
			c2, _ := serveOpened(t, s2)
			if s2.ClusterID() != rc.cluster || s2.StorageSetAside() != 1 {
				t.Fatalf("cluster %s (want %s), %d records set aside (want 1)", s2.ClusterID(), rc.cluster, s2.StorageSetAside())
			}
			q := quarantined(t, rc.st, tc.table, key)
			if q == nil || !bytes.Equal(q.Value, bad) || !strings.Contains(q.Reason, tc.want) || q.Kept {
				t.Fatalf("quarantine record %+v; want the bad bytes and a reason naming %q", q, tc.want)
			}
			if v, err := rc.st.Get(ctxT(t), tc.table, key); err == nil && bytes.Equal(v, bad) {
				t.Fatalf("the bad record is still in table %s", tc.table)
			}
			info, err := c2.GetClusterInfo(ctxT(t), &gorayv1.GetClusterInfoRequest{})
			mustOK(t, err)
			if info.GetStorageSetAside() != 1 || s2.MetricsStats().StorageSetAside != 1 {
				t.Fatalf("GetClusterInfo says %d set aside, the metrics %d; want 1", info.GetStorageSetAside(), s2.MetricsStats().StorageSetAside)
			}

			// The good records, as the first GCS left them.
			_, err = c2.RegisterNode(ctxT(t), &gorayv1.RegisterNodeRequest{Node: rc.nodeInfo, ClusterId: rc.cluster})
			mustOK(t, err)
			nodeView(t, c2, rc.node)
			if tc.table != tableJobs {
				jobs, err := c2.GetAllJobs(ctxT(t), &gorayv1.GetAllJobsRequest{IncludeEnv: true})
				mustOK(t, err)
				if len(jobs.GetJobs()) != 1 || !slices.Equal(jobs.GetJobs()[0].GetEnv(), []string{"SECRET=hunter2"}) {
					t.Fatalf("jobs after restore: %v", jobs.GetJobs())
				}
			}
			if got := getActor(t, c2, rc.actor); got.GetName() != "counter" {
				t.Fatalf("actor after restore: %v", got)
			}
			if _, err := c2.GetPlacementGroup(ctxT(t), &gorayv1.GetPlacementGroupRequest{Name: "gang"}); err != nil {
				t.Fatalf("placement group after restore: %v", err)
			}
			kv, err := c2.KVGet(ctxT(t), &gorayv1.KVGetRequest{Ns: "app", Key: "good"})
			mustOK(t, err)
			if !kv.GetFound() {
				t.Fatal("the good KV entry is gone")
			}
		})
	}
}

// recordingReserver is fakeRaylets that records every call's node and the
// raylet address it was made to.
type recordingReserver struct {
	*fakeRaylets
	mu    sync.Mutex
	calls []string // "op node addr"
}

func (r *recordingReserver) note(op string, n *gorayv1.NodeInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, fmt.Sprintf("%s %s %s", op, ids.MustFromBytes(n.GetNodeId()).Short(), n.GetRayletTcp()))
}

func (r *recordingReserver) to(node ids.ID) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, c := range r.calls {
		if strings.Contains(c, " "+node.Short()+" ") {
			out = append(out, c)
		}
	}
	return out
}

func (r *recordingReserver) Prepare(ctx context.Context, n *gorayv1.NodeInfo, g ids.ID, b []*gorayv1.Bundle) (*gorayv1.PrepareBundlesReply, error) {
	r.note("prepare", n)
	return r.fakeRaylets.Prepare(ctx, n, g, b)
}

func (r *recordingReserver) Commit(ctx context.Context, n *gorayv1.NodeInfo, g ids.ID, idx []int32) (*gorayv1.CommitBundlesReply, error) {
	r.note("commit", n)
	return r.fakeRaylets.Commit(ctx, n, g, idx)
}

func (r *recordingReserver) Cancel(ctx context.Context, n *gorayv1.NodeInfo, g ids.ID, idx []int32, why string) (*gorayv1.CancelReserveReply, error) {
	r.note("cancel", n)
	return r.fakeRaylets.Cancel(ctx, n, g, idx, why)
}

func (r *recordingReserver) ReleaseUnused(ctx context.Context, n *gorayv1.NodeInfo, inUse []*gorayv1.BundleRef, why string) (*gorayv1.ReleaseUnusedBundlesReply, error) {
	r.note("sweep", n)
	return r.fakeRaylets.ReleaseUnused(ctx, n, inUse, why)
}

func (r *recordingReserver) Drain(context.Context, *gorayv1.NodeInfo, *gorayv1.DrainRayletRequest) (*gorayv1.DrainRayletReply, error) {
	return &gorayv1.DrainRayletReply{Accepted: true}, nil
}

// TestRestoredNodeIsNotDialled: a node record someone wrote into the
// storage (a well-formed alive node, with room for the pending placement
// group the storage also holds) gets nothing from a restored GCS: no
// prepare, commit or sweep, no place in the views, no drain, its
// heartbeats refused with NotFound. Once the node registers again with
// the cluster id, its own registration's address is the one used, and it
// is swept and given the group. Before, the GCS swept it (with the token)
// as soon as it started, and placed the group there.
func TestRestoredNodeIsNotDialled(t *testing.T) {
	leaktest.Goroutines(t)
	st := keepOpen{store.NewMemory()}
	cluster := ids.New().String()
	node, group := newID(), newID()
	f := &recordingReserver{fakeRaylets: newFakeRaylets()}
	f.addNode(node, 4)
	stored := nodeInfo(node, "injected")
	stored.State, stored.RayletTcp = StateAlive, "127.0.0.66:4242"
	mustOK(t, st.Put(ctxT(t), tableMeta, map[string][]byte{"cluster_id": []byte(cluster)}))
	mustOK(t, st.Put(ctxT(t), tableNodes, map[string][]byte{node.String(): marshalled(stored)}))
	mustOK(t, st.Put(ctxT(t), tableGroups, map[string][]byte{group.String(): marshalled(&gorayv1.PlacementGroupInfo{
		PlacementGroupId: group.Bytes(), Bundles: bundlesOf(1), State: stPending})}))

	s, err := openOn(ctxT(t), Options{Reserver: f, FailureThreshold: 1 << 20}, st)
	mustOK(t, err)
	c, _ := serveOpened(t, s)
	if s.ClusterID() != cluster || s.StorageSetAside() != 0 {
		t.Fatalf("cluster %s, %d set aside; want %s, 0", s.ClusterID(), s.StorageSetAside(), cluster)
	}
	// The placement loop runs (it says why the group waits) without
	// dialling the node.
	waitFor(t, "the group to be tried", func() bool {
		g, err := c.GetPlacementGroup(ctxT(t), &gorayv1.GetPlacementGroupRequest{PlacementGroupId: group.Bytes()})
		return err == nil && g.GetGroup().GetPendingReason() != "waiting to be scheduled"
	})
	if calls := f.to(node); len(calls) > 0 {
		t.Fatalf("the GCS called a node it knows only from the storage: %v", calls)
	}
	all, err := c.GetAllNodes(ctxT(t), &gorayv1.GetAllNodesRequest{})
	mustOK(t, err)
	if len(all.GetNodes()) != 0 || len(s.Nodes()) != 0 {
		t.Fatalf("views show a node known only from the storage: %v", all.GetNodes())
	}
	info, err := c.GetClusterInfo(ctxT(t), &gorayv1.GetClusterInfoRequest{})
	mustOK(t, err)
	if info.GetNodesReconnecting() != 1 {
		t.Fatalf("GetClusterInfo: %d nodes reconnecting, want 1", info.GetNodesReconnecting())
	}
	_, err = c.ReportHeartbeat(ctxT(t), &gorayv1.HeartbeatRequest{NodeId: node.Bytes()})
	wantCode(t, err, codes.NotFound, "register")
	_, err = c.DrainNode(ctxT(t), &gorayv1.DrainNodeRequest{NodeId: node.Bytes()})
	wantCode(t, err, codes.Unavailable, "register")

	// The node itself registers again, from its own address.
	live := nodeInfo(node, "real")
	live.RayletTcp = "127.0.0.7:7000"
	_, err = c.RegisterNode(ctxT(t), &gorayv1.RegisterNodeRequest{Node: live, ClusterId: cluster})
	mustOK(t, err)
	waitFor(t, "the group placed on the node that registered again", func() bool {
		g, err := c.GetPlacementGroup(ctxT(t), &gorayv1.GetPlacementGroupRequest{PlacementGroupId: group.Bytes()})
		return err == nil && g.GetGroup().GetState() == stCreated
	})
	waitFor(t, "the node swept", func() bool {
		return slices.ContainsFunc(f.to(node), func(c string) bool { return strings.HasPrefix(c, "sweep") })
	})
	for _, call := range f.to(node) {
		if !strings.HasSuffix(call, " 127.0.0.7:7000") {
			t.Errorf("call %q went to an address the node did not register", call)
		}
	}
	if v := nodeView(t, c, node); v.GetInfo().GetRayletTcp() != "127.0.0.7:7000" || v.GetInfo().GetNodeName() != "real" {
		t.Fatalf("the view after the registration: %v", v.GetInfo())
	}
	_, err = c.ReportHeartbeat(ctxT(t), &gorayv1.HeartbeatRequest{NodeId: node.Bytes()})
	mustOK(t, err)
}

// TestRestoredNodeThatNeverComesBack: a node known only from the storage
// that never registers again is declared dead by the health check, and
// shows then (in views and its NodeDead event) without its stored
// addresses.
func TestRestoredNodeThatNeverComesBack(t *testing.T) {
	leaktest.Goroutines(t)
	st := keepOpen{store.NewMemory()}
	node := newID()
	stored := nodeInfo(node, "gone")
	stored.State, stored.RayletTcp, stored.ObjectAddr, stored.MetricsAddr = StateAlive, "127.0.0.66:1", "127.0.0.66:2", "127.0.0.66:3"
	mustOK(t, st.Put(ctxT(t), tableMeta, map[string][]byte{"cluster_id": []byte(ids.New().String())}))
	mustOK(t, st.Put(ctxT(t), tableNodes, map[string][]byte{node.String(): marshalled(stored)}))
	clock := newFakeClock()
	s, err := openOn(ctxT(t), Options{Now: clock.Now}, st)
	mustOK(t, err)
	c, _ := serveOpened(t, s)
	events, unsubscribe := s.Subscribe()
	defer unsubscribe()
	clock.Advance(DefaultHeartbeatPeriod * (2*DefaultFailureThreshold + 2))
	s.checkHealth()
	wait := ctxT(t)
	for dead := false; !dead; {
		select {
		case ev := <-events:
			if dead = ev.Kind == EventNodeDead; dead && (ev.Node.GetRayletTcp() != "" || ev.Node.GetObjectAddr() != "") {
				t.Fatalf("the NodeDead event carries the stored addresses: %v", ev.Node)
			}
		case <-wait.Done():
			t.Fatal("no NodeDead event")
		}
	}
	v := nodeView(t, c, node)
	if v.GetInfo().GetState() != StateDead || v.GetInfo().GetRayletTcp() != "" || v.GetInfo().GetObjectAddr() != "" || v.GetInfo().GetMetricsAddr() != "" {
		t.Fatalf("the node that never came back: %v; want DEAD without addresses", v.GetInfo())
	}
}

// TestJobEnvSealed: a job's env is in the storage only sealed with the
// cluster token: a GCS with the token opens it again, a GCS with another
// token keeps the job without its env (reported and copied aside once),
// and without a token the env is not stored at all. Before, it was
// stored in clear.
func TestJobEnvSealed(t *testing.T) {
	leaktest.Goroutines(t)
	env := []string{"AWS_SECRET_ACCESS_KEY=very-secret-value", "MODE=x"}
	start := func(t *testing.T, st store.Store, token string) (*Server, gorayv1.GcsClient, func()) {
		s, err := openOn(ctxT(t), Options{Token: token}, st)
		mustOK(t, err)
		c, stop := serveOpened(t, s)
		return s, c, stop
	}
	jobEnv := func(t *testing.T, c gorayv1.GcsClient) []string {
		jobs, err := c.GetAllJobs(ctxT(t), &gorayv1.GetAllJobsRequest{IncludeEnv: true})
		mustOK(t, err)
		if len(jobs.GetJobs()) != 1 {
			t.Fatalf("%d jobs, want 1", len(jobs.GetJobs()))
		}
		return jobs.GetJobs()[0].GetEnv()
	}
	write := func(t *testing.T, token string) (store.Store, ids.ID) {
		st := keepOpen{store.NewMemory()}
		_, c, stop := start(t, st, token)
		job := newID()
		_, err := c.AddJob(ctxT(t), &gorayv1.AddJobRequest{Job: &gorayv1.JobInfo{JobId: job.Bytes(), BinaryPath: "/bin/x", BinarySha256: fmt.Sprintf("%064x", 7), Env: env}})
		mustOK(t, err)
		stop()
		raw, err := st.Get(ctxT(t), tableJobs, job.String())
		mustOK(t, err)
		if bytes.Contains(raw, []byte("very-secret-value")) || bytes.Contains(raw, []byte("MODE=x")) {
			t.Fatalf("the job's env is in the storage in clear: %q", raw)
		}
		return st, job
	}

	t.Run("same token", func(t *testing.T) {
		st, _ := write(t, "token-a")
		s, c, _ := start(t, st, "token-a")
		if got := jobEnv(t, c); !slices.Equal(got, env) || s.StorageSetAside() != 0 {
			t.Fatalf("env after restore %q (%d set aside); want %q", got, s.StorageSetAside(), env)
		}
	})
	t.Run("another token", func(t *testing.T) {
		st, job := write(t, "token-a")
		s, c, stop := start(t, st, "token-b")
		if got := jobEnv(t, c); len(got) != 0 || s.StorageSetAside() != 1 {
			t.Fatalf("env after restore with another token %q (%d set aside); want none, 1 set aside", got, s.StorageSetAside())
		}
		if q := quarantined(t, st, tableJobs, job.String()); q == nil || !q.Kept || !strings.Contains(q.Reason, "cannot be opened") {
			t.Fatalf("quarantine record %+v; want the job's record kept aside", q)
		}
		stop()
		// Reported once: the job's record no longer holds the env.
		_, c, _ = start(t, st, "token-b")
		if got := jobEnv(t, c); len(got) != 0 {
			t.Fatalf("env %q", got)
		}
	})
	t.Run("env in clear", func(t *testing.T) {
		st, job := write(t, "token-a")
		j := &gorayv1.JobInfo{JobId: job.Bytes(), BinaryPath: "/bin/x", BinarySha256: fmt.Sprintf("%064x", 7), State: StateRunning, Env: []string{"LD_PRELOAD=/tmp/evil.so"}}
		mustOK(t, st.Put(ctxT(t), tableJobs, map[string][]byte{job.String(): marshalled(j)}))
		s, c, _ := start(t, st, "token-a")
		if got := jobEnv(t, c); len(got) != 0 || s.StorageSetAside() != 1 {
			t.Fatalf("env written in clear into the storage restored as %q (%d set aside)", got, s.StorageSetAside())
		}
	})
	t.Run("no token", func(t *testing.T) {
		st, _ := write(t, "")
		_, c, _ := start(t, st, "")
		if got := jobEnv(t, c); len(got) != 0 {
			t.Fatalf("without a token the env was stored: %q", got)
		}
	})
}

// TestEnvSealer: a sealed env opens with the key of the same token and
// job only; a changed byte, another version or a short record fail with
// ErrEnvNotSealed.
func TestEnvSealer(t *testing.T) {
	a, err := newEnvSealer("token-a")
	mustOK(t, err)
	b, err := newEnvSealer("token-b")
	mustOK(t, err)
	if none, err := newEnvSealer(""); none != nil || err != nil {
		t.Fatalf("newEnvSealer(\"\") = %v, %v; want nil, nil", none, err)
	}
	job := newID()
	env := []string{"A=1", "B=2"}
	sealed := a.seal(job, env)
	if got, err := a.open(job, sealed); err != nil || !slices.Equal(got, env) {
		t.Fatalf("open = %q, %v", got, err)
	}
	flipped := slices.Clone(sealed)
	flipped[len(flipped)-1] ^= 1
	version := slices.Clone(sealed)
	version[0] = 2
	var nilSealer *envSealer
	for _, tc := range []struct {
		name string
		s    *envSealer
		job  ids.ID
		b    []byte
	}{
		{"another token", b, job, sealed},
		{"another job", a, newID(), sealed},
		{"a changed byte", a, job, flipped},
		{"another version", a, job, version},
		{"too short", a, job, sealed[:10]},
		{"no token", nilSealer, job, sealed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := tc.s.open(tc.job, tc.b); err == nil || !errors.Is(err, ErrEnvNotSealed) {
				t.Fatalf("open = %q, %v; want ErrEnvNotSealed", got, err)
			}
		})
	}
}
